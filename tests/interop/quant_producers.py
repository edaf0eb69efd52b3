#!/usr/bin/env python3
"""Quantized Hugging Face folders written by the producers' own code, and the float references
each dcpctl read of them is compared with bit for bit (issue 57).

Imported by the interop tests (compressed-tensors 0.20.0 is in the project virtualenv) and run as a
script to write a folder by hand:

    python tests/interop/quant_producers.py ct SCHEME OUT/ [--moe] [--dtype bf16|fp32]
    python tests/interop/quant_producers.py ct-ref FOLDER/ OUT.safetensors [--dtype fp32]
    python tests/interop/quant_producers.py dsv4 OUT/ [--experts i8|f4] [--expert-dtype-at top|qc]
    python tests/interop/quant_producers.py dsv4-ref FOLDER/ OUT.safetensors

compressed-tensors (`ct`): a tiny model written by transformers 5.23 (`tiny_dense`: a Qwen3 with 14
Linear layers; `tiny_moe`: a Qwen3-MoE with 4 per-expert MLPs and a router), then quantized
*model-free*, as llm-compressor's `model_free_ptq` does it (llmcompressor 0.14.0.1,
entrypoints/model_free/converter.py `ModelFreePtqConverter._process_standard` and
`_process_microscale`): each targeted 2-D weight becomes a `torch.nn.Linear` that compressed-tensors'
own `initialize_module_for_quantization` sets up; its scales are computed by compressed-tensors'
`calculate_qparams` / `generate_gparam` from the weight's min and max; compressed-tensors'
`compress_module` (the registered compressor of the scheme's format) writes the packed weight and
its scales; the config is compressed-tensors' `QuantizationConfig` in `compressed` status, dumped as
llm-compressor dumps it. The only lines here that stand in for llm-compressor (whose 0.14.0.1 wheel
pins compressed-tensors 0.19.0, torch <= 2.14 and transformers <= 5.17, so it cannot be installed
beside this stack) are its memoryless min-max observer (observers/helpers.py
`flatten_for_calibration`'s weight branch, observers/min_max.py `_get_min_max`) and its fused global
scale (observers/base.py `Observer.get_global_scale`: the largest |w| over the fused group
q/k/v, gate/up, w1/w3 of microscale/`TENSOR_GROUP` schemes, as microscale.py's
`_DEFAULT_FUSED_MAPPINGS_LIST` groups them: experts' gate/up are not fused there). They are
written out below line for line.

compressed-tensors 0.20.0 writes no `weight_g_idx` (activation order): its quantize path and
decompressors take none (`quantization/lifecycle/forward.py`), so no folder here has one.

The reference of a compressed-tensors folder is compressed-tensors' own model-free dequantizer
(`entrypoints/convert/converters/ct_dequantizer.py` `CompressedTensorsDequantizer.validate`: every
scheme's registered decompressor over the folder's tensors, the quantized weights cast to the asked
dtype, everything else as stored; it refuses residual scales).

DeepSeek-V4 (`dsv4`): no tiny public release exists, so the folder is written here with torch and
safetensors, following transformers 5.23's reading code as the specification
(integrations/finegrained_fp8.py `FP8Experts` / `Fp8Dequantize._dequantize_one`,
quantizers/quantizer_finegrained_fp8.py's `.scale` -> `weight_scale_inv` renaming,
models/deepseek_v4/configuration_deepseek_v4.py's `expert_dtype`): Linear weights FP8 e4m3 in
128x128 blocks with `X.scale` in `F8_E8M0` (`scale_fmt: ue8m0`, powers of two, quantized by
transformers' own `Fp8Quantize` with `scale_fmt="ue8m0"`), routed experts FP4 (E2M1, two a byte,
low nibble first) in `I8` `[out, in/2]` (or safetensors' `F4`) with one `F8_E8M0` scale per 32
values `[out, in/32]`, `expert_dtype: fp4`. Its reference is transformers' `Fp8Dequantize
._dequantize_one` on each weight with its scale.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

SEED = 57

# compressed-tensors schemes by the name the tests use: (preset or None, extra settings). The ones
# marked data-free need no activation statistics (llm-compressor's model_free_ptq writes them).
CT_SCHEMES = {
    "fp8-channel": "FP8_DYNAMIC",  # float-quantized, channel, dynamic per-token activations
    "fp8-tensor": None,  # float-quantized, tensor (weights only: the preset FP8 needs input scales)
    "fp8-block": "FP8_BLOCK",  # float-quantized, block [128, 128]
    "w4a16": "W4A16",  # pack-quantized INT4, group 128, symmetric
    "w4a16-asym": "W4A16_ASYM",  # pack-quantized INT4, group 128, zero points
    "w8a16": "W8A16",  # pack-quantized INT8, channel
    "nvfp4a16": "NVFP4A16",  # nvfp4-pack-quantized, group 16, global scale
    "mxfp4a16": "MXFP4A16",  # mxfp4-pack-quantized, group 32, E8M0 scales
    "mxfp8a16": "MXFP8A16",  # mxfp8-quantized, group 32, E8M0 scales
    "mxfp6a16": "MXFP6A16",  # mxfp6-pack-quantized, group 32, E8M0 scales (four E2M3 codes in three bytes)
    "mxfp6a8": "MXFP6A8",  # the same weights, MXFP8 activations quantized at run time (nothing on disk)
    "mxfp4xfp8": "MXFP4XFP8",  # mxfp4-pack-quantized weights, dynamic FP8 activations per 32
}
# The schemes whose weights another scheme already writes (only the activations differ, and those
# are quantized at run time): read on the dense model alone.
CT_DENSE_ONLY = {"mxfp6a8", "mxfp4xfp8"}
# What is never quantized: the head, embeddings and MoE routers (norms never match a Linear target).
CT_IGNORE = ["lm_head", "re:.*embed_tokens$", "re:.*mlp\\.gate$"]

DENSE_DIMS = dict(vocab_size=64, hidden_size=256, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64, tie_word_embeddings=False, max_position_embeddings=64)
MOE_DIMS = dict(vocab_size=64, hidden_size=128, intermediate_size=256, moe_intermediate_size=128, num_experts=4,
                num_experts_per_tok=2, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                tie_word_embeddings=False, max_position_embeddings=64)

MLA_DIMS = dict(vocab_size=64, hidden_size=128, intermediate_size=256, moe_intermediate_size=64, num_hidden_layers=1,
                first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                num_attention_heads=2, num_key_value_heads=2, q_lora_rank=64, kv_lora_rank=64, qk_rope_head_dim=32,
                qk_nope_head_dim=32, v_head_dim=32, num_nextn_predict_layers=0, tie_word_embeddings=False,
                max_position_embeddings=64)


def _perturb(model) -> None:
    """Weights of several magnitudes, so that scales differ between layers, groups and experts, and a
    block of zeros (a scale from an all-zero group)."""
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for i, (name, p) in enumerate(sorted(model.named_parameters())):
            if p.ndim == 2:
                rows = torch.exp2(torch.randint(-3, 4, (p.shape[0], 1), generator=g).float()).to(p.dtype)
                p.mul_(rows * (1 + i % 5))
            else:
                p.add_(torch.randn(p.shape, generator=g).to(p.dtype) * 0.1)
        first = next(m for n, m in model.named_modules() if n.endswith("layers.0.self_attn.o_proj"))
        first.weight[:32, :32] = 0


def tiny_dense(out: Path, dtype: torch.dtype = torch.bfloat16, dims: dict | None = None) -> Path:
    """A Qwen3ForCausalLM transformers writes (2 layers: 14 Linear layers), seeded."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(SEED)
    model = Qwen3ForCausalLM(Qwen3Config(**(dims or DENSE_DIMS))).to(dtype).eval()
    _perturb(model)
    model.save_pretrained(out)
    return out


def tiny_moe(out: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """A Qwen3MoeForCausalLM transformers writes (per-expert 2-D weights on disk, a router), seeded."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    torch.manual_seed(SEED)
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**MOE_DIMS)).to(dtype).eval()
    _perturb(model)
    model.save_pretrained(out)
    return out


def tiny_mla(out: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """A DeepseekV3ForCausalLM transformers writes: one dense layer of multi-head latent attention
    (q_a_proj, kv_a_proj_with_mqa, q_b_proj, kv_b_proj), seeded."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    torch.manual_seed(SEED)
    model = DeepseekV3ForCausalLM(DeepseekV3Config(**MLA_DIMS)).to(dtype).eval()
    _perturb(model)
    model.save_pretrained(out)
    return out


def folder_tensors(d: Path) -> dict:
    out = {}
    for f in sorted(Path(d).glob("*.safetensors")):
        with safe_open(f, "pt") as s:
            for k in s.keys():
                out[k] = s.get_tensor(k)
    return out


def ct_scheme(name: str):
    """A scheme of CT_SCHEMES by its name, or `w4a16-gN`: W4A16 with groups of N values (what
    llm-compressor writes for a recipe that sets the group_size)."""
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationScheme, QuantizationStrategy,
                                                 QuantizationType, preset_name_to_scheme)
    if m := re.fullmatch(r"w4a16-g(\d+)", name):
        return QuantizationScheme(
            targets=["Linear"],
            weights=QuantizationArgs(num_bits=4, type=QuantizationType.INT, strategy=QuantizationStrategy.GROUP,
                                     group_size=int(m[1]), symmetric=True, dynamic=False))
    preset = CT_SCHEMES[name]
    if preset is not None:
        return preset_name_to_scheme(preset, ["Linear"])
    return QuantizationScheme(
        targets=["Linear"],
        weights=QuantizationArgs(num_bits=8, type=QuantizationType.FLOAT, strategy=QuantizationStrategy.TENSOR,
                                 symmetric=True, dynamic=False),
        input_activations=QuantizationArgs(num_bits=8, type=QuantizationType.FLOAT,
                                           strategy=QuantizationStrategy.TOKEN, symmetric=True, dynamic=True))


# --- llm-compressor 0.14.0.1's observer, written out (see the module docstring) -------------------
def _flatten_weight(value: torch.Tensor, args) -> torch.Tensor:
    from compressed_tensors.quantization import QuantizationStrategy as S
    from compressed_tensors.quantization.utils import maybe_pad_tensor_for_block_quant, strategy_cdiv
    if args.strategy == S.TENSOR:
        return value.reshape((1, 1, -1))
    if args.strategy == S.CHANNEL:
        return value.unsqueeze(-2).unsqueeze(0)
    if args.strategy in (S.GROUP, S.TENSOR_GROUP):
        return value.unflatten(-1, (-1, args.group_size)).unsqueeze(0)
    if args.strategy == S.BLOCK:
        bh, bw = args.block_structure
        value = maybe_pad_tensor_for_block_quant(value, args.block_structure)
        rows, cols = value.shape
        br = strategy_cdiv(rows, bh, args.strategy, strict=True)
        bc = strategy_cdiv(cols, bw, args.strategy, strict=True)
        return value.reshape(br, bh, bc, bw).transpose(1, 2).flatten(-2, -1).unsqueeze(0)
    raise ValueError(f"strategy {args.strategy} is not a weight strategy")


def _min_max(weight: torch.Tensor, args) -> tuple:
    observed = _flatten_weight(weight, args)
    return torch.amin(observed, dim=(0, -1)), torch.amax(observed, dim=(0, -1))


def _fused_global_scale(stats: list):
    from compressed_tensors.quantization.utils import generate_gparam
    absmax = stats[0][1].max()
    for mn, mx in stats:
        absmax = torch.max(absmax, -mn.min())
        absmax = torch.max(absmax, mx.max())
    return generate_gparam(-absmax.reshape(1), absmax.reshape(1))


# llm-compressor 0.14.0.1 microscale.py _DEFAULT_FUSED_MAPPINGS_LIST: the fused groups of a
# TENSOR_GROUP scheme, by the weight's name.
FUSED = [
    [r".*(attn|attention)\.q_proj\.weight$", r".*(attn|attention)\.k_proj\.weight$",
     r".*(attn|attention)\.v_proj\.weight$"],
    [r".*(attn|attention)\.wq_a\.weight$", r".*(attn|attention)\.wkv_a_with_mqa\.weight$"],
    [r".*mlp\.gate_proj\.weight$", r".*mlp\.up_proj\.weight$"],
    [r".*w1\.weight$", r".*w3\.weight$"],
]


# What vLLM fuses besides (each MoE expert's w13, one global scale: issue 57), which llm-compressor
# 0.14's patterns miss for per-expert names (`mlp.experts.E.gate_proj`); dcpctl shares the global
# scale there too, and its oracle is compressed-tensors' arithmetic with this grouping.
EXPERT_FUSED = [[r".*experts\.\d+\.gate_proj\.weight$", r".*experts\.\d+\.up_proj\.weight$"]]
# MLA under transformers' names: vLLM loads q_a_proj and kv_a_proj_with_mqa into one fused_qkv_a_proj;
# llm-compressor 0.14's calibrated path fuses their global scales (observers/helpers.py
# FUSED_LAYER_NAMES), its model-free mappings only DeepSeek's own wq_a/wkv_a_with_mqa.
MLA_FUSED = [[r".*(attn|attention)\.q_a_proj\.weight$", r".*(attn|attention)\.kv_a_proj_with_mqa\.weight$"]]


def fused_groups(names, mappings=None) -> dict:
    """name -> a key shared by the members of its fused group (the name with the member's pattern
    part replaced), for the names that have every partner present."""
    out = {}
    names = set(names)
    for group in (FUSED if mappings is None else mappings):
        for n in names:
            if not re.match(group[0], n):
                continue
            stem = re.sub(r"(q_proj|wq_a|q_a_proj|gate_proj|w1)\.weight$", "", n)
            members = []
            for pat in group:
                hit = [m for m in names if re.match(pat, m) and m.startswith(stem) and "." not in m[len(stem):-7]]
                if len(hit) == 1:
                    members.append(hit[0])
            if len(members) == len(group):
                for m in members:
                    out[m] = n
    return out


def ct_quantize_tensors(tensors: dict, scheme_name: str, ignore=CT_IGNORE, fused=None):
    """tensors -> (compressed tensors, quantization_config dict), model-free as llm-compressor does."""
    from compressed_tensors.compressors import compress_module
    from compressed_tensors.offload import update_offload_parameter
    from compressed_tensors.quantization import (QuantizationConfig, QuantizationStatus, QuantizationStrategy,
                                                 initialize_module_for_quantization)
    from compressed_tensors.quantization.utils import calculate_qparams
    from compressed_tensors.utils import match_quantizable_tensors
    scheme = ct_scheme(scheme_name)
    config = QuantizationConfig(config_groups={"group_0": scheme}, ignore=list(ignore))
    tensors = dict(tensors)
    matched = [(m, n) for m, n in match_quantizable_tensors(tensors, config.ignore, scheme.targets)]
    microscale = scheme.weights.strategy == QuantizationStrategy.TENSOR_GROUP
    groups = fused_groups([n for _, n in matched], fused) if microscale else {}
    stats = {n: _min_max(tensors[n], scheme.weights) for _, n in matched}
    group_stats: dict = {}
    for n, key in groups.items():
        group_stats.setdefault(key, []).append(stats[n])
    for module_name, name in matched:
        w = tensors.pop(name)
        if w.ndim != 2:
            raise ValueError(f"{name}: expected a 2-D Linear weight, got {tuple(w.shape)}")
        module = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype)
        module.weight.data.copy_(w)
        initialize_module_for_quantization(module, scheme, force_zero_point=False)
        mn, mx = stats[name]
        global_scale = None
        if microscale:
            global_scale = _fused_global_scale(group_stats[groups[name]] if name in groups else [(mn, mx)])
        scale, zero_point = calculate_qparams(mn, mx, scheme.weights, global_scale=global_scale)
        for pname, val in (("weight_scale", scale), ("weight_zero_point", zero_point),
                           ("weight_global_scale", global_scale)):
            if val is not None and hasattr(module, pname):
                update_offload_parameter(module, pname, val)
        compress_module(module)
        for key, value in module.state_dict(prefix=module_name + ".").items():
            tensors[key] = value
    qc = config.model_dump()
    # llm-compressor's update_config: the compressed status and the one format of its groups.
    from compressed_tensors.compressors.format import infer_module_format
    fmt = infer_module_format(torch.nn.Linear, scheme).value
    qc = QuantizationConfig(config_groups={"group_0": scheme}, ignore=list(ignore),
                            quantization_status=QuantizationStatus.COMPRESSED, format=fmt).to_dict()
    return tensors, qc


def ct_model_free_config(scheme_name: str, ignore: list) -> dict:
    """The quantization_config llm-compressor 0.14's model_free_ptq writes for a preset, written out
    (entrypoints/model_free/save_utils.py update_config / create_or_update_quant_config: a
    QuantizationConfig of one `config_group_0` in compressed status, its format the scheme's, dumped
    without quant_method, then version, quant_method and an empty transform_config added)."""
    import compressed_tensors
    from compressed_tensors.compressors.format import infer_module_format
    from compressed_tensors.quantization import QuantizationConfig, QuantizationStatus
    scheme = ct_scheme(scheme_name)
    scheme.format = infer_module_format(torch.nn.Linear, scheme).value
    qconfig = QuantizationConfig.model_validate({"config_groups": {"config_group_0": scheme}, "ignore": list(ignore),
                                                 "quantization_status": QuantizationStatus.COMPRESSED,
                                                 "format": scheme.format})
    return {"version": compressed_tensors.__version__, "quant_method": "compressed-tensors", "transform_config": {},
            **qconfig.model_dump(exclude=["quant_method"])}


def ct_quantize(src: Path, out: Path, scheme_name: str, ignore=CT_IGNORE, group_format: bool = True) -> Path:
    """src (an HF folder of one safetensors file) -> out, a compressed-tensors folder. group_format=False:
    the config names the format only at its top level, as some writers leave it (compressed-tensors'
    own readers infer each group's format from its weights' arguments then)."""
    out.mkdir(parents=True, exist_ok=True)
    tensors, qc = ct_quantize_tensors(folder_tensors(src), scheme_name, ignore)
    if not group_format:
        for g in qc["config_groups"].values():
            g.pop("format", None)
    save_file({k: v.contiguous() for k, v in tensors.items()}, out / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = qc
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return out


def ct_reference(folder: Path, dtype: torch.dtype = torch.float32) -> dict:
    """compressed-tensors 0.20.0's own model-free dequantization of a folder: every tensor."""
    from compressed_tensors.entrypoints.convert.converters.ct_dequantizer import CompressedTensorsDequantizer
    return CompressedTensorsDequantizer(folder, dtype=dtype).validate(folder_tensors(folder))


# --- The arithmetic of each compressed-tensors decompressor, written out -------------------------
# What a reader must compute to give compressed-tensors 0.20.0's bytes (checked equal to ct_reference
# by the tests, so a change in either is seen). S is the dtype of the stored `weight_scale` where it
# is a float (the model's dtype: compressed-tensors initialises scales in the observed weight's
# dtype), and every product is rounded to S once:
#   float-quantized (tensor / channel / block): w = round_S(f32(q) * f32(s)), s broadcast over the
#     tensor, each row, or each [bh, bw] block (the last blocks partial);
#   pack-quantized INT<b>: element i of a row at bits [i*b, i*b + b) of the row's little-endian int32
#     words, stored + 2^(b-1); w = round_S((f32(u - 2^(b-1)) - zp) * f32(s)) per group (channel:
#     one group), zp (asymmetric only) packed the same way down the columns of [N, groups];
#   nvfp4-pack-quantized: E2M1 codes, low nibble first; w = round_bf16(f32(e2m1) * (f32(s_e4m3) /
#     global)) -- always bfloat16 (unpack_fp4_from_uint8's default), whatever the model's dtype;
#   mxfp4-pack-quantized / mxfp8-quantized: the scale byte e is 2^(e-127) in bfloat16 (e = 255 gives
#     inf, exponents below -133 give 0); mxfp4: w = round_bf16(f32(e2m1) * f32(2^(e-127)));
#     mxfp8: w = round_bf16(f32(q) * f32(2^(e-127))).
def _round(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype)


def _unpack_int(packed: torch.Tensor, bits: int, cols: int) -> torch.Tensor:
    words = packed.to(torch.int64) & 0xFFFFFFFF
    rows = words.shape[0]
    bitpos = torch.arange(cols) * bits
    w, off = bitpos // 32, bitpos % 32
    both = words[:, w] | (torch.cat([words, torch.zeros(rows, 1, dtype=torch.int64)], 1)[:, w + 1] << 32)
    return ((both >> off) & ((1 << bits) - 1)) - (1 << (bits - 1))


def _e2m1(codes: torch.Tensor) -> torch.Tensor:
    mag = torch.tensor(E2M1)[(codes & 7).long()]
    return torch.where((codes & 8) != 0, -mag, mag)


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    p = packed.view(torch.uint8)
    return torch.stack((p & 0xF, p >> 4), dim=-1).reshape(p.shape[0], -1)


def ct_formula(folder: Path) -> dict:
    """ct_reference's quantized weights in their decompressor's own dtype, from the rules above."""
    qc = json.loads((Path(folder) / "config.json").read_text())["quantization_config"]
    args = qc["config_groups"]["group_0"]["weights"]
    fmt = qc["config_groups"]["group_0"].get("format") or qc["format"]
    t = folder_tensors(folder)
    out = {}
    for name in [k for k in t if k.endswith((".weight_packed", ".weight")) and k.rsplit(".", 1)[0] + ".weight_scale" in t]:
        m = name.rsplit(".", 1)[0]
        s = t[m + ".weight_scale"]
        if fmt in ("nvfp4-pack-quantized", "mxfp4-pack-quantized"):
            q = _e2m1(_nibbles(t[name]))
            if fmt == "nvfp4-pack-quantized":
                scale = s.float() / t[m + ".weight_global_scale"].float()
            else:
                scale = torch.exp2((s.to(torch.int32) - 127).to(torch.bfloat16)).float()
            w = q.unflatten(-1, (-1, args["group_size"])) * scale.unsqueeze(-1)
            out[m + ".weight"] = _round(w.flatten(-2), torch.bfloat16)
        elif fmt == "mxfp8-quantized":
            scale = torch.exp2((s.to(torch.int32) - 127).to(torch.bfloat16)).float()
            w = t[name].float().unflatten(-1, (-1, 32)) * scale.unsqueeze(-1)
            out[m + ".weight"] = _round(w.flatten(-2), torch.bfloat16)
        elif fmt == "float-quantized":
            q = t[name].float()
            if args["strategy"] == "block":
                bh, bw = args["block_structure"]
                full = s.float().repeat_interleave(bh, 0).repeat_interleave(bw, 1)[:q.shape[0], :q.shape[1]]
            else:
                full = s.float().expand_as(q) if s.ndim == 2 else s.float().reshape(1, 1).expand_as(q)
            out[m + ".weight"] = _round(q * full, s.dtype)
        elif fmt == "pack-quantized":
            bits = args["num_bits"]
            n, k = t[m + ".weight_shape"].tolist()
            q = _unpack_int(t[name], bits, k).float()
            groups = s.shape[1]
            gs = k // groups
            full = s.float().repeat_interleave(gs, 1)
            if m + ".weight_zero_point" in t:
                zp = _unpack_int(t[m + ".weight_zero_point"].t().contiguous(), bits, n).t().float()
                q = q - zp.repeat_interleave(gs, 1)
            out[m + ".weight"] = _round(q * full, s.dtype)
        else:
            raise ValueError(f"{fmt}: no formula")
    return out


def modelopt_formula(folder: Path) -> dict:
    """ModelOpt 0.47.0's QTensor.dequantize(dtype=float32) of each quantized weight, written out (the
    committed folders' dequantized.json holds ModelOpt's own digests): NVFP4: w = f32(e2m1) * (f32(s_e4m3)
    * weight_scale_2), the product of the two scales first, the code of -0 read as +0.0; MXFP8: w = f32(q) * 2^(e-127) (e = 255:
    inf); FP8: w = f32(q) * f32(weight_scale)."""
    algo = json.loads((Path(folder) / "hf_quant_config.json").read_text())["quantization"]["quant_algo"]
    t = folder_tensors(folder)
    out = {}
    for k, v in t.items():
        m = k[:-7]
        if not k.endswith(".weight") or m + ".weight_scale" not in t:
            continue
        s = t[m + ".weight_scale"]
        if "NVFP4" in algo:
            block = s.float() * t[m + ".weight_scale_2"].float()
            # ModelOpt's E2M1 table maps the code of -0 (8) to +0.0 (compressed-tensors' gives -0.0)
            w = (_e2m1(_nibbles(v)) + 0.0).unflatten(-1, (-1, 16)) * block.unsqueeze(-1)
            out[k] = w.flatten(-2)
        elif algo == "MXFP8":
            w = v.float().unflatten(-1, (-1, 32)) * torch.exp2(s.float() - 127).unsqueeze(-1)
            out[k] = w.flatten(-2)
        else:
            out[k] = v.float() * s.float()
    return out


# --- DeepSeek-V4's release layout ------------------------------------------------------------------
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _fp4_encode(x: torch.Tensor) -> torch.Tensor:
    """float32 -> E2M1 codes (uint8 0..15), round to nearest, ties to the even code, saturating at 6."""
    mag = x.abs().clamp(max=6.0)
    grid = torch.tensor(E2M1)
    d = (mag.unsqueeze(-1) - grid).abs()
    best = d.min(dim=-1, keepdim=True).values
    ties = d == best
    codes = torch.arange(8).expand_as(d)
    # among the nearest, the even code (the one whose mantissa bit is 0)
    pick = torch.where(ties & (codes % 2 == 0), codes, torch.where(ties, codes, 99)).min(dim=-1).values
    return (pick | ((x < 0).to(torch.int64) << 3)).to(torch.uint8)


def _dsv4_fp4(w: torch.Tensor) -> tuple:
    """[out, in] float -> (int8 [out, in/2] two E2M1 codes a byte, low nibble first; E8M0 [out, in/32])."""
    out_f, in_f = w.shape
    groups = w.float().reshape(out_f, in_f // 32, 32)
    amax = groups.abs().amax(dim=-1)
    # a power-of-two scale that brings the group's amax within E2M1's 6 (DeepSeek's ue8m0: rounded up)
    exp = torch.ceil(torch.log2(torch.clamp(amax / 6.0, min=2.0 ** -126)))
    scale = torch.exp2(exp)
    codes = _fp4_encode((groups / scale.unsqueeze(-1)).reshape(out_f, in_f))
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).view(torch.int8)
    return packed, scale.to(torch.float8_e8m0fnu)


def _fp8_quantizer(block: tuple, scale_fmt: str):
    """transformers' own Fp8Quantize for `block` and `scale_fmt` ("ue8m0": F8_E8M0 scales; "float": float32)."""
    from transformers.integrations.finegrained_fp8 import Fp8Quantize

    class _Q:  # what Fp8Quantize asks of its quantizer
        class quantization_config:
            weight_block_size = block
            activation_scheme = "dynamic"
    _Q.quantization_config.scale_fmt = scale_fmt
    return Fp8Quantize(_Q())


def dsv4(out: Path, experts: str = "i8", expert_dtype_at: str = "qc", block: int = 128, engram: bool = False) -> Path:
    """A tiny folder in DeepSeek-V4's release layout (see the module docstring). V4.1's variants:
    `block` 32, its MXFP8 Linear layers (weight_block_size [32, 32], F8_E8M0 scales, FP4 experts);
    experts "fp8" (expert_dtype fp8, Flash-Base: experts and Linear layers FP8 in 128x128 blocks,
    float32 scales); `engram`: layer 0's Engram table (`layers.0.engram.embed.weight` float8 rows,
    its `.scale` one F8_E8M0 per 32 values of a row, vLLM 0.33's deepseek_v41 layout)."""
    fp8_experts = experts == "fp8"
    scale_fmt = "float" if fp8_experts else "ue8m0"
    quantize = _fp8_quantizer((block, block), scale_fmt)
    g = torch.Generator().manual_seed(SEED + 4)
    H, I, E, V = 256, 128, 4, 64

    def rnd(*shape, s=0.05):
        return (torch.randn(*shape, generator=g) * s).to(torch.bfloat16)
    tensors = {"embed.weight": rnd(V, H), "head.weight": rnd(V, H), "norm.weight": rnd(H, s=1.0)}
    fp8_weights = {}
    for layer in range(2):
        p = f"layers.{layer}."
        tensors[p + "attn_norm.weight"] = rnd(H, s=1.0)
        tensors[p + "ffn_norm.weight"] = rnd(H, s=1.0)
        tensors[p + "attn.q_norm.weight"] = rnd(128, s=1.0)
        tensors[p + "attn.kv_norm.weight"] = rnd(128, s=1.0)
        for name, shape in (("attn.wq_a", (128, H)), ("attn.wq_b", (256, 128)), ("attn.wkv", (128, H)),
                            ("attn.wo_a", (128, 256)), ("attn.wo_b", (H, 128)),
                            ("ffn.shared_experts.w1", (I, H)), ("ffn.shared_experts.w2", (H, I)),
                            ("ffn.shared_experts.w3", (I, H))):
            fp8_weights[p + name] = rnd(*shape, s=0.05 * (1 + layer))
        tensors[p + "ffn.gate.weight"] = rnd(E, H)
        tensors[p + "ffn.gate.bias"] = rnd(E)
        for e in range(E):
            for w, shape in (("w1", (I, H)), ("w2", (H, I)), ("w3", (I, H))):
                key = f"{p}ffn.experts.{e}.{w}"
                if fp8_experts:
                    fp8_weights[key] = rnd(*shape, s=0.02 * (1 + e))
                    continue
                packed, scale = _dsv4_fp4(rnd(*shape, s=0.02 * (1 + e)).float())
                tensors[key + ".weight"] = packed if experts == "i8" else packed.view(torch.float4_e2m1fn_x2)
                tensors[key + ".scale"] = scale
    if engram:
        name = "layers.0.engram.embed"
        res = _fp8_quantizer((1, 32), "ue8m0").convert({name + ".weight": rnd(96, H)})
        tensors[name + ".weight"] = res[name + ".weight"]
        tensors[name + ".scale"] = res[name + ".weight_scale_inv"].contiguous()
    for name, w in fp8_weights.items():
        res = quantize.convert({name + ".weight": w})
        tensors[name + ".weight"] = res[name + ".weight"]
        tensors[name + ".scale"] = res[name + ".weight_scale_inv"].contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    qc = {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": scale_fmt, "activation_scheme": "dynamic",
          "weight_block_size": [block, block]}
    cfg = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "hidden_size": H,
           "moe_intermediate_size": I, "n_routed_experts": E, "n_shared_experts": 1, "num_hidden_layers": 2,
           "vocab_size": V, "torch_dtype": "bfloat16", "quantization_config": qc}
    if expert_dtype_at == "qc":
        qc["expert_dtype"] = "fp8" if fp8_experts else "fp4"  # V4.1
    else:
        cfg["expert_dtype"] = "fp8" if fp8_experts else "fp4"  # V4: top level, moved into quantization_config
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return out


def dsv4_reference(folder: Path, dtype: torch.dtype = torch.float32) -> dict:
    """transformers 5.23's Fp8Dequantize._dequantize_one of each weight with its `.scale`; the rest as stored."""
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize
    deq = Fp8Dequantize(None)
    t = folder_tensors(folder)
    out = {}
    for k, v in t.items():
        if k.endswith(".scale"):
            continue
        if k.endswith(".weight") and k[:-7] + ".scale" in t:
            out[k] = deq._dequantize_one(v, t[k[:-7] + ".scale"], output_dtype=dtype)
        else:
            out[k] = v
    return out


# Inkling2Loop (transformers 5.24.0, model_type inkling2_loop): the text sizes of
# tools/hf_schema.py's tiny build, the expert sizes changed so that nothing coincides (w13 [E, 2I, H] =
# [3, 192, 64], w2 [3, 64, 96]: NVFP4's 16 and MXFP8's 32 divide every row).
INK_TEXT = dict(vocab_size=256, unpadded_vocab_size=256, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, d_rel=16, moe_intermediate_size=96, n_routed_experts=3,
                num_experts_per_tok=2, loop_gate_rank=64)
INK_VISION = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                  projection_hidden_dim=64, text_hidden_size=64)
# Which layers' experts are stored how: NVFP4 and MXFP8 beside each other, the rest as saved.
INK_LAYOUT = {0: "nvfp4", 1: "mxfp8", 2: "nvfp4"}
INK_STACKS = ("w13_weight", "w2_weight")


def _ink_nvfp4(w: torch.Tensor, denominators: torch.Tensor) -> dict:
    """An expert stack [E, R, C] in Inkling2Loop's NVFP4 (the layout Inkling2LoopDequantizeExperts
    reads: value = e2m1 x block scale x amax / outer denominator): per expert amax, the block scale
    e4m3(amax16 / (6 amax / denominator)), codes to the nearest E2M1 value, low nibble first."""
    w = w.float()
    amax = w.abs().amax(dim=(1, 2))
    factor = amax / denominators
    blocks = w.reshape(w.shape[0], w.shape[1], -1, 16)
    scale = (blocks.abs().amax(-1) / (6 * factor[:, None, None])).clamp(max=448).to(torch.float8_e4m3fn)
    x = blocks / (scale.float()[..., None] * factor[:, None, None, None])
    codes = _fp4_encode(x.reshape(w.shape))
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
    return {"": packed, "_scale": scale, "_amax": amax, "_outer_scale_denominator": denominators.float()}


def _ink_mxfp8(w: torch.Tensor) -> dict:
    """An expert stack in Inkling2Loop's MXFP8: one exponent byte per 32 values (ceil(log2(amax / 448))
    + 127), the values e4m3(w / 2^(e - 127))."""
    w = w.float()
    blocks = w.reshape(w.shape[0], w.shape[1], -1, 32)
    amax = blocks.abs().amax(-1).clamp(min=2.0 ** -100)
    e = torch.ceil(torch.log2(amax / 448)).clamp(-127, 127)
    q = (blocks / torch.exp2(e)[..., None]).to(torch.float8_e4m3fn).reshape(w.shape)
    return {"": q, "_scale": (e + 127).to(torch.uint8)}


def inkling2_loop_class(text: bool):
    """transformers' class of the model (the multimodal one, or the text model alone: inkling2_loop_text)."""
    import transformers
    return transformers.Inkling2LoopForCausalLM if text else transformers.Inkling2LoopForConditionalGeneration


def inkling2_loop(out: Path, text: bool = False) -> Path:
    """A tiny Inkling2LoopForConditionalGeneration (or, `text`, Inkling2LoopForCausalLM: model_type
    inkling2_loop_text), transformers 5.24.0's own class, seeded, bfloat16, saved by save_pretrained,
    its expert stacks then stored as INK_LAYOUT says (no writer of the layout exists: transformers
    dequantizes it on load, saves plain stacks)."""
    import transformers
    cfg = (transformers.Inkling2LoopTextConfig(**INK_TEXT) if text
           else transformers.Inkling2LoopConfig(text_config=INK_TEXT, vision_config=INK_VISION))
    torch.manual_seed(SEED + 7)
    model = inkling2_loop_class(text)._from_config(cfg, dtype=torch.bfloat16)
    with torch.no_grad():  # experts drawn at several magnitudes, so that blocks differ in scale
        g = torch.Generator().manual_seed(SEED + 8)
        for name, p in model.named_parameters():
            if ".experts." in name:
                p.copy_(torch.randn(p.shape, generator=g) * torch.logspace(-3, -1, p.shape[-1])[None, None, :])
    model.save_pretrained(out)
    t = folder_tensors(out)
    for layer, kind in INK_LAYOUT.items():
        for stack in INK_STACKS:
            key = f"model.llm.layers.{layer}.mlp.experts.{stack}"
            den = torch.tensor([2688.0, 1344.0, 672.0])[: t[key].shape[0]]
            parts = _ink_nvfp4(t[key], den) if kind == "nvfp4" else _ink_mxfp8(t[key])
            for tail, v in parts.items():
                t[key + tail] = v.contiguous()
    save_file(t, out / "model.safetensors", metadata={"format": "pt"})
    return out


def inkling2_loop_reference(folder: Path, dtype: torch.dtype) -> dict:
    """transformers 5.24.0's own Inkling2LoopDequantizeExperts over each expert stack with its scale
    (and amax and denominator), to `dtype` (the model parameter's dtype it asks); stacks without a
    scale as the op passes them."""
    from transformers.core_model_loading import Inkling2LoopDequantizeExperts

    class _Model:  # what the op asks of the model: the dtype of the parameter it fills
        @staticmethod
        def get_parameter(name):
            return torch.empty(0, dtype=dtype)
    t = folder_tensors(folder)
    op = Inkling2LoopDequantizeExperts()
    out = {}
    for k, v in t.items():
        if not k.endswith(INK_STACKS) or k + "_scale" not in t:
            continue
        tails = ("", "_scale", "_amax", "_outer_scale_denominator")
        sources = [k + tail for tail in tails]
        got = op.convert({s: [t[s]] for s in sources if s in t}, sources, [k + ".out"], model=_Model(),
                         full_layer_name=k)
        out[k] = got[k + ".out"]
    return out


def main(argv) -> int:
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["ct", "ct-ref", "dsv4", "dsv4-ref"])
    ap.add_argument("args", nargs="+")
    ap.add_argument("--moe", action="store_true")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--experts", default="i8", choices=["i8", "f4"])
    ap.add_argument("--expert-dtype-at", default="qc", choices=["qc", "top"])
    a = ap.parse_args(argv)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    if a.what == "ct":
        import tempfile
        scheme, out = a.args[0], Path(a.args[1])
        with tempfile.TemporaryDirectory() as tmp:
            src = (tiny_moe if a.moe else tiny_dense)(Path(tmp) / "src", dtype)
            ct_quantize(src, out, scheme)
    elif a.what == "ct-ref":
        save_file({k: v.contiguous() for k, v in ct_reference(Path(a.args[0]), dtype).items()}, a.args[1])
    elif a.what == "dsv4":
        dsv4(Path(a.args[0]), a.experts, a.expert_dtype_at)
    else:
        save_file({k: v.contiguous() for k, v in dsv4_reference(Path(a.args[0]), dtype).items()}, a.args[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
