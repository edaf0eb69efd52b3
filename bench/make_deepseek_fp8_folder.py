#!/usr/bin/env python3
"""A DeepSeek-V3 (671B) shaped block-scaled FP8 Hugging Face folder with no data in it.

    bench/make_deepseek_fp8_folder.py OUT_DIR [--shards 163]

Writes the exact tensor list of the DeepSeek-V3 release (transformers' DeepseekV3Config defaults:
61 layers, the first 3 dense, 256 routed experts + 1 shared per MoE layer, MLA with q_lora_rank
1536 / kv_lora_rank 512, vocab 129280, and the MTP layer 61 with embed_tokens, enorm, hnorm,
eh_proj and shared_head), under the release's key names and dtypes: every Linear weight of
attention, dense MLP, routed and shared experts and eh_proj is F8_E4M3 with a float32
`weight_scale_inv` of [ceil(out/128), ceil(in/128)]; embeddings, lm_head, shared_head.head, norms
and the router's gate.weight are BF16; gate.e_score_correction_bias is F32.

The tensors are laid out in layer order over --shards files named as the release names them
(model-00001-of-000163.safetensors, ...): each file is a real safetensors file (8-byte
little-endian header length, JSON header with dtype/shape/data_offsets and
__metadata__ {"format": "pt"}, padded with spaces to 8 bytes), whose data region is a hole:
the file is extended with truncate, so it takes one disk block whatever its length (the data reads
as zeros). Beside them: model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"})
and config.json (DeepseekV3Config with the release's quantization_config). ~689 GB logical,
well under 1 MB on disk; the filesystem must support sparse files (ext4, xfs, btrfs, tmpfs).
Needs only the standard library (no torch, no transformers).
"""
import argparse
import json
import math
import os
import struct
import sys

# transformers 5.23's DeepseekV3Config() defaults (= deepseek-ai/DeepSeek-V3's config.json).
CFG = dict(
    vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
    num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128, n_shared_experts=1,
    n_routed_experts=256, routed_scaling_factor=2.5, kv_lora_rank=512, q_lora_rank=1536,
    qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128, n_group=8, topk_group=4,
    num_experts_per_tok=8, first_k_dense_replace=3, norm_topk_prob=True, hidden_act="silu",
    max_position_embeddings=4096, initializer_range=0.02, rms_norm_eps=1e-06, use_cache=True,
    bos_token_id=0, eos_token_id=1, pretraining_tp=1, tie_word_embeddings=False,
    rope_theta=10000.0, rope_interleave=True, attention_bias=False, attention_dropout=0.0,
    num_nextn_predict_layers=1,
)
BLOCK = 128
ITEMSIZE = {"F8_E4M3": 1, "BF16": 2, "F32": 4}


def tensors():
    """(key, dtype, shape) of every tensor of the release, in layer order."""
    c = CFG
    h, q_lora, kv_lora = c["hidden_size"], c["q_lora_rank"], c["kv_lora_rank"]
    heads, nope, rope, vdim = (c["num_attention_heads"], c["qk_nope_head_dim"],
                               c["qk_rope_head_dim"], c["v_head_dim"])

    def fp8(key, out_f, in_f):
        yield key + ".weight", "F8_E4M3", [out_f, in_f]
        yield key + ".weight_scale_inv", "F32", [math.ceil(out_f / BLOCK), math.ceil(in_f / BLOCK)]

    def mlp(prefix, inter):
        yield from fp8(prefix + ".gate_proj", inter, h)
        yield from fp8(prefix + ".up_proj", inter, h)
        yield from fp8(prefix + ".down_proj", h, inter)

    def layer(i):
        p = f"model.layers.{i}"
        yield p + ".input_layernorm.weight", "BF16", [h]
        yield from fp8(p + ".self_attn.q_a_proj", q_lora, h)
        yield p + ".self_attn.q_a_layernorm.weight", "BF16", [q_lora]
        yield from fp8(p + ".self_attn.q_b_proj", heads * (nope + rope), q_lora)
        yield from fp8(p + ".self_attn.kv_a_proj_with_mqa", kv_lora + rope, h)
        yield p + ".self_attn.kv_a_layernorm.weight", "BF16", [kv_lora]
        yield from fp8(p + ".self_attn.kv_b_proj", heads * (nope + vdim), kv_lora)
        yield from fp8(p + ".self_attn.o_proj", h, heads * vdim)
        yield p + ".post_attention_layernorm.weight", "BF16", [h]
        if i < c["first_k_dense_replace"]:
            yield from mlp(p + ".mlp", c["intermediate_size"])
        else:
            yield p + ".mlp.gate.weight", "BF16", [c["n_routed_experts"], h]
            yield p + ".mlp.gate.e_score_correction_bias", "F32", [c["n_routed_experts"]]
            for e in range(c["n_routed_experts"]):
                yield from mlp(f"{p}.mlp.experts.{e}", c["moe_intermediate_size"])
            yield from mlp(p + ".mlp.shared_experts", c["moe_intermediate_size"] * c["n_shared_experts"])

    vocab = c["vocab_size"]
    yield "model.embed_tokens.weight", "BF16", [vocab, h]
    for i in range(c["num_hidden_layers"]):
        yield from layer(i)
    yield "model.norm.weight", "BF16", [h]
    yield "lm_head.weight", "BF16", [vocab, h]
    for n in range(c["num_nextn_predict_layers"]):  # the MTP module: layer 61
        i = c["num_hidden_layers"] + n
        p = f"model.layers.{i}"
        yield p + ".embed_tokens.weight", "BF16", [vocab, h]
        yield p + ".enorm.weight", "BF16", [h]
        yield p + ".hnorm.weight", "BF16", [h]
        yield from fp8(p + ".eh_proj", h, 2 * h)
        yield from layer(i)
        yield p + ".shared_head.norm.weight", "BF16", [h]
        yield p + ".shared_head.head.weight", "BF16", [vocab, h]


def nbytes(t):
    return math.prod(t[2]) * ITEMSIZE[t[1]]


def split(ts, cap):
    """Greedy, in order: a new shard when the next tensor would take this one past cap bytes."""
    shards, cur, size = [], [], 0
    for t in ts:
        b = nbytes(t)
        if cur and size + b > cap:
            shards.append(cur)
            cur, size = [], 0
        cur.append(t)
        size += b
    if cur:
        shards.append(cur)
    return shards


def split_into(ts, n):
    """The smallest cap (to a MB) that splits ts into at most n shards; n exactly when possible."""
    lo, hi = max(nbytes(t) for t in ts), sum(nbytes(t) for t in ts)
    while hi - lo > 1_000_000:
        mid = (lo + hi) // 2
        if len(split(ts, mid)) > n:
            lo = mid
        else:
            hi = mid
    return split(ts, hi)


def write_shard(path, ts):
    # Data as safetensors orders it: larger dtypes first, then by name, so every tensor is aligned
    # to its element size (the header is padded to 8 bytes).
    order = sorted(ts, key=lambda t: (-ITEMSIZE[t[1]], t[0]))
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for key, dtype, shape in order:
        b = nbytes((key, dtype, shape))
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + b]}
        off += b
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        f.truncate(8 + len(hj) + off)  # the data: a hole, no disk blocks
    return off


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shards", type=int, default=163, help="number of shard files (default 163, as released)")
    args = ap.parse_args()
    ts = list(tensors())
    shards = split_into(ts, args.shards)
    n = len(shards)
    os.makedirs(args.out, exist_ok=True)
    weight_map, total = {}, 0
    for k, sh in enumerate(shards, 1):
        name = f"model-{k:05d}-of-{n:06d}.safetensors"
        total += write_shard(os.path.join(args.out, name), sh)
        for t in sh:
            weight_map[t[0]] = name
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    config = dict(CFG)
    config.update(
        architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", torch_dtype="bfloat16",
        quantization_config={"activation_scheme": "dynamic", "fmt": "e4m3",
                             "quant_method": "fp8", "weight_block_size": [BLOCK, BLOCK]},
    )
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    fp8 = sum(1 for t in ts if t[1] == "F8_E4M3")
    print(f"{args.out}: {len(ts)} tensors ({fp8} F8_E4M3 weights with a weight_scale_inv), "
          f"{n} shards, {total:,} bytes of data ({total / 1e9:.1f} GB)", file=sys.stderr)


if __name__ == "__main__":
    main()
