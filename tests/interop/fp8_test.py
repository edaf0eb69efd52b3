#!/usr/bin/env python3
"""FP8 block-scaled Hugging Face folders in, bf16/fp32 out (meta/quantized.h): `--dtype` dequantizes
every float8 weight with its `<name>_scale_inv` and writes no scale, exactly as torch's reference
`QuantizedHuggingFaceStorageReader` does (the oracle, run here on the same folder); the exported
config.json loses its `quantization_config` and says the dtype written, so `from_pretrained` loads
a plain model.

    fp8_test.py DCPCTL FIXTURES

Fixtures (tests/fixtures/layouts):
  hf_fp8_transformers/ckpt  a Qwen3 quantized and saved by transformers 5.23's own FineGrainedFP8
                            quantizer (make_fp8_real.py): 128x128 blocks, two shards
  hf_fp8_block              DeepSeek-V3's layout with partial blocks at both edges and a scale in
                            the other shard from its weight (make_fp8.py)
  hf_fp8_deepseek/ckpt      titan_deepseek_v3's HF model quantized by transformers with 4x4
                            blocks (config.json's weight_block_size), for the block size from the
                            config and the --map torchtitan-deepseek-v3 export (torchtitan's
                            from_hf of torch's dequantized folder: make_fp8_deepseek.py)

Checked: every output format (HF folder, .safetensors, .pt, reshard, cast) against torch's reader;
`--include` of a weight whose scale is in the other shard; from_pretrained of the exported folder
(no missing/unexpected keys, tensors equal); without --dtype, fp8 and scales byte for byte; an
unscaled fp8 tensor casts as torch's .to(); refusals, each naming the key and writing nothing:
`--dtype fp8_e4m3` (requantizing, exit 5), a `_scale` that is not a block scale (exit 5), a 3-D
scaled weight (exit 5), a scale whose shape is not the weight's blocks (exit 3); a `_scale_inv`
beside a weight that is not float8 (what transformers writes for a weight it leaves unquantized)
is left out and reported.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from testlib import EXIT_INVALID, EXIT_UNSUPPORTED, check, expect_rc, run, same_tensor, summary  # noqa: E402

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from torch.distributed.checkpoint.quantized_hf_storage import QuantizedHuggingFaceStorageReader  # noqa: E402

SCALE = "_scale_inv"


def folder_tensors(d: Path) -> dict:
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def torch_reader(src: Path, dtype: torch.dtype, block: int = 128) -> dict:
    """torch's reference: every non-scale key of the folder, dequantized to `dtype`."""
    import warnings
    r = QuantizedHuggingFaceStorageReader(str(src), target_dtype=dtype, block_size=block)
    md = r.read_metadata()
    sd = {k: torch.empty(tuple(v.size), dtype=dtype) for k, v in md.state_dict_metadata.items() if not k.endswith(SCALE)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
        dcp.load(sd, storage_reader=r, no_dist=True)
    return sd


def dcp_tensors(d: Path) -> dict:
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    sd: dict = {}
    _load_state_dict(sd, storage_reader=dcp.FileSystemReader(str(d)), planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    return sd


def same_dicts(got: dict, want: dict, what: str) -> None:
    check(sorted(got) == sorted(want), f"{what}: keys differ: {sorted(set(got) ^ set(want))}")
    bad = {k: d for k in want if k in got and (d := same_tensor(got[k], want[k]))}
    check(not bad, f"{what}: differs from torch's QuantizedHuggingFaceStorageReader: {dict(list(bad.items())[:3])}")


def no_output(out: Path, tmp: Path, what: str) -> None:
    check(not out.exists(), f"{what}: {out} was written")
    check(not [p for p in tmp.rglob("*") if "dcpctl-tmp" in p.name], f"{what}: a temporary was left")


def resave(src: Path, dst: Path, edit) -> None:
    """A copy of HF folder `src` whose tensors `edit(dict)` changed, re-saved by safetensors (a
    variant of a real folder for the refusals; the index is rewritten to match)."""
    dst.mkdir()
    shutil.copy(src / "config.json", dst / "config.json")
    sd = edit(folder_tensors(src))
    save_file({k: v.contiguous() for k, v in sd.items()}, dst / "model.safetensors", metadata={"format": "pt"})


def main() -> int:
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2])
    layouts = fixtures / "layouts"
    real = layouts / "hf_fp8_transformers" / "ckpt"
    block = layouts / "hf_fp8_block"
    real_raw = folder_tensors(real)
    check(sum(v.dtype == torch.float8_e4m3fn for v in real_raw.values()) == 7 and sum(k.endswith(SCALE) for k in real_raw) == 7,
          "fixture hf_fp8_transformers: 7 fp8 weights with scales")
    with tempfile.TemporaryDirectory(prefix="dcpctl-fp8-") as t:
        tmp = Path(t)

        # ---- a folder transformers quantized: every output format equals torch's reader ----
        want16, want32 = torch_reader(real, torch.bfloat16), torch_reader(real, torch.float32)
        recorded = json.loads((layouts / "hf_fp8_transformers" / "expected.json").read_text())
        check(same_tensor(load_file(layouts / "hf_fp8_transformers" / "expected_bf16.safetensors")["model.layers.0.mlp.up_proj.weight"],
                          want16["model.layers.0.mlp.up_proj.weight"]) is None and "expected_fp32" in recorded,
              "torch's reader today gives what the fixture recorded")
        r = run(dcpctl, "consolidate", real, "-o", str(tmp / "hf") + "/", "--dtype", "bf16", "--json")
        if expect_rc(r, 0, "consolidate FP8 folder -o DIR/ --dtype bf16"):
            same_dicts(folder_tensors(tmp / "hf"), want16, "HF folder bf16")
            s = json.loads(r.stdout)
            d = s.get("dequantized") or {}
            check(d.get("weights") == 7 and d.get("block") == [128, 128] and d.get("config", "").endswith("config.json")
                  and d.get("ignored_scales") == [], f"--json dequantized: {d}")
            cfg = json.loads((tmp / "hf" / "config.json").read_text())
            src_cfg = json.loads((real / "config.json").read_text())
            check("quantization_config" not in cfg and cfg.get("dtype") == "bfloat16", f"exported config.json: {cfg.get('dtype')}, "
                  f"quantization_config {'kept' if 'quantization_config' in cfg else 'dropped'}")
            rest = {k: v for k, v in cfg.items() if k != "dtype"}
            check(rest == {k: v for k, v in src_cfg.items() if k not in ("dtype", "quantization_config")},
                  "exported config.json: only quantization_config and dtype changed")
            check((tmp / "hf" / "generation_config.json").exists(), "generation_config.json copied")
            from transformers import AutoModelForCausalLM
            model, info = AutoModelForCausalLM.from_pretrained(tmp / "hf", output_loading_info=True)
            check(not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), f"from_pretrained: {info}")
            check(getattr(model.config, "quantization_config", None) is None and model.dtype == torch.bfloat16,
                  f"from_pretrained: a plain bf16 model (dtype {model.dtype})")
            sd = model.state_dict()
            bad = [k for k, v in want16.items() if same_tensor(sd[k], v)]
            check(not bad, f"from_pretrained's tensors differ from torch's reader: {bad[:3]}")
        r = run(dcpctl, "consolidate", real, "-o", tmp / "m32.safetensors", "--dtype", "fp32")
        if expect_rc(r, 0, "consolidate -o X.safetensors --dtype fp32", "dequantized 7 float8 weights"):
            same_dicts(load_file(tmp / "m32.safetensors"), want32, ".safetensors fp32")
        r = run(dcpctl, "consolidate", real, "-o", tmp / "m.pt", "--dtype", "bf16")
        if expect_rc(r, 0, "consolidate -o X.pt --dtype bf16"):
            same_dicts(torch.load(tmp / "m.pt", weights_only=True), want16, ".pt bf16")
        r = run(dcpctl, "reshard", real, "-o", tmp / "rs", "--world-size", "2", "--dtype", "bf16")
        if expect_rc(r, 0, "reshard --world-size 2 --dtype bf16"):
            same_dicts(dcp_tensors(tmp / "rs"), want16, "reshard bf16")
        r = run(dcpctl, "cast", real, "-o", tmp / "cast", "--dtype", "fp32")
        if expect_rc(r, 0, "cast --dtype fp32"):
            same_dicts(dcp_tensors(tmp / "cast"), want32, "cast fp32")

        # ---- DeepSeek's layout: partial blocks, a scale in the other shard ----
        want = torch_reader(block, torch.bfloat16)
        r = run(dcpctl, "consolidate", block, "-o", tmp / "blk.safetensors", "--dtype", "bf16")
        if expect_rc(r, 0, "hf_fp8_block --dtype bf16"):
            same_dicts(load_file(tmp / "blk.safetensors"), want, "partial blocks, bf16")
        down = "model.layers.0.mlp.down_proj.weight"
        r = run(dcpctl, "consolidate", block, "-o", tmp / "down.safetensors", "--dtype", "fp32", "--include", down)
        if expect_rc(r, 0, "--include the weight whose scale is in the other shard"):
            same_dicts(load_file(tmp / "down.safetensors"), {down: torch_reader(block, torch.float32)[down]}, "cross-shard scale, fp32")

        # ---- small blocks from config.json, and the --map export ----
        ds = layouts / "hf_fp8_deepseek"
        meta = json.loads((ds / "expected.json").read_text())
        b = int(meta["block_size"][0])
        r = run(dcpctl, "consolidate", ds / "ckpt", "-o", tmp / "ds.safetensors", "--dtype", "fp32")
        if expect_rc(r, 0, f"hf_fp8_deepseek ({b}x{b} blocks from config.json) --dtype fp32"):
            same_dicts(load_file(tmp / "ds.safetensors"), torch_reader(ds / "ckpt", torch.float32, b), f"{b}x{b} blocks, fp32")
        r = run(dcpctl, "reshard", ds / "ckpt", "-o", tmp / "ds_titan", "--world-size", "2", "--dtype", "fp32",
                "--map", "torchtitan-deepseek-v3")
        if expect_rc(r, 0, "reshard --map torchtitan-deepseek-v3 --dtype fp32 of an FP8 HF folder"):
            titan = load_file(ds / "expected_titan_fp32.safetensors")
            same_dicts(dcp_tensors(tmp / "ds_titan"), titan, "torchtitan from_hf of the dequantized folder")

        # ---- without --dtype: fp8 weights and their scales, byte for byte ----
        for out in (tmp / "keep", tmp / "keep.safetensors"):
            target = str(out) + "/" if out.suffix == "" else str(out)
            r = run(dcpctl, "consolidate", real, "-o", target)
            if expect_rc(r, 0, f"consolidate without --dtype to {target}"):
                got = folder_tensors(out) if out.is_dir() else load_file(out)
                same_dicts(got, real_raw, f"{target} (as saved)")
                if out.is_dir():
                    check("quantization_config" in json.loads((out / "config.json").read_text()), "without --dtype config.json is copied as is")

        # ---- refusals: each names the key and writes nothing ----
        r = run(dcpctl, "consolidate", real, "-o", tmp / "fp8.safetensors", "--dtype", "fp8_e4m3")
        expect_rc(r, EXIT_UNSUPPORTED, "--dtype fp8_e4m3 on scaled weights (requantizing)", SCALE, "requantize")
        no_output(tmp / "fp8.safetensors", tmp, "--dtype fp8_e4m3")

        per_tensor = tmp / "per_tensor"
        resave(block, per_tensor, lambda sd: {(k[: -len(SCALE)] + "_scale" if k.endswith(SCALE) else k): v for k, v in sd.items()})
        r = run(dcpctl, "consolidate", per_tensor, "-o", tmp / "pt.safetensors", "--dtype", "bf16")
        expect_rc(r, EXIT_UNSUPPORTED, "a _scale that is not a block scale", ".weight_scale'", "wrong values")
        no_output(tmp / "pt.safetensors", tmp, "_scale")

        def bad_shape(sd):
            sd["model.layers.0.mlp.up_proj.weight" + SCALE] = sd["model.layers.0.mlp.up_proj.weight" + SCALE][:1].clone()
            return sd
        shape = tmp / "bad_shape"
        resave(block, shape, bad_shape)
        r = run(dcpctl, "consolidate", shape, "-o", tmp / "bs.safetensors", "--dtype", "bf16")
        expect_rc(r, EXIT_INVALID, "a scale whose shape is not the weight's blocks", "model.layers.0.mlp.up_proj.weight" + SCALE, "128x128")
        no_output(tmp / "bs.safetensors", tmp, "bad scale shape")

        def three_d(sd):
            w = "model.layers.0.mlp.up_proj.weight"
            sd[w] = torch.stack([sd[w], sd[w]])
            sd[w + SCALE] = torch.stack([sd[w + SCALE], sd[w + SCALE]])
            return sd
        stacked = tmp / "three_d"
        resave(block, stacked, three_d)
        r = run(dcpctl, "consolidate", stacked, "-o", tmp / "3d.safetensors", "--dtype", "bf16")
        expect_rc(r, EXIT_UNSUPPORTED, "a 3-D scaled weight", "model.layers.0.mlp.up_proj.weight", "2-D")
        no_output(tmp / "3d.safetensors", tmp, "3-D")

        # A _scale_inv beside a weight transformers left unquantized (bf16): left out, reported;
        # the weight itself is cast as it is.
        def unquantized(sd):
            sd["model.layers.0.mlp.gate_proj.weight"] = (torch.randn(160, 200, generator=torch.Generator().manual_seed(3)) * 0.02).to(torch.bfloat16)
            sd["model.layers.0.mlp.gate_proj.weight" + SCALE] = torch.full((2, 2), 7.0)
            return sd
        mixed = tmp / "mixed"
        resave(block, mixed, unquantized)
        r = run(dcpctl, "consolidate", mixed, "-o", tmp / "mixed.safetensors", "--dtype", "fp32", "--json")
        if expect_rc(r, 0, "a _scale_inv beside a bf16 weight"):
            got = load_file(tmp / "mixed.safetensors")
            src = folder_tensors(mixed)
            gate = "model.layers.0.mlp.gate_proj.weight"
            check(gate + SCALE not in got and same_tensor(got[gate], src[gate].float()) is None,
                  "the bf16 weight is cast as it is and its scale left out")
            check(json.loads(r.stdout)["dequantized"]["ignored_scales"] == [gate + SCALE], "ignored_scales names it")

        # ---- MXFP4 (GPT-OSS's experts: X_blocks uint8 [.., G, 16] + X_scales uint8 [.., G]) is not
        # dequantized yet: --dtype and --map refuse it (exit 5, naming the key, nothing written),
        # without them the blocks and scales are copied byte for byte ----
        mx = tmp / "mxfp4"
        mx.mkdir()
        g = torch.Generator().manual_seed(4)
        gate_up = "model.layers.0.mlp.experts.gate_up_proj"
        mx_sd = {gate_up + "_blocks": torch.randint(0, 256, (2, 8, 1, 16), generator=g, dtype=torch.uint8),
                 gate_up + "_scales": torch.randint(120, 130, (2, 8, 1), generator=g, dtype=torch.uint8),
                 "model.layers.0.self_attn.sinks": torch.randn(4, generator=g)}
        save_file(mx_sd, mx / "model.safetensors", metadata={"format": "pt"})
        (mx / "config.json").write_text(json.dumps({"model_type": "gpt_oss", "quantization_config": {"quant_method": "mxfp4"}}))
        for extra in (["--dtype", "bf16"], ["--map", "torchtitan-gpt-oss"]):
            out = tmp / "mx-out"
            r = run(dcpctl, "consolidate", mx, "-o", f"{out}/", *extra)
            expect_rc(r, EXIT_UNSUPPORTED, f"MXFP4 with {' '.join(extra)}", gate_up + "_blocks", "MXFP4", extra[0])
            no_output(out, tmp, f"MXFP4 with {' '.join(extra)}")
        r = run(dcpctl, "consolidate", mx, "-o", tmp / "mx.safetensors")
        if expect_rc(r, 0, "MXFP4 without --dtype or --map"):
            same_dicts(load_file(tmp / "mx.safetensors"), mx_sd, "MXFP4 copied as saved")

        # ---- an fp8 tensor with no scale is an ordinary tensor: --dtype casts it as torch does ----
        plain = tmp / "plain"
        plain.mkdir()
        x = torch.randn(7, 5, generator=torch.Generator().manual_seed(1)).to(torch.float8_e4m3fn)
        save_file({"w": x}, plain / "model.safetensors", metadata={"format": "pt"})
        r = run(dcpctl, "consolidate", plain / "model.safetensors", "-o", tmp / "plain.safetensors", "--dtype", "bf16", "--json")
        if expect_rc(r, 0, "unscaled fp8 --dtype bf16"):
            got = load_file(tmp / "plain.safetensors")["w"]
            d = same_tensor(got, x.to(torch.bfloat16))
            check(d is None, f"unscaled fp8 --dtype bf16 differs from torch's .to(bfloat16): {d}")
            check("dequantized" not in json.loads(r.stdout), "nothing dequantized without a scale")
    return summary("fp8_test", min_checks=40)


if __name__ == "__main__":
    sys.exit(main())
