"""The key maps' oracle (tests/fixtures/layouts/titan_*, made by make_titan_maps.py with real
torchtitan and transformers), and the checks an output must pass against it. Shared by
map_reference_test.py (the Python reference implementation's outputs) and maps_test.py (dcpctl's).

A case: run/step-2 (torchtitan's CheckpointManager, full training state), config.json,
expected_hf.safetensors (the adapter's to_hf), logits.safetensors (torchtitan's logits on fixed
tokens), hf/ (transformers' save_pretrained of those weights), expected_titan.safetensors (the
adapter's from_hf of hf/), expected.json.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file

# case -> the built-in map that covers it
CASES = {
    "titan_llama3": "torchtitan-llama3",
    "titan_llama3_v02": "torchtitan-llama3-0.2",
    "titan_qwen3": "torchtitan-qwen3",
    "titan_deepseek_v3": "torchtitan-deepseek-v3",
}
# transformers vs torchtitan logits (float32), as make_titan_maps.py accepted them
LOGITS_ATOL = {"llama3": 1e-5, "qwen3": 1e-5, "deepseek_v3": 1e-4}


@dataclass
class Case:
    name: str
    dir: Path
    map: str
    doc: dict = field(repr=False)

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
    def tied(self) -> bool:
        return bool(self.doc["tie_word_embeddings"])

    @property
    def family(self) -> str:
        return self.doc["family"]

    def expected_hf(self) -> dict:
        return load_file(str(self.dir / "expected_hf.safetensors"))

    def expected_titan(self) -> dict:
        return load_file(str(self.dir / "expected_titan.safetensors"))

    def hf_input(self) -> dict:
        sd = {}
        for p in sorted(self.hf_dir.glob("*.safetensors")):
            sd.update(load_file(str(p)))
        return sd

    def expected_hf_keys(self) -> set:
        """What a mapped export must hold: to_hf's keys, plus lm_head.weight when the model ties it
        (the checkpoint holds it; the adapter leaves it out, dcpctl keeps it and reports the tie:
        nothing dropped silently)."""
        keys = set(self.doc["expected_hf"])
        if self.tied and "lm_head.weight" in self.doc["model_keys"]:
            keys.add("lm_head.weight")
        return keys

    def expected_titan_keys(self) -> set:
        """What a mapped import of hf/ must hold: from_hf's keys, less lm_head.weight when tied and
        hf/ has none (from_hf copies the embedding into it; dcpctl does not invent a tensor)."""
        keys = set(self.doc["expected_titan"])
        if self.tied and "lm_head.weight" not in self.hf_input():
            keys.discard("lm_head.weight")
        return keys


def cases(fixtures: Path) -> list[Case]:
    root = fixtures / "layouts"
    out = []
    for name, m in CASES.items():
        d = root / name
        out.append(Case(name, d, m, json.loads((d / "expected.json").read_text())))
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
            problems.append(f"{what}: {k}: values differ from the adapter's")
    return problems


def check_hf_tensors(case: Case, got: dict, what: str) -> list[str]:
    problems = compare_tensors(got, case.expected_hf(), case.expected_hf_keys(), what)
    if case.tied and "lm_head.weight" in got and "model.embed_tokens.weight" in got:
        if not torch.equal(got["lm_head.weight"], got["model.embed_tokens.weight"]):
            problems.append(f"{what}: tied lm_head.weight differs from model.embed_tokens.weight")
    return problems


def check_titan_tensors(case: Case, got: dict, what: str) -> list[str]:
    return compare_tensors(got, case.expected_titan(), case.expected_titan_keys(), what)


def check_from_pretrained(case: Case, folder: Path, what: str) -> list[str]:
    """transformers' AutoModelForCausalLM.from_pretrained(folder): no missing/unexpected/mismatched
    keys, and the torchtitan model's logits on the recorded tokens (float32)."""
    from transformers import AutoModelForCausalLM

    problems = []
    model, info = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        problems.append(f"{what}: from_pretrained: {bad}")
    model.eval()
    rec = load_file(str(case.dir / "logits.safetensors"))
    with torch.no_grad():
        logits = model(rec["tokens"]).logits.float()
    diff = (logits - rec["logits"]).abs().max().item()
    if not torch.allclose(logits, rec["logits"], rtol=1e-4, atol=LOGITS_ATOL[case.family]):
        problems.append(f"{what}: logits differ from torchtitan's: max |diff| {diff:.3g}")
    return problems


def hf_folder_from_tensors(case: Case, sd: dict, parent: Path) -> Path:
    """A folder from_pretrained can read: case's config.json + sd as model.safetensors."""
    from safetensors.torch import save_file

    d = Path(tempfile.mkdtemp(prefix="hf-", dir=parent))
    shutil.copyfile(case.config_path, d / "config.json")
    save_file({k: v.contiguous() for k, v in sd.items()}, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d
