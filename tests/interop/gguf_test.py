#!/usr/bin/env python3
"""consolidate -o model.gguf against llama.cpp's own converter (docs/gguf.md, issue 71).

    gguf_test.py DCPCTL [ARCH:OUTTYPE[:split] ...]   (default: main()'s cases; ARCH-tied: the head
                                                     tied; ARCH-bf16: saved in bfloat16; :split:
                                                     SPLIT's options to both)

For each architecture a tiny model saved by transformers (hidden 64, 2 layers, 4 heads, 2 KV heads)
with a real tokenizer rebuilt by tools/gguf_oracle.py (Llama 3's for llama, Qwen2's for qwen2 and
qwen3, Llama 2's SentencePiece tokenizer.model for llama-spm and mixtral-spm), in a folder named `tiny`; llama.cpp's convert_hf_to_gguf.py (llama-cpp-python 0.3.36's, the
oracle) writes tiny.gguf from it, and dcpctl writes tiny.gguf twice: from the Hugging Face folder
and from a DCP checkpoint of the same state dict (torch.distributed.checkpoint.save, the config and
tokenizer files beside it). gguf-py's GGUFReader reads all three: every metadata key, its type and
value, and every tensor's name, type, shape and bytes must be the converter's, and the files equal
byte for byte. A `:split` case gives both the converter's --split-max-size and --split-max-tensors
(SPLIT): the shards' names must be the converter's, more than one, each equal byte for byte, and
nothing else left beside them; then inspect of the first and of the last shard read the set as one
model (every tensor gguf-py finds in the shards), and a copy with a shard removed fails verify (exit
3 naming it). verify of every converter file (the split's first shard) must pass: its tensors
against the architecture's table. `diff` (docs/gguf.md, "Diff against the source") of the HF folder
against the converter's file, and of the DCP checkpoint against dcpctl's file from it, must exit 0
with every tensor within its type's bound: the converter's file is the oracle that dcpctl's
un-mapping (its one table of names and transforms) is llama.cpp's; llama:q8_0 also diffs dcpctl's
q4_0, q4_k and q5_k files (Q4_0, Q5_0, Q5_1 at hidden 64) and damaged copies (a Q8_0 block scale
doubled, a norm's value moved), each exit 1 naming that tensor. general.name is the converter's from the folder's name ("Tiny")
and dcpctl's from the output's ("tiny.gguf"), hence both named tiny.

Exit status: 0 pass, 1 failure, 77 skip (the virtualenv lacks gguf, sentencepiece, torch or
transformers, or the sdist was never fetched; a failure instead under CI, tests/skip.py).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from skip import skip_or_fail  # noqa: E402
from tally import Tally  # noqa: E402

try:
    import numpy as np
    import torch
    import transformers
    import gguf
    import sentencepiece  # noqa: F401  (the converter imports it for Llama)
    import gguf_oracle
except ImportError as e:
    skip_or_fail(f"the virtualenv lacks {e.name} (tools/requirements.txt)")

# The checks made, counted (tests/tally.py; the count goes to the test's ledger:
# docs/testing.md#no-test-passes-on-nothing); FAILS is its list of failures.
TALLY = Tally()
FAILS = TALLY.failures
check = TALLY.check
problems = TALLY.problems


def fail(msg: str) -> None:
    TALLY.check(False, msg)


# Each architecture: its config class, the tokenizer, and what it sets beyond the common tiny sizes.
# llama: Llama 3.1's rope (rope_type llama3, theta 500000, factor 8, original context 8192) with
# head_dim 128, so that rope_freqs holds Llama 3's own 64 factors; qwen2: a linear rope; qwen3: a
# yarn rope; the MoE ones 4 experts, 2 used per token.
ARCHS = {
    "llama": (transformers.LlamaConfig, "llama-bpe", dict(
        head_dim=128, max_position_embeddings=131072,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
    "mistral": (transformers.MistralConfig, "llama-bpe", {}),
    # SentencePiece tokenizers (spm_tokenizer below), the converter's _set_vocab_sentencepiece: Llama
    # 2's; Mixtral 8x22B's (and Mistral 7B v0.3's) own, mistral-common's v3 with its 748 control
    # pieces, and by name Mistral 7B v0.1's (and Mixtral 8x7B's) v1 (gguf_oracle.MISTRAL_SPM);
    # mixtral-spm also pads the vocabulary past the model's pieces and adds a token (SPM_EXTRAS).
    "llama-spm": (transformers.LlamaConfig, "llama-spm", {}),
    "mixtral-spm": (transformers.MixtralConfig, "mistral-v3", dict(num_local_experts=4, num_experts_per_tok=2)),
    "mistral-spm": (transformers.MistralConfig, "mistral-v1", {}),
    # Not a release's pairing and not a default case: Qwen2Model.set_vocab (qwen2, qwen3) also takes a
    # tokenizer.model first, and dcpctl with it.
    "qwen3-spm": (transformers.Qwen3Config, "llama-spm", {}),
    "mixtral": (transformers.MixtralConfig, "llama-bpe", dict(num_local_experts=4, num_experts_per_tok=2)),
    "qwen2": (transformers.Qwen2Config, "qwen2", dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})),
    "qwen3": (transformers.Qwen3Config, "qwen2", dict(rope_parameters={
        "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 64,
        "beta_fast": 32.0, "beta_slow": 1.0})),
    "qwen3moe": (transformers.Qwen3MoeConfig, "qwen2", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)),
    # DeepSeek-V3's MLA (q_lora, kv_lora, the kv_b split), a dense first layer, a shared expert,
    # expert groups and the sigmoid router; llama-bpe, which DeepseekV2Model's _set_vocab_gpt2 takes.
    "deepseek2": (transformers.DeepseekV3Config, "llama-bpe", dict(
        num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, q_lora_rank=32,
        kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, first_k_dense_replace=1, n_group=2,
        topk_group=1, n_shared_experts=1, scoring_func="sigmoid")),
    # Kimi K2 (DeepseekV3ForCausalLM with Kimi's traits: one expert group, a yarn rope with
    # mscale_all_dim, routed_scaling_factor 2.827, norm_topk_prob) and its tiktoken tokenizer
    # (KIMI_TOKENS below: no tokenizer.json, DeepseekV2Model.set_vocab's kimi-k2 branch).
    "kimi-k2": (transformers.DeepseekV3Config, "kimi", dict(
        num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, q_lora_rank=32,
        kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, first_k_dense_replace=1, n_group=1,
        topk_group=1, n_shared_experts=1, scoring_func="sigmoid", topk_method="noaux_tc", routed_scaling_factor=2.827,
        norm_topk_prob=True, rope_parameters={
            "rope_type": "yarn", "rope_theta": 50000.0, "factor": 32.0, "original_max_position_embeddings": 64,
            "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0})),
    # Kimi K2.5's text model (KimiK25ForConditionalGeneration: Kimi K2's DeepSeek-V3 under
    # language_model., text_config, beside a vision tower and projector the text GGUF leaves out;
    # kimi_k25_model below), Kimi K2's tokenizer.
    "kimi-k25": (None, "kimi", {}),
    # DeepSeek-V2-Lite's layout (DeepseekV2ForCausalLM): no q_lora (q_proj), softmax gating
    # (transformers' config has no scoring_func: written as the released config.json says it),
    # greedy top-k without groups, no e_score_correction_bias, a yarn rope with mscale_all_dim.
    "deepseekv2": (transformers.DeepseekV2Config, "llama-bpe", dict(
        num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, q_lora_rank=None,
        kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, first_k_dense_replace=1,
        n_shared_experts=2, scoring_func="softmax", topk_method="greedy", rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 64,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707})),
    # GLM-4.5's layout (Glm4MoeModel): head_dim 32 (not hidden / heads), partial rotary 0.5 (rope
    # dimension 16), attention biases, q/k norms, a dense first layer, a shared expert, expert
    # groups, e_score_correction_bias; Qwen2's tokenizer with GLM's special tokens added
    # (_set_vocab_glm looks them up), which keeps its pre-tokenizer digest.
    "glm4moe": (transformers.Glm4MoeConfig, "qwen2", dict(
        head_dim=32, attention_bias=True, use_qk_norm=True, n_routed_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1,
        routed_scaling_factor=2.5)),
    # GPT-OSS (GptOssModel): attention sinks and biases, sliding window, yarn rope (the config's
    # default), the experts fused as transformers saves them (gate_up_proj interleaved, down_proj,
    # their biases), the router with its bias.
    "gpt-oss": (transformers.GptOssConfig, "llama-bpe", dict(
        head_dim=32, num_local_experts=4, num_experts_per_tok=2, sliding_window=16)),
    # Gemma 2 (Gemma2Model): head_dim 32 (not hidden / heads), the attention and final logit
    # softcapping, a sliding window, the four norms of a layer (each written + 1); Llama 2's
    # SentencePiece tokenizer (Gemma's own has no vocabulary file in llama.cpp's models/), which
    # Gemma2Model.set_vocab reads as it reads Gemma's (_set_vocab_sentencepiece).
    "gemma2": (transformers.Gemma2Config, "llama-spm", dict(
        head_dim=32, attn_logit_softcapping=50.0, final_logit_softcapping=30.0, sliding_window=16)),
    # Phi-3 (Phi3MiniModel): the fused qkv_proj and gate_up_proj as llama.cpp takes them, a partial
    # rotary factor, a sliding window; Llama 2's SentencePiece tokenizer, which is Phi-3's own (its
    # 32,000 pieces) with Phi-3's added tokens and vocab_size (PHI3_EXTRAS), read by Phi3MiniModel's
    # own set_vocab.
    "phi3": (transformers.Phi3Config, "llama-spm", dict(partial_rotary_factor=0.5, sliding_window=16,
                                                        original_max_position_embeddings=128)),
    # Gemma 3 text (Gemma3Model, Gemma3ForCausalLM): head_dim 32, q/k norms, sliding and full
    # attention layers with their own rope thetas (transformers 5's per-attention rope_parameters),
    # norms + 1; Llama 2's tokenizer.model as for gemma2.
    "gemma3": (transformers.Gemma3TextConfig, "llama-spm", dict(head_dim=32, sliding_window=16)),
    # Granite (GraniteModel, LlamaModel's with its multipliers): GPT-2's tokenizer (GPT2Tokenizer, the
    # class Granite's releases name; their own vocabulary is not among llama.cpp's files).
    "granite": (transformers.GraniteConfig, "gpt-2", dict(
        attention_multiplier=0.0078125, embedding_multiplier=12.0, residual_multiplier=0.22, logits_scaling=8.0)),
    # OLMo 2 (Olmo2Model): q/k norms over the whole projection, post-attention and post-feedforward
    # norms only; GPT-2's tokenizer (OLMo 2's own is not among llama.cpp's files).
    "olmo2": (transformers.Olmo2Config, "gpt-2", {}),
    # StarCoder 2 (StarCoder2Model): LayerNorm with biases, biases on every projection, a plain MLP
    # (c_fc, c_proj); StarCoder's own tokenizer (GPT2Tokenizer, its 38 special tokens at ids 0..37
    # in the vocabulary as the release has them; <|endoftext|> 0 its bos and eos).
    "starcoder2": (transformers.Starcoder2Config, "starcoder", dict(sliding_window=16, bos_token_id=0, eos_token_id=0)),
    # Command-R (CommandR2Model, CohereForCausalLM; tied, as its releases: the converter has no
    # output tensor for it): parallel attention and MLP after one LayerNorm (no bias), the logit
    # scale, model_max_length as the context; no q/k norms (llama.cpp loads them only at 64 layers and
    # more, Command R+); its own tokenizer (CohereTokenizer, NFC, its 256,000 ids; CohereConfig's
    # ids: pad 0, bos 5, eos 255001, as the release's).
    "command-r": (transformers.CohereConfig, "command-r", dict(use_qk_norm=False, logit_scale=0.125, model_max_length=512)),
    # Falcon (FalconModel): Falcon-40B's layout (new_decoder_architecture: grouped KV heads, ln_attn and
    # ln_mlp), the fused query_key_value regrouped as the converter's jploski layout, LayerNorms with
    # biases; its own tokenizer (llama.cpp's falcon vocabulary: punctuation, byte-level, digits;
    # <|endoftext|> 11 its bos and eos, FalconConfig's defaults).
    "falcon": (transformers.FalconConfig, "falcon", dict(new_decoder_architecture=True, num_kv_heads=2, bias=False)),
    # Ministral 3 (Mistral3Model's Ministral3Model, a LlamaModel under mistral3): its yarn rope with
    # mscale_all_dim and llama_4_scaling_beta, head_dim 32; Mistral's Tekken tokenizer (Mistral NeMo's,
    # rebuilt from mistral-common's tekken_240718.json: gguf_oracle.tekken_tokenizer).
    "ministral3": (transformers.Ministral3Config, "tekken", dict(head_dim=32, rope_parameters={
        "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 64,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1})),
    # MPT (MPTModel): registered as MosaicML's remote code names it, MPTForCausalLM (transformers saves
    # MptForCausalLM, which the converter does not know: renamed in config.json after saving, as
    # MosaicML's releases have it); no LayerNorm biases, ALiBi, the fused Wqkv; its own tokenizer
    # (GPTNeoXTokenizer, NFC, runs of spaces as added tokens, which the check text holds).
    "mpt": (transformers.MptConfig, "mpt", dict(expansion_ratio=4, max_seq_len=256, no_bias=True,
                                                   attn_config={"alibi": True, "alibi_bias_max": 8, "clip_qkv": None})),
}

# Phi-3-mini's added tokens (microsoft/Phi-3-mini-4k-instruct's tokenizer_config.json: ids 32000..32010,
# each special but <|endoftext|>'s siblings as the release marks them), its vocab_size 32064 (ids past
# them the converter's [PAD{id}]) and its eos / pad ids.
PHI3_TOKENS = {32000: ("<|endoftext|>", True), 32001: ("<|assistant|>", True), 32002: ("<|placeholder1|>", True),
               32006: ("<|system|>", True), 32007: ("<|end|>", True), 32010: ("<|user|>", True)}
PHI3_EXTRAS = dict(vocab=32064, eos_token_id=32000, pad_token_id=32000)

# GPT-OSS's MXFP4 experts as OpenAI's checkpoints hold them (`gpt-oss-mxfp4`): config.json's
# quantization_config, modules_to_not_convert as the releases' (tests/fixtures/release_configs/gpt-oss-20b).
MXFP4_CONFIG = {"quant_method": "mxfp4", "modules_to_not_convert": [
    "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


def mxfp4_of(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """OCP MX v1.0 MXFP4 of the last dimension of `x` (its rows [..., K], K a multiple of 32) in
    OpenAI's layout: blocks uint8 [..., K / 32, 16] (two E2M1 codes a byte, the first in the low
    nibble), scales uint8 [..., K / 32] (E8M0). transformers quantizes only through the Hub's
    triton kernels (quantize_to_mxfp4), which are not reachable here; torchao's to_mx (0.18.0, the
    library whose rule OpenAI's format is) makes them where it is importable, else the same rule
    written out (quantize_test.py's mx_reference, checked equal to torchao's to_mx byte for byte)."""
    rows = x.to(torch.float32).reshape(-1, x.shape[-1]).contiguous()
    try:
        from torchao.prototype.mx_formats.mx_tensor import to_mx
        scale, data = to_mx(rows, torch.float4_e2m1fn_x2, 32)
        blocks, scales = data.view(torch.uint8), scale.view(torch.uint8)
    except ImportError:
        g = rows.reshape(rows.shape[0], -1, 32)
        exp = ((g.abs().amax(-1).view(torch.int32) >> 23) & 0xFF) - 127 - 2
        biased = exp.clamp(-127, 128) + 127
        scale = (biased.to(torch.int32) << 23).view(torch.float32).clamp(min=2.0 ** -126)
        v = (g / scale.unsqueeze(-1)).to(torch.float64)
        dist = (v.abs().unsqueeze(-1) - E2M1).abs() + 1e-12 * (torch.arange(8) % 2)
        code = dist.argmin(-1).to(torch.uint8) | (torch.signbit(v).to(torch.uint8) << 3)
        blocks, scales = code[..., 0::2] | (code[..., 1::2] << 4), biased.to(torch.uint8)
    return (blocks.reshape(*x.shape[:-1], x.shape[-1] // 32, 16).contiguous(),
            scales.reshape(*x.shape[:-1], x.shape[-1] // 32).contiguous())


# _set_vocab_glm's tokens, added to Qwen2's tokenizer for glm4moe (<|endoftext|> is Qwen2's own).
GLM_TOKENS = ("[gMASK]", "<|user|>", "<|observation|>")


# Kimi K2's tokenizer files (kimi_tokenizer): its special tokens where Kimi K2's tokenizer_config.json
# names them, relative to the first id after the ranks (Kimi K2: 163584); the 258 ids after the
# ranks are the tokenizer's special tokens, of which config.json's vocab_size keeps 256 (163840).
KIMI_TOKENS = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>", 6: "<|start_header_id|>",
               7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>", 17: "<|im_middle|>", 254: "[UNK]", 255: "[PAD]"}
KIMI_RANKS = 4096
KIMI_TEMPLATE = ("{%- for message in messages -%}<|im_{{ message['role'] }}|>{{ message['role'] }}<|im_middle|>"
                 "{{ message['content'] }}<|im_end|>{%- endfor -%}{%- if add_generation_prompt -%}"
                 "<|im_assistant|>assistant<|im_middle|>{%- endif -%}")


# The converter for the kimi-k2 case: its get_vocab_base_pre names a tokenizer by the digest of its
# encoding of a fixed text, and these ranks (not Kimi's own) give another digest than Kimi K2's; so
# the one function answers kimi-k2 for the TikTokenTokenizer (after encoding the text as the
# converter does), and the converter runs as it is otherwise (its kimi-k2 branch reads the ranks and
# special tokens through transformers' AutoTokenizer with trust_remote_code).
KIMI_RUN = """
import runpy, sys
script = sys.argv[1]
sys.path.insert(0, script.rsplit("/", 1)[0])
import conversion.base as base
plain = base.TextModel.get_vocab_base_pre
def get_vocab_base_pre(self, tokenizer):
    if type(tokenizer).__name__ != "TikTokenTokenizer":
        return plain(self, tokenizer)
    print("kimi digest input", len(tokenizer.encode("hello world")), file=sys.stderr)
    return "kimi-k2"
base.TextModel.get_vocab_base_pre = get_vocab_base_pre
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""

def kimi_tokenizer(out: Path) -> tuple[int, dict]:
    """Kimi K2's tokenizer files in `out`: tiktoken.model, tokenizer_config.json (auto_map to
    tokenization_kimi.TikTokenTokenizer, added_tokens_decoder, bos/eos/unk/pad), chat_template.jinja
    and tokenization_kimi.py (gguf_kimi_tokenizer.py: Kimi's class is remote code, not on PyPI).
    Kimi K2's own tiktoken.model is not on PyPI either: the ranks are Llama 3's first KIMI_RANKS
    (Llama 3's tokenizer is a tiktoken BPE too, published by Meta in this very format as
    original/tokenizer.model: `base64(token) rank` a line), from llama.cpp's Llama 3 vocabulary.
    Returns config.json's vocab_size and special token ids."""
    import base64
    import json
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    llama = out.parent / "llama-bpe"
    llama.mkdir()
    gguf_oracle.tokenizer("llama-bpe", str(llama))
    vocab = json.loads((llama / "tokenizer.json").read_text())["model"]["vocab"]
    shutil.rmtree(llama)
    dec = {c: b for b, c in bytes_to_unicode().items()}
    by_id = {i: bytes(dec[c] for c in t) for t, i in vocab.items() if i < KIMI_RANKS}
    lines = [base64.b64encode(by_id[i]).decode() + f" {i}" for i in range(KIMI_RANKS)]
    (out / "tiktoken.model").write_text("\n".join(lines) + "\n")
    decoder = {str(KIMI_RANKS + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                     "single_word": False, "special": True} for i, t in KIMI_TOKENS.items()}
    (out / "tokenizer_config.json").write_text(json.dumps({
        "added_tokens_decoder": decoder, "additional_special_tokens": ["<|im_end|>", "<|im_user|>", "<|im_assistant|>",
                                                                       "<|start_header_id|>", "<|end_header_id|>", "[EOT]",
                                                                       "<|im_system|>", "<|im_middle|>"],
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]}, "bos_token": "[BOS]",
        "clean_up_tokenization_spaces": False, "eos_token": "[EOS]", "extra_special_tokens": {},
        "model_max_length": 1048576, "pad_token": "[PAD]", "tokenizer_class": "TikTokenTokenizer", "unk_token": "[UNK]"},
        indent=2))
    (out / "chat_template.jinja").write_text(KIMI_TEMPLATE)
    shutil.copy(HERE / "gguf_kimi_tokenizer.py", out / "tokenization_kimi.py")
    return KIMI_RANKS + 256, dict(bos_token_id=KIMI_RANKS, eos_token_id=KIMI_RANKS + 1, pad_token_id=KIMI_RANKS + 255)

# What mixtral-spm's folder adds to Mixtral's tokenizer, each a path of _create_vocab_sentencepiece
# or SpecialVocab: config.json's vocab_size two past the 32,768 pieces (the converter pads with
# [PAD{id}]), added_tokens.json giving the first of them a token (USER_DEFINED, score -1000), its id
# as config.json's pad_token_id, tokenizer_config.json's add_prefix_space (LlamaModel.set_vocab's
# tokenizer.ggml.add_space_prefix) and a chat template (a short one of this test's; its text is only copied).
SPM_EXTRAS = dict(vocab=32770, added={"<pad>": 32768}, pad_token_id=32768, add_prefix_space=False,
                  chat_template="{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}")


def spm_tokenizer(name: str, out: Path, extras: dict | None) -> int:
    """A SentencePiece model's tokenizer files in `out`, as a Llama 2 / Mistral / Mixtral folder has
    them: tokenizer.model (gguf_oracle.spm_tokenizer: Llama 2's vocabulary from llama.cpp's vocab
    file, checked against its test vectors by sentencepiece, or Mistral's own file), and the
    tokenizer.json and tokenizer_config.json transformers 5.23 writes for it
    (AutoTokenizer.from_pretrained of tokenizer.model with tokenizer_class LlamaTokenizer, then
    save_pretrained, which leaves tokenizer.model out: copied beside them as the released folders
    hold it). tokenizer_config.json then gets the keys the releases' carry and transformers 5.23
    does not write back: add_bos_token true, add_eos_token false and added_tokens_decoder for the
    model's unknown and control pieces (special: <unk>, <s>, </s>, and Mistral v3's [INST] ...);
    `extras`: SPM_EXTRAS. Returns config.json's vocab_size (the model's piece count, or extras')."""
    import json
    stage = out.parent / f"{name}-stage"
    gguf_oracle.spm_tokenizer(name, str(stage))
    (stage / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))
    transformers.AutoTokenizer.from_pretrained(str(stage)).save_pretrained(str(out))
    shutil.copy(stage / "tokenizer.model", out / "tokenizer.model")
    shutil.rmtree(stage)
    tc = json.loads((out / "tokenizer_config.json").read_text())
    if tc.get("tokenizer_class") != "LlamaTokenizer":
        raise AssertionError(f"transformers saved tokenizer_class {tc.get('tokenizer_class')!r}")
    from sentencepiece import SentencePieceProcessor
    sp = SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    tc.update(add_bos_token=True, add_eos_token=False, added_tokens_decoder={
        str(i): {"content": sp.id_to_piece(i), "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                 "special": True}
        for i in range(sp.vocab_size()) if sp.is_control(i) or sp.is_unknown(i)})
    vocab = sp.vocab_size()
    if extras:
        tc.update(add_prefix_space=extras["add_prefix_space"], chat_template=extras["chat_template"])
        (out / "added_tokens.json").write_text(json.dumps(extras["added"]))
        vocab = extras["vocab"]
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2))
    return vocab


def phi3_tokens(out: Path) -> None:
    """Phi-3's added tokens (PHI3_TOKENS) in tokenizer_config.json's added_tokens_decoder and
    tokenizer.json's added_tokens, as its release lists them in both."""
    import json
    tc, tj = json.loads((out / "tokenizer_config.json").read_text()), json.loads((out / "tokenizer.json").read_text())
    for i, (t, special) in PHI3_TOKENS.items():
        entry = {"content": t, "lstrip": False, "normalized": False, "rstrip": True, "single_word": False, "special": special}
        tc["added_tokens_decoder"][str(i)] = entry
        tj["added_tokens"].append({"id": i, **entry})
    tc["eos_token"] = "<|endoftext|>"
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2))
    (out / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))


# The architectures whose files verify checks against gguf/model.cpp's expected_tensors.
TABLE_CHECKED = {"llama", "mistral", "mixtral", "llama-spm", "mixtral-spm", "mistral-spm", "qwen3-spm", "qwen2", "qwen3", "qwen3moe", "deepseek2", "kimi-k2", "kimi-k25", "deepseekv2", "glm4moe",
                 "glm4moe-mtp", "gpt-oss", "gpt-oss-mxfp4", "gemma2", "gemma3", "phi3", "granite", "olmo2", "starcoder2", "command-r", "falcon", "ministral3", "mpt"}

# A size that puts the embeddings and the head (Q8_0 of 128256 x 64: 8.7 MB) in shards of their own
# and a tensor count that splits the layers: both rules of gguf-py's GGUFWriter at work.
SPLIT = ["--split-max-size", "1M", "--split-max-tensors", "8"]


def tiny_model(arch: str, out: Path, tokenizer: str | None = None, extra_vocab: int = 0) -> None:
    """`tokenizer`: gguf_oracle's tokenizer of that name instead of the architecture's own
    (config.json's vocab_size its highest id + 1 + extra_vocab);
    `ARCH-tied`: the head tied to the embeddings (save_pretrained leaves lm_head out);
    `ARCH-bf16`: saved in bfloat16 (the converter reads it as float32, as dcpctl does);
    `gpt-oss-mxfp4`: the experts as MXFP4 _blocks/_scales (mxfp4_of), as OpenAI's releases;
    `glm4moe-mtp`: GLM-4.5's MTP layer (mtp_layer), as zai-org's releases."""
    bf16 = arch.endswith("-bf16")
    arch = arch.removesuffix("-bf16")
    tied = arch.endswith("-tied")
    arch = arch.removesuffix("-tied")
    mxfp4 = arch.endswith("-mxfp4")
    arch = arch.removesuffix("-mxfp4")
    mtp = arch.endswith("-mtp")
    arch = arch.removesuffix("-mtp")
    out.mkdir(parents=True)
    import json
    if arch == "kimi-k25":
        return kimi_k25_model(out, *kimi_tokenizer(out))
    if ARCHS[arch][1] == "kimi":
        vocab, special = kimi_tokenizer(out)
    elif ARCHS[arch][1] in gguf_oracle.SPM or ARCHS[arch][1] in gguf_oracle.MISTRAL_SPM:
        extras = SPM_EXTRAS if arch == "mixtral-spm" else None
        vocab = spm_tokenizer(ARCHS[arch][1], out, extras)
        special = dict(pad_token_id=extras["pad_token_id"]) if extras else {}
        if arch == "phi3":
            phi3_tokens(out)
            vocab, special = PHI3_EXTRAS["vocab"], {k: PHI3_EXTRAS[k] for k in ("eos_token_id", "pad_token_id")}
    else:
        gguf_oracle.tokenizer(tokenizer or ARCHS[arch][1], str(out))
        tok = json.loads((out / "tokenizer.json").read_text())
        vocab, special = len(tok["model"]["vocab"]) + len(tok["added_tokens"]), {}
        if tokenizer or ARCHS[arch][1] in (*gguf_oracle.FAMILIES, "tekken"):  # their special tokens may be in both lists
            vocab = 1 + extra_vocab + max([*tok["model"]["vocab"].values(), *(a["id"] for a in tok["added_tokens"])])
    if arch == "glm4moe":
        ids = list(tok["model"]["vocab"].values()) + [a["id"] for a in tok["added_tokens"]]
        for i, t in enumerate(GLM_TOKENS):
            tok["added_tokens"].append({"id": max(ids) + 1 + i, "content": t, "single_word": False, "lstrip": False,
                                        "rstrip": False, "normalized": False, "special": True})
        (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
        # GLM's tokenizer_config.json names PreTrainedTokenizer; transformers 5 loads a glm4_moe
        # model's tokenizer.json as it is all the same (TokenizersBackend), and so the converter.
        tc = json.loads((out / "tokenizer_config.json").read_text())
        (out / "tokenizer_config.json").write_text(json.dumps({**tc, "tokenizer_class": "PreTrainedTokenizer"}))
        vocab = len(tok["model"]["vocab"]) + len(tok["added_tokens"])
    torch.manual_seed(0)
    kw = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=vocab, max_position_embeddings=256, tie_word_embeddings=tied, **special)
    kw.update(ARCHS[arch][2])
    model = transformers.AutoModelForCausalLM.from_config(ARCHS[arch][0](**kw))
    with torch.no_grad():  # norms that are not all ones, so that a misplaced norm shows
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
        for n, b in model.named_buffers():  # GLM's e_score_correction_bias, zeros otherwise
            if n.endswith("e_score_correction_bias"):
                b.uniform_(0.0, 0.1)
    if bf16:
        model = model.to(torch.bfloat16)
    model.save_pretrained(out)
    if arch == "mpt":
        cfg = json.loads((out / "config.json").read_text())
        (out / "config.json").write_text(json.dumps({**cfg, "architectures": ["MPTForCausalLM"]}, indent=2))
    if mxfp4 or mtp:
        import json as _json
        from safetensors.torch import load_file, save_file
        sd = load_file(out / "model.safetensors")
        cfg = _json.loads((out / "config.json").read_text())
        if mxfp4:
            # GptOssExperts' [E, in, out] transposed to OpenAI's [E, out, in], quantized along `in`.
            for k in [k for k in sd if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
                sd[k + "_blocks"], sd[k + "_scales"] = mxfp4_of(sd.pop(k).transpose(-1, -2))
            cfg["quantization_config"] = MXFP4_CONFIG
        if mtp:
            sd.update(mtp_layer(kw, cfg))
        save_file(sd, out / "model.safetensors", metadata={"format": "pt"})
        (out / "config.json").write_text(_json.dumps(cfg, indent=2))


def kimi_k25_model(out: Path, vocab: int, special: dict) -> None:
    """Kimi K2.5 as its release lays it out: transformers 5.24's Kimi_K25ForConditionalGeneration
    (a text model with Kimi K2's sizes, a small vision tower), its head untied, saved by
    save_pretrained, then in the release's names: the text layers `language_model.model.layers.N`
    (transformers 5.24 writes `language_model.model.blocks.N`, its rename of the vision tower's
    `blocks` to `layers` reverted over the text layers too) and architectures
    KimiK25ForConditionalGeneration (the released config.json's, which the converter registers;
    transformers' class name, Kimi_K25ForConditionalGeneration, it does not). transformers must load
    that folder with nothing missing or unexpected, to the tensors it saved."""
    import json
    from safetensors.torch import load_file, save_file
    text = dict(ARCHS["kimi-k2"][2], hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                vocab_size=vocab, max_position_embeddings=256, tie_word_embeddings=False, **special)
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, pos_emb_height=4,
                  pos_emb_width=4, pos_emb_time=2)
    cfg = transformers.Kimi_K25Config(text_config=text, vision_config=vision, projection_hidden_size=64,
                                      tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.Kimi_K25ForConditionalGeneration(cfg)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.uniform_(0.0, 0.1)
    model.save_pretrained(out)
    sd = load_file(out / "model.safetensors")
    sd = {k.replace("language_model.model.blocks.", "language_model.model.layers."): v for k, v in sd.items()}
    if not any(k.startswith("language_model.model.layers.") for k in sd) or not any("vision_tower" in k for k in sd):
        raise AssertionError(f"kimi-k25: not a text model and a tower: {sorted(sd)[:8]}")
    save_file(sd, out / "model.safetensors", metadata={"format": "pt"})
    c = json.loads((out / "config.json").read_text())
    c["architectures"] = ["KimiK25ForConditionalGeneration"]
    (out / "config.json").write_text(json.dumps(c, indent=2))
    back, info = transformers.Kimi_K25ForConditionalGeneration.from_pretrained(out, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    want = model.state_dict()
    differ = [k for k, v in back.state_dict().items() if not torch.equal(v, want[k])]
    if bad or differ:
        raise AssertionError(f"kimi-k25: transformers loads the release layout with {bad}, {differ[:6]} differing")


def mtp_layer(kw: dict, cfg: dict) -> dict:
    """GLM-4.5's MTP (nextn) layer as zai-org's checkpoints hold it: model.layers.{num_hidden_layers}
    (config.json's num_nextn_predict_layers 1), a whole decoder layer (its MoE experts one tensor
    each) and eh_proj [hidden, 2 x hidden], enorm, hnorm, shared_head.norm [hidden], shared_head.head
    and embed_tokens [vocab, hidden]. transformers' Glm4Moe has no such layer: the decoder layer is
    the last of the same model built one layer deeper (transformers' own init), the others seeded."""
    n = cfg["num_hidden_layers"]
    if cfg.get("num_nextn_predict_layers") != 1:
        raise AssertionError(f"config.json's num_nextn_predict_layers {cfg.get('num_nextn_predict_layers')}, want 1")
    from safetensors.torch import load_file
    deeper = transformers.AutoModelForCausalLM.from_config(ARCHS["glm4moe"][0](**{**kw, "num_hidden_layers": n + 1}))
    with tempfile.TemporaryDirectory() as d:
        deeper.save_pretrained(d)  # per-expert tensors, as a checkpoint has them
        saved = load_file(Path(d) / "model.safetensors")
    p = f"model.layers.{n}."
    out = {k: v for k, v in saved.items() if k.startswith(p)}
    g = torch.Generator().manual_seed(3)
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    out[p + "eh_proj.weight"] = torch.randn(h, 2 * h, generator=g) * 0.02
    out[p + "embed_tokens.weight"] = torch.randn(vocab, h, generator=g) * 0.02
    out[p + "shared_head.head.weight"] = torch.randn(vocab, h, generator=g) * 0.02
    for name in ("enorm", "hnorm", "shared_head.norm"):
        out[p + name + ".weight"] = torch.rand(h, generator=g) + 0.5
    return out


def kimi_config(*folders: Path) -> None:
    """Kimi K2's config.json: model_type kimi_k2 and its auto_map (remote code, which neither the
    converter nor dcpctl runs: the converter's AutoConfig fails and it reads config.json as it is),
    set after transformers has saved and loaded the model as DeepSeek-V3."""
    import json
    for folder in folders:
        cfg = json.loads((folder / "config.json").read_text())
        cfg["model_type"] = "kimi_k2"
        cfg["cls_token_id"] = KIMI_RANKS + 2  # not Kimi's: gguf-py has no cls key, so neither writes one
        cfg["auto_map"] = {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                           "AutoModel": "modeling_deepseek.DeepseekV3Model",
                           "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}
        (folder / "config.json").write_text(json.dumps(cfg, indent=2))

def dcp_of(hf: Path, out: Path) -> None:
    """A trainer's state dict: a tied head saved as lm_head.weight too (dcpctl leaves it out, as
    save_pretrained does). A mixture of experts (but GPT-OSS, whose saved form is its in-memory one):
    the model's state dict as transformers 5 holds it in memory, its experts fused per layer
    (mlp.experts.gate_up_proj [experts, 2 x ffn, hidden], down_proj; Mixtral's under mlp.), which
    save_pretrained turns back into one tensor per expert: dcpctl writes what the converter writes
    from that folder."""
    import json
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    out.mkdir(parents=True)
    sd = load_file(hf / "model.safetensors")
    cfg = json.loads((hf / "config.json").read_text())
    kimi_k25 = cfg.get("model_type") == "kimi_k25"  # in memory model.language_model.*, model.vision_tower.*
    if kimi_k25 or any(cfg.get(k) for k in ("num_local_experts", "num_experts", "n_routed_experts")) and \
            cfg["architectures"][0] != "GptOssForCausalLM":
        auto = transformers.AutoModelForImageTextToText if kimi_k25 else transformers.AutoModelForCausalLM
        model = auto.from_pretrained(hf, dtype="auto")
        sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        if not any(k.endswith("mlp.experts.gate_up_proj") for k in sd):
            raise AssertionError(f"{hf}: transformers holds no fused experts: {sorted(sd)[:8]}")
        # GLM's MTP layer, which transformers does not load: as saved (its experts one tensor each).
        n = cfg.get("num_hidden_layers") or cfg["text_config"]["num_hidden_layers"]
        sd.update({k: v for k, v in load_file(hf / "model.safetensors").items()
                   if k.startswith("model.layers.") and int(k.split(".")[2]) >= n})
    if json.loads((hf / "config.json").read_text()).get("tie_word_embeddings"):
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    dcp.save(sd, checkpoint_id=str(out), no_dist=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "tiktoken.model", "tokenization_kimi.py",
                 "chat_template.jinja", "tokenizer.model", "added_tokens.json"):
        if (hf / name).exists():
            shutil.copy(hf / name, out / name)


def fields(path: Path) -> tuple[dict, dict]:
    """{key: (its types, its value)}, {tensor: (type, shape, bytes)}: gguf_oracle.gguf_fields, which
    gguf_read_test.py checks equal to what gguf-py's GGUFReader reads (in a tenth of a second where
    GGUFReader spends seconds on a vocabulary)."""
    return gguf_oracle.gguf_fields(path)


def compare(label: str, want: Path, got: Path) -> None:
    if want.read_bytes() == got.read_bytes():  # then every key and tensor is equal; else say which
        return
    before = len(FAILS)
    wkv, wts = fields(want)
    gkv, gts = fields(got)
    check(list(wkv) == list(gkv),
          f"{label}: keys differ: only the converter's {sorted(set(wkv) - set(gkv))}, only dcpctl's "
             f"{sorted(set(gkv) - set(wkv))}, or the order")
    for k in wkv:
        if k in gkv and wkv[k] != gkv[k]:
            w, g = wkv[k], gkv[k]
            fail(f"{label}: {k}: converter {w[0]} {str(w[1])[:120]}, dcpctl {g[0]} {str(g[1])[:120]}")
    check(list(wts) == list(gts), f"{label}: tensors differ: converter {list(wts)}, dcpctl {list(gts)}")
    for n, (wt, ws, wb) in wts.items():
        if n not in gts:
            continue
        gt, gs, gb = gts[n]
        if (wt, ws) != (gt, gs):
            fail(f"{label}: {n}: converter {wt} {ws}, dcpctl {gt} {gs}")
        elif wb != gb:
            fail(f"{label}: {n}: {wt} {ws}: bytes differ")
    fail(f"{label}: the files differ" + ("" if len(FAILS) > before else ", yet every key and tensor is equal (padding?)"))


def run_diff(dcpctl: str, src: Path, file: Path) -> tuple[subprocess.CompletedProcess, dict | None]:
    import json
    r = subprocess.run([dcpctl, "diff", str(src), str(file), "--json"], capture_output=True, text=True)
    try:
        return r, json.loads(r.stdout)
    except ValueError:
        return r, None


def check_diff(dcpctl: str, label: str, src: Path, file: Path) -> None:
    """diff SOURCE FILE (docs/gguf.md, "Diff against the source"): exit 0, every tensor of the file
    compared within its type's bound (a tied head: within token_embd's), none on one side only."""
    r, j = run_diff(dcpctl, src, file)
    if "mxfp4" in label.split(":")[0]:
        # MXFP4 experts are not compared yet: exit 5 naming the first blocks tensor, nothing passed over.
        check(not (r.returncode != 5 or not re.search(r"'model\.layers\.\d+\.mlp\.experts\.\w+_blocks'.*uint8", r.stderr)),
              f"{label}: diff of MXFP4 experts: exit {r.returncode}, want 5 naming the blocks: {r.stderr[-800:]}")
        return
    if r.returncode != 0 or j is None or not j["same"]:
        bad = [(k["key"], k["status"], k.get("max_abs_diff")) for k in (j or {}).get("keys", []) if k["status"] not in ("identical", "tied")]
        fail(f"{label}: diff against the source: exit {r.returncode}: {bad[:8]} {r.stderr[-800:]}")
        return
    untyped = [k["key"] for k in j["keys"] if k.get("bound") != "gguf" and "value" not in (k["a"] or {})]
    keys = [k["key"] for k in j["keys"] if "value" in (k["a"] or {})]
    check(not (untyped or not j["keys"]), f"{label}: diff compared {untyped[:8]} without a GGUF bound")
    check(not ("general.architecture" not in keys or not any(k.endswith(".block_count") for k in keys)),
          f"{label}: diff compared no metadata keys from config.json: {keys}")


def check_diff_damage(dcpctl: str, case: str, src: Path, file: Path, tmp: Path) -> None:
    """Copies of dcpctl's Q8_0 file, one tensor damaged each: a block's fp16 scale doubled
    (blk.0.attn_q.weight), a norm's first value moved (blk.1.attn_norm.weight, F32): diff exits 1
    naming exactly that tensor; and the source's config.json with another rms_norm_eps: exit 1 naming
    exactly that key."""
    import json
    at = {t["name"]: (t["offset"], gguf.GGMLQuantizationType(t["type"]).name) for t in gguf_oracle.read_gguf(file)[1]}
    for name, want_type in (("blk.0.attn_q.weight", "Q8_0"), ("blk.1.attn_norm.weight", "F32")):
        offset, ty = at[name]
        if not check(ty == want_type, f"{case}: {name} is {ty}, not {want_type}"):
            continue
        data = bytearray(file.read_bytes())
        if ty == "Q8_0":
            d = np.frombuffer(bytes(data[offset:offset + 2]), dtype=np.float16)[0]
            data[offset:offset + 2] = np.float16(d * 2).tobytes()
        else:
            v = np.frombuffer(bytes(data[offset:offset + 4]), dtype=np.float32)[0]
            data[offset:offset + 4] = np.float32(v + 1e-3).tobytes()
        bad = tmp / f"damaged-{name}.gguf"
        bad.write_bytes(bytes(data))
        r, j = run_diff(dcpctl, src, bad)
        changed = [k["key"] for k in (j or {}).get("keys", []) if k["status"] != "identical"]
        check(not (r.returncode != 1 or changed != [name] or j["keys"][0]["status"] != "values_changed"),
              f"{case}: diff of a copy with {name} damaged: exit {r.returncode}, changed {changed[:8]}, {r.stderr[-400:]}")
        bad.unlink()
    # A key config.json makes: the source's config.json says another rms_norm_eps than the file's.
    odd = tmp / "odd-eps"
    shutil.copytree(src, odd)
    cfg = json.loads((odd / "config.json").read_text())
    cfg["rms_norm_eps"] = cfg.get("rms_norm_eps", 1e-6) * 10
    (odd / "config.json").write_text(json.dumps(cfg))
    r, j = run_diff(dcpctl, odd, file)
    changed = [k["key"] for k in (j or {}).get("keys", []) if k["status"] != "identical"]
    check(not (r.returncode != 1 or changed != ["llama.attention.layer_norm_rms_epsilon"]),
          f"{case}: diff against a config.json of another rms_norm_eps: exit {r.returncode}, changed {changed[:8]}")
    shutil.rmtree(odd)


def check_split_read(dcpctl: str, case: str, folder: Path, names: list[str]) -> None:
    """The converter's shards read as one model: inspect of the first (and of the last) lists every
    tensor gguf_oracle.read_gguf finds in all of them (gguf-py's reader, without its numpy views: see
    there); a copy without its second shard is refused."""
    import json
    want = {}
    for name in names:
        for t in gguf_oracle.read_gguf(folder / name)[1]:
            want[t["name"]] = t["shape"][::-1]
    for name in (names[0], names[-1]):
        r = subprocess.run([dcpctl, "inspect", str(folder / name), "--json"], capture_output=True, text=True)
        got = {t["key"]: t["shape"] for t in json.loads(r.stdout).get("items", []) if t.get("kind") == "tensor"} if r.returncode == 0 else {}
        check(got == want,
              f"{case}: inspect of {name}: exit {r.returncode}, {len(got)} tensors, read_gguf reads {len(want)} in the shards "
                 f"({sorted(set(want) ^ set(got))[:6]}) {r.stderr[-400:]}")
    cut = folder.parent / "cut"
    shutil.copytree(folder, cut)
    (cut / names[1]).unlink()
    r = subprocess.run([dcpctl, "verify", str(cut / names[0])], capture_output=True, text=True)
    check(not (r.returncode != 3 or names[1] not in r.stdout),
          f"{case}: verify without {names[1]}: exit {r.returncode}, {r.stdout[-800:]} {r.stderr[-400:]}")


def check_summary(r: subprocess.CompletedProcess) -> None:
    import json
    import jsonschema
    import referencing
    import referencing.jsonschema
    if not check(r.returncode == 0, f"--json: exit {r.returncode}, {r.stderr!r}"):
        return
    folder = HERE.parent.parent / "docs" / "schemas"
    docs = {p.name: json.loads(p.read_text()) for p in folder.glob("*.schema.json")}
    registry = referencing.Registry().with_resources(
        [(d["$id"], referencing.jsonschema.DRAFT202012.create_resource(d)) for d in docs.values()])
    summary = json.loads(r.stdout)
    v = jsonschema.Draft202012Validator(docs["consolidate.schema.json"], registry=registry)
    problems([f"--json: {list(e.absolute_path)}: {e.message[:200]}" for e in v.iter_errors(summary)])
    check(not (summary.get("format") != "gguf" or summary.get("gguf") != {"architecture": "llama", "outtype": "f16"}),
          f"--json: format {summary.get('format')!r}, gguf {summary.get('gguf')!r}")


def check_small_memory(dcpctl: str, case: str, src: Path, outtype: str, want: Path, root: Path) -> None:
    """dcpctl converts a tensor a window of whole rows (a head, an expert) at a time (src/gguf/rows.h):
    with --max-memory 1MiB, far below the embedding's float32 bytes (151,936 x 64 x 4 = 39 MB for
    Qwen's vocabulary, 128,256 x 64 x 4 for Llama 3's; every case's largest tensor more than 1 MiB), the
    file is still the converter's, byte for byte."""
    largest = max(int(np.prod(t["shape"])) * 4 for t in gguf_oracle.read_gguf(want)[1])
    # the smallest, Kimi's case: 1,114,112 bytes (4,352 x 64 floats)
    check(largest > 1 << 20,
          f"{case}: the largest tensor is {largest} bytes in float32, not more than 1 MiB: windows below it are not exercised")
    got = root / "from-dcp-1MiB" / "tiny.gguf"
    got.parent.mkdir(parents=True)
    r = subprocess.run([dcpctl, "consolidate", str(src), "-o", str(got), "--outtype", outtype, "-q", "--max-memory", "1MiB"],
                       capture_output=True, text=True)
    if not check(r.returncode == 0, f"{case} from dcp --max-memory 1MiB: dcpctl exit {r.returncode}: {r.stderr[-2000:]}"):
        return
    compare(f"{case} from dcp --max-memory 1MiB", want, got)


# What each case always makes: the converter's exit, its split, verify and diff of its file, and from
# the HF folder and the DCP checkpoint dcpctl's exit, file names and a comparison each; fewer
# checks mean a case was dropped (docs/testing.md#no-test-passes-on-nothing).
CHECKS_PER_CASE = 10
# and a case that is not a split, from the DCP checkpoint at --max-memory 1MiB: its largest tensor
# above 1 MiB and dcpctl's exit (check_small_memory)
CHECKS_SMALL_MEMORY = 2

def main(argv: list[str]) -> int:
    dcpctl = argv[0]
    cases = argv[1:] or ["llama:q8_0", "qwen2-tied:bf16", "qwen3-bf16:f16", "qwen3moe:q8_0", "mixtral:f16", "deepseek2:q8_0",
                         "kimi-k2:q8_0", "kimi-k25:q8_0", "deepseekv2:q8_0", "glm4moe-mtp:q8_0", "gpt-oss:f16", "gpt-oss-mxfp4:f16",
                         "llama:q8_0:split", "llama-spm:q8_0", "mixtral-spm:f16", "gemma2:q8_0", "gemma3-bf16:bf16", "phi3:f16",
                         "granite:q8_0", "olmo2:f16", "starcoder2:q8_0", "command-r-tied:q8_0", "falcon:q8_0", "ministral3:q8_0", "mpt:f16"]
    try:
        llama = gguf_oracle.fetch()
    except Exception as e:  # noqa: BLE001
        skip_or_fail(f"llama-cpp-python's sdist not fetched ({e}); tools/dev.sh setup fetches it")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for case in cases:
            arch, outtype, *split = case.split(":")
            split_args = SPLIT if split == ["split"] else []
            root = tmp / case.replace(":", "-")
            hf, dcp_dir = tmp / arch / "hf" / "tiny", tmp / arch / "dcp"
            if not hf.exists():
                tiny_model(arch, hf)
                dcp_of(hf, dcp_dir)
                if arch == "kimi-k2":
                    kimi_config(hf, dcp_dir)
            want = root / "converter" / "tiny.gguf"
            want.parent.mkdir(parents=True)
            # Kimi's case runs the converter under KIMI_RUN (its tokenizer's name answered: see there).
            r = gguf_oracle.convert(hf, want, ["--outtype", outtype, *split_args],
                                    python_args=["-c", KIMI_RUN] if arch.startswith("kimi") else [])
            if not check(r.returncode == 0, f"{case}: the converter failed: {r.stderr[-2000:]}"):
                continue
            wants = sorted(p.name for p in want.parent.iterdir())
            check(not (split_args and (len(wants) < 2 or "tiny.gguf" in wants)),
                  f"{case}: the converter wrote {wants}, not a split")
            # The converter's file (its first shard) passes verify: names and shapes against the table
            # (gguf/arch_check.h), which must know the architectures of TABLE_CHECKED.
            r = subprocess.run([dcpctl, "verify", str(want.parent / wants[0])], capture_output=True, text=True)
            base = arch.removesuffix("-bf16").removesuffix("-tied")
            check(not (r.returncode != 0 or (base in TABLE_CHECKED and "gguf-arch-not-checked" in r.stdout)),
                  f"{case}: verify of the converter's file: exit {r.returncode}: {r.stdout[-1500:]} {r.stderr[-500:]}")
            # The converter's own file against the HF folder: llama.cpp's names and transforms undone
            # by dcpctl's table, each tensor within its type's bound.
            check_diff(dcpctl, f"{case}: the converter's file", hf, want.parent / wants[0])
            for src in (hf, dcp_dir):
                got = root / f"from-{src.name}" / "tiny.gguf"
                got.parent.mkdir(parents=True)
                r = subprocess.run([dcpctl, "consolidate", str(src), "-o", str(got), "--outtype", outtype, "-q", *split_args],
                                   capture_output=True, text=True)
                if not check(r.returncode == 0,
                             f"{case} from {src.name}: dcpctl exit {r.returncode}: {r.stderr[-2000:]}"):
                    continue
                gots = sorted(p.name for p in got.parent.iterdir() if not p.name.endswith(".dcpctl-manifest.json"))
                check(gots == wants, f"{case} from {src.name}: dcpctl wrote {gots}, the converter {wants}")
                for name in wants:
                    if (got.parent / name).exists():
                        compare(f"{case} from {src.name}: {name}", want.parent / name, got.parent / name)
                if src is dcp_dir and (got.parent / wants[0]).exists():
                    check_diff(dcpctl, f"{case} from {src.name}", src, got.parent / wants[0])
            if not split_args:
                check_small_memory(dcpctl, case, dcp_dir, outtype, want, root)
            if case == "llama:q8_0":
                # diff for the block types the converter does not write (hidden 64: q4_k falls back
                # to Q5_0, q5_k to Q5_1), and damaged copies of dcpctl's Q8_0 file.
                for outtype in ("q4_0", "q4_k", "q5_k"):
                    out = root / f"{outtype}.gguf"
                    r = subprocess.run([dcpctl, "consolidate", str(hf), "-o", str(out), "--outtype", outtype, "-q"],
                                       capture_output=True, text=True)
                    if not check(r.returncode == 0,
                                 f"{case}: consolidate --outtype {outtype}: exit {r.returncode}: {r.stderr[-800:]}"):
                        continue
                    check_diff(dcpctl, f"{case}: dcpctl's {outtype}", hf, out)
                    out.unlink()
                check_diff_damage(dcpctl, case, hf, root / "from-tiny" / "tiny.gguf", root)
            if split_args and len(wants) > 1:
                check_split_read(dcpctl, case, want.parent, wants)
            print(f"{case}: {'ok' if not FAILS else 'FAILED'}" + (f" ({len(wants)} shards)" if split_args else ""))
        # Refusals: an architecture the converter's table here does not have, a --dtype, a wrong word.
        src = tmp / "llama" / "hf" / "tiny" if (tmp / "llama").exists() else None
        if src is not None:
            odd = tmp / "odd"
            shutil.copytree(src, odd)
            cfg = (odd / "config.json").read_text().replace("LlamaForCausalLM", "MptForCausalLM")
            (odd / "config.json").write_text(cfg)
            r = subprocess.run([dcpctl, "consolidate", str(odd), "-o", str(tmp / "odd.gguf")], capture_output=True, text=True)
            check(not (r.returncode != 5 or "MptForCausalLM" not in r.stderr or (tmp / "odd.gguf").exists()),
                  f"an unknown architecture: exit {r.returncode}, {r.stderr!r}")
            r = subprocess.run([dcpctl, "consolidate", str(src), "-o", str(tmp / "x.gguf"), "--outtype", "q4_k_m"], capture_output=True, text=True)
            check(r.returncode == 2, f"--outtype q4_k_m: exit {r.returncode}, {r.stderr!r}")
            # The split options: the converter's size forms only, and only for a GGUF output.
            for args, out in ((["--split-max-size", "5X"], "x.gguf"), (["--split-max-size", "2GB"], "x.gguf"),
                              (["--split-max-tensors", "2"], "x.safetensors")):
                r = subprocess.run([dcpctl, "consolidate", str(src), "-o", str(tmp / out), *args], capture_output=True, text=True)
                check(not (r.returncode != 2 or "split-max" not in r.stderr),
                      f"{args} -o {out}: exit {r.returncode}, {r.stderr!r}")
            # --json: the summary is consolidate's schema's (docs/schemas), format gguf.
            r = subprocess.run([dcpctl, "consolidate", str(src), "-o", str(tmp / "j.gguf"), "--json"], capture_output=True, text=True)
            check_summary(r)
        # SentencePiece: without tokenizer.model, a byte-fallback tokenizer.json is the converter's
        # _set_vocab_llama_hf, which dcpctl refuses (exit 5); a tokenizer.model SentencePiece does not
        # load is refused as invalid (exit 3), as the converter fails on it. Nothing is written.
        spm = tmp / "llama-spm" / "hf" / "tiny"
        if spm.exists():
            for name, change, code, says in (("no-model", None, 5, "_set_vocab_llama_hf"),
                                             ("bad-model", b"\x0a\xff\xff", 3, "tokenizer.model")):
                odd = tmp / f"odd-spm-{name}"
                shutil.copytree(spm, odd)
                if change is None:
                    (odd / "tokenizer.model").unlink()
                else:
                    (odd / "tokenizer.model").write_bytes(change)
                r = subprocess.run([dcpctl, "consolidate", str(odd), "-o", str(tmp / f"{name}.gguf")], capture_output=True, text=True)
                if r.returncode != code or says not in r.stderr or (tmp / f"{name}.gguf").exists():
                    fail(f"a SentencePiece folder, {name}: exit {r.returncode}, want {code} naming {says}: {r.stderr!r}")
        # The families' refusals, each where the converter fails or dcpctl does not follow it: Gemma 2
        # without tokenizer.model (Gemma2Model.set_vocab reads nothing else), Phi-3 with LongRoPE factors
        # (rope_factors_long/short not written yet). Nothing is written.
        import json
        for fam, name, change, says in (("gemma2", "no-spm", lambda d: (d / "tokenizer.model").unlink(), "tokenizer.model"),
                                         ("phi3", "longrope", "long_factor", "long_factor")):
            src = tmp / fam / "hf" / "tiny"
            if not src.exists():
                continue
            odd = tmp / f"odd-{fam}-{name}"
            shutil.copytree(src, odd)
            if callable(change):
                change(odd)
            else:
                cfg = json.loads((odd / "config.json").read_text())
                n = cfg["hidden_size"] // cfg["num_attention_heads"] // 4  # rope dims / 2 at partial 0.5
                cfg["rope_parameters"] = {**cfg["rope_parameters"], "rope_type": "longrope", "long_factor": [1.0] * n,
                                          "short_factor": [1.0] * n}
                (odd / "config.json").write_text(json.dumps(cfg))
            r = subprocess.run([dcpctl, "consolidate", str(odd), "-o", str(tmp / f"odd-{fam}.gguf")], capture_output=True, text=True)
            check(not (r.returncode != 5 or says not in r.stderr or (tmp / f"odd-{fam}.gguf").exists()),
                  f"{fam} {name}: exit {r.returncode}, want 5 naming {says}: {r.stderr!r}")
        # A tiktoken.model whose class is not Kimi's: refused (the converter's kimi-k2 branch is Kimi's).
        kimi = tmp / "kimi-k2" / "hf" / "tiny"
        if kimi.exists():
            import json
            odd = tmp / "odd-kimi"
            shutil.copytree(kimi, odd)
            tc = json.loads((odd / "tokenizer_config.json").read_text())
            tc["auto_map"] = {"AutoTokenizer": ["tokenization_other.TikTokenTokenizer", None]}
            (odd / "tokenizer_config.json").write_text(json.dumps(tc))
            r = subprocess.run([dcpctl, "consolidate", str(odd), "-o", str(tmp / "odd-kimi.gguf")], capture_output=True, text=True)
            check(not (r.returncode != 5 or "tiktoken.model" not in r.stderr or (tmp / "odd-kimi.gguf").exists()),
                  f"a tiktoken.model of another class: exit {r.returncode}, {r.stderr!r}")
        # Kimi K2.5 as transformers 5.24 saves it (architectures Kimi_K25ForConditionalGeneration, the
        # text layers language_model.model.blocks.N): the converter registers only the release's
        # KimiK25ForConditionalGeneration and fails; dcpctl refuses it, exit 5 naming the class.
        k25 = tmp / "kimi-k25" / "hf" / "tiny"
        if k25.exists():
            import json
            # --mmproj: the converter's KimiK25Model (a clip GGUF of the vision tower) is not written by
            # dcpctl, which says so (exit 5), writing nothing. (The converter itself fails on this
            # folder's projector: "Can not map tensor 'mm_projector.proj.linear_2.bias'".)
            r = subprocess.run([dcpctl, "consolidate", str(k25), "-o", str(tmp / "mmproj.gguf"), "--mmproj"],
                               capture_output=True, text=True)
            check(not (r.returncode != 5 or "--mmproj" not in r.stderr or "KimiK25ForConditionalGeneration" not in r.stderr
                       or (tmp / "mmproj.gguf").exists()),
                  f"--mmproj of Kimi K2.5: exit {r.returncode}, {r.stderr!r}")
            odd = tmp / "odd-k25" / "tiny"
            shutil.copytree(k25, odd)
            cfg = json.loads((odd / "config.json").read_text())
            (odd / "config.json").write_text(json.dumps({**cfg, "architectures": ["Kimi_K25ForConditionalGeneration"]}))
            # verify of the release's layer names under transformers' class (which the schema holds),
            # a folder transformers loads clean: the schema cannot tell those names (kimi_k25's
            # load_renames_not_derived), so exit 5 saying why, never 3 (damaged). (Under the release's
            # class name the schema is not asked: a note, exit 0.)
            r = subprocess.run([dcpctl, "verify", str(odd)], capture_output=True, text=True)
            said = r.stdout + r.stderr
            check(r.returncode == 5 and "renames this type's keys on load" in said and "language_model.model.layers." in said,
                  f"verify of Kimi K2.5's release layout: exit {r.returncode}, {said[-400:]!r}")
            conv = gguf_oracle.convert(odd, tmp / "odd-k25" / "conv.gguf", ["--outtype", "q8_0"], python_args=["-c", KIMI_RUN])
            check(not (conv.returncode == 0 or "Kimi_K25ForConditionalGeneration" not in conv.stderr),
                  f"the converter on transformers' Kimi_K25ForConditionalGeneration: exit {conv.returncode}, "
                  f"{conv.stderr[-600:]!r}")
            r = subprocess.run([dcpctl, "consolidate", str(odd), "-o", str(tmp / "odd-k25.gguf")], capture_output=True, text=True)
            check(not (r.returncode != 5 or "'Kimi_K25ForConditionalGeneration'" not in r.stderr or
                       (tmp / "odd-k25.gguf").exists()),
                  f"Kimi_K25ForConditionalGeneration: exit {r.returncode}, {r.stderr!r}")
    least = CHECKS_PER_CASE * len(cases) + CHECKS_SMALL_MEMORY * sum(1 for c in cases if not c.endswith(":split"))
    return TALLY.summary("gguf-converter", min_checks=least)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
