#!/usr/bin/env python3
"""The audit of an export against its source (issue 49, item 3): `dcpctl diff SOURCE EXPORT --map M`.

    export_audit_test.py DCPCTL FIXTURES_DIR

Clean audits, exit 0, every count in --json (docs/schemas/diff.schema.json's `audit`):
  - every map fixture's export against its source, with the map tests/interop/map_oracle.py pairs
    it with: titan_* run/step-2 against hf/ (torchtitan 0.3.0's to_hf, saved by transformers
    5.23.0; titan_qwen3 ties its head, so hf/ has no lm_head.weight: `tied` 1, compared with the
    embedding), titan_deepseek_v3_mtp against expected_hf.safetensors (to_hf with the MTP block);
    megatron_* ckpt/ against hf/ (Megatron-Bridge 0.6.2 / transformers), map megatron-gpt;
  - titan_deepseek_v3's run against hf_fp8_deepseek/ckpt (transformers 5.23.0's FineGrainedFP8, 4x4
    blocks, of titan_deepseek_v3/hf): the 14 quantized Linears equal within the fp8 block bound
    (`within_codec` 14), the rest bit-equal;
  - dcpctl's own `consolidate --map M --dtype bf16` export: `after_cast` (the precision policy);
    and its `--quantize fp8-block` export of the mapped folder: `within_codec` 14;
  - an export keeping a buffer the map names on its side (rotary_emb.inv_freq): `export_only` 1.
Not clean, exit 1, naming the key (each damage of a real writer's output, done here on a copy):
  - titan_deepseek_v3_mtp against hf/, which transformers' save_pretrained wrote without the MTP
    block (the loss of Megatron-Bridge #5495): the MTP layer's keys are unexplained;
  - a key removed from an export; a value changed by one ULP (float32) and by one fp8 step (the
    quantized export); a tensor renamed (both names); a bf16 value one ULP off the cast.
"""
from __future__ import annotations

import json
import shutil
import struct
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from testlib import EXIT_FAILURE, EXIT_OK, check, run, summary  # noqa: E402

DCPCTL = ""
TITAN = {"titan_llama3": "torchtitan-llama3", "titan_llama3_v02": "torchtitan-llama3-0.2", "titan_qwen3": "torchtitan-qwen3",
         "titan_qwen3_moe": "torchtitan-qwen3",
         "titan_deepseek_v3": "torchtitan-deepseek-v3", "titan_kimi_k2_7": "torchtitan-deepseek-v3",
         "titan_gpt_oss": "torchtitan-gpt-oss", "titan_qwen3_5": "torchtitan-qwen3_5"}
MEGATRON = ["megatron_llama", "megatron_qwen", "megatron_qwen3", "megatron_qwen3_moe", "megatron_qwen2_moe", "megatron_llama_bias"]


def audit(source: Path, export: Path, m: str, config: Path | None, *extra) -> tuple[int, dict, str]:
    args = ["diff", source, export, "--map", m, "--json", *extra]
    if config:
        args += ["--config", config]
    r = run(DCPCTL, *args)
    try:
        doc = json.loads(r.stdout)
    except json.JSONDecodeError:
        doc = {}
    return r.returncode, doc, r.stderr


def clean(what: str, rc: int, doc: dict, err: str, **want) -> dict:
    a = doc.get("audit") or {}
    c = a.get("counts") or {}
    ok = check(rc == EXIT_OK and a.get("clean") is True and c.get("unexplained") == 0,
               f"{what}: exit {rc}, unexplained {a.get('unexplained')}, stderr {err.strip()[-400:]!r}")
    if ok:
        check(c.get("mapped", 0) > 0 and c.get("export_keys", 0) > 0
              and c["bit_equal"] + c["within_codec"] + c["after_cast"] + c["tied"] == c["export_keys"],
              f"{what}: counts do not add up: {c}")
        for k, v in want.items():
            check(c.get(k) == v, f"{what}: counts.{k} = {c.get(k)} (want {v}): {c}")
    return c


def unclean(what: str, rc: int, doc: dict, err: str, *keys: str) -> None:
    a = doc.get("audit") or {}
    named = [u.get("key", "") for u in a.get("unexplained", [])]
    check(rc == EXIT_FAILURE and a.get("clean") is False and all(any(k in n for n in named) for k in keys),
          f"{what}: exit {rc} (want 1), unexplained {named[:10]} (want {list(keys)}), stderr {err.strip()[-300:]!r}")


# --- safetensors files edited as a damaged export would be (the header and data as the package lays them out)
def read_st(path: Path) -> tuple[dict, bytes]:
    b = path.read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def write_st(path: Path, entries: dict) -> None:
    """entries: name -> (dtype, shape, bytes), and "__metadata__"."""
    header, data, off = {}, bytearray(), 0
    if "__metadata__" in entries:
        header["__metadata__"] = entries.pop("__metadata__")
    for k, (dt, shape, raw) in entries.items():
        header[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(data))


def entries_of(path: Path) -> dict:
    h, data = read_st(path)
    out = {"__metadata__": h.pop("__metadata__")} if "__metadata__" in h else {}
    for k, v in h.items():
        b, e = v["data_offsets"]
        out[k] = (v["dtype"], v["shape"], data[b:e])
    return out


def bump(raw: bytes, itemsize: int, index: int = 3) -> bytes:
    """The element at `index` one step (ULP, or fp8 code) away."""
    b = bytearray(raw)
    v = int.from_bytes(b[index * itemsize:(index + 1) * itemsize], "little") + 1
    b[index * itemsize:(index + 1) * itemsize] = v.to_bytes(itemsize, "little")
    return bytes(b)


def edited_copy(src: Path, work: Path, name: str, edit) -> Path:
    out = work / name
    shutil.copytree(src, out)
    f = out / "model.safetensors"
    e = entries_of(f)
    edit(e)
    write_st(f, e)
    return out


def main() -> int:
    global DCPCTL
    DCPCTL, fixtures = sys.argv[1], Path(sys.argv[2])
    lay = fixtures / "layouts"
    for case, m in TITAN.items():
        d = lay / case
        rc, doc, err = audit(d / "run" / "step-2", d / "hf", m, d / "config.json")
        clean(f"{case}: run vs hf/ --map {m}", rc, doc, err, **({"tied": 1} if case == "titan_qwen3" else {"tied": 0}))
    d = lay / "titan_deepseek_v3_mtp"
    rc, doc, err = audit(d / "run" / "step-2", d / "expected_hf.safetensors", "torchtitan-deepseek-v3", d / "config.json")
    clean("titan_deepseek_v3_mtp: run vs to_hf's export (MTP block included)", rc, doc, err)
    rc, doc, err = audit(d / "run" / "step-2", d / "hf", "torchtitan-deepseek-v3", d / "config.json")
    unclean("titan_deepseek_v3_mtp: run vs save_pretrained's hf/ (the MTP block lost)", rc, doc, err,
            "model.layers.2.self_attn.q_proj.weight", "model.layers.2.enorm.weight")
    for case in MEGATRON:
        d = lay / case
        rc, doc, err = audit(d / "ckpt", d / "hf", "megatron-gpt", d / "config.json")
        clean(f"{case}: ckpt vs hf/ --map megatron-gpt", rc, doc, err, dropped=0)

    src = lay / "titan_deepseek_v3"
    fp8 = lay / "hf_fp8_deepseek" / "ckpt"
    rc, doc, err = audit(src / "run" / "step-2", fp8, "torchtitan-deepseek-v3", src / "config.json")
    clean("titan_deepseek_v3 vs its fp8 block export", rc, doc, err, within_codec=14)
    q = "model.layers.0.self_attn.q_proj.weight"
    keys = [k.get("key") for k in doc.get("keys", []) if k.get("bound") == "codec" and k.get("codec") == "fp8-block"
            and "weight_scale_inv" in k.get("bound_rule", "")]
    check(q in keys and len(keys) == 14, f"fp8 export: keys compared under the fp8 bound: {keys}")

    with tempfile.TemporaryDirectory(prefix="dcpctl-export-audit-") as tmp:
        work = Path(tmp)
        # A quantized export with one fp8 code one step off.
        bad = work / "fp8-step"
        shutil.copytree(fp8, bad)
        index = json.loads((bad / "model.safetensors.index.json").read_text())
        f = bad / index["weight_map"][q]
        e = entries_of(f)
        dt, shape, raw = e[q]
        e[q] = (dt, shape, bump(raw, 1, 7))
        write_st(f, e)
        rc, doc, err = audit(src / "run" / "step-2", bad, "torchtitan-deepseek-v3", src / "config.json")
        unclean("fp8 export with one code one step off", rc, doc, err, q)

        d = lay / "megatron_qwen"
        gone = "model.layers.1.mlp.down_proj.weight"
        out = edited_copy(d / "hf", work, "removed", lambda e: e.pop(gone))
        rc, doc, err = audit(d / "ckpt", out, "megatron-gpt", d / "config.json")
        unclean("megatron_qwen: a key removed from the export", rc, doc, err, gone)

        d = lay / "titan_llama3"
        k = "model.layers.0.self_attn.q_proj.weight"
        out = edited_copy(d / "hf", work, "ulp", lambda e: e.__setitem__(k, (e[k][0], e[k][1], bump(e[k][2], 4))))
        rc, doc, err = audit(d / "run" / "step-2", out, "torchtitan-llama3", d / "config.json")
        unclean("titan_llama3: a value one ULP off", rc, doc, err, k)

        # dcpctl's own quantized export (`--quantize fp8-block` of the mapped folder, 128 x 128 blocks):
        # the 14 Linear weights within the fp8 bound, the embedding and head kept bit-equal.
        hf1, quant = work / "hf1", work / "fp8-dcpctl"
        r = run(DCPCTL, "consolidate", d / "run" / "step-2", "-o", f"{hf1}/", "--map", "torchtitan-llama3",
                "--config", d / "config.json", "--assets", d / "hf")
        r2 = run(DCPCTL, "consolidate", hf1, "-o", f"{quant}/", "--quantize", "fp8-block") if r.returncode == 0 else r
        if check(r2.returncode == 0, f"consolidate --quantize fp8-block: exit {r2.returncode}: {r2.stderr.strip()[-300:]}"):
            rc, doc, err = audit(d / "run" / "step-2", quant, "torchtitan-llama3", d / "config.json")
            clean("titan_llama3 vs dcpctl's fp8 block export", rc, doc, err, within_codec=14, bit_equal=7)

        # An export that keeps a buffer older transformers saved (rotary_emb.inv_freq): the map names
        # it on the HF side with its reason, so it is accounted for, not unexplained.
        inv = "model.layers.1.self_attn.rotary_emb.inv_freq"
        out = edited_copy(d / "hf", work, "inv_freq", lambda e: e.__setitem__(inv, ("F32", [4], bytes(16))))
        rc, doc, err = audit(d / "run" / "step-2", out, "torchtitan-llama3", d / "config.json")
        clean("titan_llama3: an export keeping rotary_emb.inv_freq", rc, doc, err, export_only=1)
        check([x.get("key") for x in (doc.get("audit") or {}).get("export_only", [])] == [inv], f"export_only: {doc.get('audit')}")

        d = lay / "titan_qwen3"
        out = edited_copy(d / "hf", work, "renamed", lambda e: e.__setitem__("model.final_norm.weight", e.pop("model.norm.weight")))
        rc, doc, err = audit(d / "run" / "step-2", out, "torchtitan-qwen3", d / "config.json")
        unclean("titan_qwen3: a tensor renamed", rc, doc, err, "model.norm.weight", "model.final_norm.weight")

        # The precision policy: dcpctl's own bf16 export, then one bf16 value a ULP off the cast.
        d = lay / "titan_llama3"
        cast = work / "bf16"
        r = run(DCPCTL, "consolidate", d / "run" / "step-2", "-o", f"{cast}/", "--map", "torchtitan-llama3",
                "--config", d / "config.json", "--dtype", "bf16")
        if check(r.returncode == 0, f"consolidate --dtype bf16: exit {r.returncode}: {r.stderr.strip()[-300:]}"):
            rc, doc, err = audit(d / "run" / "step-2", cast, "torchtitan-llama3", d / "config.json")
            c = clean("titan_llama3 vs its bf16 export", rc, doc, err)
            check(c.get("after_cast", 0) > 0, f"bf16 export: nothing counted as equal after the cast: {c}")
            out = edited_copy(cast, work, "bf16-ulp", lambda e: e.__setitem__(k, (e[k][0], e[k][1], bump(e[k][2], 2))))
            rc, doc, err = audit(d / "run" / "step-2", out, "torchtitan-llama3", d / "config.json")
            unclean("bf16 export: a value one ULP off the cast", rc, doc, err, k)
    return summary("export_audit_test", 30)


if __name__ == "__main__":
    sys.exit(main())
