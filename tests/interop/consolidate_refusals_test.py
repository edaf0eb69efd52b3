#!/usr/bin/env python3
"""`dcpctl consolidate` refusals and failure paths (run with the project's venv python).

    consolidate_refusals_test.py CASE DCPCTL FIXTURES_DIR

Every case works on copies of real fixtures (or on a checkpoint written here by real torch) and
checks, besides its own point, that the input checkpoint's files are unchanged (sha256 of every
file before/after) and that no output or temporary (`.NAME.dcpctl-tmp-PID`) is left behind.

CASE is one of:
  incomplete   a chunk of a sharded tensor removed from a copy's .metadata (chunks list and
               storage_data, re-pickled with torch's classes): exit 3, the key and the hole listed,
               nothing written (also --dry-run, every output format); holes in two tensors: both
               listed; a chunk whose storage entry alone is gone: exit 3; --exclude of the broken
               keys: exit 0; a missing .distcp file: MISSING_DATA_FILE_EXIT, file named, nothing written.
  overwrite    an existing output (file, HF dir) without --force: exit 2, output untouched, also
               with --dry-run (it makes the real run's output checks); --force replaces it with a
               correct output; an existing empty dir (exit 2); a lone file where a dir output goes.
Every refusal must give its exact documented exit code (a crash or a signal fails) and name what
was wrong on stderr.
  dry-run      --dry-run writes nothing for every format (plan on stdout, --json plan).
  inside       outputs inside the checkpoint, the checkpoint itself, a symlink to it, a path through
               `..`, and a parent directory of the checkpoint: refused, checkpoint untouched.
  full-disk    `ulimit -f 64` (file size limit 64 KiB; dcpctl ignores SIGXFSZ so writes fail with
               EFBIG): exit 4 for every format, nothing left behind; an existing output replaced with
               --force stays intact. Then, where mounting is permitted, a 128 KiB tmpfs (ENOSPC).
  signals      SLOW. A ~320 MB checkpoint written by torch (dcp.save, one process); runs killed with
               SIGTERM and SIGINT mid-write for every format (and over an existing output with
               --force): the process dies of the signal, no output, no temporary, the old output
               intact.
  killed       A ~96 MB checkpoint written by torch (dcp.save); a consolidate to a file and to a
               folder and a reshard (a folder) killed with SIGKILL at three points: just after its
               temporary was made (DCPCTL_FAILPOINT created/NAME:stop, then kill -9), mid-write,
               and with the whole output under its temporary name (rename/NAME:stop). Each leaves
               `.NAME.dcpctl-tmp-PID-START@HOST`; the next run to the same output removes it and
               says so, and writes what an uninterrupted run writes (byte for byte; loaded by torch).
               A live run's temporary (stopped at created/NAME) and one named for another host are
               left alone and named. `dcpctl prune RUN --keep 2` (and --dry-run, --json) lists a
               dead run's temporary in a run folder and removes it, and keeps the others.
Exit status: 0 pass, 1 failure, 77 skip (torch missing; a failure instead under CI, tests/skip.py).
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testlib import check, fail, run, skip_or_fail, summary, tree_digest  # noqa: E402

try:
    import torch
except ImportError as e:  # pragma: no cover
    skip_or_fail(f"the virtualenv lacks a module: {e}")

HERE = Path(__file__).resolve().parent
# A .distcp that .metadata references but that is absent makes the checkpoint incomplete: exit 3
# in every command, as verify reports it (README "Exit codes"); 4 is for reads that fail.
MISSING_DATA_FILE_EXIT = 3
DCPCTL = ""


def consolidate(*args: str, timeout: int = 600, pre: str | None = None) -> tuple[int, str, str]:
    """dcpctl consolidate ARGS (after the shell command pre, e.g. a ulimit): (exit code, stdout,
    stderr); a crash is a failure (testlib.run)."""
    cmd = [DCPCTL, "consolidate", *args]
    if pre:
        cmd = ["bash", "-c", pre + '; exec "$@"', "bash", *cmd]
    p = run(cmd, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def listing(d: Path) -> list[str]:
    return sorted(os.listdir(d))


class Guard:
    """Checks that the checkpoint is unchanged and `workdir` holds exactly what it held before."""

    def __init__(self, ckpt: Path, workdir: Path, what: str):
        self.ckpt, self.workdir, self.what = ckpt, workdir, what
        self.before = tree_digest(ckpt)
        self.list_before = listing(workdir)

    def check(self, allow_new: list[str] = ()) -> None:
        after = tree_digest(self.ckpt)
        if after != self.before:
            changed = sorted(k for k in set(after) | set(self.before) if after.get(k) != self.before.get(k))
            fail(f"{self.what}: input checkpoint changed: {changed[:6]}")
        now = listing(self.workdir)
        extra = sorted(set(now) - set(self.list_before) - set(allow_new))
        extra = [n for n in extra if not n.endswith("dcpctl-manifest.json")]  # beside an output written: e2e-manifest
        gone = sorted(set(self.list_before) - set(now))
        check(not (extra or gone), f"{self.what}: directory listing changed: new {extra}, gone {gone}")
        tmps = [p for p in now if "dcpctl-tmp" in p]
        if tmps:
            fail(f"{self.what}: temporary left: {tmps}")
            for t in tmps:  # so that later checks stay independent
                q = self.workdir / t
                shutil.rmtree(q) if q.is_dir() else q.unlink()


def outp(work: Path, out: str) -> str:
    """work/out as a string, keeping a trailing '/' (pathlib drops it; dcpctl reads DIR/ as an HF dir)."""
    return str(work / out) + ("/" if out.endswith("/") else "")


def copy_fixture(fixtures: Path, case: str, dst: Path) -> Path:
    shutil.copytree(fixtures / case / "ckpt", dst)
    return dst


# An HF folder of the sample takes its model subtree alone (app.model, 53 KB): --include '*' keeps
# the whole state in it, as the other formats write it, so that every output is as large.
FORMATS = [("st", "out.safetensors", []), ("hf", "outdir/", ["--max-shard-size", "20000", "--include", "*"]),
           ("pt", "out.pt", []), ("flat", "out_flat.pt", ["--flat"])]


# ------------------------------------------------------------------------------------------------


def case_incomplete(fixtures: Path, tmp: Path) -> None:
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata

    work = tmp / "w"
    work.mkdir()
    ck = copy_fixture(fixtures, "sample", work / "ckpt")
    with open(ck / ".metadata", "rb") as f:
        md = pickle.load(f)  # trusted fixture (torch's own classes)
    sharded = [k for k, v in md.state_dict_metadata.items()
               if isinstance(v, TensorStorageMetadata) and sum(1 for c in v.chunks if all(s > 0 for s in c.sizes)) >= 2]
    if not check(len(sharded) >= 2, f"sample has fewer than 2 sharded tensors: {sharded}"):
        return
    k1, k2 = sharded[0], sharded[-1]

    def drop_chunk(md, key, which, storage_only=False):
        tm = md.state_dict_metadata[key]
        ch = tm.chunks[which]
        idx = MetadataIndex(key, ch.offsets)
        sd = md.storage_data
        match = [i for i in sd if i.fqn == key and tuple(i.offset) == tuple(ch.offsets)]
        assert match, (key, ch.offsets)
        for i in match:
            del sd[i]
        if not storage_only:
            del tm.chunks[which]
        return tuple(ch.offsets), tuple(ch.sizes), idx

    orig = (ck / ".metadata").read_bytes()

    # 1: the last chunk of k1 gone (metadata + storage)
    off, sizes, _ = drop_chunk(md, k1, -1)
    with open(ck / ".metadata", "wb") as f:
        pickle.dump(md, f)
    g = Guard(ck, work, "incomplete 1 hole")
    for label, out, extra in FORMATS:
        for dry in ([], ["--dry-run"]):
            rc, _, err = consolidate(str(ck), "-o", outp(work, out), *extra, *dry)
            what = f"incomplete {label} {' '.join(dry)}"
            check(rc == 3, f"{what}: exit {rc}, want 3: {err.strip()[:300]}")
            check(k1 in err, f"{what}: the incomplete key {k1} is not named: {err.strip()[:300]}")
            # the hole: rows off[0]..off[0]+sizes[0] of dim 0
            check(str(off[0]) in err,
                  f"{what}: the hole (offsets {off}, sizes {sizes}) is not shown: {err.strip()[:300]}")
    g.check()
    print(f"1 hole: {err.strip()[:400]}")
    # other keys are fine: excluding the broken one works
    rc, _, err = consolidate(str(ck), "-o", str(work / "ok.safetensors"), "--exclude", k1)
    check(rc == 0, f"incomplete: --exclude {k1}: exit {rc}: {err.strip()[:300]}")
    (work / "ok.safetensors").unlink(missing_ok=True)

    # 2: a hole in a second tensor too: both listed
    drop_chunk(md, k2, 0)
    with open(ck / ".metadata", "wb") as f:
        pickle.dump(md, f)
    g = Guard(ck, work, "incomplete 2 holes")
    rc, _, err = consolidate(str(ck), "-o", str(work / "out.safetensors"))
    check(not (rc != 3 or k1 not in err or k2 not in err),
          f"incomplete 2 holes: exit {rc} (want 3), names {k1}: {k1 in err}, {k2}: {k2 in err}: {err.strip()[:400]}")
    g.check()
    rc, _, err = consolidate(str(ck), "-o", str(work / "ok.pt"), "--exclude", k1, "--exclude", k2)
    check(rc == 0, f"incomplete 2 holes: excluding both: exit {rc}: {err.strip()[:300]}")
    (work / "ok.pt").unlink(missing_ok=True)

    # 3: the chunk is listed but its storage entry is gone
    (ck / ".metadata").write_bytes(orig)
    with open(ck / ".metadata", "rb") as f:
        md = pickle.load(f)
    drop_chunk(md, k1, 0, storage_only=True)
    with open(ck / ".metadata", "wb") as f:
        pickle.dump(md, f)
    g = Guard(ck, work, "incomplete no storage entry")
    for label, out, extra in FORMATS:
        rc, _, err = consolidate(str(ck), "-o", outp(work, out), *extra)
        check(not (rc != 3 or k1 not in err),
              f"incomplete no storage entry {label}: exit {rc} (want 3), key named {k1 in err}: {err.strip()[:300]}")
    g.check()
    print(f"no storage entry: {err.strip()[:300]}")

    # 4: a data file missing: a read failure, nothing written
    (ck / ".metadata").write_bytes(orig)
    victim = sorted(p for p in ck.iterdir() if p.suffix == ".distcp")[-1]
    saved = victim.read_bytes()
    victim.unlink()
    g = Guard(ck, work, "missing .distcp")
    for label, out, extra in FORMATS:
        rc, _, err = consolidate(str(ck), "-o", outp(work, out), *extra)
        check(rc == MISSING_DATA_FILE_EXIT,
              f"missing {victim.name} {label}: exit {rc}, want {MISSING_DATA_FILE_EXIT}: {err.strip()[:300]}")
        check(victim.name in err, f"missing {victim.name} {label}: file not named: {err.strip()[:300]}")
    print(f"missing file: exit {rc}: {err.strip()[:300]}")
    g.check()
    victim.write_bytes(saved)


def case_overwrite(fixtures: Path, tmp: Path) -> None:
    import safetensors.torch as st

    work = tmp / "w"
    work.mkdir()
    ck = copy_fixture(fixtures, "dtensor_shard0_uneven", work / "ckpt")
    for label, out, extra in FORMATS:
        p = work / out.rstrip("/")
        if out.endswith("/"):
            p.mkdir()
            (p / "model.safetensors").write_bytes(b"old shard")
            (p / "config.json").write_text("{}")
        else:
            p.write_bytes(b"old content")
        snap = {q: q.read_bytes() for q in ([p] if p.is_file() else list(p.iterdir()))}
        g = Guard(ck, work, f"overwrite {label}")
        rc, _, err = consolidate(str(ck), "-o", outp(work, out), *extra)
        check(rc == 2, f"overwrite {label}: existing output without --force: exit {rc}, want 2: {err.strip()[:200]}")
        check(not ("force" not in err or str(p) not in err),
              f"overwrite {label}: message does not name {p} and --force: {err.strip()[:200]}")
        for q, b in snap.items():
            check(not (not q.exists() or q.read_bytes() != b), f"overwrite {label}: {q.name} changed without --force")
        g.check()
        # a dry run makes the same output checks: refused too, and writes nothing
        rc, _, err = consolidate(str(ck), "-o", outp(work, out), *extra, "--dry-run")
        check(not (rc != 2 or "force" not in err or str(p) not in err),
              f"overwrite {label} --dry-run: existing output without --force: exit {rc}, want 2 naming "
                 f"{p} and --force: {err.strip()[:200]}")
        for q, b in snap.items():
            check(not (not q.exists() or q.read_bytes() != b), f"overwrite {label} --dry-run: {q.name} changed")
        # --force replaces it
        rc, _, err = consolidate(str(ck), "-o", outp(work, out), *extra, "--force")
        if not check(rc == 0, f"overwrite {label} --force: exit {rc}: {err.strip()[:200]}"):
            continue
        g.check(allow_new=[])
        if label in ("st",):
            sd = st.load_file(str(p))
        elif label == "hf":
            names = listing(p)
            if "config.json" not in names:
                print("NOTE: --force on an HF dir output removed the directory's other files (config.json)")
            sd = {}
            for n in names:
                if n.endswith(".safetensors"):
                    sd.update(st.load_file(str(p / n)))
        else:
            sd = torch.load(p, weights_only=True)
        check(any(isinstance(v, torch.Tensor) for v in sd.values()),
              f"overwrite {label} --force: the replaced output holds no tensors")
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()

    # an existing empty directory as a dir output
    d = work / "emptydir"
    d.mkdir()
    rc, _, err = consolidate(str(ck), "-o", str(d) + "/")
    check(not (rc != 2 or str(d) not in err or "force" not in err),
          f"existing empty dir without --force: exit {rc}, want 2 naming it and --force: {err.strip()[:200]}")
    shutil.rmtree(d)
    # a file where the dir output should go, without --force: refused, file intact
    f = work / "afile"
    f.write_bytes(b"keep me")
    rc, _, err = consolidate(str(ck), "-o", str(f) + "/")
    check(not (rc != 2 or str(f) not in err or f.read_bytes() != b"keep me"),
          f"file in place of dir output: exit {rc} (want 2 naming it), intact {f.read_bytes() == b'keep me'}: "
             f"{err.strip()[:200]}")
    f.unlink()
    # output's parent directory missing: exit 4 (I/O), nothing created
    g = Guard(ck, work, "missing parent")
    rc, _, err = consolidate(str(ck), "-o", str(work / "nope" / "x.safetensors"))
    check(not (rc != 4 or str(work / "nope") not in err),
          f"missing parent dir: exit {rc}, want 4 naming {work / 'nope'}: {err.strip()[:200]}")
    g.check()


def case_dry_run(fixtures: Path, tmp: Path) -> None:
    import json

    work = tmp / "w"
    work.mkdir()
    ck = copy_fixture(fixtures, "sample", work / "ckpt")
    g = Guard(ck, work, "dry-run")
    for label, out, extra in FORMATS + [("hf-default", "hfdef/", ["--include", "*"])]:
        for j in ([], ["--json"]):
            rc, stdout, err = consolidate(str(ck), "-o", outp(work, out), *extra, "--dry-run", *j)
            if not check(rc == 0, f"dry-run {label}: exit {rc}: {err.strip()[:200]}"):
                continue
            if j:
                s = json.loads(stdout)
                check(not (not s.get("dry_run") or not s.get("plan")),
                      f"dry-run {label} --json: dry_run/plan missing: {list(s)}")
            elif "nothing written" not in stdout:
                fail(f"dry-run {label}: no plan on stdout: {stdout[:200]}")
        g.check()


def case_inside(fixtures: Path, tmp: Path) -> None:
    work = tmp / "w"
    work.mkdir()
    ck = copy_fixture(fixtures, "plain_single", work / "ckpt")
    (work / "link").symlink_to("ckpt")
    outs = [
        ([str(ck / "model.safetensors")], 2),
        ([str(ck / "model.pt")], 2),
        ([str(ck) + "/"], 2),
        ([str(ck), "--force"], 2),
        ([str(ck) + "/", "--force"], 2),
        ([str(ck), "--force", "--format", "torch"], 2),
        ([str(work / "link"), "--force"], 2),
        ([str(work / "link") + "/", "--force", "--format", "hf"], 2),
        ([str(work / "link" / "x.safetensors")], 2),
        ([str(work / "w2" / ".." / "ckpt" / "x.pt")], 4),  # w2 does not exist: the output's directory is missing
        ([str(ck / "sub") + "/"], 2),
        ([str(ck / "." / "m.safetensors")], 2),
    ]
    for args, want in outs:
        for dry in ([], ["--dry-run"]):
            g = Guard(ck, work, f"inside {args} {dry}")
            rc, _, err = consolidate(str(ck), "-o", *args, *dry)
            check(not (rc != want or args[0].rstrip("/") not in err),
                  f"output {args} {dry}: exit {rc}, want {want} naming the output: {err.strip()[:200]}")
            g.check()
    # a directory holding the checkpoint, as an HF dir output with --force: replacing it would
    # delete the input
    parent = work / "parent"
    parent.mkdir()
    ck2 = copy_fixture(fixtures, "plain_single", parent / "ckpt")
    before = tree_digest(ck2)
    for args in ([str(parent) + "/", "--force"], [str(parent), "--force", "--format", "hf"]):
        rc, _, err = consolidate(str(ck2), "-o", *args)
        if not ck2.exists() or tree_digest(ck2) != before:
            fail(f"output {args} (the checkpoint's parent dir) with --force: exit {rc}; the input checkpoint "
                 f"was {'deleted' if not ck2.exists() else 'changed'}")
            if not ck2.exists():
                shutil.rmtree(parent, ignore_errors=True)
                parent.mkdir(exist_ok=True)
                ck2 = copy_fixture(fixtures, "plain_single", parent / "ckpt")
        elif rc != 2 or "contains the checkpoint" not in err:
            fail(f"output {args} (the checkpoint's parent dir): exit {rc}, want 2 and 'contains the checkpoint': "
                 f"{err.strip()[:200]}")
    # same for .pt: a file output cannot contain the checkpoint, fine; the checkpoint's own
    # .metadata or a data file as output
    for target in (ck / ".metadata", sorted(ck.glob("*.distcp"))[0]):
        g = Guard(ck, work, f"output {target.name}")
        rc, _, err = consolidate(str(ck), "-o", str(target), "--force", "--format", "torch")
        check(not (rc != 2 or "inside the checkpoint" not in err),
              f"output {target} --force: exit {rc}, want 2 and 'inside the checkpoint': {err.strip()[:200]}")
        g.check()


def case_full_disk(fixtures: Path, tmp: Path) -> None:
    work = tmp / "w"
    work.mkdir()
    ck = copy_fixture(fixtures, "sample", work / "ckpt")  # 548 KB of tensors > 64 KiB
    lim = "ulimit -f 64"
    # HF shards bigger than the 64 KiB limit (each file is limited, not the total)
    full_formats = [f for f in FORMATS if f[0] != "hf"] + [("hf", "outdir/", ["--max-shard-size", "100000", "--include", "*"]),
                                                           ("hf-default", "hfdef/", ["--include", "*"])]
    for label, out, extra in full_formats:
        for threads in (["--threads", "1"], ["--threads", "4"]):
            g = Guard(ck, work, f"full disk {label}")
            rc, _, err = consolidate(str(ck), "-o", outp(work, out), *extra, *threads, pre=lim)
            if rc != 4:
                fail(f"full disk {label} {threads}: exit {rc}, want 4: {err.strip()[:300]}")
            # a DIR/ output's shards are named inside its temporary directory (.NAME.dcpctl-tmp-PID/)
            elif "File too large" not in err or out.rstrip("/") not in err:
                fail(f"full disk {label} {threads}: the message does not name the output and EFBIG: {err.strip()[:300]}")
            g.check()
    print(f"full disk: {err.strip()[:300]}")
    # an existing output stays intact when the --force replacement fails
    p = work / "keep.safetensors"
    p.write_bytes(b"previous good output")
    rc, _, err = consolidate(str(ck), "-o", str(p), "--force", pre=lim)
    check(not (rc != 4 or p.read_bytes() != b"previous good output"),
          f"full disk --force over an existing file: exit {rc}, old output intact: {p.read_bytes() == b'previous good output'}")
    d = work / "keepdir"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"old")
    rc, _, err = consolidate(str(ck), "-o", str(d) + "/", "--include", "*", "--force", pre=lim)
    check(not (rc != 4 or listing(d) != ["model.safetensors"] or (d / "model.safetensors").read_bytes() != b"old"),
          f"full disk --force over an existing dir: exit {rc}, dir now {listing(d)}")
    check(not ([x for x in listing(work) if "dcpctl-tmp" in x]), f"full disk: temporaries left: {listing(work)}")

    # a really full filesystem (ENOSPC), where mounting a small tmpfs is permitted (root with
    # CAP_SYS_ADMIN); the output is then on another filesystem than the checkpoint too
    mnt = work / "small_fs"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        print("NOTE: cannot mount a small tmpfs here: the ENOSPC part is not run (EFBIG above is)")
        return
    try:
        for label, out, extra in FORMATS + [("hf-default", "hfdef/", ["--include", "*"])]:
            g = Guard(ck, mnt, f"ENOSPC {label}")  # 128 KiB in all: small HF shards fill it too
            rc, _, err = consolidate(str(ck), "-o", outp(mnt, out), *extra)
            if rc != 4:
                fail(f"ENOSPC {label}: exit {rc}, want 4: {err.strip()[-300:]}")
            elif "No space left" not in err or out.rstrip("/") not in err:
                fail(f"ENOSPC {label}: the message does not name the output and ENOSPC: {err.strip()[-300:]}")
            g.check()
    finally:
        subprocess.run(["umount", str(mnt)])


def make_big_ckpt(path: Path, mb: int) -> None:
    import torch.distributed.checkpoint as dcp

    g = torch.Generator().manual_seed(7)
    sd = {}
    per = 32 << 20  # 32 MiB per tensor
    n = max(1, (mb << 20) // per)
    for i in range(n):
        sd[f"layers.{i}.weight"] = torch.randn(per // 4 // 2048, 2048, generator=g)
    sd["step"] = 5
    dcp.save(sd, checkpoint_id=str(path))


def case_signals(fixtures: Path, tmp: Path) -> None:
    work = tmp / "w"
    work.mkdir()
    ck = work / "big"
    t0 = time.time()
    make_big_ckpt(ck, 320)
    print(f"made a {sum(p.stat().st_size for p in ck.iterdir()) / 1e6:.0f} MB checkpoint in {time.time() - t0:.1f} s")
    slow = ["--dtype", "bf16", "--threads", "1"]
    formats = [("st", "out.safetensors", slow), ("st-copy", "copy.safetensors", []),
               ("hf", "outdir/", ["--max-shard-size", "100MB"] + slow), ("pt", "out.pt", []),
               ("pt-cast", "outc.pt", slow)]
    # how long an uninterrupted run takes (the window to hit)
    for label, out, extra in formats:
        t = time.time()
        rc, _, err = consolidate(str(ck), "-o", outp(work, out), *extra, "-q")
        print(f"uninterrupted {label}: exit {rc} in {time.time() - t:.2f} s")
        check(rc == 0, f"uninterrupted {label}: exit {rc}: {err.strip()[:200]}")
        p = work / out.rstrip("/")
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    g = Guard(ck, work, "signals")
    for sig in (signal.SIGTERM, signal.SIGINT):
        for label, out, extra in formats:
            for existing in (False, True):
                target = work / out.rstrip("/")
                if existing:
                    if out.endswith("/"):
                        target.mkdir()
                        (target / "model.safetensors").write_bytes(b"old")
                    else:
                        target.write_bytes(b"old")
                hit = False
                for attempt in range(5):
                    before = listing(work)
                    args = [DCPCTL, "consolidate", str(ck), "-o", outp(work, out), *extra, "-q"]
                    if existing:
                        args.append("--force")
                    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                    # wait until the temporary exists (the write has started), plus a moment
                    deadline = time.time() + 30
                    while time.time() < deadline and p.poll() is None:
                        if any("dcpctl-tmp" in x for x in os.listdir(work)):
                            break
                        time.sleep(0.001)
                    time.sleep(0.02 * attempt)
                    if p.poll() is not None:
                        print(f"  {sig.name} {label}: run finished before the signal (attempt {attempt})")
                        p.wait()
                        q = work / out.rstrip("/")
                        if not existing:
                            shutil.rmtree(q) if q.is_dir() else q.unlink(missing_ok=True)
                        elif q.is_dir():
                            shutil.rmtree(q); q.mkdir(); (q / "model.safetensors").write_bytes(b"old")
                        else:
                            q.write_bytes(b"old")
                        continue
                    p.send_signal(sig)
                    _, err = p.communicate(timeout=60)
                    rc = p.returncode
                    hit = True
                    what = f"{sig.name} {label}{' over existing' if existing else ''}"
                    check(rc == -sig,
                          f"{what}: exit status {rc}, want death by {sig.name} ({-sig}): {err.decode()[:200]}")
                    after = listing(work)
                    check(after == before, f"{what}: directory listing changed: {before} -> {after}")
                    if existing:
                        ok = ((target / "model.safetensors").read_bytes() == b"old" and listing(target) == ["model.safetensors"]) \
                            if target.is_dir() else target.read_bytes() == b"old"
                        check(ok, f"{what}: the old output was changed")
                    elif target.exists():
                        fail(f"{what}: output exists after the signal")
                    break
                check(hit, f"{sig.name} {label}: could not signal a run while it was writing (5 attempts)")
                t = work / out.rstrip("/")
                if t.exists():
                    shutil.rmtree(t) if t.is_dir() else t.unlink()
    g.check()


def proc_state(pid: int) -> str:
    """The state letter of /proc/PID/stat ('T' stopped, 'Z' zombie, ...), '' when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return text[text.rfind(")") + 2:].split()[0]


def wait_stopped(p: subprocess.Popen, what: str, timeout: float = 60) -> bool:
    """Whether the run stopped at its failpoint: one check, whatever the polls (every 5 ms) it took
    (a check per poll made the count follow the machine's speed)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if p.poll() is not None:
            return check(False, f"{what}: the run ended (exit {p.returncode}) before its failpoint stopped it")
        if proc_state(p.pid) == "T":
            return check(True, f"{what}: stopped at its failpoint")
        time.sleep(0.005)
    fail(f"{what}: the run did not stop at its failpoint in {timeout} s")
    p.kill()
    p.wait()
    return False


def temps_of(work: Path, out: str, pid: int | None = None) -> list[str]:
    """The names in `work` that are dcpctl temporaries of output `out` (of process `pid`)."""
    pre = f".{out.rstrip('/')}.dcpctl-tmp-"
    if pid is None:
        return sorted(n for n in os.listdir(work) if n.startswith(pre))
    # .NAME.dcpctl-tmp-PID-START@HOST; an older dcpctl's .NAME.dcpctl-tmp-PID
    return sorted(n for n in os.listdir(work) if n == f"{pre}{pid}" or n.startswith(f"{pre}{pid}-"))


def outputs_equal(a: Path, b: Path) -> str | None:
    """None when the two outputs (files or folders) hold the same bytes, manifests and a DCP
    .metadata aside (it records the output's path and a random save_id; dcp.load checks it)."""
    def files(p: Path) -> dict[str, bytes]:
        if p.is_file():
            return {"": p.read_bytes()}
        return {str(q.relative_to(p)): q.read_bytes() for q in sorted(p.rglob("*"))
                if q.is_file() and not q.name.endswith("dcpctl-manifest.json") and q.name != ".metadata"}
    fa, fb = files(a), files(b)
    if sorted(fa) != sorted(fb):
        return f"files {sorted(fa)} != {sorted(fb)}"
    bad = [k for k in fa if fa[k] != fb[k]]
    return f"files differ: {bad}" if bad else None


def case_killed(fixtures: Path, tmp: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file

    work = tmp / "w"
    work.mkdir()
    ck = work / "big"
    make_big_ckpt(ck, 96)
    slow = ["--threads", "1", "--dtype", "bf16"]
    # (label, command, output name, extra arguments)
    runs = [("consolidate-file", "consolidate", "out.safetensors", slow),
            ("consolidate-folder", "consolidate", "outdir/", ["--max-shard-size", "40MB", "--include", "*"] + slow),
            ("reshard", "reshard", "resh", ["-w", "2"] + slow)]
    g = Guard(ck, work, "killed")
    ref = work / "ref"
    ref.mkdir()
    durations = {}
    for label, cmd, out, extra in runs:
        t = time.time()
        r = run([DCPCTL, cmd, str(ck), "-o", outp(ref, out), *extra, "-q"])
        durations[label] = time.time() - t
        if not check(r.returncode == 0,
                     f"{label}: an uninterrupted run: exit {r.returncode}: {r.stderr.strip()[:300]}"):
            return
        print(f"uninterrupted {label}: {durations[label]:.2f} s")
    # the reference outputs, checked by torch: the tensors make_big_ckpt saved, cast to bf16
    gen = torch.Generator().manual_seed(7)
    per = 32 << 20
    saved = {f"layers.{i}.weight": torch.randn(per // 4 // 2048, 2048, generator=gen) for i in range(max(1, (96 << 20) // per))}
    st = load_file(str(ref / "out.safetensors"))
    check(not (sorted(st) != sorted(saved) or any(not torch.equal(st[k], v.to(torch.bfloat16)) for k, v in saved.items())),
          f"reference safetensors: not the saved tensors in bf16 ({sorted(st)})")
    sd = {k: torch.empty(v.shape, dtype=torch.bfloat16) for k, v in saved.items()}
    dcp.load(sd, checkpoint_id=str(ref / "resh"), no_dist=True)
    check(not any(not torch.equal(sd[k], v.to(torch.bfloat16)) for k, v in saved.items()),
          "reference reshard: dcp.load does not give the saved tensors in bf16")

    def start(cmd: str, out: str, extra: list[str], failpoint: str | None, force: bool = False) -> subprocess.Popen:
        env = dict(os.environ)
        env.pop("DCPCTL_FAILPOINT", None)
        if failpoint:
            env["DCPCTL_FAILPOINT"] = failpoint
        args = [DCPCTL, cmd, str(ck), "-o", outp(work, out), *extra] + (["--force"] if force else [])
        return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)

    def rerun(label: str, cmd: str, out: str, extra: list[str], leftover: list[str], what: str) -> None:
        """Runs again to the same output: the dead run's temporary is removed and said so."""
        r = run([DCPCTL, cmd, str(ck), "-o", outp(work, out), *extra])
        if not check(r.returncode == 0, f"{what}: the next run: exit {r.returncode}: {r.stderr.strip()[:300]}"):
            return
        for n in leftover:
            check(not (work / n).exists(), f"{what}: the next run left the dead run's temporary {n}")
            check(any(n in line and "removed" in line for line in r.stderr.splitlines()),
                  f"{what}: the next run did not say it removed {n}: {r.stderr.strip()[:400]}")
        check(not temps_of(work, out), f"{what}: temporaries after the next run: {temps_of(work, out)}")
        check(d := outputs_equal(work / out.rstrip("/"), ref / out.rstrip("/")) is None,
              f"{what}: the output is not what an uninterrupted run writes: {d}")
        if cmd == "reshard":
            sd = {k: torch.empty(v.shape, dtype=torch.bfloat16) for k, v in saved.items()}
            dcp.load(sd, checkpoint_id=str(work / out), no_dist=True)
            check(not any(not torch.equal(sd[k], v.to(torch.bfloat16)) for k, v in saved.items()),
                  f"{what}: dcp.load of the next run's output does not give the saved tensors in bf16")
        target = work / out.rstrip("/")
        shutil.rmtree(target) if target.is_dir() else target.unlink()
        for m in work.glob(out.rstrip("/") + ".dcpctl-manifest.json"):
            m.unlink()

    name_of = lambda out: out.rstrip("/")  # noqa: E731
    for label, cmd, out, extra in runs:
        for point in ("early", "mid-write", "before-rename"):
            what = f"{label} killed {point}"
            hit = False
            for attempt in range(6):
                fp = {"early": f"created/{name_of(out)}:stop", "before-rename": f"rename/{name_of(out)}:stop"}.get(point)
                p = start(cmd, out, extra, fp)
                if fp:
                    if not wait_stopped(p, what):
                        break
                else:
                    # mid-write: once the temporary exists, part of the uninterrupted run's time later
                    deadline = time.time() + 60
                    while time.time() < deadline and p.poll() is None and not temps_of(work, out, p.pid):
                        time.sleep(0.001)
                    time.sleep(durations[label] * 0.15 / (attempt + 1))
                if p.poll() is not None:
                    print(f"  {what}: finished before the kill (attempt {attempt})")
                    p.wait()
                    target = work / name_of(out)
                    shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
                    for m in work.glob(name_of(out) + ".dcpctl-manifest.json"):
                        m.unlink()
                    continue
                p.send_signal(signal.SIGKILL)
                p.communicate(timeout=60)
                check(p.returncode == -signal.SIGKILL, f"{what}: exit status {p.returncode}, want death by SIGKILL")
                left = temps_of(work, out, p.pid)
                check(not (work / name_of(out)).exists(), f"{what}: the output exists after the kill")
                if not check(left, f"{what}: no temporary was left to clean up (listing {listing(work)})"):
                    break
                size = sum(q.stat().st_size for q in (work / left[0]).rglob("*") if q.is_file()) \
                    if (work / left[0]).is_dir() else (work / left[0]).stat().st_size
                print(f"  {what}: left {left} ({size} bytes)")
                rerun(label, cmd, out, extra, left, what)
                hit = True
                break
            check(hit, f"{what}: could not kill a run while it was writing")

    # A live run's temporary is left alone (and named); so is another host's.
    label, cmd, out, extra = runs[0]
    live = start(cmd, out, extra, f"created/{name_of(out)}:stop")
    if wait_stopped(live, "live run"):
        live_tmp = temps_of(work, out, live.pid)
        other = work / f".{name_of(out)}.dcpctl-tmp-4194304-12345@another-node.example"
        other.write_bytes(b"another node's run")
        r = run([DCPCTL, cmd, str(ck), "-o", outp(work, out), *extra])
        check(r.returncode == 0, f"beside a live run: exit {r.returncode}: {r.stderr.strip()[:300]}")
        if not live_tmp or not (work / live_tmp[0]).exists():
            fail(f"beside a live run: its temporary {live_tmp} was removed")
        elif not any(live_tmp[0] in line and "still running" in line for line in r.stderr.splitlines()):
            fail(f"beside a live run: its temporary is not named: {r.stderr.strip()[:400]}")
        if other.read_bytes() != b"another node's run":
            fail("another host's temporary was touched")
        elif not any(other.name in line and "another host" in line for line in r.stderr.splitlines()):
            fail(f"another host's temporary is not named: {r.stderr.strip()[:400]}")
        print(f"beside a live run and another host's: {r.stderr.strip()[:600]}")
        (work / name_of(out)).unlink(missing_ok=True)
        for m in work.glob(name_of(out) + ".dcpctl-manifest.json"):
            m.unlink()
        # once the live run is killed, its temporary goes with the next run
        live.send_signal(signal.SIGKILL)
        live.communicate(timeout=60)
        other.unlink()
        rerun(label, cmd, out, extra, live_tmp, "after the live run was killed")

    # dcpctl prune of a run folder: a dead run's temporary listed (--dry-run, --json) and removed;
    # a live run's and another host's kept.
    rundir = work / "run"
    rundir.mkdir()
    for step in (1, 2):
        shutil.copytree(fixtures / "sample" / "ckpt", rundir / f"step-{step}")
    sample = rundir / "step-2"

    def start_into(out: str, failpoint: str) -> subprocess.Popen:
        env = dict(os.environ, DCPCTL_FAILPOINT=failpoint)
        return subprocess.Popen([DCPCTL, "reshard", str(sample), "-o", str(rundir / out), "-w", "1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)

    dead = start_into("step-3", "rename/step-3:stop")
    live = start_into("step-4", "created/step-4:stop")
    if wait_stopped(dead, "prune: a run to kill") and wait_stopped(live, "prune: a live run"):
        dead.send_signal(signal.SIGKILL)
        dead.communicate(timeout=60)
        dead_tmp = temps_of(rundir, "step-3", dead.pid)
        live_tmp = temps_of(rundir, "step-4", live.pid)
        other = rundir / ".step-5.dcpctl-tmp-4194304-12345@another-node.example"
        other.mkdir()
        (other / "__0_0.distcp").write_bytes(b"x")
        if len(dead_tmp) != 1 or len(live_tmp) != 1:
            fail(f"prune: the runs left {listing(rundir)}")
        else:
            ls = run([DCPCTL, "ls", str(rundir), "--json"])
            check(not (ls.returncode != 0 or "dcpctl-tmp" in ls.stdout),
                  f"ls of the run folder lists a temporary as a checkpoint (exit {ls.returncode}): {ls.stdout[:400]}")
            before = listing(rundir)
            dry = run([DCPCTL, "prune", str(rundir), "--keep", "2", "--dry-run"])
            lines = dry.stdout.splitlines()
            check(not (dry.returncode != 0 or listing(rundir) != before),
                  f"prune --dry-run: exit {dry.returncode}, listing {before} -> {listing(rundir)}")
            check(any(x.startswith("remove ") and dead_tmp[0] in x for x in lines),
                  f"prune --dry-run does not list the dead run's temporary: {dry.stdout[:600]}")
            for kept in (live_tmp[0], other.name):
                check(any(x.startswith("keep ") and kept in x for x in lines),
                      f"prune --dry-run does not name {kept} as kept: {dry.stdout[:600]}")
            js = run([DCPCTL, "prune", str(rundir), "--keep", "2", "--dry-run", "--json"])
            import json as _json
            j = _json.loads(js.stdout) if js.returncode == 0 else {}
            check([Path(x["path"]).name for x in j.get("removed", [])] == dead_tmp,
                  f"prune --dry-run --json: removed {j.get('removed')}")
            print(f"prune --dry-run:\n{dry.stdout.strip()}")
            pr = run([DCPCTL, "prune", str(rundir), "--keep", "2"])
            check(pr.returncode == 0, f"prune: exit {pr.returncode}: {pr.stderr.strip()[:300]}")
            check(not (rundir / dead_tmp[0]).exists(), "prune left the dead run's temporary")
            check(not (not (rundir / live_tmp[0]).exists() or not (other / "__0_0.distcp").exists()),
                  f"prune removed a live run's or another host's temporary: {listing(rundir)}")
            check(not (not (sample / ".metadata").exists() or not (rundir / "step-1" / ".metadata").exists()),
                  f"prune removed a checkpoint: {listing(rundir)}")
            check(any(x.startswith("removed ") and dead_tmp[0] in x for x in pr.stdout.splitlines()),
                  f"prune does not say it removed the temporary: {pr.stdout[:400]}")
            print(f"prune:\n{pr.stdout.strip()}")
    for p in (dead, live):
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.communicate(timeout=60)
    shutil.rmtree(rundir)
    shutil.rmtree(ref)
    g.check()


# What a full run of each case always makes, a little under what one made (2026-11-29: incomplete 44,
# overwrite 42, dry-run 20, inside 52, full-disk 18, signals 76, killed 116), so that a refusal or a
# comparison lost fails (docs/testing.md#no-test-passes-on-nothing). killed made a check per 5 ms
# poll while it waited for a failpoint (486 in one run, 380 and 193 in clean-clone CI runs: the
# machine's speed, not the test's work, so a quiet machine failed its floor of 300); now one per wait.
MIN_CHECKS = {"incomplete": 42, "overwrite": 40, "dry-run": 19, "inside": 50, "full-disk": 17, "signals": 72,
              "killed": 112}

def main() -> int:
    global DCPCTL
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    case, DCPCTL, fixtures = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    fn = {"incomplete": case_incomplete, "overwrite": case_overwrite, "dry-run": case_dry_run,
          "inside": case_inside, "full-disk": case_full_disk, "signals": case_signals,
          "killed": case_killed}.get(case)
    if fn is None:
        print(f"unknown case {case}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="dcpctl-cons-refuse-") as t:
        fn(fixtures, Path(t))
    return summary(f"consolidate_refusals_test {case}", min_checks=MIN_CHECKS[case])


if __name__ == "__main__":
    sys.exit(main())
