#!/usr/bin/env python3
"""consolidate --resume (write/resume.h; docs/commands.md, "Resuming a stopped run").

Usage: resume_test.py DCPCTL FIXTURES [CASE ...]   (cases: hf, gguf, reshard; default all)

Each case writes a multi-file output of a fixture written by real software:
  hf    tests/fixtures/layouts/hf_transformers (a tiny Llama saved by transformers' Trainer through
        dcp.save, its config and tokenizer beside) into an HF folder of 6 shards
        (--max-shard-size 6KB --threads 1: one lane, so the shards finish in order);
  gguf  tests/fixtures/layouts/titan_qwen3_gguf (REAL torchtitan 0.3.0's Qwen 3, --map
        torchtitan-qwen3, with the real Qwen2 tokenizer tools/gguf_oracle.py rebuilds, as
        gguf_trainers_test.py) into a GGUF split 4 ways (--split-max-tensors 6), gguf-py's GGUFReader
        reading the result (split.no / split.count / split.tensors.count, every tensor);
  reshard  tests/fixtures/sample/ckpt (FSDP2 over 2 ranks, dcp.save) resharded to 4 rank files
        (-w 4 --threads 1), stopped once __2_0.distcp is finished (rank 0's file, which holds the
        non-tensor items, is never kept: journaled __1_0 and __2_0); .metadata compared as torch
        reads it (its save_id is random in every run, as torch's, and the manifest digests it),
        dcp.load of the result equal to the uninterrupted run's, verify --checksum passing.
For each: an uninterrupted run (the reference); a run stopped by its failpoint once its second
file is finished (DCPCTL_FAILPOINT finished/NAME:stop) and killed with SIGKILL: no output under
the final name, the staging folder with its journal recording the finished files; the first
finished file cut short by 100 bytes (torn); `--resume --json` exits 0, its summary keeps exactly
the intact file (its inode kept: not rewritten), names the torn one, writes the rest, and every
file of the output (shards, index or split headers, manifests) is byte for byte the reference's.
Then a run killed again and resumed with a flag changed (hf: --dtype bf16; gguf: --outtype q8_0):
exit 2 naming the flag and its two values, nothing written; resumed as first asked: equal to the
reference. An error once every shard is finished (hf: the --assets folder's tokenizer.json removed while the
run is stopped at its assets-copy failpoint: exit 4) keeps the shards and names them; the file put
back, --resume keeps all six and writes the reference. A run stopped the same way and sent SIGTERM: the handler leaves the two finished files
(and the journal) and removes the rest; --resume keeps both and writes the reference. --resume with
no stopped run: exit 2; into a single file or a folder of one shard: exit 5.
Exit status: 0 pass, 1 failure, 77 skip (torch or gguf missing; a failure under CI, tests/skip.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testlib import (EXIT_OK, EXIT_UNSUPPORTED, EXIT_USAGE, check, each_case, expect_rc, fail, run,  # noqa: E402
                     skip_or_fail, summary)

try:
    import torch  # noqa: F401  (testlib's loading of the HF folders written)
except ImportError as e:  # pragma: no cover
    skip_or_fail(f"torch is not installed ({e})")

DCPCTL = sys.argv[1]
FIXTURES = Path(sys.argv[2])
FIX = FIXTURES / "layouts" / "hf_transformers"

TITAN = FIXTURES / "layouts" / "titan_qwen3_gguf"

SAMPLE = FIXTURES / "sample" / "ckpt"

# stop: the data file at whose finish the run is stopped; journaled: those the journal then records
# (a DCP checkpoint's rank 0 file, which holds the non-tensor items, is written again by every
# run); torn, intact: the journaled file cut short and the one kept.
CASES = {
    "hf": dict(cmd="consolidate", src=FIX / "dcp", out="model/",
               args=["--max-shard-size", "6KB", "--threads", "1", "--assets", str(FIX / "ckpt")], files=6,
               stop=1, journaled=[0, 1], torn=0, intact=1,
               changed=(["--dtype", "bf16"], "--dtype", "(none)", '"bfloat16"')),
    "gguf": dict(cmd="consolidate", src=TITAN / "run" / "step-2", out="tiny.gguf",
                 args=["--map", "torchtitan-qwen3", "--split-max-tensors", "6"], files=4,
                 stop=1, journaled=[0, 1], torn=0, intact=1,
                 changed=(["--outtype", "q8_0"], "--outtype", "(none)", '"q8_0"')),
    "reshard": dict(cmd="reshard", src=SAMPLE, out="resh/", args=["-w", "4", "--threads", "1"], files=4,
                    stop=2, journaled=[1, 2], torn=1, intact=2,
                    changed=(["--dtype", "bf16"], "--dtype", "(none)", '"bfloat16"')),
}
DATA = (".safetensors", ".gguf", ".distcp")


def gguf_assets(work: Path) -> list[str]:
    """config.json and the real Qwen2 tokenizer (tools/gguf_oracle.py), as gguf_trainers_test.py."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import gguf_oracle
    assets = work / "assets"
    gguf_oracle.tokenizer("qwen2", assets)
    shutil.copyfile(TITAN / "config.json", assets / "config.json")
    return ["--assets", str(assets)]


def proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def stop_and_kill(cmd: list[str], failpoint: str, what: str, sig: int = signal.SIGKILL) -> bool:
    """Runs cmd until its failpoint stops it, then kills it with `sig` (a real kill; SIGTERM is
    delivered once the process is continued, and its handler runs)."""
    env = dict(os.environ, DCPCTL_FAILPOINT=failpoint)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None and proc_state(p.pid) != "T":
        time.sleep(0.005)
    if p.poll() is not None:
        return check(False, f"{what}: the run ended (exit {p.returncode}) before {failpoint}: "
                            f"{p.stderr.read().decode()[:300]}")
    p.send_signal(sig)
    if sig != signal.SIGKILL:
        p.send_signal(signal.SIGCONT)
    p.communicate(timeout=60)
    return check(p.returncode == -sig, f"{what}: killed by {signal.Signals(sig).name} at {failpoint} ({p.returncode})")


def outputs(work: Path, out: str) -> dict[str, bytes]:
    """Every file of the output: a folder's files, or the split's shards and their manifests."""
    if out.endswith("/"):
        d = work / out.rstrip("/")
        return {p.name: p.read_bytes() for p in sorted(d.iterdir())} if d.is_dir() else {}
    stem = out.rsplit(".", 1)[0]
    return {p.name: p.read_bytes() for p in sorted(work.glob(stem + "-*"))}


def staging(work: Path, out: str) -> Path | None:
    found = sorted(work.glob(f".{out.rstrip('/')}.dcpctl-tmp-*"))
    return found[0] if len(found) == 1 and found[0].is_dir() else None


def same_files(got: dict[str, bytes], want: dict[str, bytes], what: str) -> None:
    """Every file byte for byte the uninterrupted run's; a DCP checkpoint's .metadata (whose save_id
    is random in every run, as torch's) read by torch and equal but for it, and its manifest
    (which digests it) left to verify."""
    check(sorted(got) == sorted(want), f"{what}: files {sorted(got)}, want {sorted(want)}")
    for name in sorted(set(got) & set(want)):
        if ".metadata" in got and name in (".metadata", "dcpctl-manifest.json"):
            continue
        check(got[name] == want[name], f"{what}: {name} is byte for byte the uninterrupted run's")
    if ".metadata" in got and ".metadata" in want:
        import pickle  # torch's own classes (torch.distributed.checkpoint.metadata), as its reader unpickles them
        a, b = (pickle.loads(x) for x in (got[".metadata"], want[".metadata"]))
        check(a.state_dict_metadata == b.state_dict_metadata and a.storage_data == b.storage_data,
              f"{what}: .metadata (read by torch's classes) is the uninterrupted run's")


def dcp_tensors(path: Path) -> dict:
    """Every tensor of a DCP checkpoint, as torch's dcp.load reads it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    md = dcp.FileSystemReader(str(path)).read_metadata()
    sd = {k: torch.empty(v.size, dtype=v.properties.dtype) for k, v in md.state_dict_metadata.items()
          if isinstance(v, TensorStorageMetadata)}
    dcp.load(sd, checkpoint_id=str(path), no_dist=True)
    return sd


def same_checkpoint(got: Path, want: Path, what: str) -> None:
    """dcp.load of the resumed checkpoint gives the uninterrupted run's tensors; verify --checksum
    passes (its manifest's file and tensor digests)."""
    a, b = dcp_tensors(got), dcp_tensors(want)
    check(sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a),
          f"{what}: dcp.load gives the uninterrupted run's {len(b)} tensors")
    r = run(DCPCTL, "verify", "--checksum", got)
    expect_rc(r, EXIT_OK, f"{what}: verify --checksum of the resumed checkpoint")


def clear(work: Path, out: str) -> None:
    for p in list(work.iterdir()):
        if p.name not in ("assets", "reference") and (p.name.startswith(out.rstrip("/").rsplit(".", 1)[0]) or
                                   p.name.startswith("." + out.rstrip("/"))):
            shutil.rmtree(p) if p.is_dir() else p.unlink()


def read_gguf_split(work: Path, names: list[str], n: int, what: str) -> None:
    """gguf-py's reader over every shard: its split keys, and every tensor read."""
    try:
        from gguf import GGUFReader
    except ImportError as e:
        skip_or_fail(f"gguf-py is not installed ({e})")
    tensors = 0
    for i, name in enumerate(names):
        r = GGUFReader(str(work / name))
        kv = {f.name: f for f in r.fields.values()}
        check(int(kv["split.no"].parts[-1][0]) == i and int(kv["split.count"].parts[-1][0]) == n,
              f"{what}: {name}: split.no {i} of {n}")
        total = int(kv["split.tensors.count"].parts[-1][0])
        tensors += len(r.tensors)
        for t in r.tensors:
            _ = t.data.sum()  # every tensor's bytes read
    check(tensors == total, f"{what}: gguf-py reads {tensors} tensors across the shards, split.tensors.count {total}")


def kill_after_second(cmd: list[str], work: Path, c: dict, ref_names: list[str], what: str,
                      sig: int = signal.SIGKILL) -> Path | None:
    """A run killed once its data file `stop` is finished: the staging folder, checked."""
    data = [n for n in ref_names if n.endswith(DATA)]
    if not stop_and_kill(cmd, f"finished/{data[c['stop']]}:stop", what, sig):
        return None
    check(not outputs(work, c["out"]), f"{what}: nothing under the final name after the kill")
    st = staging(work, c["out"])
    if not check(st is not None, f"{what}: one staging folder left ({sorted(os.listdir(work))})"):
        return None
    journal = json.loads((st / ".dcpctl-resume.json").read_text())
    want = [data[i] for i in c["journaled"]]
    check(sorted(journal["files"]) == want, f"{what}: the journal records {sorted(journal['files'])}, want {want}")
    return st


def case(name: str) -> None:
    c = CASES[name]
    work = Path(tempfile.mkdtemp(prefix=f"resume-{name}-"))
    try:
        out = str(work / c["out"])
        extra = gguf_assets(work) if name == "gguf" else []
        cmd = [DCPCTL, c["cmd"], str(c["src"]), "-o", out, *c["args"], *extra, "-q"]
        r = run(cmd)
        if not expect_rc(r, EXIT_OK, f"{name}: uninterrupted run"):
            return
        ref = outputs(work, c["out"])
        if c["cmd"] == "reshard":
            shutil.copytree(work / c["out"].rstrip("/"), work / "reference")
        data = [n for n in ref if n.endswith(DATA)]
        journaled = [data[i] for i in c["journaled"]]
        check(len(data) == c["files"], f"{name}: the uninterrupted run wrote {len(data)} data files, want {c['files']}")
        clear(work, c["out"])

        st = kill_after_second(cmd, work, c, list(ref), f"{name} killed")
        if st is None:
            return
        torn, intact = data[c["torn"]], data[c["intact"]]
        with open(st / torn, "r+b") as f:
            f.truncate((st / torn).stat().st_size - 100)
        inode = (st / intact).stat().st_ino
        r = run([*cmd, "--resume", "--json"])
        if not expect_rc(r, EXIT_OK, f"{name}: --resume after a kill and a torn file"):
            return
        res = json.loads(r.stdout)["resume"]
        check(res["kept"] == [intact], f"{name}: --resume kept {res['kept']}, want [{intact}]")
        check(res["torn"] == [torn], f"{name}: --resume found {res['torn']} torn, want [{torn}]")
        check(sorted(res["written"]) == sorted(set(data) - {intact}),
              f"{name}: --resume wrote {sorted(res['written'])}, want {sorted(set(data) - {intact})}")
        got = outputs(work, c["out"])
        same_files(got, ref, f"{name} resumed")
        kept_at = (work / c["out"].rstrip("/") / intact) if c["out"].endswith("/") else work / intact
        check(kept_at.stat().st_ino == inode, f"{name}: {intact} is the stopped run's file (not rewritten)")
        check(staging(work, c["out"]) is None, f"{name}: no staging folder after the resumed run")
        if name == "gguf":
            read_gguf_split(work, data, len(data), f"{name} resumed")
        if c["cmd"] == "reshard":
            same_checkpoint(work / c["out"].rstrip("/"), work / "reference", f"{name} resumed")
        clear(work, c["out"])

        # A flag that changes the bytes: refused, naming it and its two values; nothing written.
        st = kill_after_second(cmd, work, c, list(ref), f"{name} killed again")
        if st is None:
            return
        flags, flag, was, now = c["changed"]
        r = run([*cmd, *flags, "--resume"])
        expect_rc(r, EXIT_USAGE, f"{name}: --resume with {' '.join(flags)}", "plan changed", flag, was, now)
        check(not outputs(work, c["out"]) and staging(work, c["out"]) == st,
              f"{name}: the refused --resume wrote nothing and left the stopped run's folder")
        r = run([*cmd, "--resume"])
        if expect_rc(r, EXIT_OK, f"{name}: --resume as first asked"):
            same_files(outputs(work, c["out"]), ref, f"{name} resumed after a refusal")
        clear(work, c["out"])

        # SIGTERM: its handler removes the unfinished files' temporaries and keeps the finished ones.
        st = kill_after_second(cmd, work, c, list(ref), f"{name} terminated", signal.SIGTERM)
        if st is None:
            return
        finished = data[:c["stop"] + 1]
        check(sorted(n for n in os.listdir(st) if not n.startswith(".dcpctl-resume")) == finished,
              f"{name}: after SIGTERM the folder holds {sorted(os.listdir(st))}, want the finished {finished}")
        r = run([*cmd, "--resume", "--json"])
        if expect_rc(r, EXIT_OK, f"{name}: --resume after SIGTERM"):
            check(json.loads(r.stdout)["resume"]["kept"] == journaled, f"{name}: --resume after SIGTERM kept "
                                                                       f"{json.loads(r.stdout)['resume']['kept']}")
            same_files(outputs(work, c["out"]), ref, f"{name} resumed after SIGTERM")
        clear(work, c["out"])

        r = run([*cmd, "--resume"])
        expect_rc(r, EXIT_USAGE, f"{name}: --resume with no stopped run", "--resume", "no stopped run")
        check(not outputs(work, c["out"]), f"{name}: --resume with no stopped run wrote nothing")
        if name == "hf":
            failed_copy(work, ref)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def failed_copy(work: Path, ref: dict[str, bytes]) -> None:
    """An error after every shard is finished (a tokenizer file gone when the assets are copied,
    exit 4): the finished shards are kept and named; with the file back, --resume keeps all six
    and writes only the folder's other files."""
    assets = work / "assets-copy"
    shutil.copytree(FIX / "ckpt", assets)
    out = work / "model"
    cmd = [DCPCTL, "consolidate", str(FIX / "dcp"), "-o", f"{out}/", "--max-shard-size", "6KB", "--assets", str(assets),
           "-q"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, DCPCTL_FAILPOINT="assets-copy:stop"))
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None and proc_state(p.pid) != "T":
        time.sleep(0.005)
    if not check(p.poll() is None, "failed copy: the run stopped at assets-copy"):
        return
    saved = (assets / "tokenizer.json").read_bytes()
    (assets / "tokenizer.json").unlink()
    p.send_signal(signal.SIGCONT)
    _, err = p.communicate(timeout=60)
    check(p.returncode == 4 and "kept 6 finished file(s)" in err and "--resume" in err,
          f"failed copy: exit {p.returncode} (want 4) naming the 6 finished files kept: {err.strip()[:400]}")
    check(not out.exists() and staging(work, "model/") is not None, "failed copy: no output, the staging folder kept")
    (assets / "tokenizer.json").write_bytes(saved)
    r = run([*cmd, "--resume", "--json"])
    if expect_rc(r, EXIT_OK, "failed copy: --resume"):
        res = json.loads(r.stdout)["resume"]
        check(len(res["kept"]) == 6 and res["written"] == [], f"failed copy: --resume kept {res['kept']}, wrote "
                                                              f"{res['written']}")
        same_files(outputs(work, "model/"), ref, "failed copy resumed")


def single_file() -> None:
    work = Path(tempfile.mkdtemp(prefix="resume-single-"))
    try:
        r = run([DCPCTL, "consolidate", str(FIX / "dcp"), "-o", str(work / "m.safetensors"), "--resume"])
        expect_rc(r, EXIT_UNSUPPORTED, "--resume into one .safetensors", "--resume")
        r = run([DCPCTL, "consolidate", str(FIX / "dcp"), "-o", f"{work / 'one'}/", "--assets", str(FIX / "ckpt"),
                 "--resume"])
        expect_rc(r, EXIT_UNSUPPORTED, "--resume into a folder of one shard", "--resume", "several")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    names = sys.argv[3:] or list(CASES)
    for n in names:
        if n not in CASES:
            fail(f"unknown case {n!r} (known: {', '.join(CASES)})")
    for n in each_case([n for n in names if n in CASES], 20, name=str):
        case(n)
    single_file()
    return summary("resume", min_checks=50)


if __name__ == "__main__":
    sys.exit(main())
