#!/usr/bin/env python3
"""The model schema against the config.json of published releases (issue 68, item 1).

    hf_release_configs_test.py DCPCTL [NAME ...]

For each tests/fixtures/release_configs/NAME/config.json (a release's config.json, copied from a
public repository: README.md beside them says which, file and commit), the folder the release's
save_pretrained would write at its real sizes, its layers cut:
  - the config read by transformers (its class by model_type, or, for a model_type transformers
    does not define, Kimi-K2's `kimi_k2`, by the class its `architectures` names), the layer count
    cut to CUT_LAYERS (more where `first_k_dense_replace` needs it: its dense layers and two MoE
    layers stay), every per-layer list and per-layer pattern string cut with it (sub-configs too:
    text_config, vision_config); every width, head count, head_dim, key/value head count,
    intermediate size, expert count, rank and the vocabulary are the release's;
  - built on the meta device (no memory), its on-disk names and shapes taken as save_pretrained
    derives them (tools/hf_schema.py's build and disk_keys: tied weights out, load-time renames
    reverted), each tensor in the dtype transformers keeps it in for bfloat16;
  - written as a folder: the release's config.json (layers cut; `quantization_config` dropped, the
    folder being the dequantized bfloat16 form --dtype bf16 writes) and one model.safetensors whose
    header carries those shapes (safetensors' own format: u64 little-endian header length, the JSON
    header padded with spaces to 8 bytes, data offsets contiguous from 0), the data a sparse file
    (os.truncate: zeros, no disk used);
  - `dcpctl verify DIR --json` must exit 0 with hf.schema.checked true: the schema agrees with
    transformers on the release's real sizes. A refusal prints the problems (a schema or generator
    bug: the key, the dimension and the formula).
Negative controls (the check is live): Qwen3-30B-A3B and Mistral-Small-3.1-24B with layer 1's
o_proj input width set to hidden_size (heads x head_dim differs from it in both), DeepSeek-V3 with
one expert's down_proj input width set to intermediate_size: each exit 3, schema-shape-mismatch
naming the key.

Exit status: 0 pass, 1 failure, 77 skip (torch/transformers missing; a failure under CI).
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import os
import struct
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from testlib import EXIT_INVALID, EXIT_OK, check, run, summary  # noqa: E402

FIXTURES = HERE.parent / "fixtures" / "release_configs"
CUT_LAYERS = 4
LAYER_FIELDS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers")
# Per-layer pattern strings, one character a layer (Nemotron-H's "MEMEM*E...").
PATTERN_FIELDS = ("hybrid_override_pattern",)
ST_DTYPE = {"torch.bfloat16": "BF16", "torch.float16": "F16", "torch.float32": "F32", "torch.float64": "F64",
            "torch.int64": "I64", "torch.int32": "I32", "torch.int16": "I16", "torch.int8": "I8",
            "torch.uint8": "U8", "torch.bool": "BOOL", "torch.float8_e4m3fn": "F8_E4M3",
            "torch.float8_e5m2": "F8_E5M2"}
ST_SIZE = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
           "F8_E4M3": 1, "F8_E5M2": 1}
# name -> (a key of layer 1 and the dimension to set wrong, the config field it is set to)
NEGATIVE = {
    "Qwen3-30B-A3B": ("model.layers.1.self_attn.o_proj.weight", 1, "hidden_size"),
    "Mistral-Small-3.1-24B": ("language_model.model.layers.1.self_attn.o_proj.weight", 1, "text_config.hidden_size"),
    "DeepSeek-V3": ("model.layers.3.mlp.experts.0.down_proj.weight", 1, "intermediate_size"),
}


def cut_dict(d: dict, layers: int | None = None) -> dict:
    """d (a config dict, sub-configs nested) with its layer count cut to `layers` (CUT_LAYERS, more
    where first_k_dense_replace needs it) and every list or pattern string as long as the layer
    count cut with it."""
    d = copy.deepcopy(d)
    for k, v in list(d.items()):
        if isinstance(v, dict) and k not in ("quantization_config", "rope_scaling", "rope_parameters", "auto_map"):
            d[k] = cut_dict(v)
    f = next((f for f in LAYER_FIELDS if isinstance(d.get(f), int) and not isinstance(d.get(f), bool)), None)
    if f is None:
        return d
    n = d[f]
    want = layers or CUT_LAYERS
    dense = d.get("first_k_dense_replace")
    if isinstance(dense, int) and dense > 0:
        want = max(want, dense + 2)
    if n <= want:
        return d
    d[f] = want
    for k, v in list(d.items()):
        if isinstance(v, list) and len(v) == n:
            d[k] = v[:want]
        elif k in PATTERN_FIELDS and isinstance(v, str) and len(v) == n:
            d[k] = v[:want]
        elif k == "mlp_only_layers" and isinstance(v, list):
            d[k] = [i for i in v if i < want]
    return d


def config_class_of(raw: dict):
    """The config class transformers reads raw with: its model_type's, else the class's its
    architectures name (Kimi-K2's kimi_k2: DeepseekV3ForCausalLM's DeepseekV3Config)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    mt = raw.get("model_type")
    if mt in CONFIG_MAPPING:
        return CONFIG_MAPPING[mt]
    for arch in raw.get("architectures") or []:
        cls = getattr(transformers, arch, None)
        if cls is not None and getattr(cls, "config_class", None) is not None:
            return cls.config_class
    raise KeyError(f"model_type {mt!r}: no config class in transformers, nor one by architectures")


def release_keys(raw: dict):
    """{on-disk key: (shape, safetensors dtype)} transformers' save_pretrained writes for raw (the
    cut config dict), built on the meta device; and the class built."""
    import torch
    import transformers
    import hf_schema
    cc = config_class_of(raw)
    d = {k: v for k, v in raw.items() if k != "quantization_config"}
    if d.get("model_type") != cc.model_type:
        d["model_type"] = cc.model_type
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cfg = cc.from_dict(d)
    cls = getattr(transformers, hf_schema.primary_class(cc.model_type))
    model, sd, _ = hf_schema.build(cls, cfg, torch.bfloat16)
    disk = hf_schema.disk_keys(model, sd)
    return {k: (tuple(shape), ST_DTYPE[str(dt)]) for k, (shape, dt) in disk.items()}, cls.__name__


def write_safetensors(path: Path, tensors: dict) -> int:
    """A safetensors file whose header lists tensors ({key: (shape, dtype)}) in key order, data
    contiguous from offset 0, the data a sparse file of zeros; returns the data size."""
    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for k in sorted(tensors):
        shape, dt = tensors[k]
        n = ST_SIZE[dt]
        for s in shape:
            n *= s
        header[k] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
    os.truncate(path, 8 + len(h) + off)
    return off


def write_folder(d: Path, raw: dict, tensors: dict) -> int:
    d.mkdir(parents=True)
    cfg = {k: v for k, v in raw.items() if k != "quantization_config"}
    (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return write_safetensors(d / "model.safetensors", tensors)


def field_value(raw: dict, path: str):
    for p in path.split(".")[:-1]:
        raw = raw[p]
    return raw[path.split(".")[-1]]


def verify(dcpctl: str, d: Path):
    r = run(dcpctl, "verify", str(d), "--json", timeout=300)
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        doc = {}
    return r, doc


def problems_text(doc: dict, r) -> str:
    ps = doc.get("problems") or []
    if not ps:
        return (r.stderr or r.stdout or "").strip()[-1500:]
    return "\n".join(f"    [{p.get('code')}] {p.get('key')}: {p.get('message')}" for p in ps[:12]) + \
        (f"\n    ... {len(ps) - 12} more" if len(ps) > 12 else "")


def main() -> int:
    dcpctl = sys.argv[1]
    only = set(sys.argv[2:])
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    names = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())
    unknown = sorted(only - set(names))
    if unknown:  # a name given that is not a release config: an error, never a smaller run
        print(f"no release config {unknown} under {FIXTURES}", file=sys.stderr)
        return 2
    if only:
        names = [n for n in names if n in only]
    check(len(names) >= 20 or bool(only), f"at least 20 release configs: {len(names)}")
    refused, table = [], []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dcpctl-release-") as tmp:
        tmp = Path(tmp)
        for name in names:
            raw = json.loads((FIXTURES / name / "config.json").read_text())
            cut = cut_dict(raw)
            try:
                tensors, cls = release_keys(cut)
            except Exception as e:  # noqa: BLE001 - reported as this release's failure
                check(False, f"{name}: transformers 5.23 does not build it: {type(e).__name__}: {e}")
                continue
            d = tmp / name
            size = write_folder(d, cut, tensors)
            r, doc = verify(dcpctl, d)
            schema = (doc.get("hf") or {}).get("schema") or {}
            ok = r.returncode == EXIT_OK and schema.get("checked") is True
            table.append(f"{'ok ' if ok else 'REFUSED'} {name:32s} {raw.get('model_type', '?'):16s} {cls:36s} "
                         f"{len(tensors):6d} keys {size / 2**30:9.1f} GiB sparse  exit {r.returncode}"
                         f"{'' if schema.get('checked') else '  schema not checked: ' + json.dumps(schema)[:200]}")
            if not ok:
                refused.append(name)
                print(f"{name}: verify exit {r.returncode}:\n{problems_text(doc, r)}", flush=True)
            check(ok, f"{name} ({raw.get('model_type')}, {cls}): verify of the folder transformers would "
                      f"save at the release's sizes: exit {r.returncode}, schema {schema}")

            if name in NEGATIVE:
                key, dim, field = NEGATIVE[name]
                check(key in tensors, f"{name}: negative control key {key} in the build: {sorted(tensors)[:8]}")
                if key not in tensors:
                    continue
                shape, dt = tensors[key]
                want = field_value(cut, field)
                check(shape[dim] != want, f"{name}: {key} dimension {dim} is {shape[dim]}, not {field} {want}")
                bad = dict(tensors)
                bad[key] = (tuple(want if i == dim else s for i, s in enumerate(shape)), dt)
                nd = tmp / (name + "-wrong")
                write_folder(nd, cut, bad)
                r, doc = verify(dcpctl, nd)
                codes = [(p.get("code"), p.get("key")) for p in doc.get("problems") or []]
                check(r.returncode == EXIT_INVALID and ("schema-shape-mismatch", key) in codes,
                      f"{name}: {key} with dimension {dim} = {field} ({want}) refused: exit {r.returncode} "
                      f"(wanted {EXIT_INVALID}), problems {codes}")
    print("\n".join(table), flush=True)
    print(f"{len(table)} release configs, {len(refused)} refused{': ' + ', '.join(refused) if refused else ''}; "
          f"{time.monotonic() - t0:.1f} s", flush=True)
    return summary("hf-release-configs")


if __name__ == "__main__":
    sys.exit(main())
