#!/usr/bin/env python3
"""`consolidate --quantize fp8-block` (issue 48 item 3; view/quantize.h), checked by transformers
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
  - refusals: --quantize on an fp8 checkpoint (exit 5), with --map (exit 5), --quantize-block 0x8
    (exit 2), nothing written.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from testlib import EXIT_UNSUPPORTED, EXIT_USAGE, check, expect_rc, run, same_tensor, summary  # noqa: E402

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
        # The model as transformers' own quantize-dequantize leaves it: the logits dcpctl's folder
        # must give, up to float32 summation order.
        import copy
        ref = copy.deepcopy(model)
        with torch.no_grad():
            for k in qkeys:
                rq, rs = reference_quantize(tensors[k], (16, 16))
                ref.get_parameter(k).copy_(rq.to(torch.float32) * rs.repeat_interleave(16, 0).repeat_interleave(16, 1))
        ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            want, got, quant = model(ids).logits, loaded.eval()(ids).logits, ref.eval()(ids).logits
        err, qerr = (want - got).abs().max().item(), (quant - got).abs().max().item()
        scale = want.abs().max().item()
        print(f"     logits: max |dcpctl fp8 - fp32 model| = {err:.4g} (logits up to {scale:.3g}); "
              f"max |dcpctl fp8 - transformers' quantize-dequantize| = {qerr:.3g}")
        check(qerr <= 1e-5 * max(scale, 1.0), f"from_pretrained's logits are those of transformers' own quantization ({qerr:.3g})")
        check(err < 0.1 * scale, f"and within the quantization error of the unquantized model's ({err:.3g} < 10% of {scale:.3g})")

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
        dcp_dir = WORK / "dcp3"
        if expect_rc(dcpctl("reshard", src, "-o", dcp_dir, "-w", "3", "-q"), 0, "reshard the folder over 3 ranks"):
            q3 = WORK / "q3"
            if expect_rc(dcpctl("consolidate", dcp_dir, "-o", f"{q3}/", "--quantize", "fp8-block", "--quantize-block", "16x16",
                                "--assets", src, "-q"), 0, "consolidate --quantize of the 3-rank DCP copy"):
                o3 = folder_tensors(q3)
                check(sorted(o3) == sorted(out) and all(same_tensor(o3[k], out[k]) is None for k in out),
                      "the same bytes from row shards that cut the blocks (43/43/42 rows of 128)")

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
        ([src, "--quantize", "fp8-block", "--map", "torchtitan-qwen3"], EXIT_UNSUPPORTED, "with --map", ("--quantize with --map",)),
        ([src, "--quantize", "fp8-block", "--quantize-block", "0x8"], EXIT_USAGE, "--quantize-block 0x8", ("RxC",)),
        ([src, "--quantize-block", "16x16"], EXIT_USAGE, "--quantize-block alone", ("--quantize",)),
    ]:
        out = WORK / f"refused-{abs(hash(what))}"
        expect_rc(dcpctl("consolidate", *args, "-o", f"{out}/"), rc, f"--quantize refused: {what}", *words)
        check(not out.exists(), f"{what}: nothing written")
    return summary("quantize_test")


if __name__ == "__main__":
    import shutil
    try:
        rc = main()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    sys.exit(rc)
