#!/usr/bin/env python3
"""`dcpctl consolidate -o DIR/` keeps the files a Hugging Face folder needs beside its weights, checked
by real transformers (run with the project's venv python, which has transformers pinned).

    hf_assets_test.py DCPCTL FIXTURES_DIR

Fixtures: tests/fixtures/layouts/hf_transformers{,_tied} (make_transformers.py): transformers'
save_pretrained(ckpt, distributed_checkpoint=True) of a tiny Llama on 2 FSDP ranks (shards +
config.json + generation_config.json, and the tokenizer rank 0 saved beside them), start/ (the
folder the run started from) and dcp/ (dcp.save of the same model, nothing beside it).

Checks:
  - from the checkpoint's folder: the assets are copied byte for byte (sha256 as the fixture
    recorded), listed in --json `assets`, and nothing else lands in DIR/; then
    AutoModelForCausalLM.from_pretrained(DIR) gives the same logits, bit for bit, as the model
    loaded from start/ (float32, the same tokens, tokenized by the copied tokenizer, whose chat
    template renders as start/'s), and the same state dict; DIR/'s weights equal those of a
    --no-assets run byte for byte;
  - --no-assets: DIR/ holds only the weights, and from_pretrained(DIR) fails for want of config.json
    (the failure the assets fix); a DCP checkpoint with nothing beside it: a note on stderr;
  - --assets DIR (dcp/ with start/ as the source): start/'s files, and the same logits;
  - tie_word_embeddings: tied + lm_head.weight present (the FSDP shards), tied + absent
    (--exclude), untied + absent (--exclude: the note that transformers would initialise it);
  - an HF-mode `sharded/` folder given as the checkpoint: its parent's assets, the nearer folder
    winning a name both hold;
  - links: one leaving the checkpoint's folder is skipped (listed in assets_skipped), one inside it
    is copied, and in an --assets folder links are followed (a Hugging Face cache snapshot);
  - --dry-run lists them and writes nothing;
  - refusals, exit 2, nothing written: --assets with a .safetensors output, a missing --assets
    folder (named), a file given as --assets, --assets with --no-assets;
  - a copy that fails (an asset removed after the listing: DCPCTL_FAILPOINT=assets-copy:stop, the
    file removed, SIGCONT) exits 4 and leaves no output and no temporary;
  - under a launcher (2 ranks started by hand, --parallel-write): rank 0 copies the assets.

Exit status: 0 pass, 1 failure, 77 skip (torch/transformers missing; a failure instead under CI,
tests/skip.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testlib import check, record_hf_output, run, skip_or_fail, summary  # noqa: E402

try:
    import torch
    import transformers
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
except ImportError as e:
    skip_or_fail(f"torch, safetensors and transformers are needed ({e}); tools/requirements.txt pins them")

DCPCTL = ""
def consolidate(*args, env=None) -> subprocess.CompletedProcess:
    return run(DCPCTL, "consolidate", *args, env=dict(os.environ, **(env or {})))


def consolidate_json(label: str, *args) -> dict:
    p = consolidate(*args, "--json")
    if not check(p.returncode == 0, f"{label}: exit {p.returncode}: {p.stderr.strip()[-600:]}"):
        return {}
    doc = json.loads(p.stdout)
    doc["_stderr"] = p.stderr
    return doc


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def names(d: Path) -> list[str]:
    return sorted(n for n in os.listdir(d) if n != "dcpctl-manifest.json")  # dcpctl's manifest: e2e-manifest


def no_leftovers(work: Path, label: str) -> None:
    left = [n for n in os.listdir(work) if "dcpctl-tmp" in n]
    check(not left, f"{label}: temporaries left in {work}: {left}")


PROMPT = "hello world the quick brown fox"


def load(d: Path):
    return AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def same_model(label: str, got_dir: Path, start: Path, ids: torch.Tensor) -> None:
    """from_pretrained(got_dir) against from_pretrained(start): state dict and logits, bit for bit."""
    try:
        got = load(got_dir)
    except Exception as e:  # noqa: BLE001
        check(False, f"{label}: from_pretrained({got_dir}) failed: {type(e).__name__}: {e}")
        return
    ref = load(start)
    gs, rs = got.state_dict(), ref.state_dict()
    check(sorted(gs) == sorted(rs), f"{label}: state dict keys differ: {sorted(set(gs) ^ set(rs))}")
    bad = [k for k in rs if k in gs and not torch.equal(gs[k], rs[k])]
    check(not bad, f"{label}: tensors differ from start/'s: {bad[:5]}")
    lg, lr = logits(got, ids), logits(ref, ids)
    check(lg.dtype == torch.float32 and torch.equal(lg, lr),
          f"{label}: logits differ from start/'s (max abs diff {(lg - lr).abs().max().item():.3g})")


def test_from_checkpoint(fx: Path, work: Path) -> None:
    case = fx / "hf_transformers"
    expected = json.loads((case / "expected.json").read_text())
    assets = sorted(expected["assets"])
    check(set(assets) >= {"config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja"},
          f"fixture: assets of ckpt/ are {assets}")
    out = work / "hf"
    doc = consolidate_json("from ckpt/", case / "ckpt", "-o", f"{out}/")
    if not doc:
        return
    check(doc["assets"] == [str(out / n) for n in assets], f"from ckpt/: --json assets {doc['assets']}, want {assets}")
    check(doc["assets_skipped"] == [], f"from ckpt/: assets_skipped {doc['assets_skipped']}")
    check(names(out) == sorted(assets + ["model.safetensors"]), f"from ckpt/: DIR/ holds {names(out)}")
    for n in assets:
        check((out / n).read_bytes() == (case / "ckpt" / n).read_bytes() and sha256(out / n) == expected["assets"][n],
              f"from ckpt/: {n} is not a byte-for-byte copy")
    check(doc["tie_word_embeddings"] == {"config": False, "lm_head_weight": True, "left_out": None},
          f"from ckpt/: tie_word_embeddings {doc['tie_word_embeddings']}")
    check("beside the weights:" not in doc["_stderr"], "from ckpt/: --json printed the text summary")
    p = consolidate(case / "ckpt", "-o", f"{work / 'hf-text'}/")
    check(p.returncode == 0 and f"copied {len(assets)} file(s) beside the weights: " + " ".join(assets) in p.stderr,
          f"from ckpt/ (text): stderr {p.stderr!r}")

    tok = AutoTokenizer.from_pretrained(str(out))
    ref_tok = AutoTokenizer.from_pretrained(str(case / "start"))
    ids = tok(PROMPT, return_tensors="pt")["input_ids"]
    check(ids.shape[1] > 3 and torch.equal(ids, ref_tok(PROMPT, return_tensors="pt")["input_ids"]),
          f"from ckpt/: the copied tokenizer gives {ids.tolist()}")
    chat = [{"role": "user", "content": "hello world"}]
    got_chat = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    check(got_chat == ref_tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
          and got_chat.startswith("<s>user: hello world</s>"), f"from ckpt/: chat template renders {got_chat!r}")
    same_model("from ckpt/", out, case / "start", ids)

    # --no-assets: the weights alone (byte-identical to the run with assets); transformers refuses it
    bare = work / "hf-bare"
    doc = consolidate_json("--no-assets", case / "ckpt", "-o", f"{bare}/", "--no-assets")
    if doc:
        check(doc["assets"] == [] and doc["tie_word_embeddings"] is None, f"--no-assets: --json {doc['assets']}")
        check(names(bare) == ["model.safetensors"], f"--no-assets: DIR/ holds {names(bare)}")
        check((bare / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes(),
              "--no-assets: the weights differ from the run with assets")
        try:
            load(bare)
            check(False, "--no-assets: from_pretrained loaded a folder without config.json")
        except Exception as e:  # noqa: BLE001  (the failure that made this feature)
            check("config" in str(e).lower() or "model_type" in str(e), f"--no-assets: from_pretrained failed with {e}")


def test_assets_from(fx: Path, work: Path) -> None:
    case = fx / "hf_transformers"
    start = case / "start"
    want = sorted(n for n in names(start) if not n.endswith(".safetensors"))
    # a DCP checkpoint with nothing beside it: a note, no assets
    out = work / "dcp-none"
    doc = consolidate_json("dcp/ without --assets", case / "dcp", "-o", f"{out}/")
    if doc:
        check(doc["assets"] == [] and names(out) == ["model.safetensors"], f"dcp/ without --assets: {names(out)}")
        check("no config.json in" in doc["_stderr"] and "--assets" in doc["_stderr"],
              f"dcp/ without --assets: no note on stderr: {doc['_stderr']!r}")
        p = consolidate(case / "dcp", "-o", f"{work / 'dcp-none-q'}/", "-q")
        check(p.returncode == 0 and p.stderr == "", f"dcp/ -q: stderr {p.stderr!r}")
    out = work / "dcp-assets"
    doc = consolidate_json("--assets start/", case / "dcp", "-o", f"{out}/", "--assets", start)
    if not doc:
        return
    check(doc["assets"] == [str(out / n) for n in want], f"--assets start/: --json assets {doc['assets']}")
    check(names(out) == sorted(want + ["model.safetensors"]), f"--assets start/: DIR/ holds {names(out)}")
    for n in want:
        check((out / n).read_bytes() == (start / n).read_bytes(), f"--assets start/: {n} differs from start/'s")
    check("no config.json" not in doc["_stderr"], "--assets start/: the missing-config note was printed")
    tok = AutoTokenizer.from_pretrained(str(out))
    same_model("--assets start/", out, start, tok(PROMPT, return_tensors="pt")["input_ids"])


def test_tied(fx: Path, work: Path) -> None:
    case = fx / "hf_transformers_tied"
    ids = torch.tensor([[1, 7, 19, 33, 42, 2]])
    out = work / "tied"
    doc = consolidate_json("tied", case / "ckpt", "-o", f"{out}/")
    if doc:
        t = doc["tie_word_embeddings"] or {}
        # Equal to the embedding: left out, as save_pretrained leaves it (issue 49; hf_export_test.py)
        check(t.get("config") is True and t.get("lm_head_weight") is False
              and t.get("left_out") == {"key": "lm_head.weight", "equal_to": "model.embed_tokens.weight"},
              f"tied, lm_head.weight left out: tie_word_embeddings {t}")
        check("lm_head.weight" not in load_file(str(out / "model.safetensors")), "tied: lm_head.weight was kept")
        same_model("tied", out, case / "start", ids)
    out = work / "tied-nohead"
    doc = consolidate_json("tied --exclude lm_head.weight", case / "ckpt", "-o", f"{out}/", "--exclude", "lm_head.weight")
    if doc:
        check(doc["tie_word_embeddings"] == {"config": True, "lm_head_weight": False, "left_out": None},
              f"tied, no lm_head.weight: tie_word_embeddings {doc['tie_word_embeddings']}")
        same_model("tied --exclude lm_head.weight", out, case / "start", ids)
    # An untied model without its head is a folder from_pretrained would fill at random: the export's
    # own check refuses it (lm-head-missing) and leaves nothing (issue 49 item 2); the checkpoint is
    # intact and config.json does not describe what was selected: exit 5 (issue 68 item 3).
    r = run(DCPCTL, "consolidate", fx / "hf_transformers" / "ckpt", "-o", f"{work / 'untied-nohead'}/", "--exclude", "lm_head.weight")
    check(r.returncode == 5 and "lm-head-missing" in r.stderr and "at random" in r.stderr and not (work / "untied-nohead").exists(),
          f"untied --exclude lm_head.weight: exit {r.returncode}: {r.stderr[-400:]}")


def test_sharded_parent(fx: Path, work: Path) -> None:
    src = fx / "hf_transformers" / "ckpt"
    ck = work / "hc"
    shutil.copytree(fx / "hf_consolidated" / "ckpt", ck)  # torch's enable_consolidation layout
    for n in ("config.json", "generation_config.json", "tokenizer.json"):
        shutil.copy(src / n, ck / n)
    # Another model's config (this test is where assets are found): without the fields the export's
    # own checks compare with the tensors (the model schema's model_type among them), which are not
    # this model's.
    cfg = json.loads((ck / "config.json").read_text())
    for k in ("vocab_size", "num_hidden_layers", "tie_word_embeddings", "dtype", "torch_dtype", "model_type", "architectures"):
        cfg.pop(k, None)
    (ck / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (ck / "sharded" / "generation_config.json").write_text('{"nearer": true}\n')
    out = work / "hc-out"
    doc = consolidate_json("sharded/", ck / "sharded", "-o", f"{out}/")
    if doc:
        want = ["config.json", "generation_config.json", "tokenizer.json"]
        check(doc["assets"] == [str(out / n) for n in want], f"sharded/: --json assets {doc['assets']}")
        check((out / "config.json").read_bytes() == (ck / "config.json").read_bytes(), "sharded/: the parent's config.json")
        check((out / "generation_config.json").read_text() == '{"nearer": true}\n',
              "sharded/: generation_config.json is not sharded/'s own (the nearer folder wins)")
    doc = consolidate_json("parent of sharded/", ck, "-o", f"{work / 'hc-top'}/")
    if doc:
        check(len(doc["assets"]) == 3, f"parent of sharded/: --json assets {doc['assets']}")


def test_links(fx: Path, work: Path) -> None:
    ck = work / "linked"
    shutil.copytree(fx / "hf_transformers" / "ckpt", ck)
    secret = work / "outside-secret.txt"
    secret.write_text("not for the output\n")
    (ck / "tokenizer.json").unlink()
    os.symlink(secret, ck / "tokenizer.json")  # leaves the folder: skipped
    os.symlink("tokenizer_config.json", ck / "special_tokens_map.json")  # inside: copied
    os.symlink("missing.json", ck / "added_tokens.json")  # dangling: skipped
    out = work / "linked-out"
    doc = consolidate_json("links", ck, "-o", f"{out}/")
    if doc:
        skipped = {s["path"]: s["reason"] for s in doc["assets_skipped"]}
        check(str(ck / "tokenizer.json") in skipped and "leaves" in skipped[str(ck / "tokenizer.json")],
              f"links: the link leaving the folder was not skipped: {doc['assets_skipped']}")
        check(str(ck / "added_tokens.json") in skipped, f"links: the dangling link was not skipped: {doc['assets_skipped']}")
        check(not (out / "tokenizer.json").exists(), "links: a link leaving the folder was copied")
        sp = out / "special_tokens_map.json"
        check(sp.is_file() and not sp.is_symlink() and sp.read_bytes() == (ck / "tokenizer_config.json").read_bytes(),
              "links: the link inside the folder was not copied as a file")
        check("not copied beside the weights: " + str(ck / "tokenizer.json") in doc["_stderr"],
              f"links: no note on stderr: {doc['_stderr']!r}")
    # an --assets folder laid out as a Hugging Face cache snapshot: every file a link to ../../blobs/
    repo = work / "models--tiny"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    start = fx / "hf_transformers" / "start"
    for n in names(start):
        blob = repo / "blobs" / sha256(start / n)
        shutil.copy(start / n, blob)
        os.symlink(os.path.join("..", "..", "blobs", blob.name), snap / n)
    out = work / "snapshot-out"
    doc = consolidate_json("--assets snapshot", fx / "hf_transformers" / "dcp", "-o", f"{out}/", "--assets", snap)
    if doc:
        want = sorted(n for n in names(start) if not n.endswith(".safetensors"))
        check(doc["assets"] == [str(out / n) for n in want] and doc["assets_skipped"] == [],
              f"--assets snapshot: {doc['assets']} / {doc['assets_skipped']}")
        check(all((out / n).is_file() and not (out / n).is_symlink() and (out / n).read_bytes() == (start / n).read_bytes()
                  for n in want), "--assets snapshot: the copies are not the blobs' bytes")


def test_dry_run_and_refusals(fx: Path, work: Path) -> None:
    case = fx / "hf_transformers"
    out = work / "dry"
    p = consolidate(case / "ckpt", "-o", f"{out}/", "--dry-run", "--json")
    if check(p.returncode == 0, f"--dry-run: exit {p.returncode}: {p.stderr}"):
        doc = json.loads(p.stdout)
        check(len(doc["assets"]) == len(json.loads((case / "expected.json").read_text())["assets"]),
              f"--dry-run: --json assets {doc['assets']}")
        check(not out.exists(), "--dry-run wrote the output")
    p = consolidate(case / "ckpt", "-o", f"{out}/", "--dry-run")
    check(p.returncode == 0 and f"{out}/config.json  (copied beside the weights)" in p.stdout, f"--dry-run text: {p.stdout!r}")

    before = names(work)
    for label, args, needle in [
        (".safetensors output", ["-o", work / "x.safetensors", "--assets", case / "start"], "DIR/"),
        (".pt output", ["-o", work / "x.pt", "--assets", case / "start"], "DIR/"),
        ("missing folder", ["-o", f"{work / 'x'}/", "--assets", work / "nowhere"], str(work / "nowhere")),
        ("a file", ["-o", f"{work / 'x'}/", "--assets", case / "start" / "config.json"], "not a folder"),
        ("with --no-assets", ["-o", f"{work / 'x'}/", "--assets", case / "start", "--no-assets"], "--no-assets"),
    ]:
        p = consolidate(case / "ckpt", *args)
        check(p.returncode == 2 and needle in p.stderr and p.stdout == "",
              f"--assets {label}: exit {p.returncode} (want 2), stderr {p.stderr.strip()!r} (want {needle!r})")
        p = consolidate(case / "ckpt", *args, "--dry-run")
        check(p.returncode == 2, f"--assets {label} --dry-run: exit {p.returncode} (want 2)")
    check(names(work) == before, f"refusals wrote something: {sorted(set(names(work)) - set(before))}")


def test_failed_copy(fx: Path, work: Path) -> None:
    src = work / "vanishing"
    shutil.copytree(fx / "hf_transformers" / "start", src)
    out = work / "failed"
    before = names(work)
    p = subprocess.Popen([DCPCTL, "consolidate", str(fx / "hf_transformers" / "dcp"), "-o", f"{out}/", "--assets", str(src)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, DCPCTL_FAILPOINT="assets-copy:stop"))
    stopped = False
    for _ in range(6000):  # wait (up to 300 s: far above what load adds) until it stopped itself at the failpoint
        try:
            state = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "T":
            stopped = True
            break
        time.sleep(0.05)
    if not check(stopped, "failed copy: dcpctl never stopped at the assets-copy failpoint"):
        p.kill()
        p.communicate()
        return
    check(any("dcpctl-tmp" in n for n in names(work)), "failed copy: no temporary output while stopped mid-run")
    (src / "tokenizer.json").unlink()
    os.kill(p.pid, signal.SIGCONT)
    _, err = p.communicate(timeout=120)
    check(p.returncode == 4 and "tokenizer.json" in err, f"failed copy: exit {p.returncode} (want 4), stderr {err.strip()!r}")
    check(names(work) == before, f"failed copy left {sorted(set(names(work)) - set(before))}")
    no_leftovers(work, "failed copy")


def test_torchrun(fx: Path, work: Path) -> None:
    case = fx / "hf_transformers"
    for label, extra, want_rc in (("torchrun --parallel-write", ["--parallel-write"], 0),
                                  ("torchrun --assets missing", ["--assets", str(work / "nowhere")], 2)):
        out = work / ("tr-" + str(want_rc))
        for attempt in range(2):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            args = [DCPCTL, "consolidate", str(case / "ckpt"), "-o", f"{out}/", "--json", "--timeout", "300", *extra]
            procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                                               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
                     for r in range(2)]
            res = [pr.communicate(timeout=600) + (pr.returncode,) for pr in procs]
            if attempt == 0 and any("ddress already in use" in err for _, err, _ in res):
                continue
            break
        detail = "; ".join(f"rank {r}: exit {rc}, {err.strip()[-300:]!r}" for r, (_, err, rc) in enumerate(res))
        if not check(all(rc == want_rc for _, _, rc in res), f"{label}: {detail}"):
            continue
        if want_rc == 0:
            record_hf_output(args)  # loaded by transformers before the summary (testlib.run's check)
            doc = json.loads(res[0][0])
            assets = sorted(json.loads((case / "expected.json").read_text())["assets"])
            check(doc["ranks"] == 2 and doc["assets"] == [str(out / n) for n in assets], f"{label}: --json {doc['assets']}")
            check(names(out) == sorted(assets + ["model.safetensors"]), f"{label}: DIR/ holds {names(out)}")
            check(all((out / n).read_bytes() == (case / "ckpt" / n).read_bytes() for n in assets), f"{label}: copies differ")
        else:
            check(not out.exists() and all(str(work / "nowhere") in err for _, err, _ in res), f"{label}: {detail}")
    no_leftovers(work, "torchrun")


def main() -> int:
    global DCPCTL
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    DCPCTL = sys.argv[1]
    fixtures = Path(sys.argv[2]).resolve()
    fx = fixtures / "layouts"
    print(f"torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="dcpctl-hf-assets-") as tmp:
        for test in (test_from_checkpoint, test_assets_from, test_tied, test_sharded_parent, test_links,
                     test_dry_run_and_refusals, test_failed_copy, test_torchrun):
            work = Path(tmp) / test.__name__
            work.mkdir()
            t0 = time.monotonic()
            try:
                test(fx, work)
            except Exception as e:  # noqa: BLE001  (one test's crash fails it; the others still run)
                check(False, f"{test.__name__}: {type(e).__name__}: {e}")
            print(f"{test.__name__}: {time.monotonic() - t0:.1f} s", flush=True)
    return summary("hf_assets_test")


if __name__ == "__main__":
    sys.exit(main())
