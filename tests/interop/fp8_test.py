#!/usr/bin/env python3
"""FP8 block-scaled Hugging Face folders in, bf16/fp32 out (view/codecs/quantized.h): `--dtype` dequantizes
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
`--dtype fp8_e4m3` (requantizing, exit 5), a `_scale` that is not a block scale (exit 5), a 4-D
scaled weight (exit 5), an int8 weight beside a `_scale_inv` (exit 5: no codec of the config
explains a one-byte tensor; named with the config keys that decide) (a 3-D one, an expert stack as FP8Experts keeps it, dequantizes expert by
expert, each expert the 2-D weight's values), a scale whose shape is not the weight's blocks (exit 3); a `_scale_inv`
beside a weight that is not float8 (what transformers writes for a weight it leaves unquantized)
is left out and reported.

MXFP4 (GPT-OSS releases: X_blocks uint8 + X_scales uint8), on a folder made here (transformers'
tiny GptOssForCausalLM, its experts as seeded random packed bytes and scales, edge scales 0, 1, 254,
255 included): --dtype to every output against torch's _dequantize_tensor_mxfp4 (called directly:
torch 2.15's reader returns wrong values through dcp.load), bit for bit; transformers'
convert_moe_packed_tensors agrees (transposed); --map gpt-oss-mxfp4's folder loads in
from_pretrained with transformers' own dequantized experts; --map torchtitan-gpt-oss gives
torchtitan's names; inspect counts them; refusals (--map without --dtype, fp8 --dtype, misshapen
scales); without --dtype the bytes as saved; the same MXFP4 in I8 blocks with F8_E8M0 scales (the
codec from quantization_config, not the byte width), refused without that config.

FP8 with float8_e8m0fnu block scales (transformers 5.23's scale_fmt "ue8m0", e8m0_scale_checks):
dequantized as transformers' own _dequantize_fp8_weight, bit for bit.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from testlib import EXIT_INVALID, EXIT_UNSUPPORTED, check, expect_rc, hf_loaded, run, same_tensor, summary  # noqa: E402

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


def mxfp4_folder(d: Path) -> dict:
    """A GPT-OSS folder as the releases ship it: transformers' GptOssForCausalLM (tiny, its own
    init, saved by safetensors with its config) with the experts as MXFP4 `*_blocks` uint8
    [E, out, in / 32, 16] + `*_scales` uint8 [E, out, in / 32]. The packed bytes are seeded random
    (every nibble value); the scales span 2^-27 .. 2^13, and one layer's down_proj scales hold the
    edges (0, 1: subnormal results; 254; 255, E8M0's NaN, which torch takes as 2^128)."""
    from transformers import GptOssConfig, GptOssForCausalLM

    cfg = GptOssConfig(vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
                       tie_word_embeddings=False, layer_types=["sliding_attention", "full_attention"])
    torch.manual_seed(6)
    model = GptOssForCausalLM(cfg)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()
          if not (k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj"))}
    g = torch.Generator().manual_seed(7)
    E, H, F = 4, 32, 32
    for layer in range(2):
        for name, (out_dim, in_dim) in {"gate_up_proj": (2 * F, H), "down_proj": (H, F)}.items():
            k = f"model.layers.{layer}.mlp.experts.{name}"
            sd[k + "_blocks"] = torch.randint(0, 256, (E, out_dim, in_dim // 32, 16), generator=g, dtype=torch.uint8)
            sc = torch.randint(100, 141, (E, out_dim, in_dim // 32), generator=g, dtype=torch.uint8)
            if layer == 1 and name == "down_proj":
                sc.view(-1)[:4] = torch.tensor([0, 1, 254, 255], dtype=torch.uint8)
            sd[k + "_scales"] = sc
    cfg.quantization_config = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    cfg.architectures = ["GptOssForCausalLM"]
    d.mkdir()
    cfg.save_pretrained(d)
    half = sorted(sd)[: len(sd) // 2]  # two shards, scales apart from some of their blocks
    shards = {"model-00001-of-00002.safetensors": {k: sd[k] for k in half},
              "model-00002-of-00002.safetensors": {k: sd[k] for k in sd if k not in half}}
    for f, part in shards.items():
        save_file(part, d / f, metadata={"format": "pt"})
    index = {"metadata": {"total_size": sum(v.numel() * v.element_size() for v in sd.values())},
             "weight_map": {k: f for f, part in shards.items() for k in part}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return sd


def torch_mxfp4(src: Path, sd: dict, dtype: torch.dtype) -> dict:
    """torch's arithmetic: QuantizedHuggingFaceStorageReader._dequantize_tensor_mxfp4 on each whole
    X_blocks (called directly: torch 2.15's reader returns wrong values for such a folder through
    dcp.load), keyed X_blocks as that reader names them."""
    import types

    r = QuantizedHuggingFaceStorageReader(path=str(src), thread_count=1, target_dtype=dtype)
    out = {}
    for k, b in sd.items():
        if k.endswith("_blocks"):
            req = types.SimpleNamespace(storage_offsets=[0, 0, 0], lengths=[b.shape[0], b.shape[1], b.shape[2] * b.shape[3] * 2])
            out[k] = r._dequantize_tensor_mxfp4(blocks=b, scales=sd[k[: -len("_blocks")] + "_scales"], req=req, group_start=0,
                                                offset_in_first_group=0)
        elif not k.endswith("_scales"):
            out[k] = sd[k].to(dtype) if sd[k].is_floating_point() else sd[k]
    return out


def bitwise(got: dict, want: dict, what: str) -> None:
    """Keys, dtypes, shapes and bytes equal (NaN payloads too)."""
    check(sorted(got) == sorted(want), f"{what}: keys differ: {sorted(set(got) ^ set(want))[:6]}")
    bad = [k for k in want if k in got and not (got[k].dtype == want[k].dtype and got[k].shape == want[k].shape and
                                               torch.equal(got[k].contiguous().view(torch.uint8), want[k].contiguous().view(torch.uint8)))]
    check(not bad, f"{what}: differs bit for bit: {bad[:4]}")


def mxfp4_checks(dcpctl: str, tmp: Path) -> None:
    """MXFP4 (GPT-OSS releases) dequantized by --dtype as torch's reader computes it, to every
    output; --map gpt-oss-mxfp4 gives the folder from_pretrained loads as a plain model (the
    same experts transformers itself dequantizes); --map torchtitan-gpt-oss gives torchtitan's
    names; refusals."""
    from transformers import AutoModelForCausalLM
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    mx = tmp / "mxfp4"
    sd = mxfp4_folder(mx)
    want32, want16 = torch_mxfp4(mx, sd, torch.float32), torch_mxfp4(mx, sd, torch.bfloat16)
    blocks = [k for k in sd if k.endswith("_blocks")]
    edge = "model.layers.1.mlp.experts.down_proj_blocks"
    w = want32[edge]
    check(torch.isinf(w).any() and not torch.isnan(w).any() and ((w != 0) & (w.abs() < 1.1754944e-38)).any(),
          "the edge scales give inf and subnormals (no NaN) in torch's arithmetic")
    # transformers' own dequantization is torch's transposed (finite values; NaN where both are)
    for k in blocks:
        tf = convert_moe_packed_tensors(sd[k], sd[k[: -len("_blocks")] + "_scales"], dtype=torch.float32)
        check(torch.equal(torch.nan_to_num(tf.transpose(1, 2)), torch.nan_to_num(want32[k])), f"transformers' convert_moe_packed_tensors vs torch: {k}")

    r = run(dcpctl, "inspect", mx, "--json")
    if expect_rc(r, 0, "inspect of an MXFP4 folder"):
        q = json.loads(r.stdout).get("quantization") or {}
        check(q.get("mxfp4") == len(blocks) and q.get("scaled_weights") == 0, f"inspect --json quantization {q}")
    r = run(dcpctl, "inspect", mx)
    expect_rc(r, 0, "inspect (text) of an MXFP4 folder", f"{len(blocks)} MXFP4 weights")
    out = tmp / "mx32.safetensors"
    r = run(dcpctl, "consolidate", mx, "-o", out, "--dtype", "fp32", "--json")
    if expect_rc(r, 0, "MXFP4 --dtype fp32"):
        bitwise(load_file(out), want32, "MXFP4 --dtype fp32 vs torch's _dequantize_tensor_mxfp4")
        deq = json.loads(r.stdout).get("dequantized") or {}
        check(deq.get("mxfp4") == len(blocks) and deq.get("weights") == 0 and deq.get("block") is None, f"--json dequantized {deq}")
    # Dequantized under the `_blocks` names torch's reader keeps: a file holds them; a gpt_oss folder
    # without quantization_config has no such keys (from_pretrained would report them unexpected
    # and initialise the experts at random), so the model schema refuses the folder (exit 3, nothing
    # left): --map gpt-oss-mxfp4 below writes the names the model has.
    one = tmp / "mx16.safetensors"
    r = run(dcpctl, "consolidate", mx, "-o", one, "--dtype", "bf16")
    if expect_rc(r, 0, "MXFP4 --dtype bf16 to a file"):
        bitwise(load_file(one), want16, "MXFP4 --dtype bf16 vs torch's (bfloat16)")
    folder = tmp / "mx16"
    r = run(dcpctl, "consolidate", mx, "-o", f"{folder}/", "--dtype", "bf16")
    expect_rc(r, 3, "MXFP4 --dtype bf16 to a folder, under the _blocks names", "schema-key-unexpected", "gate_up_proj_blocks")
    check(not folder.exists(), "MXFP4 --dtype bf16 to a folder refused: nothing left")
    dcp_out = tmp / "mx-dcp"
    r = run(dcpctl, "reshard", mx, "-o", dcp_out, "--world-size", "2", "--dtype", "fp32")
    if expect_rc(r, 0, "MXFP4 reshard --dtype fp32"):
        bitwise(dcp_tensors(dcp_out), want32, "MXFP4 reshard -w 2 --dtype fp32 (torch's DCP reader)")

    # --map gpt-oss-mxfp4: GptOssForCausalLM's own layout; from_pretrained loads it, experts equal
    # to transformers' dequantization of the release (convert_moe_packed_tensors)
    plain = tmp / "mx-plain"
    r = run(dcpctl, "consolidate", mx, "-o", f"{plain}/", "--dtype", "fp32", "--map", "gpt-oss-mxfp4", "--json")
    if expect_rc(r, 0, "MXFP4 --dtype fp32 --map gpt-oss-mxfp4"):
        m = json.loads(r.stdout).get("map") or {}
        check(m.get("direction") == "mxfp4->hf" and m.get("left_out") == [] and m.get("dropped") == [], f"--json map {m}")
        model, info = AutoModelForCausalLM.from_pretrained(plain, dtype=torch.float32, output_loading_info=True)
        check(not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), f"from_pretrained of the plain folder: {info}")
        hf_loaded(plain)
        params = dict(model.named_parameters())
        for k in blocks:
            name = k[: -len("_blocks")]
            tf = convert_moe_packed_tensors(sd[k], sd[name + "_scales"], dtype=torch.float32)
            check(torch.equal(torch.nan_to_num(params[name].detach()), torch.nan_to_num(tf)), f"from_pretrained {name} vs transformers' dequantization")
    # --map torchtitan-gpt-oss: torchtitan's names and layout ([E, 2F, D]: torch's as it reads them)
    titan = tmp / "mx-titan"
    r = run(dcpctl, "reshard", mx, "-o", titan, "--world-size", "1", "--dtype", "fp32", "--map", "torchtitan-gpt-oss")
    if expect_rc(r, 0, "MXFP4 reshard --map torchtitan-gpt-oss"):
        got = dcp_tensors(titan)
        for layer in range(2):
            for name, tt in (("gate_up_proj", "mlp1_weight_EGD"), ("down_proj", "mlp2_weight_EDF")):
                k = f"layers.{layer}.moe.routed_experts.inner_experts.{tt}"
                src = want32[f"model.layers.{layer}.mlp.experts.{name}_blocks"]
                check(k in got and bitwise_one(got[k], src), f"--map torchtitan-gpt-oss: {k} vs torch's dequantized blocks")

    # refusals (exit 5, naming the key, nothing written), and without --dtype the bytes as saved
    for extra, rc, names in ((["--map", "torchtitan-gpt-oss"], EXIT_UNSUPPORTED, ["MXFP4", "--dtype"]),
                             (["--dtype", "fp8_e4m3"], EXIT_UNSUPPORTED, ["MXFP4", "requantize"])):
        o = tmp / "mx-refused"
        r = run(dcpctl, "consolidate", mx, "-o", f"{o}/", *extra)
        expect_rc(r, rc, f"MXFP4 with {' '.join(extra)}", "_blocks", *names)
        no_output(o, tmp, f"MXFP4 with {' '.join(extra)}")
    # One-byte tensors are dequantized only when the config says MXFP4 (issue 48 item 4): the same
    # folder with quantization_config removed, or naming another method, is refused naming the key
    # and the config key that decides.
    for label, edit in (("without quantization_config", lambda c: {k: v for k, v in c.items() if k != "quantization_config"}),
                        ("with quant_method fp8", lambda c: {**c, "quantization_config": {"quant_method": "fp8"}})):
        other = tmp / f"mx-config-{label.split()[-1]}"
        resave(mx, other, lambda t: t)
        cfg = json.loads((other / "config.json").read_text())
        (other / "config.json").write_text(json.dumps(edit(cfg)))
        o = tmp / "mx-guess.safetensors"
        r = run(dcpctl, "consolidate", other, "-o", o, "--dtype", "bf16")
        expect_rc(r, EXIT_UNSUPPORTED, f"MXFP4-shaped blocks {label}: not dequantized by guess", "_blocks", "quant_method")
        no_output(o, tmp, f"MXFP4-shaped blocks {label}")
    bad = tmp / "mx-badscale"
    resave(mx, bad, lambda t: {**t, "model.layers.0.mlp.experts.down_proj_scales": t["model.layers.0.mlp.experts.down_proj_scales"][:, :8].clone()})
    r = run(dcpctl, "consolidate", bad, "-o", tmp / "mxb.safetensors", "--dtype", "bf16")
    expect_rc(r, EXIT_INVALID, "MXFP4 scales that are not the blocks' groups", "model.layers.0.mlp.experts.down_proj_scales", "groups")
    no_output(tmp / "mxb.safetensors", tmp, "MXFP4 bad scales")
    r = run(dcpctl, "consolidate", mx, "-o", tmp / "mx-raw.safetensors")
    if expect_rc(r, 0, "MXFP4 without --dtype"):
        bitwise(load_file(tmp / "mx-raw.safetensors"), sd, "MXFP4 without --dtype: blocks and scales as saved")
    # The codec from the config, not the byte width (issue 48 item 4): the same MXFP4 in I8 blocks
    # beside F8_E8M0 scales (DeepSeek-V4-style dtypes; safetensors writes both), read as the
    # U8/U8 release when the config says mxfp4, refused naming the key and quant_method when not.
    i8 = tmp / "mx-i8"
    resave(mx, i8, lambda t: {k: v.view(torch.int8) if k.endswith("_blocks") else v.view(torch.float8_e8m0fnu) if k.endswith("_scales")
                              else v for k, v in t.items()})
    from safetensors import safe_open
    with safe_open(i8 / "model.safetensors", "pt") as f:
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys() if k.endswith(("_blocks", "_scales"))}
    check(dtypes == {"I8", "F8_E8M0"}, f"the variant's blocks and scales are I8 and F8_E8M0 on disk ({dtypes})")
    out = tmp / "mx-i8.safetensors"
    r = run(dcpctl, "consolidate", i8, "-o", out, "--dtype", "fp32")
    if expect_rc(r, 0, "MXFP4 in I8 with F8_E8M0 scales --dtype fp32"):
        bitwise(load_file(out), want32, "MXFP4 I8/F8_E8M0 --dtype fp32 vs torch's _dequantize_tensor_mxfp4 of the U8 release")
    cfg = json.loads((i8 / "config.json").read_text())
    (i8 / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "quantization_config"}))
    r = run(dcpctl, "consolidate", i8, "-o", tmp / "mx-i8-guess.safetensors", "--dtype", "fp32")
    expect_rc(r, EXIT_UNSUPPORTED, "I8 blocks and F8_E8M0 scales without quantization_config: not dequantized by guess", "_blocks", "int8",
              "quant_method")
    no_output(tmp / "mx-i8-guess.safetensors", tmp, "I8 MXFP4 without a config")


def e8m0_scale_checks(dcpctl: str, tmp: Path) -> None:
    """Block-scaled fp8 with float8_e8m0fnu scales (transformers 5.23's FineGrainedFP8 with
    scale_fmt "ue8m0": each weight_scale_inv a power of two, saved as F8_E8M0): a tiny Qwen3 that
    transformers makes here, every 2-D Linear weight quantized by transformers' own Fp8Quantize
    with that config, saved by safetensors with the config transformers writes; `--dtype fp32`
    equals transformers' own _dequantize_fp8_weight (float32(q) * float32(scale_inv) per block)
    bit for bit."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from transformers.integrations.finegrained_fp8 import Fp8Quantize, _dequantize_fp8_weight
    from transformers.utils.quantization_config import FineGrainedFP8Config

    cfg = Qwen3Config(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, tie_word_embeddings=False)
    torch.manual_seed(5)
    model = Qwen3ForCausalLM(cfg)
    qc = FineGrainedFP8Config(weight_block_size=(32, 32), scale_fmt="ue8m0")

    class Q:
        quantization_config = qc

    op = Fp8Quantize(Q())
    sd = {}
    for k, v in model.state_dict().items():
        if k.endswith(".weight") and v.dim() == 2 and "embed" not in k and "lm_head" not in k:
            sd.update(op._quantize_one(k, v.detach()))
        else:
            sd[k] = v.detach().clone()
    scales = [k for k in sd if k.endswith("_scale_inv")]
    check(len(scales) == 7 and all(sd[k].dtype == torch.float8_e8m0fnu for k in scales), f"7 float8_e8m0fnu scales ({len(scales)})")
    d = tmp / "fp8-ue8m0"
    d.mkdir()
    cfg.quantization_config = qc.to_dict()
    cfg.save_pretrained(d)
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})
    out = tmp / "fp8-ue8m0.safetensors"
    r = run(dcpctl, "consolidate", d, "-o", out, "--dtype", "fp32", "--json")
    if expect_rc(r, 0, "fp8 with F8_E8M0 scales --dtype fp32"):
        got = load_file(out)
        want = {k: (_dequantize_fp8_weight(v, sd[k + "_scale_inv"], [32, 32], torch.float32) if v.dtype == torch.float8_e4m3fn else v)
                for k, v in sd.items() if not k.endswith("_scale_inv")}
        bitwise(got, want, "fp8 with F8_E8M0 scales vs transformers' _dequantize_fp8_weight")
        check(json.loads(r.stdout).get("dequantized", {}).get("weights") == 7, "--json dequantized.weights 7")


def bitwise_one(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


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
            hf_loaded(tmp / "hf")
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
        # A 3-D stack (FP8Experts' [E, out, in] beside [E, out / b0, in / b1]) dequantizes expert
        # by expert: each expert is the 2-D weight's values; a 4-D one is refused.
        stacked = tmp / "three_d"
        resave(block, stacked, three_d)
        r = run(dcpctl, "consolidate", stacked, "-o", tmp / "3d.safetensors", "--dtype", "fp32")
        flat = tmp / "2d.safetensors"
        if expect_rc(r, 0, "a 3-D scaled weight (an expert stack)") and expect_rc(
                run(dcpctl, "consolidate", block, "-o", flat, "--dtype", "fp32"), 0, "the 2-D original"):
            w = "model.layers.0.mlp.up_proj.weight"
            got, want = load_file(tmp / "3d.safetensors")[w], load_file(flat)[w]
            check(same_tensor(got, torch.stack([want, want])) is None, "a 3-D stack dequantized expert by expert")

        def four_d(sd):
            w = "model.layers.0.mlp.up_proj.weight"
            sd[w] = sd[w][None, None]
            sd[w + SCALE] = sd[w + SCALE][None, None]
            return sd
        four = tmp / "four_d"
        resave(block, four, four_d)
        r = run(dcpctl, "consolidate", four, "-o", tmp / "4d.safetensors", "--dtype", "bf16")
        expect_rc(r, EXIT_UNSUPPORTED, "a 4-D scaled weight", "model.layers.0.mlp.up_proj.weight", "3-D expert stacks")
        no_output(tmp / "4d.safetensors", tmp, "4-D")

        # A one-byte weight that is not float8 (int8: packed FP4, int8 ...) beside a _scale_inv, the
        # config saying fp8: no codec of the table explains it; refused (exit 5), naming it and the
        # config keys that decide, never dequantized nor written without its scale.
        def int8_weight(sd):
            w = "model.layers.0.mlp.up_proj.weight"
            sd[w] = sd[w].view(torch.int8)
            return sd
        one_byte = tmp / "int8_weight"
        resave(block, one_byte, int8_weight)
        r = run(dcpctl, "consolidate", one_byte, "-o", tmp / "i8.safetensors", "--dtype", "bf16")
        expect_rc(r, EXIT_UNSUPPORTED, "an int8 weight beside a _scale_inv", "model.layers.0.mlp.up_proj.weight'",
                  "quant_method", "scale_fmt", "by guess")
        no_output(tmp / "i8.safetensors", tmp, "int8 weight")

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

        mxfp4_checks(dcpctl, tmp)
        e8m0_scale_checks(dcpctl, tmp)

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
