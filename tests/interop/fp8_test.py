#!/usr/bin/env python3
"""FP8 block-scaled Hugging Face folders (tests/fixtures/layouts/hf_fp8_block, DeepSeek-V3's layout:
float8_e4m3fn weights, `<name>_scale_inv` float32 per 128x128 block, one scale in the other shard).

    fp8_test.py DCPCTL FIXTURES

Until dcpctl dequantizes, a cast of a scaled fp8 weight would write values off by the whole scale,
so every command that casts refuses it (exit 5) naming the weight and its scale, and writes
nothing: consolidate to an HF folder, .safetensors and .pt with --dtype bf16/fp32, reshard and cast
with --dtype, also when the scales are excluded from the selection. Without --dtype, consolidate
writes every fp8 weight and its scale as they are (safetensors' own reader: same dtype, same bytes).
A float8 tensor with no scale beside it still casts as before (torch's `.to()` bit for bit).
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from testlib import EXIT_UNSUPPORTED, check, expect_rc, run, same_tensor, summary  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402



def folder_tensors(d: Path) -> dict:
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def main() -> int:
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2])
    src = fixtures / "layouts" / "hf_fp8_block"
    want = folder_tensors(src)
    scaled = sorted(k[: -len("_scale_inv")] for k in want if k.endswith("_scale_inv"))
    check(len(scaled) == 2 and all(want[k].dtype == torch.float8_e4m3fn for k in scaled), f"fixture: scaled weights {scaled}")
    with tempfile.TemporaryDirectory(prefix="dcpctl-fp8-") as t:
        tmp = Path(t)
        refusals = [
            ("consolidate HF folder --dtype bf16", ["consolidate", str(src), "-o", str(tmp / "hf") + "/", "--dtype", "bf16"], tmp / "hf"),
            ("consolidate .safetensors --dtype fp32", ["consolidate", str(src), "-o", str(tmp / "m.safetensors"), "--dtype", "fp32"],
             tmp / "m.safetensors"),
            ("consolidate .pt --dtype bf16", ["consolidate", str(src), "-o", str(tmp / "m.pt"), "--dtype", "bf16"], tmp / "m.pt"),
            ("consolidate --dtype bf16 with the scales excluded",
             ["consolidate", str(src), "-o", str(tmp / "noscale.safetensors"), "--dtype", "bf16", "--exclude", "*_scale_inv"],
             tmp / "noscale.safetensors"),
            ("consolidate --dtype bf16 of the weight whose scale is in the other shard",
             ["consolidate", str(src), "-o", str(tmp / "down.safetensors"), "--dtype", "bf16", "--include",
              "model.layers.0.mlp.down_proj.weight"], tmp / "down.safetensors"),
            ("reshard --dtype bf16", ["reshard", str(src), "-o", str(tmp / "rs"), "--world-size", "2", "--dtype", "bf16"], tmp / "rs"),
            ("cast --dtype bf16", ["cast", str(src), "-o", str(tmp / "cast"), "--dtype", "bf16"], tmp / "cast"),
        ]
        for what, args, out in refusals:
            r = run(dcpctl, *args)
            expect_rc(r, EXIT_UNSUPPORTED, what, "_scale_inv", "dequantize")
            check(not out.exists(), f"{what}: {out} was written")
            check(not [p for p in tmp.iterdir() if "dcpctl-tmp" in p.name], f"{what}: a temporary was left")

        # Without --dtype: fp8 weights and their scales, byte for byte.
        for out in (tmp / "keep" , tmp / "keep.safetensors"):
            target = str(out) + "/" if out.suffix == "" else str(out)
            r = run(dcpctl, "consolidate", src, "-o", target)
            if expect_rc(r, 0, f"consolidate without --dtype to {target}"):
                got = folder_tensors(out) if out.is_dir() else load_file(out)
                check(sorted(got) == sorted(want), f"{target}: keys {sorted(set(got) ^ set(want))}")
                bad = [k for k in want if k in got and same_tensor(got[k], want[k])]
                check(not bad, f"{target}: not byte for byte: {bad}")

        # An fp8 tensor with no scale is an ordinary tensor: --dtype casts it as torch does.
        plain = tmp / "plain"
        plain.mkdir()
        x = torch.randn(7, 5, generator=torch.Generator().manual_seed(1)).to(torch.float8_e4m3fn)
        save_file({"w": x}, plain / "model.safetensors", metadata={"format": "pt"})
        r = run(dcpctl, "consolidate", plain / "model.safetensors", "-o", tmp / "plain.safetensors", "--dtype", "bf16")
        if expect_rc(r, 0, "unscaled fp8 --dtype bf16"):
            got = load_file(tmp / "plain.safetensors")["w"]
            d = same_tensor(got, x.to(torch.bfloat16))
            check(d is None, f"unscaled fp8 --dtype bf16 differs from torch's .to(bfloat16): {d}")
        shutil.rmtree(plain)
    return summary("fp8_test")


if __name__ == "__main__":
    sys.exit(main())
