#!/usr/bin/env python3
"""safetensors' F4 (two E2M1 values a byte) read and written as torch's float4_e2m1fn_x2.

    f4_test.py DCPCTL

safetensors counts an F4 tensor's shape in 4-bit elements; torch's float4_e2m1fn_x2 counts the bytes
that pack two, so safetensors' own torch loader halves the last dimension, and its writer doubles
it. dcpctl reads and writes the same way (meta/safetensors_header.cpp, write/safetensors.cpp).
Everything here is written by real software at test time: safetensors 0.8's save_file (an HF
folder holding F4) and torch's dcp.save (a DCP checkpoint holding float4_e2m1fn_x2).

Checked: inspect shows torch's dtype and shape; consolidate to .safetensors gives the header
safetensors' own save_file writes for the same tensors (dtype F4, elements in the shape) and the
same bytes, to .pt what torch.load reads back equal; the DCP source the same through save_file's
header; an HF folder in and out again byte for byte; verify of the outputs is clean; a header
whose F4 last dimension is odd (bytes damaged by hand) is exit 3 naming the key.
"""
from __future__ import annotations

import json
import struct
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from testlib import EXIT_INVALID, EXIT_OK, check, expect_rc, run, summary  # noqa: E402

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402


def header(path: Path) -> dict:
    b = path.read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n])


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def main() -> int:
    dcpctl = sys.argv[1]
    g = torch.Generator().manual_seed(4)
    packed = torch.randint(0, 256, (6, 10), dtype=torch.uint8, generator=g)
    tensors = {
        "model.layers.0.mlp.experts.down_proj_blocks": packed.view(torch.float4_e2m1fn_x2),
        "model.norm.weight": torch.randn(7, generator=g).to(torch.bfloat16),
    }
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # The reference: what safetensors itself writes for these tensors.
        ref = tmp / "ref.safetensors"
        save_file(tensors, ref)
        check(header(ref)["model.layers.0.mlp.experts.down_proj_blocks"]["shape"] == [6, 20],
              f"safetensors writes F4 shapes in elements: {header(ref)}")
        hf = tmp / "hf"
        hf.mkdir()
        save_file(tensors, hf / "model.safetensors")
        ck = tmp / "dcp"
        dcp.save(tensors, checkpoint_id=str(ck), no_dist=True)

        r = run(dcpctl, "inspect", hf, "--json")
        if expect_rc(r, EXIT_OK, "inspect of an HF folder holding F4"):
            rows = {t["key"]: t for t in json.loads(r.stdout)["items"]}
            t = rows.get("model.layers.0.mlp.experts.down_proj_blocks", {})
            check(t.get("dtype") == "float4_e2m1fn_x2" and t.get("shape") == [6, 10],
                  f"inspect shows torch's float4_e2m1fn_x2 [6, 10]: {t}")

        for name, src in (("HF folder", hf), ("DCP", ck)):
            out = tmp / f"out-{name[:2]}.safetensors"
            r = run(dcpctl, "consolidate", src, "-o", out, "-q")
            if expect_rc(r, EXIT_OK, f"consolidate {name} -> .safetensors"):
                got, want = header(out), header(ref)
                for k in tensors:
                    check(got[k]["dtype"] == want[k]["dtype"] and got[k]["shape"] == want[k]["shape"],
                          f"{name}: {k} as save_file writes it: {got[k]} vs {want[k]}")
                back = load_file(out)
                for k, v in tensors.items():
                    check(same_bytes(back[k], v), f"{name}: {k} reads back equal through safetensors")
                expect_rc(run(dcpctl, "verify", out), EXIT_OK, f"verify of the {name} .safetensors output")
            pt = tmp / f"out-{name[:2]}.pt"
            r = run(dcpctl, "consolidate", src, "-o", pt, "-q")
            if expect_rc(r, EXIT_OK, f"consolidate {name} -> .pt"):
                back = torch.load(pt, weights_only=True)
                for k, v in tensors.items():
                    check(same_bytes(back[k], v), f"{name}: {k} reads back equal through torch.load")

        out = tmp / "out-hf"
        r = run(dcpctl, "consolidate", hf, "-o", f"{out}/", "-q")
        if expect_rc(r, EXIT_OK, "consolidate HF folder -> HF folder"):
            back = load_file(out / "model.safetensors")
            check(all(same_bytes(back[k], v) for k, v in tensors.items()), "the HF folder round trip keeps every tensor")
            expect_rc(run(dcpctl, "verify", out), EXIT_OK, "verify of the HF folder output")

        # Damage: the F4 entry's last dimension made odd (its bytes then no longer match either).
        bad = tmp / "bad"
        bad.mkdir()
        raw = (hf / "model.safetensors").read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        text = raw[8:8 + n].decode()
        damaged = text.replace('"shape":[6,20]', '"shape":[6,19]')
        check(damaged != text, "the damage applies")
        (bad / "model.safetensors").write_bytes(raw[:8] + damaged.encode() + raw[8 + n:])
        r = run(dcpctl, "consolidate", bad, "-o", tmp / "never.safetensors", "-q")
        expect_rc(r, EXIT_INVALID, "an F4 entry with an odd last dimension", "down_proj_blocks", "F4")
        check(not (tmp / "never.safetensors").exists(), "nothing written for the damaged input")
    return summary("f4")


if __name__ == "__main__":
    sys.exit(main())
