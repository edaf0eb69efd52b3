#!/usr/bin/env python3
"""An HF folder dcpctl exports is a model from_pretrained takes, checked before it is put in place
(issue 49 item 2: write/formats/hf_folder.cpp, write/tied_head.h, write/model_subtree.h).

    hf_export_test.py DCPCTL FIXTURES_DIR

- torchtitan 0.3.0's tied Qwen 3 (layouts/titan_qwen3, enable_weight_tying: `lm_head.weight` saved
  beside `tok_embeddings.weight`, equal): `consolidate --map torchtitan-qwen3 -o DIR/` leaves the head
  out, as torchtitan's `to_hf` (hf/, the fixture's reference) and save_pretrained do, and says so in
  --json; the folder is to_hf's tensors bit for bit and transformers 5.23's from_pretrained loads it
  with no missing or unexpected key and torchtitan's logits. `-o x.safetensors` keeps the head.
- verl 0.9.1's FSDP2 save of a tied Llama (layouts/verl_fsdp2_tied, the head and the embedding one
  torch.save storage): the folder has no lm_head.weight, from_pretrained takes it (but the recipe's own buffer).
- The check before the rename: the same export with a config.json that says 3 layers (the
  checkpoint has 2) is exit 5 naming layer-missing and config.json (the checkpoint is intact:
  issue 68's exit codes), and leaves nothing (no folder, no temporary).
- The README's sample (app.model beside app.optim): `-o DIR/` takes app.model and says so;
  `-o x.safetensors` writes everything, with a note naming --select app.model. torchtitan's flat
  model keys beside optimizer.*: `-o DIR/` leaves optimizer.* out.

Exit status: 0 pass, 1 failure, 77 skip (torch/transformers missing; a failure under CI).
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from skip import skip_or_fail  # noqa: E402

try:
    import torch
    import transformers  # noqa: F401
    from safetensors.torch import load_file
except ImportError as e:
    skip_or_fail(f"torch, safetensors and transformers are needed ({e}); tools/requirements.txt pins them")

import map_oracle as mo  # noqa: E402
from testlib import EXIT_INVALID, EXIT_OK, EXIT_UNSUPPORTED, check, expect_rc, hf_loaded, problems, run, summary  # noqa: E402


def tensors(folder: Path) -> dict:
    sd = {}
    for p in sorted(folder.glob("*.safetensors")):
        sd.update(load_file(str(p)))
    return sd


def from_pretrained_clean(folder: Path, what: str, unexpected_ok: frozenset = frozenset()):
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, output_loading_info=True)
    info["unexpected_keys"] = set(info.get("unexpected_keys") or ()) - unexpected_ok
    bad = {k: v for k, v in info.items() if v}
    check(not bad, f"{what}: from_pretrained: {bad}")
    hf_loaded(folder)
    return model


def load_check_can_fail(cmd: list) -> None:
    """testlib's load of every HF folder a test writes (tests/hf_loadcheck.py) fails on a damaged
    copy: a key dropped (missing_keys), a key renamed (unexpected_keys and missing_keys), a shape cut
    (a size mismatch); the clean folder passes; an opt-out is counted, with its reason, not loaded."""
    from hf_loadcheck import Recorder, folder_digest
    from safetensors.torch import save_file
    rec = Recorder()
    for _ in range(4):
        rec.record(cmd, None, None)
    rec.record(cmd, None, "a partial folder on purpose")
    if not check(len(rec.records) == 4 and rec.skipped == {"opted out at the call site: a partial folder on purpose": 1},
                 f"the recorder took the folder of {cmd[1:]}: {len(rec.records)} records, skipped {rec.skipped}"):
        return
    damage = [lambda t: t.pop("model.norm.weight"),
              lambda t: t.__setitem__("model.norm.weights", t.pop("model.norm.weight")),
              lambda t: t.__setitem__("model.norm.weight", t["model.norm.weight"][:-1].clone())]
    for r, hurt in zip(rec.records[1:], damage):
        f = Path(r["copy"]) / "model.safetensors"
        t = load_file(str(f))
        hurt(t)
        save_file(t, str(f), metadata={"format": "pt"})
        r["digest"] = folder_digest(Path(r["copy"]))
    got = []
    rec.check(lambda ok, msg: got.append((ok, msg)))
    want = [(True, ["no missing"]), (False, ["missing_keys (1)", "'model.norm.weight'"]),
            (False, ["unexpected_keys (1)", "'model.norm.weights'", "missing_keys (1)", "'model.norm.weight'"]),
            (False, ["mismatched_keys (1)", "'model.norm.weight'"])]
    check(len(got) == 4 and all(ok == w_ok and all(n in msg for n in names) and str(cmd[2]) in msg
                                for (ok, msg), (w_ok, names) in zip(got, want)),
          f"the load check: the clean folder passes, a dropped, a renamed and a cut key each fail naming it: {got}")


def main() -> int:
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2]).resolve()
    with tempfile.TemporaryDirectory(prefix="dcpctl-hf-export-") as tmp:
        tmp = Path(tmp)
        case = next(c for c in mo.cases(fixtures) if c.name == "titan_qwen3")
        # torchtitan's tied Qwen 3 through its map.
        out = tmp / "qwen3"
        r = run(dcpctl, "consolidate", case.ckpt, "-o", f"{out}/", "--map", case.map, "--assets", case.hf_dir, "--json")
        if expect_rc(r, EXIT_OK, "titan_qwen3 -o DIR/"):
            doc = json.loads(r.stdout)
            got = tensors(out)
            check("lm_head.weight" not in got, "titan_qwen3 -o DIR/: lm_head.weight written though tied")
            check(doc["tie_word_embeddings"].get("left_out") == {"key": "lm_head.weight", "equal_to": "model.embed_tokens.weight"},
                  f"titan_qwen3: --json tie_word_embeddings {doc['tie_word_embeddings']}")
            check("lm_head.weight" in (doc.get("map") or {}).get("drop_reasons", {}), f"titan_qwen3: map {doc.get('map')}")
            ref = tensors(case.hf_dir)  # torchtitan's to_hf, saved by its HF storage writer
            check(set(got) == set(ref), f"titan_qwen3 -o DIR/: keys {sorted(set(got) ^ set(ref))} differ from to_hf's")
            problems(mo.check_from_pretrained(case, out, "titan_qwen3 -o DIR/"))
        one = tmp / "qwen3.safetensors"
        r = run(dcpctl, "consolidate", case.ckpt, "-o", one, "--map", case.map, "--config", case.config_path)
        if expect_rc(r, EXIT_OK, "titan_qwen3 -o x.safetensors"):
            check("lm_head.weight" in load_file(str(one)), "titan_qwen3 -o x.safetensors: the head is kept in a file")

        # verl's tied Llama: HF keys, the tie one stored record.
        verl = fixtures / "layouts" / "verl_fsdp2_tied" / "ckpt"
        out = tmp / "verl"
        # model.loss_scale: a buffer the fixture's recipe registers on the LlamaModel (make_verl.py,
        # verl issue #7610), which LlamaForCausalLM has no place for: the model schema refuses it
        # (exit 5: the checkpoint is intact, config.json does not describe it; nothing left), and
        # --exclude leaves it out.
        r = run(dcpctl, "consolidate", verl, "-o", f"{out}/")
        expect_rc(r, EXIT_UNSUPPORTED, "verl_fsdp2_tied -o DIR/ with model.loss_scale", "schema-key-unexpected",
                  "model.loss_scale", "--exclude")
        check(not out.exists(), "verl -o DIR/ refused: nothing left")
        r = run(dcpctl, "consolidate", verl, "-o", f"{out}/", "--json", "--exclude", "model.loss_scale")
        if expect_rc(r, EXIT_OK, "verl_fsdp2_tied -o DIR/ --exclude model.loss_scale"):
            got = tensors(out)
            check("lm_head.weight" not in got and "model.embed_tokens.weight" in got, f"verl -o DIR/: keys {sorted(got)[:4]}")
            from_pretrained_clean(out, "verl -o DIR/")
            load_check_can_fail([dcpctl, "consolidate", str(verl), "-o", f"{out}/", "--json", "--exclude", "model.loss_scale"])

        # The check before the rename: a config that disagrees with the tensors.
        assets = tmp / "assets3"
        shutil.copytree(case.hf_dir, assets)
        (assets / "model.safetensors").unlink()
        cfg = json.loads((assets / "config.json").read_text())
        cfg["num_hidden_layers"] = 3
        (assets / "config.json").write_text(json.dumps(cfg))
        bad = tmp / "bad"
        r = run(dcpctl, "consolidate", case.ckpt, "-o", f"{bad}/", "--map", case.map, "--assets", assets)
        expect_rc(r, EXIT_UNSUPPORTED, "a folder whose config says 3 layers", "layer-missing", "not put in place",
                  "config.json does not describe")
        check(not bad.exists() and not [p for p in tmp.iterdir() if "dcpctl-tmp" in p.name],
              f"a refused folder left {sorted(p.name for p in tmp.iterdir())}")

        # The README's sample: the model beside the optimizer.
        sample = fixtures / "sample" / "ckpt"
        out = tmp / "sample"
        r = run(dcpctl, "consolidate", sample, "-o", f"{out}/", "--json")
        if expect_rc(r, EXIT_OK, "sample -o DIR/", "--select app.model"):
            doc = json.loads(r.stdout)
            got = tensors(out)
            check(got and not [k for k in got if k.startswith(("app.", "optim"))], f"sample -o DIR/: keys {sorted(got)[:5]}")
            check(doc.get("model_subtree") == {"option": "--select app.model", "beside": "app.optim", "taken": True},
                  f"sample -o DIR/: --json model_subtree {doc.get('model_subtree')}")
            r2 = run(dcpctl, "consolidate", sample, "-o", tmp / "sel", "--select", "app.model", "--format", "hf")
            if expect_rc(r2, EXIT_OK, "sample --select app.model"):
                check(set(tensors(tmp / "sel")) == set(got), "sample -o DIR/ is not --select app.model's")
        f = tmp / "sample.safetensors"
        r = run(dcpctl, "consolidate", sample, "-o", f)
        if expect_rc(r, EXIT_OK, "sample -o x.safetensors", "--select app.model writes the model alone"):
            check(any(k.startswith("app.optim") for k in load_file(str(f))), "sample -o x.safetensors: no longer everything")
        # torchtitan's flat model keys beside optimizer.*, no map.
        out = tmp / "titan-flat"
        r = run(dcpctl, "consolidate", case.ckpt, "-o", f"{out}/", "--no-assets")
        if expect_rc(r, EXIT_OK, "titan_qwen3 -o DIR/ without --map", "--exclude 'optimizer.*'"):
            got = tensors(out)
            check(set(got) == set(case.model_keys), f"titan flat -o DIR/: {sorted(set(got) ^ set(case.model_keys))[:6]}")
    return summary("hf_export")


if __name__ == "__main__":
    sys.exit(main())
