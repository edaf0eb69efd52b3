#!/usr/bin/env python3
"""A torchtitan run's own job config against the config.json its checkpoint is exported under
(check/titan_config.h), end to end on runs real torchtitan 0.3.0 code wrote.

    titan_config_test.py DCPCTL FIXTURES_DIR

titan_config_llama3/ and titan_config_qwen3_moe/ (make_titan_config.py): `out/job_config.json` is
torchtitan's Trainer.Config.maybe_log output (debug.save_config_file "job_config.json", dump_folder
"out", flavor "dcpctl_tiny", which torchtitan has no flavor of), `out/checkpoint/step-2` the DCP
checkpoint its CheckpointManager wrote after 2 steps, `config.json` the model's Hugging Face config.

- Under its config.json each export exits 0, and --json's `map.trainer_config` names the file, the
  model and flavor, and lists the settings compared (RoPE base and Llama 3 scaling, norm eps, tied
  head, head counts and dims, vocabulary; the MoE router's experts, top-k, softmax, route_norm and
  route_scale); the summary says so.
- config.json with one setting changed (rope_theta in both spellings, rope_type default, the Llama 3
  factor, rms_norm_eps stated and left to the class default, tie_word_embeddings, head_dim,
  vocab_size, num_experts_per_tok, norm_topk_prob stated and left to Qwen3MoeConfig's default False)
  exits 5 naming config.json's field and value and the job config's file, field and value, and
  writes nothing.
- A copy of the run whose job config lacks a field the rows name (the RoPE theta), names a model no
  table lists, or names another run's checkpoint folder, makes no claim: exit 0, `note` saying why.
- A run with no job config (titan_llama3, the key maps' fixture) exits 0, `from` null and a note.
"""
from __future__ import annotations

import copy
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testlib import EXIT_OK, EXIT_UNSUPPORTED, check, expect_rc, run, summary  # noqa: E402

STEP = Path("out") / "checkpoint" / "step-2"


def main() -> int:
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2])
    layouts = fixtures / "layouts"
    with tempfile.TemporaryDirectory(prefix="dcpctl-titan-config-") as tmp:
        tmp = Path(tmp)
        n = [0]

        def export(case: Path, map_name: str, config: dict, as_json: bool = True):
            n[0] += 1
            assets = tmp / f"assets-{n[0]}"
            assets.mkdir()
            (assets / "config.json").write_text(json.dumps(config))
            outdir = tmp / f"out-{n[0]}"
            outdir.mkdir()
            r = run(dcpctl, "consolidate", case / STEP, "-o", f"{outdir}/hf/", "--map", map_name, "--assets", assets,
                    *(["--json"] if as_json else []))
            return r, outdir

        def agrees(case: Path, map_name: str, config: dict, want: set, what: str) -> dict:
            r, outdir = export(case, map_name, config)
            check(r.returncode == EXIT_OK, f"{what}: exit {r.returncode}: {r.stderr.strip()[-600:]}")
            if r.returncode != EXIT_OK:
                return {}
            t = json.loads(r.stdout).get("map", {}).get("trainer_config") or {}
            got = {c.get("config") for c in t.get("checked") or []}
            check(want <= got, f"{what}: checked lacks {sorted(want - got)} (has {sorted(got)})")
            check(str(t.get("from", "")).endswith("out/job_config.json"), f"{what}: from {t.get('from')!r}")
            check(t.get("flavor") == "dcpctl_tiny" and t.get("note") is None, f"{what}: {t}")
            check((outdir / "hf" / "config.json").is_file(), f"{what}: nothing written")
            r, _ = export(case, map_name, config, as_json=False)
            said = f"config.json agrees with the torchtitan job config on {len(t.get('checked') or [])} settings"
            check(r.returncode == EXIT_OK and said in r.stderr, f"{what}: the summary lacks {said!r}: {r.stderr[-600:]}")
            return t

        def contradicts(case: Path, map_name: str, config: dict, what: str, *names: str) -> None:
            r, outdir = export(case, map_name, config)
            expect_rc(r, EXIT_UNSUPPORTED, what, "job_config.json", "disagrees", *names)
            check(not any(outdir.iterdir()), f"{what}: wrote {sorted(p.name for p in outdir.iterdir())}")

        # ---- Llama 3 ----
        llama = layouts / "titan_config_llama3"
        oracle = json.loads((llama / "config.json").read_text())
        t = agrees(llama, "torchtitan-llama3", oracle,
                   {"rope_parameters.rope_theta", "rope_parameters.rope_type", "rope_parameters.factor",
                    "rope_parameters.low_freq_factor", "rope_parameters.high_freq_factor",
                    "rope_parameters.original_max_position_embeddings", "rms_norm_eps", "tie_word_embeddings",
                    "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size", "vocab_size",
                    "num_hidden_layers", "intermediate_size"}, "llama3 under its config.json")
        check(t.get("model") == "llama3", f"llama3: model {t.get('model')!r}")

        def changed(base: dict, **kv) -> dict:
            c = copy.deepcopy(base)
            for k, v in kv.items():
                if k.startswith("rope_"):
                    c.setdefault("rope_parameters", {})[k[5:]] = v
                elif v is None:
                    c.pop(k, None)
                else:
                    c[k] = v
            return c

        contradicts(llama, "torchtitan-llama3", changed(oracle, rope_rope_theta=10000.0), "llama3 rope_theta 10000",
                    "rope_parameters.rope_theta = 10000.0", "layers[0].attention.rope.theta = 500000")
        top = changed(oracle)
        theta = top.pop("rope_parameters")
        top.update({"rope_theta": 10000.0, "rope_scaling": {k: v for k, v in theta.items() if k != "rope_theta"}})
        contradicts(llama, "torchtitan-llama3", top, "llama3 top-level rope_theta 10000 (transformers < 5's spelling)",
                    "rope_theta = 10000.0", "rope.theta = 500000")
        contradicts(llama, "torchtitan-llama3",
                    changed(oracle, rope_parameters=None) | {"rope_parameters": {"rope_type": "default",
                                                                               "rope_theta": 500000.0}},
                    "llama3 rope_type default", 'rope_parameters.rope_type = "default"', 'rope.scaling = "llama"')
        contradicts(llama, "torchtitan-llama3", changed(oracle, rope_factor=32.0), "llama3 RoPE factor 32",
                    "rope_parameters.factor = 32.0", "rope.scaling_factor = 8.0")
        contradicts(llama, "torchtitan-llama3", changed(oracle, rms_norm_eps=1e-6), "llama3 rms_norm_eps 1e-6",
                    "rms_norm_eps = 1e-06", "norm.eps = 1e-05")
        contradicts(llama, "torchtitan-llama3", changed(oracle, rms_norm_eps=None),
                    "llama3 rms_norm_eps left out (LlamaConfig's default 1e-6)", "llama's default", "norm.eps = 1e-05")
        contradicts(llama, "torchtitan-llama3", changed(oracle, tie_word_embeddings=True), "llama3 tied head",
                    "tie_word_embeddings = true", "enable_weight_tying = false")
        contradicts(llama, "torchtitan-llama3", changed(oracle, vocab_size=128), "llama3 vocab_size 128",
                    "vocab_size = 128", "model_spec.model.vocab_size = 64")

        # ---- Qwen 3 MoE ----
        moe = layouts / "titan_config_qwen3_moe"
        oracle_moe = json.loads((moe / "config.json").read_text())
        t = agrees(moe, "torchtitan-qwen3", oracle_moe,
                   {"rope_parameters.rope_theta", "rope_parameters.rope_type", "rms_norm_eps", "tie_word_embeddings",
                    "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size", "vocab_size",
                    "num_local_experts", "moe_intermediate_size", "num_experts_per_tok", "norm_topk_prob",
                    "(Qwen3-MoE's router scores with a softmax)",
                    "(Qwen3-MoE's router does not scale the routed weights)"}, "qwen3 MoE under its config.json")
        check(t.get("model") == "qwen3", f"qwen3 MoE: model {t.get('model')!r}")
        contradicts(moe, "torchtitan-qwen3", changed(oracle_moe, num_experts_per_tok=4), "qwen3 MoE top-4",
                    "num_experts_per_tok = 4", "moe.router.top_k = 2")
        contradicts(moe, "torchtitan-qwen3", changed(oracle_moe, norm_topk_prob=False), "qwen3 MoE norm_topk_prob false",
                    "norm_topk_prob = false", "moe.router.route_norm = true")
        contradicts(moe, "torchtitan-qwen3", changed(oracle_moe, norm_topk_prob=None),
                    "qwen3 MoE norm_topk_prob left out (Qwen3MoeConfig's default false)", "qwen3_moe's default",
                    "route_norm = true")
        contradicts(moe, "torchtitan-qwen3", changed(oracle_moe, head_dim=12), "qwen3 MoE head_dim 12", "head_dim = 12",
                    "qkv_linear.head_dim = 16")
        contradicts(moe, "torchtitan-qwen3", changed(oracle_moe, rope_rope_theta=10000.0), "qwen3 MoE rope_theta 10000",
                    "rope_parameters.rope_theta = 10000.0", "rope.theta = 1000000.0")

        # ---- no claim: a field the job config lacks, a model no table lists, another run's file ----
        def edited_run(case: Path, name: str, edit) -> Path:
            dst = tmp / name
            shutil.copytree(case, dst)
            job = dst / "out" / "job_config.json"
            j = json.loads(job.read_text())
            edit(j)
            job.write_text(json.dumps(j, indent=2))
            return dst

        def no_theta(j):
            for layer in j["model_spec"]["model"]["layers"]:
                layer["attention"]["rope"].pop("theta")

        def no_claim(case: Path, map_name: str, config: dict, what: str, note: str | None, absent: str | None = None):
            r, _ = export(case, map_name, config)
            check(r.returncode == EXIT_OK, f"{what}: exit {r.returncode}: {r.stderr.strip()[-600:]}")
            if r.returncode != EXIT_OK:
                return
            t = json.loads(r.stdout).get("map", {}).get("trainer_config") or {}
            if note:
                check(note in str(t.get("note")), f"{what}: note {t.get('note')!r}")
            if absent:
                check(absent not in {c.get("config") for c in t.get("checked") or []}, f"{what}: compared {absent}")

        bad_theta = changed(oracle, rope_rope_theta=10000.0)
        no_claim(edited_run(llama, "no-theta", no_theta), "torchtitan-llama3", bad_theta,
                 "a job config without rope.theta", None, "rope_parameters.rope_theta")
        no_claim(edited_run(llama, "unknown-model", lambda j: j["model_spec"].update(name="my_llama")),
                 "torchtitan-llama3", bad_theta, "a model no table lists", "no comparison table")
        no_claim(edited_run(llama, "other-run", lambda j: j["checkpoint"].update(folder="elsewhere")),
                 "torchtitan-llama3", bad_theta, "another run's job config", "not this run folder")
        plain = layouts / "titan_llama3" / "run" / "step-2"
        if plain.is_dir():
            r = run(dcpctl, "consolidate", plain, "-o", f"{tmp}/plain/", "--map", "torchtitan-llama3", "--assets",
                    layouts / "titan_llama3", "--json")
            check(r.returncode == EXIT_OK, f"no job config: exit {r.returncode}: {r.stderr[-400:]}")
            if r.returncode == EXIT_OK:
                t = json.loads(r.stdout).get("map", {}).get("trainer_config") or {}
                check("from" in t and t["from"] is None and "no torchtitan job config" in str(t.get("note")),
                      f"no job config: {t}")
    return summary("titan-config", min_checks=40)


if __name__ == "__main__":
    sys.exit(main())
