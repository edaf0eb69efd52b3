#!/usr/bin/env python3
"""The run folders real trainers leave (tests/fixtures/layouts/run_{hf_trainer,lightning,
llamafactory,megatron,automodel}, written by make_trainer_runs.py; run_megatron_fsdp, run_megatron_fsdp_bias and run_megatron_fsdp_qk, Megatron-FSDP's
fsdp_dtensor format, by make_megatron_fsdp.py; run_verl, by make_verl.py),
read by dcpctl and checked against torch.

    trainer_runs_test.py DCPCTL FIXTURES_DIR

For each run: `ls --json` lists every step, complete, with its trainer and the model checkpoint
inside it; `latest` names the newest; `verify`, `inspect --json` and `consolidate STEP_DIR` read
the model inside a step (equal, key for key and byte for byte, to torch's dcp_to_torch_save view in
expected.json); the transformers step consolidated to a folder (`--select model`) carries the
run's config and tokenizer and loads with transformers' from_pretrained to the same weights.
Then, on copies, what each trainer's own marker says: a transformers step without
trainer_state.json, a LLaMA-Factory step without CHECKPOINT_COMPLETE, a NeMo AutoModel step with
.incomplete, a Megatron iteration or a verl global_step newer
than latest_checkpointed_iteration.txt, a `tmp-checkpoint-N` staging folder are incomplete
(`ls` says why, `latest` passes over them, `verify` and `consolidate` of that step exit 3 naming
the marker and write nothing where the marker is in the step folder, `prune --keep 1` never
removes them, the older complete step goes).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from testlib import EXIT_INVALID, check, expect_rc, run, skip_or_fail, summary, tree_digest  # noqa: E402

try:
    from safetensors.torch import load_file
except ImportError as e:
    skip_or_fail(f"the virtualenv lacks a module: {e}")
import dcp_oracle  # noqa: E402

CASES = ["run_hf_trainer", "run_lightning", "run_llamafactory", "run_megatron", "run_megatron_fsdp", "run_megatron_fsdp_bias", "run_megatron_fsdp_qk",
         "run_automodel", "run_verl"]


def ls_json(dcpctl: str, run_dir: Path, what: str) -> dict:
    r = run(dcpctl, "ls", "--json", run_dir)
    if not expect_rc(r, 0, f"{what}: ls --json"):
        return {"checkpoints": []}
    return json.loads(r.stdout)


def check_case(dcpctl: str, case: str, fixtures: Path, tmp: Path) -> None:
    d = fixtures / "layouts" / case
    exp = json.loads((d / "expected.json").read_text())
    run_dir = d / "run"
    doc = ls_json(dcpctl, run_dir, case)
    got = {c["name"]: c for c in doc["checkpoints"]}
    check(sorted(got) == sorted(exp["steps"]), f"{case}: ls lists {sorted(got)}, the trainer wrote {sorted(exp['steps'])}")
    for step, e in exp["steps"].items():
        c = got.get(step, {})
        check(c.get("complete") is True, f"{case} {step}: ls says incomplete: {c.get('why_incomplete')}")
        check(c.get("trainer") == exp["trainer"], f"{case} {step}: trainer {c.get('trainer')!r}, wanted {exp['trainer']!r}")
        check(c.get("model_path") == str(run_dir / e["model"]), f"{case} {step}: model_path {c.get('model_path')}")
        check(c.get("tensors") == sum(1 for v in e["keys"].values() if v["kind"] == "tensor"),
              f"{case} {step}: ls counts {c.get('tensors')} tensors")
    check(doc.get("newest_complete") == str(run_dir / exp["newest_complete"]), f"{case}: newest_complete {doc.get('newest_complete')}")
    r = run(dcpctl, "latest", run_dir)
    if expect_rc(r, 0, f"{case}: latest"):
        check(r.stdout == f"{run_dir / exp['newest_complete']}\n", f"{case}: latest printed {r.stdout!r}")
    r = run(dcpctl, "latest", "--json", run_dir)
    if expect_rc(r, 0, f"{case}: latest --json"):
        j = json.loads(r.stdout)
        newest = exp["steps"][exp["newest_complete"]]
        check(j["model_path"] == str(run_dir / newest["model"]) and j["trainer"] == exp["trainer"],
              f"{case}: latest --json {j}")

    for step, e in exp["steps"].items():
        sd = run_dir / step
        expect_rc(run(dcpctl, "verify", sd), 0, f"{case} {step}: verify of the step folder")
        r = run(dcpctl, "inspect", "--json", sd)
        if expect_rc(r, 0, f"{case} {step}: inspect --json of the step folder"):
            keys = {i["key"] for i in json.loads(r.stdout)["items"]}
            check(keys == set(e["keys"]), f"{case} {step}: inspect keys differ: {sorted(keys ^ set(e['keys']))[:6]}")
        out = tmp / f"{case}-{step}.safetensors"
        r = run(dcpctl, "consolidate", sd, "-o", out, "-q")
        if expect_rc(r, 0, f"{case} {step}: consolidate STEP_DIR"):
            tensors = {"keys": {k: v for k, v in e["keys"].items() if v["kind"] == "tensor"}}
            msgs = dcp_oracle.compare_flat(load_file(str(out)), tensors)
            check(not msgs, f"{case} {step}: consolidate differs from torch's view: {msgs[:5]}")


def check_hf_folder(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    """checkpoint-2 to a Hugging Face folder: the run's config and tokenizer come along, and
    transformers loads it to the weights torch reads from the step."""
    d = fixtures / "layouts" / "run_hf_trainer"
    exp = json.loads((d / "expected.json").read_text())
    out = tmp / "hf"
    r = run(dcpctl, "consolidate", d / "run" / "checkpoint-2", "-o", f"{out}/", "--select", "model", "--json")
    if not expect_rc(r, 0, "run_hf_trainer: consolidate checkpoint-2 to a folder"):
        return
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        check((out / f).read_bytes() == (d / "run" / f).read_bytes() if (out / f).exists() else False,
              f"run_hf_trainer: {f} of the run folder not copied beside the weights")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(out))
    want = {k[len("model."):]: v for k, v in exp["steps"]["checkpoint-2"]["keys"].items()}
    got = {k: v for k, v in model.state_dict().items()}
    msgs = dcp_oracle.compare_flat(got, {"keys": want})
    check(not msgs, f"run_hf_trainer: from_pretrained of the consolidated folder differs from the step: {msgs[:5]}")


def check_verl_folder(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    """verl's global_step_2 (per-rank torch.save files in actor/) to a Hugging Face folder: the
    config and tokenizer verl saved in actor/huggingface/ come along, and transformers loads it to
    the weights torch gathered from the ranks."""
    d = fixtures / "layouts" / "run_verl"
    exp = json.loads((d / "expected.json").read_text())
    out = tmp / "verl-hf"
    # make_verl.py's model.loss_scale is no tensor of LlamaForCausalLM: the model schema refuses the
    # folder (exit 5: the run is intact, config.json does not describe it; nothing left) until
    # --exclude leaves it out.
    r = run(dcpctl, "consolidate", d / "run" / "global_step_2", "-o", f"{out}/")
    expect_rc(r, 5, "run_verl: consolidate global_step_2 to a folder with model.loss_scale", "schema-key-unexpected",
              "model.loss_scale", "--exclude")
    check(not out.exists(), "run_verl: the refused folder left nothing")
    r = run(dcpctl, "consolidate", d / "run" / "global_step_2", "-o", f"{out}/", "--json", "--exclude", "model.loss_scale")
    if not expect_rc(r, 0, "run_verl: consolidate global_step_2 to a folder"):
        return
    assets = d / "run" / "global_step_2" / "actor" / "huggingface"
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        if (assets / f).exists():
            check((out / f).exists() and (out / f).read_bytes() == (assets / f).read_bytes(),
                  f"run_verl: {f} of actor/huggingface not copied beside the weights")
    check((out / "config.json").exists(), "run_verl: no config.json beside the weights")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(out))
    sd = model.state_dict()
    want = exp["steps"]["global_step_2"]["keys"]
    # make_verl.py's model carries one extra persistent buffer (model.loss_scale, verl #7610's
    # shape) that LlamaForCausalLM does not define: transformers reports it unexpected.
    check(set(want) - set(sd) == {"model.loss_scale"}, f"run_verl: keys from_pretrained lacks: {sorted(set(want) - set(sd))}")
    want = {k: v for k, v in want.items() if k in sd}
    check(len(want) == len(sd), f"run_verl: the model has keys the checkpoint lacks: {sorted(set(sd) - set(want))}")
    msgs = dcp_oracle.compare_flat({k: sd[k] for k in want}, {"keys": want})
    check(not msgs, f"run_verl: from_pretrained of the consolidated folder differs from the ranks' gathered model: {msgs[:5]}")


def refused_step(dcpctl: str, label: str, run_dir: Path, step: str, why: str, newest: str, older: str, tmp: Path,
                 in_step: bool = True) -> None:
    """A step the trainer's marker calls unfinished, in a copy of a run folder. in_step: the marker
    is in the step folder itself, so the step given alone is refused too (a run-level marker, the
    tracker or a staging name, counts where the run folder is read: ls, latest, prune)."""
    doc = ls_json(dcpctl, run_dir, label)
    c = next((c for c in doc["checkpoints"] if c["name"] == step), {})
    check(c.get("complete") is False and why in (c.get("why_incomplete") or ""),
          f"{label}: ls says {step} complete={c.get('complete')}, why {c.get('why_incomplete')!r} (wanted {why!r})")
    r = run(dcpctl, "latest", run_dir)
    if expect_rc(r, 0, f"{label}: latest"):
        check(r.stdout == f"{run_dir / newest}\n", f"{label}: latest printed {r.stdout!r}, wanted {run_dir / newest}")
    if in_step:
        expect_rc(run(dcpctl, "verify", run_dir / step), EXIT_INVALID, f"{label}: verify {step}", why)
        out = tmp / f"{label}.safetensors"
        expect_rc(run(dcpctl, "consolidate", run_dir / step, "-o", out), EXIT_INVALID, f"{label}: consolidate {step}", why)
        check(not out.exists(), f"{label}: consolidate of {step} left {out}")
    before = tree_digest(run_dir / step)
    r = run(dcpctl, "prune", run_dir, "--keep", "1", "--json")
    if expect_rc(r, 0, f"{label}: prune --keep 1"):
        j = json.loads(r.stdout)
        removed = sorted(x["name"] for x in j["removed"])
        check(removed == [older], f"{label}: prune removed {removed}, wanted [{older}] (never the unfinished {step})")
        check((run_dir / step).is_dir() and tree_digest(run_dir / step) == before, f"{label}: prune touched {step}")


def check_markers(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    L = fixtures / "layouts"

    def copy(case: str, name: str) -> Path:
        dst = tmp / name
        shutil.copytree(L / case / "run", dst, symlinks=True)
        return dst

    r = copy("run_hf_trainer", "hf-unfinished")
    (r / "checkpoint-2" / "trainer_state.json").unlink()
    doc = ls_json(dcpctl, r, "hf-unfinished")
    c = next((c for c in doc["checkpoints"] if c["name"] == "checkpoint-2"), {})
    check(c.get("complete") is False and "trainer_state.json" in (c.get("why_incomplete") or ""),
          f"transformers step without trainer_state.json: ls says {c.get('complete')}, {c.get('why_incomplete')!r}")
    rr = run(dcpctl, "latest", r)
    if expect_rc(rr, 0, "transformers step without trainer_state.json: latest"):
        check(rr.stdout == f"{r / 'checkpoint-1'}\n", f"latest printed {rr.stdout!r}")
    expect_rc(run(dcpctl, "verify", r / "checkpoint-2"), EXIT_INVALID, "verify of a transformers step without "
              "trainer_state.json", "trainer_state.json")
    out = tmp / "hf-unfinished.safetensors"
    expect_rc(run(dcpctl, "consolidate", r / "checkpoint-2", "-o", out), EXIT_INVALID,
              "consolidate of a transformers step without trainer_state.json", "trainer_state.json", "pytorch_model_fsdp_0")
    check(not out.exists(), "consolidate of an unfinished step left an output")
    # ... while its model folder, named directly, is read as it is
    expect_rc(run(dcpctl, "verify", r / "checkpoint-2" / "pytorch_model_fsdp_0"), 0, "verify of the model folder itself")

    # a transformers staging folder, newer than the rest
    r = copy("run_hf_trainer", "hf-staging")
    shutil.copytree(r / "checkpoint-2", r / "tmp-checkpoint-3")
    refused_step(dcpctl, "transformers tmp-checkpoint-3", r, "tmp-checkpoint-3", "save in flight", "checkpoint-2",
                 "checkpoint-1", tmp, in_step=False)

    r = copy("run_llamafactory", "lf-unfinished")
    (r / "checkpoint-2" / "CHECKPOINT_COMPLETE").unlink()
    shutil.copytree(r / "checkpoint-1", r / "checkpoint-0")  # an older complete one, for prune to remove
    refused_step(dcpctl, "LLaMA-Factory step without CHECKPOINT_COMPLETE", r, "checkpoint-2", "CHECKPOINT_COMPLETE",
                 "checkpoint-1", "checkpoint-0", tmp)

    r = copy("run_automodel", "automodel-unfinished")
    (r / "epoch_0_step_2" / ".incomplete").touch()  # what AutoModel's reserve() leaves until publish()
    shutil.copytree(r / "epoch_0_step_1", r / "epoch_0_step_0")
    refused_step(dcpctl, "NeMo AutoModel step with .incomplete", r, "epoch_0_step_2", ".incomplete", "epoch_0_step_1",
                 "epoch_0_step_0", tmp)
    doc = ls_json(dcpctl, L / "run_automodel" / "run", "automodel pointers")
    want = str(L / "run_automodel" / "run" / "epoch_0_step_2")
    check(doc.get("pointers") == {"LATEST": want, "LOWEST_VAL": want}, f"ls --json pointers {doc.get('pointers')}")

    r = copy("run_megatron", "megatron-unfinished")
    (r / "latest_checkpointed_iteration.txt").write_text("1")
    shutil.copytree(r / "iter_0000001", r / "iter_0000000")
    refused_step(dcpctl, "Megatron iteration newer than its tracker", r, "iter_0000002",
                 "latest_checkpointed_iteration.txt", "iter_0000001", "iter_0000000", tmp, in_step=False)
    doc = ls_json(dcpctl, r, "megatron tracker")
    check(doc.get("megatron_tracker") == "1", f"ls --json megatron_tracker {doc.get('megatron_tracker')!r}")


    r = copy("run_verl", "verl-unfinished")
    (r / "latest_checkpointed_iteration.txt").write_text("1")
    shutil.copytree(r / "global_step_1", r / "global_step_0")
    refused_step(dcpctl, "verl global_step newer than its tracker", r, "global_step_2",
                 "latest_checkpointed_iteration.txt", "global_step_1", "global_step_0", tmp, in_step=False)
    r = copy("run_verl", "verl-rank-missing")
    next((r / "global_step_2" / "actor").glob("model_world_size_*_rank_1.pt")).unlink()
    shutil.copytree(r / "global_step_1", r / "global_step_0")
    refused_step(dcpctl, "verl global_step missing rank 1's file", r, "global_step_2", "rank 1", "global_step_1",
                 "global_step_0", tmp)


def main() -> int:
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2]).resolve()
    before = {c: tree_digest(fixtures / "layouts" / c) for c in CASES}
    with tempfile.TemporaryDirectory(prefix="dcpctl-trainer-runs-") as t:
        tmp = Path(t)
        for case in CASES:
            check_case(dcpctl, case, fixtures, tmp)
            print(f"{case}: checked", flush=True)
        check_hf_folder(dcpctl, fixtures, tmp)
        check_verl_folder(dcpctl, fixtures, tmp)
        check_markers(dcpctl, fixtures, tmp)
    for c in CASES:
        check(tree_digest(fixtures / "layouts" / c) == before[c], f"{c}: the fixture changed")
    return summary("trainer_runs_test")


if __name__ == "__main__":
    sys.exit(main())
