#!/usr/bin/env python3
"""`consolidate --quantize fp8-block` (issue 48 item 3; view/codecs/quantize.h), checked by transformers
5.23 and torch 2.15 on a model transformers itself writes here (a tiny Qwen3ForCausalLM, seeded,
save_pretrained in float32 and in bfloat16; a DCP copy of it through dcp.save, sharded over 2 ranks'
worth of chunks by torch's own planner is not needed: the HF folder and a DCP checkpoint written
by `dcpctl reshard` of it, FSDP-style row shards that cut 16-row blocks, are both read):

  - every quantized weight and its weight_scale_inv equal transformers' own Fp8Quantize
    (integrations/finegrained_fp8.py, the op its save path runs) on the source weight, byte for
    byte; kept weights (embeddings, lm_head, norms) byte for byte as saved, and listed with their
    reason; a partial edge block (--quantize-block 24x24 on 64-wide weights) scaled by its own
    amax, as DeepSeek's releases are (checked against the rule written out here in torch);
  - config.json: quantization_config {quant_method fp8, fmt e4m3, activation_scheme dynamic,
    weight_block_size, modules_to_not_convert}; --dtype bf16 makes the others bf16 and the config
    say so, the fp8 weights and scales untouched;
  - from_pretrained of the folder (FineGrainedFP8Config(dequantize=True), on CPU): no missing or
    unexpected keys, logits within the quantization error of the unquantized model's (the bound
    measured here is printed);
  - round trip: dcpctl's own dequantization (`consolidate Q/ --dtype fp32`) and torch's
    QuantizedHuggingFaceStorageReader give back float32(q) * scale_inv, and each value is within
    2^-4 |w| + 2^-10 amax/448 of the source (e4m3's half ulp, or its smallest subnormal's half);
  - a DCP source whose chunks cut the blocks (reshard -w 3 of the folder) gives the same bytes;
  - refusals: --quantize on an fp8 checkpoint (exit 5), --quantize-block 0x8 (exit 2), nothing
    written.

`--quantize mxfp4` (mxfp4_checks), on a tiny GptOssForCausalLM transformers writes here (seeded,
float32, save_pretrained; experts [E, in, out] as GptOssExperts keeps them):

  - the experts' `_blocks`/`_scales` equal the OCP MX v1.0 rule written out below in torch
    (mx_reference: torchao's to_mx, ScaleCalculationMode.FLOOR, E2M1 round-to-nearest-even
    saturating, pack_uint4's low nibble first), byte for byte, on the transposed experts
    (GPT-OSS's [E, out, in / 32, 16]); every other tensor byte for byte as saved. mx_reference
    itself equals torchao 0.18.0's to_mx(x, torch.float4_e2m1fn_x2, 32) on CPU byte for byte
    (random groups over 2^-30..2^30, zeros, -0.0, subnormal groups, every midpoint, saturation;
    checked 2026-11-26 with the torchao-0.18.0 wheel from PyPI unzipped on PYTHONPATH beside the
    test virtualenv's torch 2.15.0); where torchao is importable the test asks it too;
  - config.json's quantization_config is GPT-OSS's: quant_method mxfp4, modules_to_not_convert
    ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"];
  - torch 2.15's _dequantize_tensor_mxfp4 of the output and dcpctl's `consolidate Q/ --dtype fp32`
    agree bit for bit and are within amax/2 of each 32-value group's source (E2M1's spacing at
    the top of the range plus saturation; plus 2^-124 for groups whose amax is below 2^-124, which
    get scale byte 0 and, as torchao divides them by 2^-126, flush to zero or decode at half); from_pretrained(Mxfp4Config(dequantize=True)) on CPU
    loads with no missing or unexpected keys, its experts equal transformers' own
    convert_moe_packed_tensors of the blocks, its logits equal those of the reference quantization
    (the error against the unquantized model printed);
  - a DCP source whose chunks cut the expert stacks (reshard -w 3) gives the same bytes;
  - refusals: a model_type that is not gpt_oss, a model with no expert stacks, an MXFP4 folder,
    --quantize-block with mxfp4 (exit 5, 5, 5, 2), nothing written.

  - `diff SRC Q --map gpt-oss-mxfp4` (mxfp4_audit): clean, the 4 stacks within MXFP4's bound; a
    code one step toward zero or a group's scale doubled: exit 1 naming the stack.

`reshard` and `cast` with --quantize (reshard_cast_checks): the DCP outputs, read by torch's DCP
loader, hold consolidate's bytes.

`--quantize fp8-block` on stacked experts (fp8_stack_checks, fp8_kept_stack_checks), on a tiny
Gemma4ForCausalLM transformers writes here (seeded, float32, save_pretrained: Gemma 4 has no
conversion mapping, so its experts stay on disk as Gemma4TextExperts holds them,
`experts.gate_up_proj` [E, 2I, H] and `down_proj` [E, H, I], the [E, out, in] FP8Experts loads;
transformers 5.23's other MoE models write per-expert 2-D weights, and GPT-OSS / Llama 4 [E, in, out]):

  - each expert's fp8 bytes and its slice of `_scale_inv` [E, out / 16, in / 16] equal
    transformers' Fp8Quantize of that expert, byte for byte;
  - from_pretrained of the folder loads FP8Experts and FP8Linear (the GPU path, its environment
    check bypassed on CPU: transformers 5.23's dequantize=True does not collect a stack's
    `_scale_inv` for a model without a conversion mapping, it reports them unexpected), no missing,
    unexpected or mismatched keys, holding dcpctl's bytes; the model rebuilt from transformers'
    own _dequantize_fp8_weight of what it loaded gives the logits of transformers' own
    quantize-dequantize, and with its experts alone quantized is within 10% of the unquantized
    model's largest logit (measured 0.035 of 0.55; the whole model 0.32: a random Gemma 4 is
    sensitive);
  - `consolidate Q/ --dtype bf16` gives back _dequantize_fp8_weight's values in bf16; a DCP copy
    whose chunks cut the stacks (reshard -w 3) the same bytes;
  - kept, each named with its reason and its experts module in modules_to_not_convert: a stack
    with partial blocks (--quantize-block 32x32 on down_proj's 48 columns; transformers'
    Fp8Dequantize derives the block from the scale grid) keeps its whole module; GPT-OSS's biased
    [E, in, out] stacks.

`--map M --quantize S` in one command (map_fp8_checks, map_mxfp4_checks; the map a view the
quantize view reads, view/maps/map_view.h): bit for bit the two-step path (consolidate --map M -o A/,
then consolidate A/ --quantize S), on torchtitan 0.3.0's DeepSeek-V3 fixtures (fp8-block, experts
unstacked by the map, the MTP block kept) and on the GPT-OSS model above in torchtitan's names
(mxfp4); consolidate, reshard and cast alike.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from testlib import EXIT_UNSUPPORTED, EXIT_USAGE, check, expect_rc, hf_loaded, run, same_tensor, summary  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

DCPCTL = sys.argv[1]
FIXTURES = Path(sys.argv[2])
WORK = Path(tempfile.mkdtemp(prefix="dcpctl-quantize-"))


def folder_tensors(d: Path) -> dict:
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def make_model(dtype: torch.dtype, d: Path):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, tie_word_embeddings=False, max_position_embeddings=64)
    torch.manual_seed(11)
    model = Qwen3ForCausalLM(cfg).to(dtype).eval()
    with torch.no_grad():  # weights of several magnitudes, a block of zeros, so that scales differ
        model.model.layers[0].mlp.down_proj.weight.mul_(7.5)
        model.model.layers[1].self_attn.o_proj.weight[:16, :16] = 0
    model.save_pretrained(d)
    return model


def reference_quantize(w: torch.Tensor, block: tuple[int, int]):
    """transformers 5.23's Fp8Quantize on one weight (its own op, with a stand-in quantizer that
    carries the config it reads)."""
    from transformers.integrations.finegrained_fp8 import Fp8Quantize
    from transformers.utils.quantization_config import FineGrainedFP8Config

    class Q:
        quantization_config = FineGrainedFP8Config(weight_block_size=block)

    out = Fp8Quantize(Q())._quantize_one("x.weight", w)
    return out["x.weight"], out["x.weight_scale_inv"]


def partial_block_quantize(w: torch.Tensor, bm: int, bn: int):
    """The same rule with edge blocks smaller than bm x bn, each scaled by its own amax."""
    x = w.to(torch.float32)
    rows, cols = x.shape
    rb, cb = -(-rows // bm), -(-cols // bn)
    scale = torch.empty(rb, cb)
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    for i in range(rb):
        for j in range(cb):
            blk = x[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn]
            amax = blk.abs().amax()
            s = torch.where(amax > 0, 448.0 / torch.where(amax > 0, amax, torch.ones_like(amax)), torch.ones_like(amax))  # as transformers
            scale[i, j] = s
            q[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn] = torch.clamp(blk * s, -448.0, 448.0).to(torch.float8_e4m3fn)
    return q, (1.0 / scale).to(torch.float32)


def quantized_keys(src: dict) -> list[str]:
    kept = ("embed", "lm_head", "norm")
    return [k for k, v in src.items() if k.endswith(".weight") and v.dim() == 2 and not any(p in k for p in kept)]


E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


def mx_reference(x: torch.Tensor):
    """OCP MX v1.0 MXFP4 of the last dimension of `x` (a multiple of 32), as torchao's to_mx
    computes it: the shared exponent is amax's float32 exponent field less 127 and E2M1's emax 2,
    clamped to [-127, 128], biased by 127 (the E8M0 byte); the values divided by that power of two
    (at least 2^-126) in float32, rounded to the nearest E2M1 value, ties to the even code,
    saturating at 6, the sign kept; two codes a byte, the first in the low nibble."""
    g = x.to(torch.float32).reshape(*x.shape[:-1], -1, 32)
    amax = g.abs().amax(-1)
    exp = ((amax.view(torch.int32) >> 23) & 0xFF) - 127 - 2
    biased = exp.clamp(-127, 128) + 127
    scale = (biased.to(torch.int32) << 23).view(torch.float32).clamp(min=2.0 ** -126)
    v = (g / scale.unsqueeze(-1)).to(torch.float64)
    dist = (v.abs().unsqueeze(-1) - E2M1).abs() + 1e-12 * (torch.arange(8) % 2)  # ties: the even code
    code = dist.argmin(-1).to(torch.uint8) | (torch.signbit(v).to(torch.uint8) << 3)
    blocks = code[..., 0::2] | (code[..., 1::2] << 4)
    return blocks.contiguous(), biased.to(torch.uint8)


def mx_dequantize(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The reference's values back: E2M1(code) * 2^(scale - 127), [..., G * 32]."""
    lut = torch.cat([E2M1, -E2M1]).to(torch.float32)
    codes = torch.stack([blocks & 0xF, blocks >> 4], -1).reshape(*blocks.shape[:-1], 32).long()
    vals = lut[codes] * torch.pow(2.0, scales.to(torch.float64) - 127).to(torch.float32).unsqueeze(-1)
    return vals.reshape(*blocks.shape[:-2], -1)


def make_gpt_oss(d: Path):
    from transformers import GptOssConfig, GptOssForCausalLM
    cfg = GptOssConfig(vocab_size=96, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=8,
                       tie_word_embeddings=False, layer_types=["sliding_attention", "full_attention"], max_position_embeddings=64)
    torch.manual_seed(12)
    model = GptOssForCausalLM(cfg).eval()
    with torch.no_grad():  # experts of several magnitudes, a group of zeros, tiny (subnormal-scale) values and ties
        model.model.layers[0].mlp.experts.gate_up_proj.mul_(40.0)
        model.model.layers[1].mlp.experts.down_proj[0, :32, 0] = 0
        model.model.layers[1].mlp.experts.down_proj[1, :32, 1] *= 1e-38
        model.model.layers[1].mlp.experts.down_proj[2, :8, 2] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -5.0])
        model.model.layers[1].mlp.experts.down_proj[2, 8:32, 2] = 0.1
    model.save_pretrained(d)
    return model


def mxfp4_audit(src: Path, q: Path, tensors: dict, out: dict, stacks: list) -> None:
    """`diff SRC Q --map gpt-oss-mxfp4` (issue 57 item 4): the 4 expert stacks within MXFP4's bound (OCP's
    saturating top code, torchao's 2^-124 groups), the rest bit-equal; a copy with one E2M1 code one step
    toward zero (from the element whose source lies nearest its decoded value, at or beyond it) or one
    group's scale doubled: exit 1 naming that stack."""
    import shutil
    from safetensors.torch import save_file
    r = dcpctl("diff", src, q, "--map", "gpt-oss-mxfp4", "--json")
    doc = json.loads(r.stdout) if r.stdout.startswith("{") else {}
    a = doc.get("audit") or {}
    c = a.get("counts", {})
    keys = {k["key"]: k for k in doc.get("keys", [])}
    check(r.returncode == 0 and a.get("clean") and c.get("within_codec") == 4 and c.get("unexplained") == 0,
          f"diff SRC Q --map gpt-oss-mxfp4: exit {r.returncode}, counts {c}, unexplained {a.get('unexplained')}")
    bounded = sorted(k for k, v in keys.items() if v.get("bound") == "codec" and v.get("codec") == "mxfp4" and v["inexact"] > 0)
    check(bounded == sorted(k + "_blocks" for k in stacks), f"the expert stacks under mxfp4's bound: {bounded}")
    k = "model.layers.1.mlp.experts.down_proj"
    blocks, scales = out[k + "_blocks"], out[k + "_scales"]
    x, d = tensors[k].transpose(1, 2).reshape(-1), mx_dequantize(blocks, scales).reshape(-1)
    near = torch.where((x.abs() >= d.abs()) & (d != 0), (x.abs() - d.abs()) / d.abs().clamp(min=1e-30), float("inf"))
    flat = int(near.argmin())
    stepped = blocks.clone().reshape(-1)
    v = int(stepped[flat // 2])
    nib = ((v >> 4) if flat % 2 else (v & 15)) - 1
    stepped[flat // 2] = ((v & 15) | (nib << 4)) if flat % 2 else ((v & 0xF0) | nib)
    doubled = scales.clone().reshape(-1)
    doubled[flat // 32] += 1
    for how, name, value in (("an E2M1 code one step toward zero", k + "_blocks", stepped.reshape(blocks.shape)),
                             ("a group's scale doubled", k + "_scales", doubled.reshape(scales.shape))):
        bad = WORK / ("mx-damaged-" + name.rsplit("_", 1)[1])
        shutil.copytree(q, bad)
        t = load_file(bad / "model.safetensors")
        t[name] = value
        save_file(t, bad / "model.safetensors", metadata={"format": "pt"})
        r = dcpctl("diff", src, bad, "--map", "gpt-oss-mxfp4", "--json")
        doc = json.loads(r.stdout) if r.stdout.startswith("{") else {}
        named = [u.get("key") for u in (doc.get("audit") or {}).get("unexplained", [])]
        check(r.returncode == 1 and named == [k + "_blocks"],
              f"diff SRC Q --map gpt-oss-mxfp4, {how}: exit {r.returncode} (wanted 1) naming {k}_blocks: {named}")


def mxfp4_checks() -> tuple[Path, dict]:
    src = WORK / "gptoss"
    model = make_gpt_oss(src)
    tensors = folder_tensors(src)
    stacks = [k for k in tensors if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]
    check(len(stacks) == 4 and all(tensors[k].dim() == 3 for k in stacks), f"the model has 4 expert stacks ({stacks})")
    q = WORK / "mx"
    r = dcpctl("consolidate", src, "-o", f"{q}/", "--quantize", "mxfp4", "--json", "-q")
    if not expect_rc(r, 0, "consolidate --quantize mxfp4"):
        return src, {}
    s = json.loads(r.stdout).get("quantized", {})
    check(s.get("scheme") == "mxfp4" and s.get("weights") == 4 and s.get("block") == [1, 32], f"--json quantized: {s}")
    kept = {k["key"]: k["reason"] for k in s.get("kept", [])}
    check("lm_head.weight" in kept and "model.layers.0.mlp.router.weight" in kept and "model.layers.0.self_attn.q_proj.weight" in kept,
          f"the kept weights named with reasons ({sorted(kept)[:4]})")
    out = folder_tensors(q)
    bad = []
    for k in stacks:
        want_b, want_s = mx_reference(tensors[k].transpose(1, 2))
        if (d := same_tensor(out.get(k + "_blocks"), want_b)) or (d := same_tensor(out.get(k + "_scales"), want_s)):
            bad.append(f"{k}: {d}")
    check(not bad, f"every expert's _blocks and _scales equal the OCP MX v1.0 reference byte for byte ({bad[:2]})")
    try:  # torchao is not in the test virtualenv's pins; where it is importable, its to_mx decides too
        from torchao.prototype.mx_formats.mx_tensor import to_mx
    except ImportError:
        to_mx = None
        print("     (torchao not importable: mx_reference was checked against torchao 0.18.0's to_mx when written)")
    if to_mx is not None:
        bad = []
        for k in stacks:
            sc, d = to_mx(tensors[k].transpose(1, 2).contiguous(), torch.float4_e2m1fn_x2, 32)
            if not (torch.equal(sc.view(torch.uint8).reshape(out[k + "_scales"].shape), out[k + "_scales"])
                    and torch.equal(d.view(torch.uint8).reshape(out[k + "_blocks"].shape), out[k + "_blocks"])):
                bad.append(k)
        check(not bad, f"torchao's to_mx gives the same _blocks and _scales ({bad})")
    edge = mx_reference(tensors["model.layers.1.mlp.experts.down_proj"].transpose(1, 2))
    check(edge[1][0, 0, 0] == 0 and edge[1][1, 1, 0] == 0 and edge[1][2, 2, 0] == 127,
          f"the edge groups: zeros and 1e-38 values at scale 0 (2^-127), the ties at 2^0 ({edge[1][0, 0, 0]}, {edge[1][1, 1, 0]}, {edge[1][2, 2, 0]})")
    others = [k for k in tensors if k not in stacks]
    check(all(same_tensor(out.get(k), tensors[k]) is None for k in others), "every other tensor byte for byte as saved")
    check(len(out) == len(tensors) + 4, f"each stack written as _blocks and _scales ({len(out)} tensors)")
    cfg = json.loads((q / "config.json").read_text())
    qc = cfg.get("quantization_config", {})
    check(qc.get("quant_method") == "mxfp4" and sorted(qc.get("modules_to_not_convert", [])) ==
          sorted(["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]),
          f"config.json quantization_config as GPT-OSS ships it: {qc}")

    # ---- round trip: torch's _dequantize_tensor_mxfp4, dcpctl's --dtype fp32 ----
    import types
    from torch.distributed.checkpoint.quantized_hf_storage import QuantizedHuggingFaceStorageReader
    reader = QuantizedHuggingFaceStorageReader(path=str(q), thread_count=1, target_dtype=torch.float32)
    rt = WORK / "mx-rt.safetensors"
    if expect_rc(dcpctl("consolidate", q, "-o", rt, "--dtype", "fp32", "-q"), 0, "consolidate Q/ --dtype fp32 (MXFP4 dequantized back)"):
        back = load_file(rt)
        bad, worst = [], 0.0
        for k in stacks:
            b, sc = out[k + "_blocks"], out[k + "_scales"]
            req = types.SimpleNamespace(storage_offsets=[0, 0, 0], lengths=[b.shape[0], b.shape[1], b.shape[2] * 32])
            t = reader._dequantize_tensor_mxfp4(blocks=b, scales=sc, req=req, group_start=0, offset_in_first_group=0)
            if (d := same_tensor(back.get(k + "_blocks"), t)) or (d := same_tensor(t, mx_dequantize(b, sc))):
                bad.append(f"{k}: {d}")
            w = tensors[k].transpose(1, 2)
            amax = w.reshape(*w.shape[:-1], -1, 32).abs().amax(-1).repeat_interleave(32, -1)
            if ((t - w).abs() > amax / 2 + 2.0 ** -124).any():
                bad.append(f"{k}: outside amax/2 + 2^-124")
            worst = max(worst, ((t - w).abs() / amax.clamp(min=1e-30)).max().item())
        check(not bad, f"dcpctl's dequantization, torch's _dequantize_tensor_mxfp4 and the reference agree, within amax/2 "
                       f"(+ 2^-124: a group whose amax is below 2^-124 gets scale byte 0 and flushes) of the source ({bad[:2]})")
        print(f"     mxfp4 round trip: worst |error| / group amax {worst:.4g}")

    # ---- from_pretrained, dequantized on load (CPU) ----
    from transformers import AutoModelForCausalLM, Mxfp4Config
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    loaded, info = AutoModelForCausalLM.from_pretrained(q, quantization_config=Mxfp4Config(dequantize=True), dtype=torch.float32,
                                                        output_loading_info=True)
    check(not info["missing_keys"] and not info["unexpected_keys"],
          f"from_pretrained (Mxfp4 dequantize=True): no missing or unexpected keys ({sorted(info['missing_keys'])[:3]}, {sorted(info['unexpected_keys'])[:3]})")
    hf_loaded(q)
    import copy
    ref = copy.deepcopy(model)
    bad = []
    with torch.no_grad():
        for k in stacks:
            tf = convert_moe_packed_tensors(out[k + "_blocks"], out[k + "_scales"], dtype=torch.float32)
            if not torch.equal(loaded.get_parameter(k).detach(), tf):
                bad.append(k)
            ref.get_parameter(k).copy_(mx_dequantize(*mx_reference(tensors[k].transpose(1, 2))).transpose(1, 2))
    check(not bad, f"from_pretrained's experts are transformers' convert_moe_packed_tensors of dcpctl's blocks ({bad})")
    compare_logits(model, loaded, ref, torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(4)), "mxfp4", 0.25)

    # ---- a DCP source whose chunks cut the expert stacks ----
    dcp_dir = WORK / "gptoss-dcp3"
    if expect_rc(dcpctl("reshard", src, "-o", dcp_dir, "-w", "3", "-q"), 0, "reshard the GPT-OSS folder over 3 ranks"):
        q3 = WORK / "mx3"
        if expect_rc(dcpctl("consolidate", dcp_dir, "-o", f"{q3}/", "--quantize", "mxfp4", "--assets", src, "-q"), 0,
                     "consolidate --quantize mxfp4 of the 3-rank DCP copy"):
            o3 = folder_tensors(q3)
            check(sorted(o3) == sorted(out) and all(same_tensor(o3[k], out[k]) is None for k in out),
                  "the same bytes from a DCP copy whose chunks cut the expert stacks")

    mxfp4_audit(src, q, tensors, out, stacks)

    # ---- refusals, nothing written ----
    other = WORK / "gptoss-as-qwen"
    other.mkdir()
    for f in src.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    c = json.loads((other / "config.json").read_text())
    c["model_type"] = "qwen3_moe"
    (other / "config.json").write_text(json.dumps(c))
    for args, rc, what, words in [
        ([other, "--quantize", "mxfp4"], EXIT_UNSUPPORTED, "experts of another model_type", ("experts.down_proj", "model_type")),
        ([WORK / "src", "--quantize", "mxfp4"], EXIT_UNSUPPORTED, "a model with no expert stacks", ("stacked MoE experts",)),
        ([q, "--quantize", "mxfp4"], EXIT_UNSUPPORTED, "an MXFP4 folder", ("_blocks", "already quantized")),
        ([src, "--quantize", "mxfp4", "--quantize-block", "32x32"], EXIT_USAGE, "--quantize-block with mxfp4", ("--quantize-block",)),
    ]:
        o = WORK / f"mx-refused-{abs(hash(what))}"
        expect_rc(dcpctl("consolidate", *args, "-o", f"{o}/"), rc, f"--quantize mxfp4 refused: {what}", *words)
        check(not o.exists(), f"{what}: nothing written")
    return src, out


def compare_logits(model, loaded, ref, ids, scheme: str, bound: float) -> None:
    """The logits of `loaded` (dcpctl's folder through from_pretrained) against the unquantized
    `model`'s (within `bound` of their largest, printed) and the reference quantize-dequantize
    `ref`'s (equal up to float32 summation order)."""
    with torch.no_grad():
        want, got, quant = model(ids).logits, loaded.eval()(ids).logits, ref.eval()(ids).logits
    err, qerr, scale = (want - got).abs().max().item(), (quant - got).abs().max().item(), want.abs().max().item()
    print(f"     {scheme} logits: max |dcpctl {scheme} - fp32 model| = {err:.4g} (logits up to {scale:.3g}); "
          f"max |dcpctl {scheme} - reference quantize-dequantize| = {qerr:.3g}")
    check(qerr <= 1e-5 * max(scale, 1.0), f"{scheme}: from_pretrained's logits are the reference quantization's ({qerr:.3g})")
    check(err < bound * scale, f"{scheme}: and within the quantization error of the unquantized model's "
                               f"({err:.3g} < {bound:.0%} of {scale:.3g})")


def dcp_tensors(d: Path) -> dict:
    """A DCP checkpoint as torch's own loader reads it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    sd: dict = {}
    _load_state_dict(sd, storage_reader=dcp.FileSystemReader(str(d)), planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    return sd


def reshard_cast_checks(src: Path, hf: dict, gptoss: Path, mx: dict) -> None:
    """--quantize on reshard and cast (issue 48 item 4): the DCP output, read by torch's own DCP
    loader, holds the bytes consolidate's HF folder has (fp8-block 16x16 of the Qwen3 model,
    mxfp4 of the GPT-OSS model); cast --dtype bf16 --quantize casts the others and keeps the
    quantized ones."""
    dcp3 = WORK / "reshard-q"
    if expect_rc(dcpctl("reshard", src, "-o", dcp3, "-w", "3", "--quantize", "fp8-block", "--quantize-block", "16x16", "-q"), 0,
                 "reshard -w 3 --quantize fp8-block"):
        got = dcp_tensors(dcp3)
        check(sorted(got) == sorted(hf) and all(same_tensor(got[k], hf[k]) is None for k in hf),
              "reshard --quantize fp8-block: torch's DCP loader reads consolidate's fp8 weights and scales")
    dcpmx = WORK / "reshard-mx"
    if expect_rc(dcpctl("reshard", gptoss, "-o", dcpmx, "-w", "2", "--quantize", "mxfp4", "-q"), 0, "reshard -w 2 --quantize mxfp4"):
        got = dcp_tensors(dcpmx)
        check(sorted(got) == sorted(mx) and all(same_tensor(got[k], mx[k]) is None for k in mx),
              "reshard --quantize mxfp4: torch's DCP loader reads consolidate's _blocks and _scales")
        # The codec comes from the config, never the byte width: the DCP output carries config.json
        # with the quantization_config, so its later export and dequantization read the same codec.
        cfg = json.loads((dcpmx / "config.json").read_text()) if (dcpmx / "config.json").exists() else {}
        want = json.loads((gptoss / "config.json").read_text())
        check(cfg.get("quantization_config", {}).get("quant_method") == "mxfp4" and cfg.get("model_type") == want.get("model_type"),
              f"reshard --quantize mxfp4 writes the source's config.json with its quantization_config: {cfg.get('quantization_config')}")
        hf2 = WORK / "reshard-mx-hf"
        if expect_rc(dcpctl("consolidate", dcpmx, "-o", f"{hf2}/", "-q"), 0, "that DCP output exported as an HF folder"):
            c2 = json.loads((hf2 / "config.json").read_text()) if (hf2 / "config.json").exists() else {}
            check(c2.get("quantization_config") is not None and c2.get("quantization_config") == cfg.get("quantization_config"),
                  f"the HF export keeps the quantization_config: {c2.get('quantization_config')}")
        expect_rc(dcpctl("consolidate", dcpmx, "-o", WORK / "reshard-mx.safetensors", "--dtype", "fp32", "-q"), 0,
                  "that DCP output dequantized (--dtype fp32) through its own config")
    base = WORK / "cast-base"
    if expect_rc(dcpctl("reshard", src, "-o", base, "-w", "2", "-q"), 0, "a DCP copy of the Qwen3 folder"):
        cq = WORK / "cast-q"
        r = dcpctl("cast", base, "-o", cq, "--dtype", "bf16", "--quantize", "fp8-block", "--quantize-block", "16x16", "--json", "-q")
        if expect_rc(r, 0, "cast --dtype bf16 --quantize fp8-block"):
            check(json.loads(r.stdout).get("quantized", {}).get("weights") == 14, "cast --json: quantized.weights 14")
            got = dcp_tensors(cq)
            fp8 = [k for k in hf if hf[k].dtype == torch.float8_e4m3fn or k.endswith("_scale_inv")]
            check(len(fp8) == 28 and all(same_tensor(got.get(k), hf[k]) is None for k in fp8),
                  "cast --quantize: the fp8 weights and scales those of consolidate")
            check(all(got[k].dtype == torch.bfloat16 for k in hf if k not in fp8), "cast --quantize: the others cast to bf16")


def same_folders(got: Path, want: Path, what: str) -> None:
    """Two HF folders: the same keys, every tensor bit for bit, the same quantization_config."""
    a, b = folder_tensors(got), folder_tensors(want)
    bad = [k for k in b if same_tensor(a.get(k), b[k]) is not None]
    check(sorted(a) == sorted(b) and b and not bad, f"{what}: {len(a)} tensors bit for bit those of the two-step path "
                                                      f"(extra {sorted(set(a) - set(b))[:3]}, missing {sorted(set(b) - set(a))[:3]}, differ {bad[:3]})")
    qa = json.loads((got / "config.json").read_text()).get("quantization_config")
    qb = json.loads((want / "config.json").read_text()).get("quantization_config")
    check(qa is not None and qa == qb, f"{what}: config.json's quantization_config that of the two-step path ({qa} vs {qb})")


def map_fp8_checks() -> None:
    """--map beside --quantize fp8-block (issue 48 items 1, 3; view/maps/map_view.h): on torchtitan 0.3.0's
    DeepSeek-V3 (MLA, 4 routed experts stacked [E, out, in] unstacked by the map into 2-D HF
    experts, a dense layer) and its MTP variant, consolidate, reshard and cast --map M --quantize
    fp8-block write the bits of the two-step path (consolidate --map M -o A/, then consolidate A/
    --quantize -o B/); 8x8 blocks, so the 16-wide weights hold several."""
    for case in ("titan_deepseek_v3", "titan_deepseek_v3_mtp"):
        layout = FIXTURES / "layouts" / case
        ckpt, hf = layout / "run" / "step-2", layout / "hf"
        a, b, one = WORK / f"{case}-a", WORK / f"{case}-b", WORK / f"{case}-one"
        mp = ["--map", "torchtitan-deepseek-v3", "--assets", hf]
        mpc = ["--map", "torchtitan-deepseek-v3", "--config", layout / "config.json"]
        q = ["--quantize", "fp8-block", "--quantize-block", "8x8"]
        if not (expect_rc(dcpctl("consolidate", ckpt, "-o", f"{a}/", *mp, "-q"), 0, f"{case}: consolidate --map")
                and expect_rc(dcpctl("consolidate", a, "-o", f"{b}/", *q, "-q"), 0, f"{case}: then --quantize")):
            continue
        r = dcpctl("consolidate", ckpt, "-o", f"{one}/", *mp, *q, "--json", "-q")
        if not expect_rc(r, 0, f"{case}: consolidate --map --quantize fp8-block"):
            continue
        doc = json.loads(r.stdout)
        two = folder_tensors(b)
        experts = [k for k in two if ".mlp.experts." in k and k.endswith(".weight") and two[k].dtype == torch.float8_e4m3fn]
        check(len(experts) == 12, f"{case}: the 12 unstacked expert weights quantized ({len(experts)})")
        nq = sum(t.dtype == torch.float8_e4m3fn for t in two.values())
        check(doc.get("map", {}).get("name") == "torchtitan-deepseek-v3" and doc.get("quantized", {}).get("weights") == nq,
              f"{case}: --json says the map and the {nq} quantized weights ({doc.get('quantized', {}).get('weights')})")
        same_folders(one, b, f"{case}: consolidate --map --quantize")
        if case.endswith("mtp"):
            kept = {k["key"]: k["reason"] for k in doc.get("quantized", {}).get("kept", [])}
            check(any("MTP" in v for v in kept.values()), f"{case}: the MTP block kept, named ({sorted(kept)[:3]})")
            continue
        rs = WORK / f"{case}-reshard"
        if expect_rc(dcpctl("reshard", ckpt, "-o", rs, "-w", "3", *mpc, *q, "-q"), 0, f"{case}: reshard -w 3 --map --quantize"):
            got = dcp_tensors(rs)
            check(sorted(got) == sorted(two) and all(same_tensor(got[k], two[k]) is None for k in two),
                  f"{case}: reshard --map --quantize: torch's DCP loader reads the two-step path's tensors")
        cs = WORK / f"{case}-cast"
        if expect_rc(dcpctl("cast", ckpt, "-o", cs, "--dtype", "bf16", *mpc, *q, "-q"), 0, f"{case}: cast --dtype bf16 --map --quantize"):
            got = dcp_tensors(cs)
            fp8 = [k for k in two if two[k].dtype == torch.float8_e4m3fn or k.endswith("_scale_inv")]
            check(sorted(got) == sorted(two) and all(same_tensor(got[k], two[k]) is None for k in fp8),
                  f"{case}: cast --map --quantize: the {len(fp8)} fp8 weights and scales those of the two-step path")


def map_mxfp4_checks(gptoss: Path) -> None:
    """--map beside --quantize mxfp4. No torchtitan GPT-OSS fixture has experts MXFP4 takes (its
    dims are 16 and 8, not multiples of 32), so the transformers-written GPT-OSS model above is put
    in torchtitan's names by dcpctl (reshard -w 3 --map torchtitan-gpt-oss: a DCP checkpoint whose
    chunks cut the expert stacks, experts [E, out, in] as torchtitan holds them) and mapped back:
    consolidate and reshard --map torchtitan-gpt-oss --quantize mxfp4 write the bits of the two-step
    path (consolidate --map, then consolidate --quantize mxfp4)."""
    titan = WORK / "gptoss-titan"
    mp = ["--map", "torchtitan-gpt-oss", "--config", gptoss / "config.json"]
    if not expect_rc(dcpctl("reshard", gptoss, "-o", titan, "-w", "3", "--map", "torchtitan-gpt-oss", "-q"), 0,
                     "GPT-OSS in torchtitan's names (reshard --map)"):
        return
    a, b, one = WORK / "gptoss-a", WORK / "gptoss-b", WORK / "gptoss-one"
    if not (expect_rc(dcpctl("consolidate", titan, "-o", f"{a}/", *mp, "--assets", gptoss, "-q"), 0, "GPT-OSS: consolidate --map")
            and expect_rc(dcpctl("consolidate", a, "-o", f"{b}/", "--quantize", "mxfp4", "-q"), 0, "GPT-OSS: then --quantize mxfp4")):
        return
    r = dcpctl("consolidate", titan, "-o", f"{one}/", *mp, "--assets", gptoss, "--quantize", "mxfp4", "--json", "-q")
    if expect_rc(r, 0, "GPT-OSS: consolidate --map --quantize mxfp4"):
        check(json.loads(r.stdout).get("quantized", {}).get("weights") == 4, "GPT-OSS --map --quantize mxfp4: 4 expert stacks quantized")
        same_folders(one, b, "GPT-OSS: consolidate --map --quantize mxfp4")
    rs = WORK / "gptoss-reshard"
    if expect_rc(dcpctl("reshard", titan, "-o", rs, "-w", "2", *mp, "--quantize", "mxfp4", "-q"), 0, "GPT-OSS: reshard --map --quantize mxfp4"):
        got, two = dcp_tensors(rs), folder_tensors(b)
        check(sorted(got) == sorted(two) and all(same_tensor(got[k], two[k]) is None for k in two),
              "GPT-OSS: reshard --map --quantize mxfp4: torch's DCP loader reads the two-step path's tensors")


def same_from_dcp3(src: Path, out: dict, name: str, what: str) -> None:
    """`consolidate --quantize fp8-block --quantize-block 16x16` of a DCP copy of HF folder `src`
    sharded over 3 ranks (reshard -w 3, chunks that cut the blocks) gives `out`, byte for byte."""
    dcp_dir, q3 = WORK / f"{name}-dcp3", WORK / f"{name}-q3"
    if expect_rc(dcpctl("reshard", src, "-o", dcp_dir, "-w", "3", "-q"), 0, f"reshard {name} over 3 ranks") and \
            expect_rc(dcpctl("consolidate", dcp_dir, "-o", f"{q3}/", "--quantize", "fp8-block", "--quantize-block", "16x16",
                             "--assets", src, "-q"), 0, f"consolidate --quantize of {name}'s 3-rank DCP copy"):
        o3 = folder_tensors(q3)
        check(sorted(o3) == sorted(out) and all(same_tensor(o3[k], out[k]) is None for k in out), what)


def make_gemma4(d: Path):
    """A tiny Gemma4ForCausalLM (transformers 5.23, seeded, float32, save_pretrained): its MoE
    experts on disk as Gemma4TextExperts keeps them, `model.layers.N.experts.gate_up_proj` [E, 2I, H]
    and `down_proj` [E, H, I] ([E, out, in], the parameters FP8Experts loads), no conversion mapping."""
    from transformers import AutoModelForCausalLM, Gemma4TextConfig
    cfg = Gemma4TextConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=16, global_head_dim=16, hidden_size_per_layer_input=16,
                           vocab_size_per_layer_input=96, enable_moe_block=True, num_experts=4, top_k_experts=2,
                           moe_intermediate_size=48, layer_types=["full_attention"] * 2, max_position_embeddings=64)
    torch.manual_seed(13)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # experts of different magnitudes, a block of zeros
        model.model.layers[0].experts.gate_up_proj[1].mul_(9.0)
        model.model.layers[1].experts.down_proj[2, :16, :16] = 0
    model.save_pretrained(d)
    return model


def fp8_stack_checks() -> Path:
    """--quantize fp8-block on stacked experts (view/codecs/quantize.h): Gemma 4's [E, out, in] stacks
    quantized expert by expert, equal to transformers' Fp8Quantize per expert; stacks FP8Experts
    does not load as they are ([E, in, out], biased, partial blocks) kept, listed with a reason and
    in modules_to_not_convert."""
    src = WORK / "gemma4"
    model = make_gemma4(src)
    tensors = folder_tensors(src)
    stacks = sorted(k for k, v in tensors.items() if v.dim() == 3)
    check(len(stacks) == 4 and all(".experts." in k for k in stacks), f"Gemma 4 keeps 4 expert stacks on disk ({stacks})")
    q = WORK / "gemma4-q"
    r = dcpctl("consolidate", src, "-o", f"{q}/", "--quantize", "fp8-block", "--quantize-block", "16x16", "--json", "-q")
    if not expect_rc(r, 0, "consolidate --quantize fp8-block of Gemma 4 (stacked experts)"):
        return src
    s = json.loads(r.stdout)
    kept = {k["key"]: k["reason"] for k in s["quantized"]["kept"]}
    check(not any(k in kept for k in stacks), f"no expert stack kept: {[k for k in stacks if k in kept]}")
    out = folder_tensors(q)
    bad = []
    for k in stacks:
        w = tensors[k]
        for e in range(w.shape[0]):  # transformers' own op on each expert, a 2-D weight
            want_q, want_s = reference_quantize(w[e], (16, 16))
            if (d := same_tensor(out.get(k, torch.empty(0))[e:e + 1].squeeze(0), want_q)) or \
                    (d := same_tensor(out.get(k + "_scale_inv", torch.empty(0))[e:e + 1].squeeze(0), want_s)):
                bad.append(f"{k}[{e}]: {d}")
    check(not bad, f"each expert's fp8 bytes and scales equal transformers' Fp8Quantize of it ({bad[:2]})")
    if not check(all(k + "_scale_inv" in out and out[k + "_scale_inv"].shape == (w.shape[0], w.shape[1] // 16, w.shape[2] // 16)
                     for k, w in ((k, tensors[k]) for k in stacks)), "each stack's scale is [E, out / 16, in / 16] (FP8Experts')"):
        return src
    qc = json.loads((q / "config.json").read_text()).get("quantization_config", {})
    check(not any(".experts" in m for m in qc.get("modules_to_not_convert", [])), f"no experts module left unconverted: {qc}")

    # ---- from_pretrained: FP8Experts, the GPU path (its environment check bypassed on CPU) ----
    import copy
    from transformers import AutoModelForCausalLM
    from transformers.integrations.finegrained_fp8 import FP8Experts, FP8Linear, _dequantize_fp8_weight
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer
    check_env = FineGrainedFP8HfQuantizer.validate_environment
    FineGrainedFP8HfQuantizer.validate_environment = lambda self, *a, **k: None
    try:
        loaded, info = AutoModelForCausalLM.from_pretrained(q, dtype=torch.float32, output_loading_info=True)
    finally:
        FineGrainedFP8HfQuantizer.validate_environment = check_env
    check(not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"],
          f"from_pretrained (FP8Experts, FP8Linear): no missing, unexpected or mismatched keys ({info})")
    hf_loaded(q)
    ex = loaded.model.layers[0].experts
    check(isinstance(ex, FP8Experts) and same_tensor(ex.gate_up_proj.detach(), out["model.layers.0.experts.gate_up_proj"]) is None,
          f"the experts load as FP8Experts holding dcpctl's bytes ({type(ex).__name__})")
    # The model as transformers' own dequantization of what it loaded (its FP8 kernels are CUDA's),
    # whole and with its experts alone quantized; and as transformers' own quantize-dequantize of
    # the source (Fp8Quantize, expert by expert).
    ref, experts_only, tf_ref = copy.deepcopy(model), copy.deepcopy(model), copy.deepcopy(model)
    with torch.no_grad():
        for name, mod in loaded.named_modules():
            params = ["gate_up_proj", "down_proj"] if isinstance(mod, FP8Experts) else ["weight"] if isinstance(mod, FP8Linear) else []
            for p in params:
                key = f"{name}.{p}"
                deq = _dequantize_fp8_weight(getattr(mod, p).detach(), getattr(mod, p + "_scale_inv" if p != "weight" else "weight_scale_inv").detach(),
                                             mod.block_size, torch.float32)
                ref.get_parameter(key).copy_(deq)
                if params != ["weight"]:
                    experts_only.get_parameter(key).copy_(deq)
                w = tensors[key]
                parts = [reference_quantize(m, (16, 16)) for m in (w if w.dim() == 3 else w[None])]
                tf_ref.get_parameter(key).copy_(torch.stack([_dequantize_fp8_weight(a, b, [16, 16], torch.float32) for a, b in parts]).reshape(w.shape))
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        want, got, ex_got, tf = model(ids).logits, ref.eval()(ids).logits, experts_only.eval()(ids).logits, tf_ref.eval()(ids).logits
    err, ex_err, scale = (want - got).abs().max().item(), (want - ex_got).abs().max().item(), want.abs().max().item()
    print(f"     fp8 Gemma 4 logits: max |dequantized dcpctl fp8 - fp32 model| = {err:.4g}, its experts alone "
          f"quantized {ex_err:.4g} (logits up to {scale:.3g}; a random Gemma 4 is sensitive: per-layer inputs, softcapping)")
    check((got - tf).abs().max().item() <= 1e-5 * max(scale, 1.0), "fp8 Gemma 4: the logits of transformers' own quantize-dequantize")
    check(ex_err < 0.1 * scale, f"fp8 stacked experts: logits within the quantization error ({ex_err:.3g} < 10% of {scale:.3g})")

    # ---- round trip: consolidate Q/ --dtype bf16 (dcpctl's dequantization, expert by expert) ----
    rt = WORK / "gemma4-rt.safetensors"
    if expect_rc(dcpctl("consolidate", q, "-o", rt, "--dtype", "bf16", "-q"), 0, "consolidate Q/ --dtype bf16 of the stacks"):
        back = load_file(rt)
        bad = [k for k in stacks if same_tensor(back.get(k), _dequantize_fp8_weight(
            out[k], out[k + "_scale_inv"], [16, 16], torch.float32).to(torch.bfloat16))]
        check(not bad, f"dequantized back: transformers' _dequantize_fp8_weight, in bf16 ({bad[:2]})")
        worst = max(((back[k].float() - tensors[k]).abs() / tensors[k].abs().clamp(min=1e-30)).max().item() for k in stacks)
        print(f"     stacked round trip in bf16: worst relative error {worst:.4g}")

    # ---- a DCP source whose chunks cut the stacks (reshard -w 3: 4 experts over 3 ranks) ----
    same_from_dcp3(src, out, "gemma4", "the same bytes from shards that cut the expert stacks")
    return src



def fp8_kept_stack_checks(src: Path, gptoss: Path) -> None:
    """The stacks --quantize fp8-block keeps, each named with its reason and its experts module
    in modules_to_not_convert (transformers would otherwise replace it by FP8Experts)."""
    tensors = folder_tensors(src)
    stacks = sorted(k for k, v in tensors.items() if v.dim() == 3)
    # ---- partial blocks: the experts module kept whole, named with the reason ----
    r = dcpctl("consolidate", src, "-o", f"{WORK / 'gemma4-q32'}/", "--quantize", "fp8-block", "--quantize-block", "32x32", "--json", "-q")
    if expect_rc(r, 0, "--quantize-block 32x32 (down_proj's 48 columns: partial blocks)"):
        kept = {k["key"]: k["reason"] for k in json.loads(r.stdout)["quantized"]["kept"]}
        check(all(k in kept for k in stacks), f"every stack kept (down_proj's partial blocks keep its module whole): {sorted(kept)}")
        check("partial" in kept.get("model.layers.0.experts.down_proj", "") and
              "down_proj is kept" in kept.get("model.layers.0.experts.gate_up_proj", ""), f"with reasons: {kept}")
        out32 = folder_tensors(WORK / "gemma4-q32")
        check(all(same_tensor(out32[k], tensors[k]) is None for k in stacks), "kept stacks byte for byte as saved")
        qc = json.loads((WORK / "gemma4-q32" / "config.json").read_text())["quantization_config"]
        check({"model.layers.0.experts", "model.layers.1.experts"} <= set(qc["modules_to_not_convert"]),
              f"the kept experts modules in modules_to_not_convert: {qc['modules_to_not_convert']}")

    # ---- GPT-OSS's stacks ([E, in, out], with biases): kept, each named ----
    r = dcpctl("consolidate", gptoss, "-o", f"{WORK / 'gptoss-fp8'}/", "--quantize", "fp8-block", "--quantize-block", "16x16", "--json", "-q")
    if expect_rc(r, 0, "--quantize fp8-block of GPT-OSS"):
        kept = {k["key"]: k["reason"] for k in json.loads(r.stdout)["quantized"]["kept"]}
        g = [k for k, v in folder_tensors(gptoss).items() if v.dim() == 3]
        check(g and all("bias" in kept.get(k, "") for k in g), f"GPT-OSS's expert stacks kept, the bias named: {[kept.get(k) for k in g]}")
        qc = json.loads((WORK / "gptoss-fp8" / "config.json").read_text())["quantization_config"]
        check("model.layers.0.mlp.experts" in qc["modules_to_not_convert"], f"and in modules_to_not_convert: {qc['modules_to_not_convert']}")


def dcpctl(*args):
    return run(DCPCTL, *args)


def main() -> int:
    src = WORK / "src"
    model = make_model(torch.float32, src)
    tensors = folder_tensors(src)
    qkeys = quantized_keys(tensors)
    check(len(qkeys) == 14, f"the model has 14 Linear weights to quantize ({len(qkeys)})")

    # ---- 16x16 blocks: transformers' own op, byte for byte ----
    q = WORK / "q"
    r = dcpctl("consolidate", src, "-o", f"{q}/", "--quantize", "fp8-block", "--quantize-block", "16x16", "--json", "-q")
    if expect_rc(r, 0, "consolidate --quantize fp8-block --quantize-block 16x16"):
        s = json.loads(r.stdout)
        check(s.get("quantized", {}).get("weights") == 14, f"--json quantized.weights 14: {s.get('quantized')}")
        kept = {k["key"]: k["reason"] for k in s["quantized"]["kept"]}
        check(set(kept) == {"model.embed_tokens.weight", "lm_head.weight"}, f"kept 2-D weights named with reasons: {kept}")
        out = folder_tensors(q)
        bad = []
        for k in qkeys:
            want_q, want_s = reference_quantize(tensors[k], (16, 16))
            sk = k[: -len(".weight")] + ".weight_scale_inv"
            if (d := same_tensor(out.get(k), want_q)) or (d := same_tensor(out.get(sk), want_s)):
                bad.append(f"{k}: {d}")
        check(not bad, f"every fp8 weight and scale equal transformers' Fp8Quantize byte for byte ({bad[:2]})")
        others = [k for k in tensors if k not in qkeys]
        check(all(same_tensor(out.get(k), tensors[k]) is None for k in others), "kept tensors byte for byte as saved")
        check(len(out) == len(tensors) + 14, f"one weight_scale_inv per quantized weight ({len(out)} tensors)")
        cfg = json.loads((q / "config.json").read_text())
        qc = cfg.get("quantization_config", {})
        check(qc.get("quant_method") == "fp8" and qc.get("fmt") == "e4m3" and qc.get("activation_scheme") == "dynamic"
              and qc.get("weight_block_size") == [16, 16], f"config.json quantization_config: {qc}")
        check(sorted(qc.get("modules_to_not_convert", [])) == ["lm_head", "model.embed_tokens"],
              f"modules_to_not_convert names the Linear-shaped weights kept: {qc.get('modules_to_not_convert')}")

        # ---- from_pretrained, dequantized on load (CPU) ----
        from transformers import AutoModelForCausalLM, FineGrainedFP8Config
        loaded, info = AutoModelForCausalLM.from_pretrained(q, quantization_config=FineGrainedFP8Config(dequantize=True, weight_block_size=(16, 16)),
                                                            dtype=torch.float32, output_loading_info=True)
        check(not info["missing_keys"] and not info["unexpected_keys"],
              f"from_pretrained: no missing or unexpected keys ({sorted(info['missing_keys'])[:3]}, {sorted(info['unexpected_keys'])[:3]})")
        hf_loaded(q)
        # The model as transformers' own quantize-dequantize leaves it: the logits dcpctl's folder
        # must give, up to float32 summation order.
        import copy
        ref = copy.deepcopy(model)
        with torch.no_grad():
            for k in qkeys:
                rq, rs = reference_quantize(tensors[k], (16, 16))
                ref.get_parameter(k).copy_(rq.to(torch.float32) * rs.repeat_interleave(16, 0).repeat_interleave(16, 1))
        compare_logits(model, loaded, ref, torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(3)), "fp8", 0.1)

        # ---- round trip: dcpctl's dequantization and torch's reader ----
        rt = WORK / "rt.safetensors"
        if expect_rc(dcpctl("consolidate", q, "-o", rt, "--dtype", "fp32", "-q"), 0, "consolidate Q/ --dtype fp32 (dequantize back)"):
            back = load_file(rt)
            worst = 0.0
            bad = []
            for k in qkeys:
                sk = k[: -len(".weight")] + ".weight_scale_inv"
                deq = out[k].to(torch.float32) * out[sk].repeat_interleave(16, 0).repeat_interleave(16, 1)
                if d := same_tensor(back[k], deq):
                    bad.append(f"{k}: {d}")
                amax = tensors[k].abs().reshape(tensors[k].shape[0] // 16, 16, -1, 16).amax(dim=(1, 3))
                bound = tensors[k].abs() * 2 ** -4 + (amax / 448 * 2 ** -10).repeat_interleave(16, 0).repeat_interleave(16, 1)
                if ((back[k] - tensors[k]).abs() > bound * (1 + 1e-6)).any():
                    bad.append(f"{k}: outside 2^-4|w| + 2^-10 amax/448")
                worst = max(worst, ((back[k] - tensors[k]).abs() / tensors[k].abs().clamp(min=1e-30)).max().item())
            check(not bad, f"dequantized back: float32(q) * scale_inv, within e4m3's rounding of the source ({bad[:2]})")
            print(f"     round trip: worst relative error {worst:.4g} (e4m3 half ulp 0.0625, subnormals aside)")
        try:
            import warnings
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.quantized_hf_storage import QuantizedHuggingFaceStorageReader
            # torch's reader needs the index of a sharded folder: the same export in shards of 16 KB.
            qs = WORK / "q-sharded"
            expect_rc(dcpctl("consolidate", src, "-o", f"{qs}/", "--quantize", "fp8-block", "--quantize-block", "16x16",
                             "--max-shard-size", "16KB", "-q"), 0, "the same export in shards (an index)")
            reader = QuantizedHuggingFaceStorageReader(str(qs), target_dtype=torch.float32, block_size=16)
            md = reader.read_metadata()
            sd = {k: torch.empty(tuple(v.size), dtype=torch.float32) for k, v in md.state_dict_metadata.items() if not k.endswith("_scale_inv")}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dcp.load(sd, storage_reader=reader, no_dist=True)
            back = load_file(rt)
            check(all(same_tensor(sd[k], back[k]) is None for k in qkeys),
                  "torch's QuantizedHuggingFaceStorageReader gives dcpctl's dequantized values back")
        except Exception as e:  # noqa: BLE001
            check(False, f"torch's QuantizedHuggingFaceStorageReader: {type(e).__name__}: {e}")

        # ---- a DCP source whose chunks cut the blocks ----
        same_from_dcp3(src, out, "qwen3", "the same bytes from row shards that cut the blocks (43/43/42 rows of 128)")

    # ---- partial edge blocks: 24x24 on 64- and 128-wide weights ----
    q24 = WORK / "q24.safetensors"
    if expect_rc(dcpctl("consolidate", src, "-o", q24, "--quantize", "fp8-block", "--quantize-block", "24x24", "-q"), 0,
                 "--quantize-block 24x24 (edge blocks of 16 and 8)"):
        out = load_file(q24)
        bad = []
        for k in qkeys:
            want_q, want_s = partial_block_quantize(tensors[k], 24, 24)
            sk = k[: -len(".weight")] + ".weight_scale_inv"
            if (d := same_tensor(out.get(k), want_q)) or (d := same_tensor(out.get(sk), want_s)):
                bad.append(f"{k}: {d}")
        check(not bad, f"partial edge blocks scaled by their own amax ({bad[:2]})")

    # ---- --dtype bf16 beside it: the others cast, the fp8 weights and scales as quantized ----
    qb = WORK / "qb"
    r = dcpctl("consolidate", src, "-o", f"{qb}/", "--quantize", "fp8-block", "--quantize-block", "16x16", "--dtype", "bf16", "--json", "-q")
    if expect_rc(r, 0, "--quantize with --dtype bf16"):
        out = folder_tensors(qb)
        check(all(out[k].dtype == torch.float8_e4m3fn for k in qkeys), "the weights stay fp8")
        check(all(out[k[: -len(".weight")] + ".weight_scale_inv"].dtype == torch.float32 for k in qkeys), "the scales stay float32")
        check(out["model.embed_tokens.weight"].dtype == torch.bfloat16 and out["model.norm.weight"].dtype == torch.bfloat16,
              "the kept tensors cast to bf16")
        cfg = json.loads((qb / "config.json").read_text())
        check(cfg.get("dtype") == "bfloat16" and "quantization_config" in cfg, f"config.json: dtype bfloat16 and quantized ({cfg.get('dtype')})")

    # ---- refusals, nothing written ----
    fp8 = FIXTURES / "layouts" / "hf_fp8_deepseek" / "ckpt"
    for args, rc, what, words in [
        ([fp8, "--quantize", "fp8-block"], EXIT_UNSUPPORTED, "an fp8 checkpoint", ("already quantized",)),
        ([src, "--quantize", "fp8-block", "--quantize-block", "0x8"], EXIT_USAGE, "--quantize-block 0x8", ("RxC",)),
        ([src, "--quantize-block", "16x16"], EXIT_USAGE, "--quantize-block alone", ("--quantize",)),
    ]:
        out = WORK / f"refused-{abs(hash(what))}"
        expect_rc(dcpctl("consolidate", *args, "-o", f"{out}/"), rc, f"--quantize refused: {what}", *words)
        check(not out.exists(), f"{what}: nothing written")
    gptoss, mx = mxfp4_checks()
    hf16 = WORK / "q"
    reshard_cast_checks(src, folder_tensors(hf16) if hf16.exists() else {}, gptoss, mx)
    map_fp8_checks()
    map_mxfp4_checks(gptoss)
    fp8_kept_stack_checks(fp8_stack_checks(), gptoss)
    return summary("quantize_test")


if __name__ == "__main__":
    import shutil
    try:
        rc = main()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    sys.exit(rc)
