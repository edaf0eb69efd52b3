#!/usr/bin/env python3
"""Pruned MoE checkpoints (issue 79 item 2; view/moe_sparsity.h): verify, refuse and consolidate
what compressed-tensors' MagnitudeExpertPruner writes, with each layer's expert count.

    pruned_moe_test.py DCPCTL

Writers (run here, into a temporary folder; the project virtualenv: torch 2.15, transformers 5.24.0,
compressed-tensors 0.20.0): transformers' save_pretrained of three tiny seeded MoE models whose sizes
do not coincide:
  - qwen3_moe: per-expert 2-D keys, 8 experts, layer 0 dense (mlp_only_layers);
  - deepseek_v3: per-expert 2-D keys, 8 routed experts, the router's e_score_correction_bias, layer 0
    dense (first_k_dense_replace), saved in float32;
  - gpt_oss: stacked 3-D experts (with their 2-D biases), the router's bias;
then compressed-tensors' convert_checkpoint with MagnitudeExpertPruner (its from_pretrained scores
each router's rows): "uniform", one pruner at sparsity 0.25 (every MoE layer keeps 6: the pruner sets
the global count, as it does); "per-layer", one pruner per MoE layer at its own sparsity (7, 5, ...:
the pruner refuses to write non-uniform counts itself, so each converter is restricted to its layer's
router, experts and router vector, and the chain's last writes the global count), and a converter of
this test whose update_config returns compressed-tensors' own QuantizationConfig with an
ExpertSparsityConfig of the counts the pruners kept (compressed-tensors' pipeline writes it into
config.json as quantization_config.moe_sparsity_config: no producer in the virtualenv writes one).

Checked: verify exits 0 on each (per-layer: warning moe-sparsity-per-layer); consolidate to an HF folder
(and, for DeepSeek-V3, --dtype bf16 and a single .safetensors file) writes every tensor as the pruner
wrote it, byte for byte (bf16: as Tensor.to, transformers' keep-in-float32 modules kept), and
config.json's moe_sparsity_config; transformers' from_pretrained loads the uniform folders (no missing,
unexpected or mismatched key) and the export gives the pruner output's logits, and refuses the
per-layer ones (transformers 5.24 fails first on the compressed-tensors config without config groups;
without it, on the size mismatch of every layer whose count is not the global one: the warning's
claim). Qwen3-MoE also quantized first (compressed-tensors' FP8_DYNAMIC, tests/interop/quant_producers.py)
and then pruned per layer: --dtype bf16 equals compressed-tensors' own dequantizer and keeps the
counts; its GGUF is exit 5. Tampered copies of the per-layer folders, each refused with exit 3 naming
the layer: a layer's last expert dropped, a layer cut to the global count (experts and router rows:
what a check of the global count passes), a stacked expert tensor sliced, the config's count of a
layer changed, an MoE layer's entry made null, the list one entry short (and consolidate of the
changed count, nothing left); method "novice" is exit 5. The per-layer folder is left as written.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from testlib import (EXIT_INVALID, EXIT_OK, EXIT_UNSUPPORTED, check, each_case, expect_rc, hf_loaded,  # noqa: E402
                     run, same_tensor, skip_or_fail, summary, tree_digest)

try:
    import torch
    import transformers
    from compressed_tensors.config import ExpertSparsityConfig
    from compressed_tensors.entrypoints.convert import MagnitudeExpertPruner, convert_checkpoint
    from compressed_tensors.quantization import QuantizationConfig
    from safetensors.torch import load_file, save_file

    import quant_producers as qp
except ImportError as e:  # the virtualenv is set up by tools/dev.sh
    skip_or_fail(f"the virtualenv's torch, transformers or compressed-tensors: {e}")

AUX = r"(?:mlp|ffn)\.(?:gate|router)\.(?:bias|e_score_correction_bias)$"  # the pruner's AUX_PATTERN


class Model:
    def __init__(self, name: str, make, router: str, expert: str, stacked: bool, per_layer: list[float]):
        self.name, self.make, self.router, self.expert, self.stacked = name, make, router, expert, stacked
        self.per_layer = per_layer  # each MoE layer's sparsity, in layer order


def qwen3_moe(out: Path) -> None:
    cfg = transformers.Qwen3MoeConfig(vocab_size=96, hidden_size=24, intermediate_size=40, moe_intermediate_size=12,
                                      num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=10,
                                      num_experts=8, num_experts_per_tok=2, mlp_only_layers=[0],
                                      tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.Qwen3MoeForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out)


def deepseek_v3(out: Path) -> None:
    cfg = transformers.DeepseekV3Config(vocab_size=96, hidden_size=24, intermediate_size=40, moe_intermediate_size=12,
                                        num_hidden_layers=3, first_k_dense_replace=1, n_routed_experts=8,
                                        num_experts_per_tok=2, n_group=1, topk_group=1, n_shared_experts=1,
                                        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=14, kv_lora_rank=18,
                                        qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=10,
                                        tie_word_embeddings=False)
    torch.manual_seed(0)
    m = transformers.DeepseekV3ForCausalLM(cfg)
    with torch.no_grad():  # a bias the router uses: not all zeros, so a slice of the wrong rows shows
        for layer in m.model.layers[1:]:
            layer.mlp.gate.e_score_correction_bias.copy_(torch.randn_like(layer.mlp.gate.e_score_correction_bias))
    m.save_pretrained(out)


def gpt_oss(out: Path) -> None:
    cfg = transformers.GptOssConfig(vocab_size=96, hidden_size=24, intermediate_size=20, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=10, num_local_experts=8,
                                    num_experts_per_tok=2, sliding_window=16, layer_types=["sliding_attention",
                                                                                          "full_attention"],
                                    tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.GptOssForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out)


MODELS = [
    Model("qwen3_moe", qwen3_moe, r"mlp\.gate\.weight$", r"mlp\.experts\.\d+\.", False, [0.125, 0.375]),
    Model("deepseek_v3", deepseek_v3, r"mlp\.gate\.weight$", r"mlp\.experts\.\d+\.", False, [0.125, 0.375]),
    Model("gpt_oss", gpt_oss, r"mlp\.router\.weight$", r"mlp\.experts\.(?:gate_up|down)_proj", True, [0.125, 0.375]),
]


class SparsityConfig:
    """A Converter (compressed-tensors' protocol) that changes no tensor and records the per-layer
    counts: its update_config returns compressed-tensors' QuantizationConfig holding an
    ExpertSparsityConfig, which convert_checkpoint writes into config.json."""

    def __init__(self, counts: list[int | None]):
        self.counts = counts

    def process(self, tensors):
        return tensors

    def validate(self, tensors):
        return tensors

    def update_config(self, config):
        config = config or QuantizationConfig(config_groups={})
        config.moe_sparsity_config = ExpertSparsityConfig(method="prune", num_experts=self.counts)
        return config

    def update_model_config(self, model_config):
        return model_config

    def get_dependencies(self, weight_name):
        return set()


def layers_of(folder: Path) -> int:
    return json.loads((folder / "config.json").read_text())["num_hidden_layers"]


def moe_layers(m: Model, src: Path) -> list[int]:
    keys = [k for f in sorted(src.glob("*.safetensors")) for k in load_file(f)]
    import re
    return sorted({int(re.search(r"layers\.(\d+)\.", k).group(1)) for k in keys if re.search(m.router, k)})


def prune_uniform(m: Model, src: Path, out: Path) -> dict[str, list[int]]:
    p = MagnitudeExpertPruner.from_pretrained(str(src), router_pattern=m.router, expert_pattern=m.expert, sparsity=0.25)
    convert_checkpoint(str(src), str(out), p, max_workers=1, device="cpu")
    return p.retained_experts


def prune_per_layer(m: Model, src: Path, out: Path) -> list[int | None]:
    """One pruner per MoE layer, at that layer's sparsity; the counts each kept, per layer."""
    counts: list[int | None] = [None] * layers_of(src)
    pruners = []
    for layer, sparsity in zip(moe_layers(m, src), m.per_layer):
        at = rf"layers\.{layer}\."
        p = MagnitudeExpertPruner.from_pretrained(str(src), router_pattern=at + m.router, expert_pattern=at + m.expert,
                                                  sparsity=sparsity, aux_pattern=at + AUX)
        (kept,) = p.retained_experts.values()
        counts[layer] = len(kept)
        pruners.append(p)
    convert_checkpoint(str(src), str(out), pruners + [SparsityConfig(counts)], max_workers=1, device="cpu")
    return counts


def tensors_of(folder: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")) if folder.is_dir() else [folder]:
        out.update(load_file(f))
    return out


def expect_same(what: str, got: dict, want: dict, cast: torch.dtype | None = None, kept: tuple = ()) -> None:
    """Every tensor of `want` in `got`, byte for byte; with `cast`, as Tensor.to(cast) does, but for
    the keys under a module of `kept` (transformers' keep-in-float32 list), which stay as they were."""
    bad = sorted(set(got) ^ set(want))
    for k in sorted(set(got) & set(want)):
        w = want[k]
        if cast is not None and w.is_floating_point() and not any(f".{m}." in f".{k}." for m in kept):
            w = w.to(cast)
        if (d := same_tensor(got[k], w)) is not None:
            bad.append(f"{k}: {d}")
    check(not bad and got, f"{what}: {len(got)} tensors as the pruner wrote them; differ: {bad[:6]}")


def verify(dcpctl: str, folder: Path) -> tuple[int, dict]:
    r = run(dcpctl, "verify", "--json", str(folder))
    try:
        return r.returncode, json.loads(r.stdout)
    except json.JSONDecodeError:
        check(False, f"verify {folder}: not JSON (exit {r.returncode}): {r.stderr[-400:]}")
        return r.returncode, {}


def expect_verify(dcpctl: str, what: str, folder: Path, rc: int, code: str | None = None, key: str = "",
                  warning: str | None = None) -> None:
    got, j = verify(dcpctl, folder)
    probs = [(p["code"], p.get("key") or "", p["message"]) for p in j.get("problems", [])]
    warns = [w["code"] for w in j.get("warnings", [])]
    named = any(c == code and key in k + " " + msg for c, k, msg in probs) if code else not probs
    check(got == rc and named and (warning is None or warning in warns),
          f"{what}: exit {got} (want {rc}), problems {probs[:5]} (want {code} naming {key!r}), warnings {warns}")


def load(folder: Path):
    # float32: transformers' grouped experts kernel on CPU wants 16-byte strides, which bfloat16 rows
    # of these tiny widths do not have.
    m, info = transformers.AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True, dtype=torch.float32)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    return m, bad


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.arange(1, 9).reshape(1, 8)).logits


def check_loads(name: str, pruned: Path, export: Path) -> None:
    a, bad_a = load(pruned)
    b, bad_b = load(export)
    check(not bad_a and not bad_b, f"{name}: from_pretrained of the pruner's folder {bad_a} and the export {bad_b}")
    check(torch.equal(logits(a), logits(b)), f"{name}: the export's logits are the pruner output's")
    hf_loaded(export)


def load_error(folder: Path) -> str | None:
    """What from_pretrained raises on the folder, or None when it loads it with no missing,
    unexpected or mismatched key."""
    try:
        _, bad = load(folder)
        return f"loaded with {bad}" if bad else None
    except Exception as e:  # noqa: BLE001 (what from_pretrained raises is the finding)
        return f"{type(e).__name__}: {e}"


def check_refused_by_transformers(name: str, pruned: Path, tmp: Path) -> None:
    """transformers does not read moe_sparsity_config: it builds every MoE layer with the global count.
    The folder as written is refused (transformers 5.24 fails first on the compressed-tensors config
    without config groups); a copy without the quantization_config, for its size mismatch."""
    how = load_error(pruned)
    print(f"{name}: transformers {transformers.__version__} on the per-layer folder: {(how or 'loaded')[:300]}")
    check(how is not None, f"{name}: transformers loads a per-layer pruned folder cleanly: the warning is wrong")
    bare = tmp / f"{name}-per-layer-no-qc"
    shutil.copytree(pruned, bare)
    edit_config(bare, lambda j: j.pop("quantization_config"))
    how = load_error(bare) or "loaded"
    print(f"{name}: ... without its quantization_config: {how[:300]}")
    check("ignore_mismatched_sizes" in how, f"{name}: transformers refuses the per-layer counts for their sizes: {how[:300]}")


def resave(folder: Path, edit) -> None:
    """Each safetensors file re-saved with edit(tensors) applied; the index's weight_map kept to them."""
    index = folder / "model.safetensors.index.json"
    weight_map = {}
    for f in sorted(folder.glob("*.safetensors")):
        t = load_file(f)
        edit(t)
        save_file(t, f, metadata={"format": "pt"})
        weight_map.update({k: f.name for k in t})
    if index.exists():
        j = json.loads(index.read_text())
        j["weight_map"] = weight_map
        index.write_text(json.dumps(j))


def edit_config(folder: Path, edit) -> None:
    j = json.loads((folder / "config.json").read_text())
    edit(j)
    (folder / "config.json").write_text(json.dumps(j, indent=2))


def tampered(dcpctl: str, m: Model, folder: Path, counts: list[int | None], tmp: Path) -> None:
    """Copies of the per-layer folder damaged one way each, refused naming the layer."""
    moe = [i for i, n in enumerate(counts) if n]
    first, last = moe[0], moe[-1]
    global_count = json.loads((folder / "config.json").read_text())
    global_count = next(global_count[k] for k in ("n_routed_experts", "num_local_experts", "num_experts")
                        if k in global_count)

    def case(what: str) -> Path:
        d = tmp / f"{m.name}-{what}"
        shutil.copytree(folder, d)
        return d

    layer = f"layers.{first}."
    if m.stacked:
        d = case("sliced")
        key = f"model.layers.{first}.mlp.experts.gate_up_proj"
        resave(d, lambda t: t.__setitem__(key, t[key][:-1].contiguous()) if key in t else None)
        expect_verify(dcpctl, f"{m.name}: layer {first}'s stacked experts sliced to {counts[first] - 1}", d,
                      EXIT_INVALID, "expert-count-mismatch", key)
    else:
        d = case("expert-dropped")
        gone = f"{layer}mlp.experts.{counts[first] - 1}."
        resave(d, lambda t: [t.pop(k) for k in list(t) if gone in k])
        expect_verify(dcpctl, f"{m.name}: layer {first}'s last expert dropped", d, EXIT_INVALID, "expert-missing", layer)
    # Layer `first` cut to the global count (the last pruner's): experts, router rows and router
    # vector. A check of the global count finds nothing wrong; the layer's own count refuses it.
    check(counts[first] > global_count, f"{m.name}: layer {first} keeps more than the global count {global_count}")
    if counts[first] > global_count:
        d = case("cut-to-global")
        keep = global_count

        def cut(t):
            for k in list(t):
                if layer not in k:
                    continue
                if not m.stacked and ".experts." in k and int(k.split(".experts.")[1].split(".")[0]) >= keep:
                    t.pop(k)
                elif (m.stacked and ".experts." in k) or k.endswith(("gate.weight", "router.weight", "router.bias",
                                                                     "e_score_correction_bias")):
                    t[k] = t[k][:keep].contiguous()
        resave(d, cut)
        expect_verify(dcpctl, f"{m.name}: layer {first} cut to the global count {keep}", d, EXIT_INVALID,
                      "expert-count-mismatch" if m.stacked else "expert-missing", layer)
    d = case("count-changed")
    edit_config(d, lambda j: j["quantization_config"]["moe_sparsity_config"]["num_experts"].__setitem__(
        last, counts[last] - 1))
    expect_verify(dcpctl, f"{m.name}: the config's count of layer {last} one less", d, EXIT_INVALID,
                  "expert-count-mismatch", f"layers.{last}.")
    d = case("null-entry")
    edit_config(d, lambda j: j["quantization_config"]["moe_sparsity_config"]["num_experts"].__setitem__(last, None))
    expect_verify(dcpctl, f"{m.name}: MoE layer {last}'s entry null", d, EXIT_INVALID, "expert-count-mismatch",
                  f"layers.{last}.")
    d = case("short-list")
    edit_config(d, lambda j: j["quantization_config"]["moe_sparsity_config"]["num_experts"].pop())
    expect_verify(dcpctl, f"{m.name}: num_experts one entry short", d, EXIT_INVALID, "moe-sparsity-invalid",
                  "num_hidden_layers")
    r = run(dcpctl, "consolidate", str(tmp / f"{m.name}-count-changed"), "-o", str(tmp / f"{m.name}-refused") + "/")
    expect_rc(r, EXIT_INVALID, f"{m.name}: consolidate of a folder whose count is changed", f"layers.{last}.")
    check(not (tmp / f"{m.name}-refused").exists(), f"{m.name}: the refused consolidate left its output")


def quantized(dcpctl: str, m: Model, src: Path, tmp: Path) -> None:
    """Quantized (compressed-tensors' FP8_DYNAMIC, tests/interop/quant_producers.py), then pruned per
    layer: --dtype bf16 dequantizes as compressed-tensors' own dequantizer does and keeps the counts."""
    q = qp.ct_quantize(src, tmp / f"{m.name}-fp8", "fp8-channel")
    per = tmp / f"{m.name}-fp8-per-layer"
    counts = prune_per_layer(m, q, per)
    qc = json.loads((per / "config.json").read_text())["quantization_config"]
    check(qc.get("config_groups") and qc.get("moe_sparsity_config", {}).get("num_experts") == counts,
          f"{m.name} fp8: the pruned folder's quantization_config keeps its groups and gains the counts: {qc}")
    expect_verify(dcpctl, f"{m.name} fp8: pruned per layer", per, EXIT_OK, warning="moe-sparsity-per-layer")
    out = tmp / f"{m.name}-fp8-per-layer-bf16"
    why = "a per-layer pruned model, which transformers cannot build (the test asserts its refusal)"
    expect_rc(run(dcpctl, "consolidate", str(per), "-o", str(out) + "/", "--dtype", "bf16", hf_partial=why), EXIT_OK,
              f"{m.name} fp8: consolidate --dtype bf16 (dequantized)")
    expect_same(f"{m.name} fp8: dequantized per-layer export", tensors_of(out), qp.ct_reference(per, torch.bfloat16))
    got = json.loads((out / "config.json").read_text()).get("quantization_config")
    kept = QuantizationConfig.model_validate(got) if got else None
    check(kept is not None and not kept.config_groups and kept.moe_sparsity_config is not None
          and kept.moe_sparsity_config.num_experts == counts,
          f"{m.name} fp8: the dequantized export's quantization_config is the counts alone: {got}")


def main() -> int:
    dcpctl = sys.argv[1]
    tmp = Path(tempfile.mkdtemp(prefix="pruned-moe-"))
    try:
        for m in each_case(MODELS, 12, name=lambda m: m.name):
            src, uni, per = tmp / f"{m.name}-src", tmp / f"{m.name}-uniform", tmp / f"{m.name}-per-layer"
            m.make(src)
            expect_verify(dcpctl, f"{m.name}: the model as transformers saved it", src, EXIT_OK)

            kept = prune_uniform(m, src, uni)
            sizes = {len(v) for v in kept.values()}
            check(sizes == {6}, f"{m.name}: the uniform pruner kept {sizes} experts a layer (8 at sparsity 0.25: 6)")
            expect_verify(dcpctl, f"{m.name}: uniformly pruned", uni, EXIT_OK)
            out = tmp / f"{m.name}-uniform-hf"
            expect_rc(run(dcpctl, "consolidate", str(uni), "-o", str(out) + "/"), EXIT_OK, f"{m.name}: consolidate uniform")
            expect_same(f"{m.name}: uniform export", tensors_of(out), tensors_of(uni))
            check_loads(f"{m.name} uniform", uni, out)

            counts = prune_per_layer(m, src, per)
            print(f"{m.name}: per-layer counts {counts}")
            dense0 = m.name != "gpt_oss"  # the others' layer 0 is dense
            check(len({n for n in counts if n}) > 1 and (counts[0] is None) == dense0,
                  f"{m.name}: the pruners kept differing counts {counts} (layer 0 dense: {dense0})")
            j = json.loads((per / "config.json").read_text())
            check(j.get("quantization_config", {}).get("moe_sparsity_config") == {"method": "prune", "num_experts": counts},
                  f"{m.name}: compressed-tensors wrote moe_sparsity_config {j.get('quantization_config')}")
            before = tree_digest(per)
            expect_verify(dcpctl, f"{m.name}: pruned per layer", per, EXIT_OK, warning="moe-sparsity-per-layer")
            check_refused_by_transformers(m.name, per, tmp)
            out = tmp / f"{m.name}-per-layer-hf"
            why = "a per-layer pruned model, which transformers cannot build (the test asserts its refusal)"
            expect_rc(run(dcpctl, "consolidate", str(per), "-o", str(out) + "/", hf_partial=why), EXIT_OK,
                      f"{m.name}: consolidate per-layer")
            expect_same(f"{m.name}: per-layer export", tensors_of(out), tensors_of(per))
            got = json.loads((out / "config.json").read_text())
            check(got == j, f"{m.name}: the export's config.json is the pruned folder's")
            expect_verify(dcpctl, f"{m.name}: the per-layer export", out, EXIT_OK, warning="moe-sparsity-per-layer")
            if m.name == "deepseek_v3":
                out = tmp / f"{m.name}-per-layer-bf16"
                expect_rc(run(dcpctl, "consolidate", str(per), "-o", str(out) + "/", "--dtype", "bf16", hf_partial=why),
                          EXIT_OK, f"{m.name}: consolidate per-layer --dtype bf16")
                keep = tuple(transformers.DeepseekV3ForCausalLM._keep_in_fp32_modules_strict or ())
                expect_same(f"{m.name}: per-layer export in bf16 (float32: {keep})", tensors_of(out), tensors_of(per),
                            torch.bfloat16, kept=keep)
                got = json.loads((out / "config.json").read_text())
                check(got.get("quantization_config") == j["quantization_config"] and got.get("dtype") == "bfloat16",
                      f"{m.name}: the bf16 export's config keeps moe_sparsity_config: {got.get('quantization_config')}")
                one = tmp / f"{m.name}-per-layer.safetensors"
                expect_rc(run(dcpctl, "consolidate", str(per), "-o", str(one)), EXIT_OK, f"{m.name}: to one file")
                expect_same(f"{m.name}: per-layer to one .safetensors", tensors_of(one), tensors_of(per))
                d = tmp / f"{m.name}-novice"
                shutil.copytree(per, d)
                edit_config(d, lambda c: c["quantization_config"]["moe_sparsity_config"].__setitem__("method", "novice"))
                expect_rc(run(dcpctl, "verify", str(d)), EXIT_UNSUPPORTED, f"{m.name}: method novice", "novice")
            if m.name == "qwen3_moe":
                r = run(dcpctl, "consolidate", str(per), "-o", str(tmp / "per-layer.gguf"))
                expect_rc(r, EXIT_UNSUPPORTED, f"{m.name}: a GGUF of a per-layer pruned model", "expert_count",
                          "layer 1 keeps 7")
                quantized(dcpctl, m, src, tmp)
            check(tree_digest(per) == before, f"{m.name}: the per-layer folder is as the pruner wrote it")
            tampered(dcpctl, m, per, counts, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("pruned_moe_test", min_checks=60)


if __name__ == "__main__":
    sys.exit(main())
