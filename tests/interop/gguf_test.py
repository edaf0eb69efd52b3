#!/usr/bin/env python3
"""consolidate -o model.gguf against llama.cpp's own converter (docs/gguf.md, issue 71).

    gguf_test.py DCPCTL [ARCH:OUTTYPE[:split] ...]   (default: main()'s cases; ARCH-tied: the head
                                                     tied; ARCH-bf16: saved in bfloat16; :split:
                                                     SPLIT's options to both)

For each architecture a tiny model saved by transformers (hidden 64, 2 layers, 4 heads, 2 KV heads)
with a real tokenizer rebuilt by tools/gguf_oracle.py (Llama 3's for llama, Qwen2's for qwen2 and
qwen3), in a folder named `tiny`; llama.cpp's convert_hf_to_gguf.py (llama-cpp-python 0.3.36's, the
oracle) writes tiny.gguf from it, and dcpctl writes tiny.gguf twice: from the Hugging Face folder
and from a DCP checkpoint of the same state dict (torch.distributed.checkpoint.save, the config and
tokenizer files beside it). gguf-py's GGUFReader reads all three: every metadata key, its type and
value, and every tensor's name, type, shape and bytes must be the converter's, and the files equal
byte for byte. A `:split` case gives both the converter's --split-max-size and --split-max-tensors
(SPLIT): the shards' names must be the converter's, more than one, each equal byte for byte, and
nothing else left beside them; then inspect of the first and of the last shard read the set as one
model (every tensor gguf-py finds in the shards), and a copy with a shard removed fails verify (exit
3 naming it). verify of every converter file (the split's first shard) must pass: its tensors
against the architecture's table. general.name is the converter's from the folder's name ("Tiny")
and dcpctl's from the output's ("tiny.gguf"), hence both named tiny.

Exit status: 0 pass, 1 failure, 77 skip (the virtualenv lacks gguf, sentencepiece, torch or
transformers, or the sdist was never fetched; a failure instead under CI, tests/skip.py).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from skip import skip_or_fail  # noqa: E402

try:
    import numpy as np
    import torch
    import transformers
    import gguf
    import sentencepiece  # noqa: F401  (the converter imports it for Llama)
    import gguf_oracle
except ImportError as e:
    skip_or_fail(f"the virtualenv lacks {e.name} (tools/requirements.txt)")

FAILS: list[str] = []


def fail(msg: str) -> None:
    FAILS.append(msg)
    print("FAIL:", msg, file=sys.stderr)


# Each architecture: its config class, the tokenizer, and what it sets beyond the common tiny sizes.
# llama: Llama 3.1's rope (rope_type llama3, theta 500000, factor 8, original context 8192) with
# head_dim 128, so that rope_freqs holds Llama 3's own 64 factors; qwen2: a linear rope; qwen3: a
# yarn rope; the MoE ones 4 experts, 2 used per token.
ARCHS = {
    "llama": (transformers.LlamaConfig, "llama-bpe", dict(
        head_dim=128, max_position_embeddings=131072,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
    "mistral": (transformers.MistralConfig, "llama-bpe", {}),
    "mixtral": (transformers.MixtralConfig, "llama-bpe", dict(num_local_experts=4, num_experts_per_tok=2)),
    "qwen2": (transformers.Qwen2Config, "qwen2", dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})),
    "qwen3": (transformers.Qwen3Config, "qwen2", dict(rope_parameters={
        "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 64,
        "beta_fast": 32.0, "beta_slow": 1.0})),
    "qwen3moe": (transformers.Qwen3MoeConfig, "qwen2", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)),
    # DeepSeek-V3's MLA (q_lora, kv_lora, the kv_b split), a dense first layer, a shared expert,
    # expert groups and the sigmoid router; llama-bpe, which DeepseekV2Model's _set_vocab_gpt2 takes.
    "deepseek2": (transformers.DeepseekV3Config, "llama-bpe", dict(
        num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, q_lora_rank=32,
        kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, first_k_dense_replace=1, n_group=2,
        topk_group=1, n_shared_experts=1, scoring_func="sigmoid")),
    # GLM-4.5's layout (Glm4MoeModel): head_dim 32 (not hidden / heads), partial rotary 0.5 (rope
    # dimension 16), attention biases, q/k norms, a dense first layer, a shared expert, expert
    # groups, e_score_correction_bias; Qwen2's tokenizer with GLM's special tokens added
    # (_set_vocab_glm looks them up), which keeps its pre-tokenizer digest.
    "glm4moe": (transformers.Glm4MoeConfig, "qwen2", dict(
        head_dim=32, attention_bias=True, use_qk_norm=True, n_routed_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1,
        routed_scaling_factor=2.5)),
    # GPT-OSS (GptOssModel): attention sinks and biases, sliding window, yarn rope (the config's
    # default), the experts fused as transformers saves them (gate_up_proj interleaved, down_proj,
    # their biases), the router with its bias.
    "gpt-oss": (transformers.GptOssConfig, "llama-bpe", dict(
        head_dim=32, num_local_experts=4, num_experts_per_tok=2, sliding_window=16)),
}

# _set_vocab_glm's tokens, added to Qwen2's tokenizer for glm4moe (<|endoftext|> is Qwen2's own).
GLM_TOKENS = ("[gMASK]", "<|user|>", "<|observation|>")


# The architectures whose files verify checks against write/gguf_model.cpp's expected_tensors.
TABLE_CHECKED = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3moe", "deepseek2"}

# A size that puts the embeddings and the head (Q8_0 of 128256 x 64: 8.7 MB) in shards of their own
# and a tensor count that splits the layers: both rules of gguf-py's GGUFWriter at work.
SPLIT = ["--split-max-size", "1M", "--split-max-tensors", "8"]


def tiny_model(arch: str, out: Path) -> None:
    """`ARCH-tied`: the head tied to the embeddings (save_pretrained leaves lm_head out);
    `ARCH-bf16`: saved in bfloat16 (the converter reads it as float32, as dcpctl does)."""
    bf16 = arch.endswith("-bf16")
    arch = arch.removesuffix("-bf16")
    tied = arch.endswith("-tied")
    arch = arch.removesuffix("-tied")
    out.mkdir(parents=True)
    gguf_oracle.tokenizer(ARCHS[arch][1], str(out))
    import json
    tok = json.loads((out / "tokenizer.json").read_text())
    if arch == "glm4moe":
        ids = list(tok["model"]["vocab"].values()) + [a["id"] for a in tok["added_tokens"]]
        for i, t in enumerate(GLM_TOKENS):
            tok["added_tokens"].append({"id": max(ids) + 1 + i, "content": t, "single_word": False, "lstrip": False,
                                        "rstrip": False, "normalized": False, "special": True})
        (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    vocab = len(tok["model"]["vocab"]) + len(tok["added_tokens"])
    torch.manual_seed(0)
    kw = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=vocab, max_position_embeddings=256, tie_word_embeddings=tied)
    kw.update(ARCHS[arch][2])
    model = transformers.AutoModelForCausalLM.from_config(ARCHS[arch][0](**kw))
    with torch.no_grad():  # norms that are not all ones, so that a misplaced norm shows
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
        for n, b in model.named_buffers():  # GLM's e_score_correction_bias, zeros otherwise
            if n.endswith("e_score_correction_bias"):
                b.uniform_(0.0, 0.1)
    if bf16:
        model = model.to(torch.bfloat16)
    model.save_pretrained(out)


def dcp_of(hf: Path, out: Path) -> None:
    """A trainer's state dict: a tied head saved as lm_head.weight too (dcpctl leaves it out, as
    save_pretrained does). A mixture of experts (but GPT-OSS, whose saved form is its in-memory one):
    the model's state dict as transformers 5 holds it in memory, its experts fused per layer
    (mlp.experts.gate_up_proj [experts, 2 x ffn, hidden], down_proj; Mixtral's under mlp.), which
    save_pretrained turns back into one tensor per expert: dcpctl writes what the converter writes
    from that folder."""
    import json
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    out.mkdir(parents=True)
    sd = load_file(hf / "model.safetensors")
    cfg = json.loads((hf / "config.json").read_text())
    if any(cfg.get(k) for k in ("num_local_experts", "num_experts", "n_routed_experts")) and \
            cfg["architectures"][0] != "GptOssForCausalLM":
        model = transformers.AutoModelForCausalLM.from_pretrained(hf, dtype="auto")
        sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        if not any(k.endswith("mlp.experts.gate_up_proj") for k in sd):
            raise AssertionError(f"{hf}: transformers holds no fused experts: {sorted(sd)[:8]}")
    if json.loads((hf / "config.json").read_text()).get("tie_word_embeddings"):
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    dcp.save(sd, checkpoint_id=str(out), no_dist=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(hf / name, out / name)


def fields(path: Path) -> tuple[dict, dict]:
    r = gguf.GGUFReader(path)
    kv = {}
    for k, f in r.fields.items():
        v = f.contents()
        kv[k] = ([t.name for t in f.types], v)
    ts = {t.name: (t.tensor_type.name, [int(x) for x in t.shape], np.asarray(t.data).tobytes()) for t in r.tensors}
    return kv, ts


def compare(label: str, want: Path, got: Path) -> None:
    if want.read_bytes() == got.read_bytes():  # then every key and tensor is equal; else say which
        return
    before = len(FAILS)
    wkv, wts = fields(want)
    gkv, gts = fields(got)
    if list(wkv) != list(gkv):
        fail(f"{label}: keys differ: only the converter's {sorted(set(wkv) - set(gkv))}, only dcpctl's "
             f"{sorted(set(gkv) - set(wkv))}, or the order")
    for k in wkv:
        if k in gkv and wkv[k] != gkv[k]:
            w, g = wkv[k], gkv[k]
            fail(f"{label}: {k}: converter {w[0]} {str(w[1])[:120]}, dcpctl {g[0]} {str(g[1])[:120]}")
    if list(wts) != list(gts):
        fail(f"{label}: tensors differ: converter {list(wts)}, dcpctl {list(gts)}")
    for n, (wt, ws, wb) in wts.items():
        if n not in gts:
            continue
        gt, gs, gb = gts[n]
        if (wt, ws) != (gt, gs):
            fail(f"{label}: {n}: converter {wt} {ws}, dcpctl {gt} {gs}")
        elif wb != gb:
            fail(f"{label}: {n}: {wt} {ws}: bytes differ")
    fail(f"{label}: the files differ" + ("" if len(FAILS) > before else ", yet every key and tensor is equal (padding?)"))


def check_split_read(dcpctl: str, case: str, folder: Path, names: list[str]) -> None:
    """The converter's shards read as one model: inspect of the first (and of the last) lists every
    tensor gguf-py's GGUFReader finds in all of them; a copy without its second shard is refused."""
    import json
    want = {}
    for name in names:
        for t in gguf.GGUFReader(folder / name).tensors:
            want[t.name] = [int(x) for x in reversed(t.shape.tolist())]
    for name in (names[0], names[-1]):
        r = subprocess.run([dcpctl, "inspect", str(folder / name), "--json"], capture_output=True, text=True)
        got = {t["key"]: t["shape"] for t in json.loads(r.stdout).get("items", []) if t.get("kind") == "tensor"} if r.returncode == 0 else {}
        if got != want:
            fail(f"{case}: inspect of {name}: exit {r.returncode}, {len(got)} tensors, gguf-py reads {len(want)} in the shards "
                 f"({sorted(set(want) ^ set(got))[:6]}) {r.stderr[-400:]}")
    cut = folder.parent / "cut"
    shutil.copytree(folder, cut)
    (cut / names[1]).unlink()
    r = subprocess.run([dcpctl, "verify", str(cut / names[0])], capture_output=True, text=True)
    if r.returncode != 3 or names[1] not in r.stdout:
        fail(f"{case}: verify without {names[1]}: exit {r.returncode}, {r.stdout[-800:]} {r.stderr[-400:]}")


def check_summary(r: subprocess.CompletedProcess) -> None:
    import json
    import jsonschema
    import referencing
    import referencing.jsonschema
    if r.returncode != 0:
        fail(f"--json: exit {r.returncode}, {r.stderr!r}")
        return
    folder = HERE.parent.parent / "docs" / "schemas"
    docs = {p.name: json.loads(p.read_text()) for p in folder.glob("*.schema.json")}
    registry = referencing.Registry().with_resources(
        [(d["$id"], referencing.jsonschema.DRAFT202012.create_resource(d)) for d in docs.values()])
    summary = json.loads(r.stdout)
    v = jsonschema.Draft202012Validator(docs["consolidate.schema.json"], registry=registry)
    for e in v.iter_errors(summary):
        fail(f"--json: {list(e.absolute_path)}: {e.message[:200]}")
    if summary.get("format") != "gguf" or summary.get("gguf") != {"architecture": "llama", "outtype": "f16"}:
        fail(f"--json: format {summary.get('format')!r}, gguf {summary.get('gguf')!r}")


def main(argv: list[str]) -> int:
    dcpctl = argv[0]
    cases = argv[1:] or ["llama:q8_0", "qwen2-tied:bf16", "qwen3-bf16:f16", "qwen3moe:q8_0", "mixtral:f16", "deepseek2:q8_0",
                         "glm4moe:q8_0", "gpt-oss:f16", "llama:q8_0:split"]
    try:
        llama = gguf_oracle.fetch()
    except Exception as e:  # noqa: BLE001
        skip_or_fail(f"llama-cpp-python's sdist not fetched ({e}); tools/dev.sh setup fetches it")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for case in cases:
            arch, outtype, *split = case.split(":")
            split_args = SPLIT if split == ["split"] else []
            root = tmp / case.replace(":", "-")
            hf, dcp_dir = tmp / arch / "hf" / "tiny", tmp / arch / "dcp"
            if not hf.exists():
                tiny_model(arch, hf)
                dcp_of(hf, dcp_dir)
            want = root / "converter" / "tiny.gguf"
            want.parent.mkdir(parents=True)
            r = gguf_oracle.convert(hf, want, ["--outtype", outtype, *split_args])
            if r.returncode != 0:
                fail(f"{case}: the converter failed: {r.stderr[-2000:]}")
                continue
            wants = sorted(p.name for p in want.parent.iterdir())
            if split_args and (len(wants) < 2 or "tiny.gguf" in wants):
                fail(f"{case}: the converter wrote {wants}, not a split")
            # The converter's file (its first shard) passes verify: names and shapes against the table
            # (check/gguf_arch.h), which must know the architectures of TABLE_CHECKED.
            r = subprocess.run([dcpctl, "verify", str(want.parent / wants[0])], capture_output=True, text=True)
            base = arch.removesuffix("-bf16").removesuffix("-tied")
            if r.returncode != 0 or (base in TABLE_CHECKED and "gguf-arch-not-checked" in r.stdout):
                fail(f"{case}: verify of the converter's file: exit {r.returncode}: {r.stdout[-1500:]} {r.stderr[-500:]}")
            for src in (hf, dcp_dir):
                got = root / f"from-{src.name}" / "tiny.gguf"
                got.parent.mkdir(parents=True)
                r = subprocess.run([dcpctl, "consolidate", str(src), "-o", str(got), "--outtype", outtype, "-q", *split_args],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    fail(f"{case} from {src.name}: dcpctl exit {r.returncode}: {r.stderr[-2000:]}")
                    continue
                gots = sorted(p.name for p in got.parent.iterdir() if not p.name.endswith(".dcpctl-manifest.json"))
                if gots != wants:
                    fail(f"{case} from {src.name}: dcpctl wrote {gots}, the converter {wants}")
                for name in wants:
                    if (got.parent / name).exists():
                        compare(f"{case} from {src.name}: {name}", want.parent / name, got.parent / name)
            if split_args and len(wants) > 1:
                check_split_read(dcpctl, case, want.parent, wants)
            print(f"{case}: {'ok' if not FAILS else 'FAILED'}" + (f" ({len(wants)} shards)" if split_args else ""))
        # Refusals: an architecture the converter's table here does not have, a --dtype, a wrong word.
        src = tmp / "llama" / "hf" / "tiny" if (tmp / "llama").exists() else None
        if src is not None:
            odd = tmp / "odd"
            shutil.copytree(src, odd)
            cfg = (odd / "config.json").read_text().replace("LlamaForCausalLM", "FalconForCausalLM")
            (odd / "config.json").write_text(cfg)
            r = subprocess.run([dcpctl, "consolidate", str(odd), "-o", str(tmp / "odd.gguf")], capture_output=True, text=True)
            if r.returncode != 5 or "FalconForCausalLM" not in r.stderr or (tmp / "odd.gguf").exists():
                fail(f"an unknown architecture: exit {r.returncode}, {r.stderr!r}")
            r = subprocess.run([dcpctl, "consolidate", str(src), "-o", str(tmp / "x.gguf"), "--outtype", "q4_k_m"], capture_output=True, text=True)
            if r.returncode != 2:
                fail(f"--outtype q4_k_m: exit {r.returncode}, {r.stderr!r}")
            # The split options: the converter's size forms only, and only for a GGUF output.
            for args, out in ((["--split-max-size", "5X"], "x.gguf"), (["--split-max-size", "2GB"], "x.gguf"),
                              (["--split-max-tensors", "2"], "x.safetensors")):
                r = subprocess.run([dcpctl, "consolidate", str(src), "-o", str(tmp / out), *args], capture_output=True, text=True)
                if r.returncode != 2 or "split-max" not in r.stderr:
                    fail(f"{args} -o {out}: exit {r.returncode}, {r.stderr!r}")
            # --json: the summary is consolidate's schema's (docs/schemas), format gguf.
            r = subprocess.run([dcpctl, "consolidate", str(src), "-o", str(tmp / "j.gguf"), "--json"], capture_output=True, text=True)
            check_summary(r)
    if FAILS:
        print(f"{len(FAILS)} failure(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
