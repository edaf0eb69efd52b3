#!/usr/bin/env python3
"""A Megatron checkpoint's own training arguments against the config.json it is exported under
(check/megatron_args.h), end to end on checkpoints real Megatron code wrote.

    megatron_args_test.py DCPCTL FIXTURES_DIR

run_megatron_fsdp/run/iter_0000002 is Megatron-LM's training loop's own save (fsdp_dtensor,
make_megatron_fsdp.py): it carries the argparse Namespace as the item `args`. Exported with
`--map megatron-gpt --assets megatron_fsdp_hf/` (transformers' LlamaConfig of the model, the oracle
whose logits equal megatron's) it exits 0 and --json's `map.args_checked` lists the fields compared
(rope_theta, rms_norm_eps, tie_word_embeddings, hidden_act, the sizes, ...) and `map.args_from`
the item. The same config.json with one setting no tensor shape shows changed (rope_theta as
rope_parameters and as the older top-level spelling, rms_norm_eps, rms_norm_eps left out so that
LlamaConfig's default 1e-6 applies, tie_word_embeddings, hidden_act, partial_rotary_factor, Llama 3
RoPE scaling) exits 5 (issue 68: the checkpoint is intact) naming config.json's field and value, the args field and value and the item
they came from, and writes nothing (the output folder absent, its parent empty), for a folder and
a single-file output.

megatron_llama/ckpt is megatron-core 0.19.2's dist_checkpointing.save of a model (torch_dist): its
common state (`common_state/shard_0_1`, real bytes) holds the iteration and no args: the export
exits 0 and says so (`args_from` null, `args_note`, `args_checked` empty).

megatron_args_torch_dist/run/iter_0000001 is Megatron-LM's save_checkpoint with --ckpt-format
torch_dist (make_megatron_args_torch_dist.py; run_megatron_fsdp's model, --rotary-base 500000): the
args inside the common state (`common_state/shard_0_1`, torch.save([state]), state['args']). Under
the oracle config.json with rope_theta 500000 it exits 0, `args_from` naming the common state; with
rope_theta 10000 it exits 5 naming both values and the common state, nothing written.

megatron_args_torch_dist/moe/iter_0000001 is the same save of a Qwen3-MoE (4 experts, top 2, the
softmax router without pre-softmax, q/k norms, one KV group): under a Qwen3MoeConfig of its sizes
(norm_topk_prob True) it exits 0 listing the router's rows; num_experts_per_tok 4, norm_topk_prob
False, or norm_topk_prob left out (Qwen3MoeConfig's default False) exit 5 naming both sides.

megatron_args_torch_dist/mla/iter_0000001 is the same save of a DeepSeek-V3 (multi-latent attention
with q_lora_rank 12, kv_lora_rank 8, qk 8 + RoPE 4, v 6; YaRN factor 4 with mscale_all_dim 1; the
sigmoid router with expert bias, routed scaling 2.5, 2 expert groups of which 1 is chosen; layer 0
dense by --moe-layer-freq [0]+[1]; a shared expert): under a DeepseekV3Config of its sizes it exits
0 listing the MLA, YaRN, group and dense-layer rows; each contradicted (an MLA size, q_lora_rank
null, rope_interleave False, the YaRN factor, original_max_position_embeddings, mscale_all_dim left
out, plain RoPE, no group limit, other groups, first_k_dense_replace left to DeepseekV3Config's 3)
exits 5 naming both sides, nothing written.

Not here: GLM-4.5's router and Mixtral on real args (unit:megatron_args).
"""
from __future__ import annotations

import copy
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testlib import EXIT_OK, EXIT_UNSUPPORTED, check, run, summary  # noqa: E402


def main() -> int:
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2])
    layouts = fixtures / "layouts"
    ckpt = layouts / "run_megatron_fsdp" / "run" / "iter_0000002"
    oracle = json.loads((layouts / "megatron_fsdp_hf" / "config.json").read_text())
    with tempfile.TemporaryDirectory(prefix="dcpctl-megatron-args-") as tmp:
        tmp = Path(tmp)

        def export(config: dict, name: str, single_file: bool = False, src: Path = ckpt):
            assets = tmp / f"assets-{name}"
            assets.mkdir()
            (assets / "config.json").write_text(json.dumps(config))
            outdir = tmp / f"out-{name}"
            outdir.mkdir()
            out = outdir / ("model.safetensors" if single_file else "hf")
            extra = ["--config", assets / "config.json"] if single_file else ["--assets", assets]
            r = run(dcpctl, "consolidate", src, "-o", f"{out}" if single_file else f"{out}/", "--map", "megatron-gpt", *extra, "--json")
            return r, outdir

        # The oracle config: every field agrees.
        r, outdir = export(oracle, "oracle")
        check(r.returncode == EXIT_OK, f"oracle config: exit {r.returncode}: {r.stderr.strip()[-400:]}")
        if r.returncode == EXIT_OK:
            m = json.loads(r.stdout).get("map", {})
            got = {(c.get("config"), c.get("args")) for c in m.get("args_checked") or []}
            want = {("rope_parameters.rope_theta", "rotary_base"), ("rms_norm_eps", "layernorm_epsilon"),
                    ("tie_word_embeddings", "untie_embeddings_and_output_weights"), ("hidden_act", "swiglu"),
                    ("num_hidden_layers", "num_layers"), ("hidden_size", "hidden_size"), ("num_attention_heads", "num_attention_heads"),
                    ("num_key_value_heads", "num_attention_heads"), ("head_dim", "kv_channels"), ("intermediate_size", "ffn_hidden_size"),
                    ("partial_rotary_factor", "rotary_percent"), ("rope_parameters.rope_type", "use_rope_scaling")}
            check(want <= got, f"oracle config: args_checked lacks {sorted(want - got)} (has {sorted(got)})")
            check("item 'args'" in str(m.get("args_from")), f"oracle config: args_from {m.get('args_from')!r}")
            check((outdir / "hf" / "config.json").is_file(), "oracle config: nothing written")

        # One setting changed at a time: (name, edit, [what stderr must name]).
        def edit(f):
            c = copy.deepcopy(oracle)
            f(c)
            return c

        def legacy_theta(c):
            del c["rope_parameters"]
            c["rope_theta"] = 500000.0

        def llama3(c):
            c["rope_parameters"].update({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 8192})

        cases = [
            ("rope_theta", edit(lambda c: c["rope_parameters"].update(rope_theta=500000.0)),
             ["rope_parameters.rope_theta = 500000.0", "args.rotary_base = 10000"]),
            ("rope_theta-top-level", edit(legacy_theta), ["rope_theta = 500000.0", "args.rotary_base = 10000"]),
            ("rms_norm_eps", edit(lambda c: c.update(rms_norm_eps=1e-6)), ["rms_norm_eps = 1e-06", "args.layernorm_epsilon = 1e-05"]),
            ("rms_norm_eps-default", edit(lambda c: c.pop("rms_norm_eps")),
             ["rms_norm_eps = 1e-06 (llama's default)", "args.layernorm_epsilon = 1e-05"]),
            ("tie_word_embeddings", edit(lambda c: c.update(tie_word_embeddings=True)),
             ["tie_word_embeddings = True", "args.untie_embeddings_and_output_weights = True"]),
            ("hidden_act", edit(lambda c: c.update(hidden_act="gelu")), ['hidden_act = "gelu"', "args.swiglu = True"]),
            ("partial_rotary_factor", edit(lambda c: c["rope_parameters"].update(partial_rotary_factor=0.5)),
             ["rope_parameters.partial_rotary_factor = 0.5", "args.rotary_percent = 1.0"]),
            ("llama3-scaling", edit(llama3), ['rope_parameters.rope_type = "llama3"', "args.use_rope_scaling = False"]),
        ]
        for name, config, names in cases:
            for single in (False, True):
                label = f"{name}{' (one file)' if single else ''}"
                r, outdir = export(config, name + ("-file" if single else ""), single)
                err = r.stderr
                check(r.returncode == EXIT_UNSUPPORTED, f"{label}: exit {r.returncode}, want 5: {err.strip()[-400:]}")
                for n in names + ["config.json", "item 'args'", str(ckpt)]:
                    check(n in err, f"{label}: stderr does not name {n!r}: {err.strip()[-500:]}")
                left = sorted(p.name for p in outdir.iterdir())
                check(not left, f"{label}: left behind {left}")

        # torch_dist from Megatron-LM's save_checkpoint: the args inside the common state (real bytes,
        # make_megatron_args_torch_dist.py: run_megatron_fsdp's model with --rotary-base 500000).
        td = layouts / "megatron_args_torch_dist" / "run" / "iter_0000001"
        for name, theta, rc in (("torch_dist", 500000.0, EXIT_OK), ("torch_dist-rope_theta", 10000.0, EXIT_UNSUPPORTED)):
            r, outdir = export(edit(lambda c: c["rope_parameters"].update(rope_theta=theta)), name, src=td)
            check(r.returncode == rc, f"{name}: exit {r.returncode}, want {rc}: {r.stderr.strip()[-400:]}")
            if rc == EXIT_OK and r.returncode == EXIT_OK:
                m = json.loads(r.stdout).get("map", {})
                got = {(c.get("config"), c.get("args"), c.get("value")) for c in m.get("args_checked") or []}
                check(("rope_parameters.rope_theta", "rotary_base", 500000.0) in got and len(got) >= 12,
                      f"{name}: args_checked {sorted(map(str, got))}")
                check("common_state/shard_0_1" in str(m.get("args_from")), f"{name}: args_from {m.get('args_from')!r}")
            if rc == EXIT_UNSUPPORTED:
                for n in ("rope_parameters.rope_theta = 10000.0", "args.rotary_base = 500000", "common_state/shard_0_1", "config.json"):
                    check(n in r.stderr, f"{name}: stderr does not name {n!r}: {r.stderr.strip()[-500:]}")
                check(not any(outdir.iterdir()), f"{name}: left behind {sorted(p.name for p in outdir.iterdir())}")

        # The MoE case (Qwen3-MoE: 4 experts, top 2, softmax router without pre-softmax) under a
        # Qwen3MoeConfig of its sizes: the router's rows compared, and contradicted.
        moe = layouts / "megatron_args_torch_dist" / "moe" / "iter_0000001"
        moe_config = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 16,
                      "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
                      "intermediate_size": 32, "moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2,
                      "norm_topk_prob": True, "rms_norm_eps": 1e-05, "vocab_size": 32, "max_position_embeddings": 8,
                      "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}, "tie_word_embeddings": False,
                      "hidden_act": "silu"}

        def moe_edit(f):
            c = copy.deepcopy(moe_config)
            f(c)
            return c

        moe_cases = [
            ("moe", moe_config, EXIT_OK, []),
            ("moe-num_experts_per_tok", moe_edit(lambda c: c.update(num_experts_per_tok=4)), EXIT_UNSUPPORTED,
             ["num_experts_per_tok = 4", "args.moe_router_topk = 2"]),
            ("moe-norm_topk_prob", moe_edit(lambda c: c.update(norm_topk_prob=False)), EXIT_UNSUPPORTED,
             ["norm_topk_prob = False", "args.moe_router_pre_softmax = False"]),
            ("moe-norm_topk_prob-default", moe_edit(lambda c: c.pop("norm_topk_prob")), EXIT_UNSUPPORTED,
             ["norm_topk_prob = False (qwen3_moe's default)", "args.moe_router_pre_softmax = False"]),
        ]
        for name, config, rc, names in moe_cases:
            r, outdir = export(config, name, src=moe)
            check(r.returncode == rc, f"{name}: exit {r.returncode}, want {rc}: {r.stderr.strip()[-400:]}")
            if rc == EXIT_OK and r.returncode == EXIT_OK:
                m = json.loads(r.stdout).get("map", {})
                got = {(c.get("config"), c.get("args")) for c in m.get("args_checked") or []}
                want = {("num_experts_per_tok", "moe_router_topk"), ("norm_topk_prob", "moe_router_pre_softmax"),
                        ("num_experts", "num_experts"), ("moe_intermediate_size", "moe_ffn_hidden_size"),
                        ("num_key_value_heads", "num_query_groups"), ("Qwen-MoE's softmax router", "moe_router_score_function"),
                        ("(no routed scaling)", "moe_router_topk_scaling_factor")}
                check(want <= got, f"{name}: args_checked lacks {sorted(want - got)}")
            for n in names + (["common_state/shard_0_1", "config.json"] if names else []):
                check(n in r.stderr, f"{name}: stderr does not name {n!r}: {r.stderr.strip()[-500:]}")
            if rc == EXIT_UNSUPPORTED:
                check(not any(outdir.iterdir()), f"{name}: left behind {sorted(p.name for p in outdir.iterdir())}")

        # The MLA case (a DeepSeek-V3 through Megatron-LM's parser: multi-latent attention with a q
        # LoRA, YaRN, group-limited routing, layer 0 dense by --moe-layer-freq) under a
        # DeepseekV3Config of its sizes: the MLA, YaRN, group and dense-layer rows compared, and each
        # contradicted.
        mla = layouts / "megatron_args_torch_dist" / "mla" / "iter_0000001"
        mla_config = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 16,
                      "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 32,
                      "moe_intermediate_size": 16, "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
                      "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1, "norm_topk_prob": True,
                      "routed_scaling_factor": 2.5, "q_lora_rank": 12, "kv_lora_rank": 8, "qk_nope_head_dim": 8,
                      "qk_rope_head_dim": 4, "v_head_dim": 6, "rms_norm_eps": 1e-05, "vocab_size": 31,
                      "max_position_embeddings": 8, "rope_interleave": True, "tie_word_embeddings": False, "hidden_act": "silu",
                      "rope_parameters": {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 4.0,
                                          "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                                          "mscale": 1.0, "mscale_all_dim": 1.0}}

        def mla_edit(f):
            c = copy.deepcopy(mla_config)
            f(c)
            return c

        mla_cases = [
            ("mla", mla_config, EXIT_OK, []),
            ("mla-kv_lora_rank", mla_edit(lambda c: c.update(kv_lora_rank=16)), EXIT_UNSUPPORTED,
             ["kv_lora_rank = 16", "args.kv_lora_rank = 8"]),
            ("mla-q_lora_rank-null", mla_edit(lambda c: c.update(q_lora_rank=None)), EXIT_UNSUPPORTED,
             ["q_lora_rank = None", "args.q_lora_rank = 12"]),
            ("mla-rope_interleave", mla_edit(lambda c: c.update(rope_interleave=False)), EXIT_UNSUPPORTED,
             ["rope_interleave = False", "always takes the RoPE columns even then odd"]),
            ("mla-yarn-factor", mla_edit(lambda c: c["rope_parameters"].update(factor=40.0)), EXIT_UNSUPPORTED,
             ["rope_parameters.factor = 40.0", "args.rotary_scaling_factor = 4.0"]),
            ("mla-yarn-original", mla_edit(lambda c: c["rope_parameters"].update(original_max_position_embeddings=256)),
             EXIT_UNSUPPORTED, ["rope_parameters.original_max_position_embeddings = 256", "megatron-core's MLA uses 4096"]),
            ("mla-yarn-mscale_all_dim", mla_edit(lambda c: c["rope_parameters"].pop("mscale_all_dim")), EXIT_UNSUPPORTED,
             ["YaRN's softmax scale) = 1.0", "megatron-core's is 1.2964"]),
            ("mla-rope-default", mla_edit(lambda c: c.update(rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
             EXIT_UNSUPPORTED, ['rope_parameters.rope_type = "default"', "args.rope_type = None"]),
            ("mla-n_group", mla_edit(lambda c: c.update(n_group=1, topk_group=1)), EXIT_UNSUPPORTED,
             ["n_group = 1, topk_group = 1 (every group chosen: no limit)", "args.moe_router_num_groups = 2, moe_router_group_topk = 1"]),
            ("mla-topk_group", mla_edit(lambda c: c.update(n_group=4, topk_group=2)), EXIT_UNSUPPORTED,
             ["n_group = 4, but args.moe_router_num_groups = 2", "topk_group = 2, but args.moe_router_group_topk = 1"]),
            ("mla-first_k_dense_replace", mla_edit(lambda c: c.pop("first_k_dense_replace")), EXIT_UNSUPPORTED,
             ["first_k_dense_replace = 3 (deepseek_v3's default) (dense layers 0, 1)", "args.moe_layer_freq = [0,1] (dense layers 0)"]),
        ]
        for name, config, rc, names in mla_cases:
            r, outdir = export(config, name, src=mla)
            check(r.returncode == rc, f"{name}: exit {r.returncode}, want {rc}: {r.stderr.strip()[-400:]}")
            if rc == EXIT_OK and r.returncode == EXIT_OK:
                m = json.loads(r.stdout).get("map", {})
                got = {(c.get("config"), c.get("args")) for c in m.get("args_checked") or []}
                want = {("q_lora_rank", "q_lora_rank"), ("kv_lora_rank", "kv_lora_rank"), ("qk_nope_head_dim", "qk_head_dim"),
                        ("qk_rope_head_dim", "qk_pos_emb_head_dim"), ("v_head_dim", "v_head_dim"),
                        ("rope_interleave", "multi_latent_attention"), ("rope_parameters.rope_type", "rope_type"),
                        ("rope_parameters.factor", "rotary_scaling_factor"),
                        ("rope_parameters.mscale / mscale_all_dim (YaRN's cos/sin scale)", "mscale"),
                        ("rope_parameters.mscale_all_dim (YaRN's softmax scale)", "mscale_all_dim"),
                        ("n_group", "moe_router_num_groups"), ("topk_group", "moe_router_group_topk"),
                        ("first_k_dense_replace", "moe_layer_freq"), ("norm_topk_prob", "moe_router_topk"),
                        ("routed_scaling_factor", "moe_router_topk_scaling_factor")}
                check(want <= got, f"{name}: args_checked lacks {sorted(want - got)}")
                check(m.get("variant") == "deepseek_v3", f"{name}: variant {m.get('variant')!r}")
            for n in names + (["common_state/shard_0_1", "config.json"] if names else []):
                check(n in r.stderr, f"{name}: stderr does not name {n!r}: {r.stderr.strip()[-500:]}")
            if rc == EXIT_UNSUPPORTED:
                check(not any(outdir.iterdir()), f"{name}: left behind {sorted(p.name for p in outdir.iterdir())}")

        # torch_dist from dist_checkpointing.save: a common state without args.
        d = layouts / "megatron_llama"
        r = run(dcpctl, "consolidate", d / "ckpt", "-o", f"{tmp / 'llama'}/", "--map", "megatron-gpt", "--assets", d / "hf", "--json")
        check(r.returncode == EXIT_OK, f"megatron_llama: exit {r.returncode}: {r.stderr.strip()[-400:]}")
        if r.returncode == EXIT_OK:
            m = json.loads(r.stdout).get("map", {})
            check(m.get("args_from") is None and m.get("args_checked") == [] and "no Megatron-LM args" in str(m.get("args_note")),
                  f"megatron_llama: {({k: m.get(k) for k in ('args_from', 'args_checked', 'args_note')})}")
        # The folders written (exit 0) are loaded by transformers before they go (testlib's summary).
        return summary("megatron-args", min_checks=60)


if __name__ == "__main__":
    sys.exit(main())
