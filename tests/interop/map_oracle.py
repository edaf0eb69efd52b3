"""The key maps' oracle, and the checks an output must pass against it. Shared by
map_reference_test.py (the Python reference implementation's outputs) and maps_test.py (dcpctl's).

Two kinds of case (tests/fixtures/layouts/README.md, "expected.json per layout"):

- "titan" (titan_*, made by make_titan_maps.py with real torchtitan and transformers): run/step-2
  (torchtitan's CheckpointManager, full training state), config.json, expected_hf.safetensors (the
  adapter's to_hf), logits.safetensors (torchtitan's logits on fixed tokens), hf/ (transformers'
  save_pretrained of those weights), expected_titan.safetensors (the adapter's from_hf of hf/; for
  titan_deepseek_v3_mtp, of expected_hf: hf/ lacks the MTP block transformers does not load),
  expected.json. Side "torchtitan".
- "megatron" (megatron_*, made by make_megatron_hf.py with megatron-core and Megatron-Bridge): ckpt/
  (dist_checkpointing torch_dist, TP2, layers stacked), config.json, expected_hf.safetensors
  (Megatron-Bridge's export_hf_weights), logits.safetensors (megatron's GPTModel logits), hf/
  (save_pretrained; equal to expected_hf), expected.json. No expected_titan: the reverse oracle is the
  checkpoint's own tensors (torch's reader). Side "megatron".
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import torch
from safetensors.torch import load_file

# case -> the built-in map that covers it
CASES = {
    "titan_llama3": "torchtitan-llama3",
    "titan_llama3_v02": "torchtitan-llama3-0.2",
    "titan_qwen3": "torchtitan-qwen3",
    "titan_qwen3_moe": "torchtitan-qwen3",
    "titan_deepseek_v3": "torchtitan-deepseek-v3",
    "titan_deepseek_v3_mtp": "torchtitan-deepseek-v3",
    "titan_kimi_k2_7": "torchtitan-deepseek-v3",
    "titan_gpt_oss": "torchtitan-gpt-oss",
    "titan_qwen3_5": "torchtitan-qwen3_5",
    "megatron_llama": "megatron-gpt",
    "megatron_qwen": "megatron-gpt",
    "megatron_llama_bias": "megatron-gpt",
}
# transformers vs torchtitan logits (float32, rtol 1e-4), as make_titan_maps.py accepted them; the
# megatron cases record theirs in expected.json (logits.atol, rtol 0: make_megatron_hf.py)
LOGITS_ATOL = {"llama3": 1e-5, "qwen3": 1e-5, "qwen3_moe": 1e-5, "deepseek_v3": 1e-4, "kimi_k2_7": 1e-4, "gpt_oss": 1e-5, "qwen3_5": 1e-6}
# an HF key whose source tensor(s) each case's --dry-run plan and diff checks look at
PROBE = {"titan_qwen3_moe": ("model.layers.1.mlp.experts.4.down_proj.weight", "inner_experts.w2_EDF"),
         "titan_kimi_k2_7": ("model.layers.1.self_attn.q_b_proj.weight", "attention.wq_b.weight"),
         "titan_deepseek_v3_mtp": ("model.layers.2.self_attn.q_proj.weight", "mtp_layers.0.attention.wq.weight"),
         "titan_gpt_oss": ("model.layers.1.mlp.experts.down_proj", "mlp2_weight_EDF"),
         "titan_qwen3_5": ("model.language_model.layers.1.self_attn.q_proj.weight", "attn.wq.weight"),
         "megatron": ("model.layers.1.self_attn.k_proj.weight", "decoder.layers.self_attention.linear_qkv.weight"),
         "titan": ("model.layers.0.self_attn.q_proj.weight", "wq.weight")}


@dataclass
class Case:
    name: str
    dir: Path
    map: str
    doc: dict = field(repr=False)

    # ------------------------------------------------------------------------------- what it is
    @property
    def kind(self) -> str:
        return "megatron" if self.name.startswith("megatron_") else "titan"

    @property
    def side(self) -> str:
        """The map's non-HF side."""
        return "megatron" if self.kind == "megatron" else "torchtitan"

    @property
    def export_direction(self) -> str:
        return f"{self.side}->hf"

    @property
    def import_direction(self) -> str:
        return f"hf->{self.side}"

    @property
    def family(self) -> str:
        return self.doc["family"]

    @property
    def tied(self) -> bool:
        return bool(self.doc.get("tie_word_embeddings", self.doc.get("dims", {}).get("tied", False)))

    @property
    def model_keys(self) -> list[str]:
        return self.doc["model_keys"]

    @property
    def dropped_keys(self) -> list[str]:
        """The checkpoint's model keys the map drops on purpose and reports (dropped): torchtitan's
        load-balancing expert_bias_E, which GPT-OSS, Qwen 3 MoE and Qwen 3.5 in transformers have no
        tensor for (their adapters drop it too; DeepSeek-V3's is e_score_correction_bias). Sorted."""
        if self.family in ("gpt_oss", "qwen3_moe", "qwen3_5"):
            return sorted(k for k in self.model_keys if k.endswith(".moe.expert_bias_E"))
        return []

    @property
    def other_keys(self) -> list[str]:
        """The checkpoint's keys a mapped export leaves out (optimizer, train state; Megatron's
        _extra_state and common_state)."""
        return self.doc["other_keys"]

    @property
    def mtp_hf_keys(self) -> set:
        """to_hf's keys of the DeepSeek-V3 MTP blocks (model.layers.(n_layers + M).*); empty elsewhere."""
        return set((self.doc.get("mtp") or {}).get("mtp_hf_keys", []))

    @property
    def probe(self) -> tuple[str, str]:
        """(an HF key, the suffix of the checkpoint tensor it is made from)."""
        return PROBE.get(self.name) or PROBE[self.kind]

    @property
    def logits_tolerance(self) -> tuple[float, float]:
        """(rtol, atol) of transformers' logits vs the training framework's, as the generator accepted."""
        if self.kind == "megatron":
            return 0.0, float(self.doc["logits"]["atol"])
        return 1e-4, LOGITS_ATOL[self.family]

    # ------------------------------------------------------------------------------------ files
    @property
    def ckpt(self) -> Path:
        return self.dir / self.doc["checkpoint"]

    @property
    def config_path(self) -> Path:
        return self.dir / "config.json"

    @property
    def config(self) -> dict:
        return json.loads(self.config_path.read_text())

    @property
    def hf_dir(self) -> Path:
        return self.dir / "hf"

    @property
    def expected_hf_path(self) -> Path:
        return self.dir / "expected_hf.safetensors"

    def expected_hf(self) -> dict:
        return load_file(str(self.expected_hf_path))

    def hf_input(self) -> dict:
        sd = {}
        for p in sorted(self.hf_dir.glob("*.safetensors")):
            sd.update(load_file(str(p)))
        return sd

    @cached_property
    def _side_tensors(self) -> dict:
        import dcp_oracle  # tests/interop, on the path of both tests

        if self.kind == "titan":
            sd = load_file(str(self.dir / "expected_titan.safetensors"))
            if self.dropped_keys:  # from_hf leaves them out; the model holds them at the zeros it starts from
                flat = dcp_oracle.flat_state_from_dcp(self.ckpt)
                sd.update({k: torch.zeros_like(flat[k]) for k in self.dropped_keys})
            return sd

        flat = dcp_oracle.flat_state_from_dcp(self.ckpt)
        return {k: flat[k] for k in self.model_keys}

    def expected_side(self) -> dict:
        """The oracle of hf -> side: the adapter's from_hf (titan), the checkpoint's tensors (megatron)."""
        return dict(self._side_tensors)

    # ----------------------------------------------------------------------------- key sets
    def expected_hf_keys(self, folder: bool = False) -> set:
        """What a mapped export must hold: to_hf's keys, plus lm_head.weight when the model ties it
        (the checkpoint holds it) in a .safetensors file; an HF folder (folder) leaves a tied head
        equal to the embedding out as the adapter's to_hf and save_pretrained do, and says so."""
        keys = set(self.doc["expected_hf"])
        if self.tied and "lm_head.weight" in self.model_keys and not folder:
            keys.add("lm_head.weight")
        return keys

    def expected_side_keys(self, hf_keys) -> set:
        """What a mapped import of the HF tensors hf_keys must hold: from_hf's keys (titan) or the
        checkpoint's model keys (megatron; a tied model's lm_head.weight the map's "tied" rule copies
        from the embedding when the input has none, as from_hf does), less the MTP
        blocks' keys when the input lacks the MTP keys (hf/ of titan_deepseek_v3_mtp)."""
        hf_keys = set(hf_keys)
        keys = set(self.doc["expected_titan"]) if self.kind == "titan" else set(self.model_keys)
        # the dropped keys (expert_bias_E) are in: the map's "zeros" writes them as the zeros torchtitan's
        # model starts from (from_hf leaves them out, its strict dcp.load of the model asks for them)
        keys |= set(self.dropped_keys)
        if self.mtp_hf_keys and not (self.mtp_hf_keys & hf_keys):
            keys = {k for k in keys if not k.startswith("mtp_layers.")}
        return keys

    def unexpected_ok(self, hf_keys) -> set:
        """from_pretrained's unexpected keys a mapped export must give: for the MTP case the MTP
        block's keys as transformers names them (DeepseekV3ForCausalLM does not build MTP layers;
        recorded in expected.json), when the export holds them; nothing otherwise."""
        mtp = self.doc.get("mtp") or {}
        if self.mtp_hf_keys & set(hf_keys):
            return set(mtp["from_pretrained_unexpected_keys"])
        return set()


def cases(fixtures: Path) -> list[Case]:
    root = fixtures / "layouts"
    out = []
    for name, m in CASES.items():
        d = root / name
        out.append(Case(name, d, m, json.loads((d / "expected.json").read_text())))
    return out


def with_tied_head(case: Case, hf: dict) -> dict:
    """An HF state dict as a tied model's round trip gives it back: hf -> side copies the embedding
    into lm_head.weight (the map's "tied" rule, as from_hf), and side -> hf keeps what the
    checkpoint holds; so plus lm_head.weight (the embedding) when the case ties and hf has none."""
    out = dict(hf)
    for emb in ("model.embed_tokens.weight", "model.language_model.embed_tokens.weight"):
        if case.tied and "lm_head.weight" not in out and emb in out:
            out["lm_head.weight"] = out[emb]
    return out


def compare_tensors(got: dict, want: dict, want_keys: set, what: str) -> list[str]:
    """Every key of want_keys present and bit-equal (dtype, shape, bytes); nothing else."""
    problems = []
    if set(got) != want_keys:
        problems.append(f"{what}: keys differ: missing {sorted(want_keys - set(got))}, "
                        f"unexpected {sorted(set(got) - want_keys)}")
    for k in sorted(want_keys & set(got)):
        w = want.get(k)
        if w is None:
            continue
        g = got[k]
        if g.dtype != w.dtype or tuple(g.shape) != tuple(w.shape):
            problems.append(f"{what}: {k}: {g.dtype} {tuple(g.shape)} != {w.dtype} {tuple(w.shape)}")
        elif not torch.equal(g.contiguous().view(torch.uint8), w.contiguous().view(torch.uint8)):
            problems.append(f"{what}: {k}: values differ from the oracle's")
    return problems


def check_hf_tensors(case: Case, got: dict, what: str, folder: bool = False) -> list[str]:
    problems = compare_tensors(got, case.expected_hf(), case.expected_hf_keys(folder), what)
    if case.tied and "lm_head.weight" in got and "model.embed_tokens.weight" in got:
        if not torch.equal(got["lm_head.weight"], got["model.embed_tokens.weight"]):
            problems.append(f"{what}: tied lm_head.weight differs from model.embed_tokens.weight")
    return problems


def check_side_tensors(case: Case, got: dict, hf_keys, what: str) -> list[str]:
    """An import (hf -> torchtitan / megatron) of the HF tensors named hf_keys against the oracle."""
    return compare_tensors(got, case.expected_side(), case.expected_side_keys(hf_keys), what)


def check_from_pretrained(case: Case, folder: Path, what: str) -> list[str]:
    """transformers' AutoModelForCausalLM.from_pretrained(folder): no missing/mismatched keys, no
    unexpected keys but the case's (the MTP block), and the training framework's logits on the
    recorded tokens (float32) within the case's tolerance."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    problems = []
    keys = set()
    for p in folder.glob("*.safetensors"):
        with safe_open(str(p), "pt") as f:
            keys.update(f.keys())
    model, info = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, output_loading_info=True)
    info = {k: (set(v) if isinstance(v, (list, set, tuple)) else v) for k, v in info.items()}
    want_unexpected = case.unexpected_ok(keys)
    unexpected = set(info.pop("unexpected_keys", set()) or set())
    if unexpected != want_unexpected:
        problems.append(f"{what}: from_pretrained: unexpected keys {sorted(unexpected - want_unexpected)}, "
                        f"and not {sorted(want_unexpected - unexpected)} (want {len(want_unexpected)})")
    bad = {k: v for k, v in info.items() if v}
    if bad:
        problems.append(f"{what}: from_pretrained: {bad}")
    from testlib import hf_loaded  # its caller's harness: the summary's load check skips these bytes
    hf_loaded(folder)
    model.eval()
    rec = load_file(str(case.dir / "logits.safetensors"))
    with torch.no_grad():
        logits = model(rec["tokens"]).logits.float()
    diff = (logits - rec["logits"]).abs().max().item()
    rtol, atol = case.logits_tolerance
    if not torch.allclose(logits, rec["logits"], rtol=rtol, atol=atol):
        problems.append(f"{what}: logits differ from {case.side}'s: max |diff| {diff:.3g} (atol {atol}, rtol {rtol})")
    return problems


def hf_folder_from_tensors(case: Case, sd: dict, parent: Path) -> Path:
    """A folder from_pretrained can read: case's config.json + sd as model.safetensors."""
    from safetensors.torch import save_file

    d = Path(tempfile.mkdtemp(prefix="hf-", dir=parent))
    shutil.copyfile(case.config_path, d / "config.json")
    save_file({k: v.contiguous() for k, v in sd.items()}, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d


def mtp_release_extras(case: Case) -> list[str]:
    """The keys DeepSeek's release has in each MTP layer that torchtitan's to_hf does not write (the
    MTP block shares the model's embedding and head): the map drops them."""
    layers = sorted({int(m.group(1)) for k in case.mtp_hf_keys if (m := re.match(r"model\.layers\.(\d+)\.", k))})
    return [f"model.layers.{n}.{s}" for n in layers for s in ("embed_tokens.weight", "shared_head.head.weight")]
