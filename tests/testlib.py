"""The one harness of dcpctl's Python tests: running a command, judging its exit, counting checks.

    import sys; sys.path.insert(0, "<tests dir>")      # or run through tests/with_venv.sh
    from testlib import run, expect_rc, check, fail, summary, EXIT_INVALID
    r = run(dcpctl, "verify", ckpt)                    # a CompletedProcess, never an exception
    expect_rc(r, EXIT_INVALID, "verify of a truncated file", "__0_0.distcp", "offset")
    ...
    sys.exit(summary("my_test"))                       # "my_test: N checks passed, M failed"

What it guarantees, so that no test can pass on a crash:
- run() records a failure by itself when the process dies of a signal, runs past its timeout,
  prints a sanitizer report, or (dcpctl) exits with a code it does not document, whatever the test then checks (pass allow_signal=True where a test
  kills the process on purpose);
- expect_rc() wants one exit code, exactly: a test that accepts several names them and says why
  (expect_rc_in);
- a prerequisite that set-up provides is skip_or_fail (tests/skip.py): under CI it fails.

Standard library only; torch is imported by the functions that compare tensors, when called.
"""
import hashlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from hf_loadcheck import Recorder
from skip import SKIP, skip_absent, skip_or_fail, skip_or_fail_code, strict  # noqa: F401 (re-exported)
from tally import Tally

# A dcpctl run without credentials ends the AWS chain at the instance metadata service, a
# link-local address no test may reach: tests that want IMDS serve it on 127.0.0.1
# (AWS_EC2_METADATA_SERVICE_ENDPOINT) and lift this in their own environment.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

# dcpctl's documented exit codes (cmd/exit_codes.h, README, the man page).
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INVALID, EXIT_IO, EXIT_UNSUPPORTED = 0, 1, 2, 3, 4, 5

SANITIZER_MARKERS = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "LeakSanitizer", "ThreadSanitizer",
                     "runtime error:")

TALLY = Tally()
check = TALLY.check
problems = TALLY.problems
# Every Hugging Face folder a dcpctl run of this test writes, loaded by transformers before the
# summary (tests/hf_loadcheck.py).
HF_OUTPUTS = Recorder()


def hf_loaded(folder) -> None:
    """Say that the test loaded this folder with from_pretrained and checked its keys itself: the
    summary's check does not load the same bytes again."""
    HF_OUTPUTS.loaded(folder)


def record_hf_output(cmd, cwd=None, hf_partial: str | None = None) -> None:
    """For a dcpctl run not made through run() (a Popen) that exited 0: its HF folder output, if
    any, is loaded by transformers before the summary as run()'s are."""
    HF_OUTPUTS.record([str(a) for a in cmd], cwd, hf_partial)


def fail(msg: str) -> None:
    """One failed check (printed at once, counted in the summary)."""
    TALLY.check(False, msg)


def checks_made() -> int:
    """The checks this test has made so far, passed or not."""
    return TALLY.passed + len(TALLY.failures)


def each_case(cases, least: int, name=lambda c: getattr(c, "name", str(c))):
    """Yields each of cases (a data-driven loop: `for case in each_case(fixtures, 5):`); the checks
    made while the loop's body ran for a case must be at least `least`, so a case whose work was
    skipped in silence (a `continue` before its comparisons) fails, naming it
    (docs/testing.md#no-test-passes-on-nothing). No case at all is a failure too."""
    n = 0
    for c in cases:
        n += 1
        before = checks_made()
        yield c
        made = checks_made() - before
        check(made >= least, f"{name(c)}: {made} checks made, fewer than the {least} each case makes")
    check(n > 0, "no case to run")


def check_labelled(label: str, ok: bool, what: str) -> bool:
    """One check printed either way, "ok   LABEL: WHAT" or a FAIL line (for the tests whose log
    is read as a table of what passed)."""
    if ok:
        print(f"ok   {label}: {what}", flush=True)
    return TALLY.check(ok, f"{label}: {what}")


def summary(name: str, min_checks: int = 1) -> int:
    """Prints "NAME: N checks passed, M failed" and records the count in the test's ledger
    (tests/ledger.py); the exit status: 1 on any failure, and when fewer than min_checks checks
    passed. min_checks is the floor that is honest for the test: what a full run always makes
    (not 1 where it runs 40 comparisons); it cannot be 0, since a test that checked nothing has not
    passed (docs/testing.md#no-test-passes-on-nothing).
    First, every Hugging Face folder the test's dcpctl runs wrote is loaded by transformers: a
    check per folder, no missing, unexpected or mismatched key (tests/hf_loadcheck.py)."""
    HF_OUTPUTS.check(TALLY.check)
    return TALLY.summary(name, min_checks)


def _text(b) -> str:
    if b is None:
        return ""
    return b.decode(errors="replace") if isinstance(b, bytes) else b


def crash_of(r: subprocess.CompletedProcess) -> str | None:
    """How r ended other than by exiting: a signal, a timeout, a sanitizer report; None if it exited."""
    if getattr(r, "timed_out", False):
        return f"timed out after {r.timed_out} s"
    if r.returncode is not None and r.returncode < 0:
        try:
            return f"died of {signal.Signals(-r.returncode).name}"
        except ValueError:
            return f"died of signal {-r.returncode}"
    # a shell's report of its child's signal (bash -c: 128 + N)
    if r.returncode in (128 + signal.SIGSEGV, 128 + signal.SIGABRT, 128 + signal.SIGBUS, 128 + signal.SIGILL) \
            and isinstance(r.args, list) and r.args[:1] == ["bash"]:
        return f"its command died of {signal.Signals(r.returncode - 128).name}"
    if r.returncode is not None and r.returncode > EXIT_UNSUPPORTED and isinstance(r.args, list) and r.args \
            and os.path.basename(str(r.args[0])).startswith("dcpctl"):
        return f"exit {r.returncode}, outside dcpctl's documented 0-5"
    err = _text(r.stderr)
    for m in SANITIZER_MARKERS:
        if m in err:
            return f"sanitizer report ({m})"
    return None


def run(*argv, timeout: float = 600, env: dict | None = None, input: str | bytes | None = None,
        cwd=None, text: bool = True, allow_signal: bool = False,
        hf_partial: str | None = None) -> subprocess.CompletedProcess:
    """Runs argv (each item str()-ed; a list may be passed as the one argument) and returns its
    CompletedProcess with stdout and stderr captured. A timeout comes back as returncode -SIGKILL
    with r.timed_out set; a crash, a timeout or a sanitizer report is recorded as a failure here
    (the test's own checks then fail on the exit code too). A dcpctl consolidate that exits 0 and
    writes a Hugging Face folder is recorded: summary() loads it with transformers
    (tests/hf_loadcheck.py); hf_partial="why" says the folder is not a whole model on purpose."""
    if len(argv) == 1 and isinstance(argv[0], (list, tuple)):
        argv = tuple(argv[0])
    cmd = [str(a) for a in argv]
    try:
        r = subprocess.run(cmd, capture_output=True, text=text, timeout=timeout, env=env, input=input, cwd=cwd)
        r.timed_out = 0
    except subprocess.TimeoutExpired as e:
        r = subprocess.CompletedProcess(cmd, -signal.SIGKILL, _text(e.stdout) if text else e.stdout,
                                        (_text(e.stderr) if text else e.stderr))
        r.timed_out = timeout
    how = crash_of(r)
    if how and not (allow_signal and not r.timed_out and r.returncode < 0):
        fail(f"{' '.join(cmd)[:300]}: {how}: {_text(r.stderr).strip()[-1500:]}")
    if r.returncode == 0:
        HF_OUTPUTS.record(cmd, cwd, hf_partial)
    return r


def expect_rc(r: subprocess.CompletedProcess, rc: int, what: str, *names: str) -> bool:
    """One check: r exited with exactly rc, and every one of names is in what it printed (stderr,
    or stdout, where verify reports)."""
    err = _text(r.stderr) + _text(r.stdout)
    missing = [n for n in names if n not in err]
    ok = r.returncode == rc and not missing
    check(ok, f"{what}: exit {r.returncode} (wanted {rc}"
              f"{', naming ' + ', '.join(map(repr, missing)) if missing else ''}): {err.strip()[-800:]}")
    return ok


def verify_json(dcpctl, path, rc: int, what: str) -> dict:
    """`dcpctl verify PATH --json`: expects exit rc (expect_rc) and returns the document, {} (a
    failure) where stdout is not JSON."""
    import json
    r = run(dcpctl, "verify", str(path), "--json")
    expect_rc(r, rc, what)
    try:
        return json.loads(r.stdout)
    except ValueError:
        check(False, f"{what}: --json is not JSON: {r.stdout[-300:]!r}")
        return {}


def expect_rc_in(r: subprocess.CompletedProcess, rcs: dict[int, str], what: str, *names: str) -> bool:
    """For the rare run whose outcome legitimately has more than one exit code: rcs maps each
    accepted code to the reason it is right (kept in the test, so the choice is reviewable)."""
    err = _text(r.stderr) + _text(r.stdout)
    missing = [n for n in names if n not in err]
    ok = r.returncode in rcs and not missing
    check(ok, f"{what}: exit {r.returncode} (wanted one of {sorted(rcs)}"
              f"{', naming ' + ', '.join(map(repr, missing)) if missing else ''}): {err.strip()[-800:]}")
    return ok


def free_port(avoid=()) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (and not one of avoid)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port


# What a rank prints when the port its store should listen on was taken between free_port() and
# the bind (another test's rank, or one of gloo's own connections, on the same machine at -j2):
# c10d's TCPStore says EADDRINUSE.
PORT_TAKEN = ("EADDRINUSE", "address already in use", "Address already in use")


def launch_ranks(argv_for_rank, world: int, env=None, timeout: float = 600, tries: int = 3):
    """Run `world` processes as a launcher would (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT on 127.0.0.1): argv_for_rank(r) is rank r's command. Returns (return codes,
    outputs), stdout and stderr together. Once a rank fails the group cannot finish: the others
    get 20 s to say why, then are killed (a rank killed so, or past `timeout`, returns a negative
    code). A port taken before rank 0's store could listen on it is the machine's race, not the
    code's: the whole group is run again on a fresh port (up to `tries` times); any other failure
    comes back as it is, every rank's output with it."""
    import tempfile
    import time
    for attempt in range(tries):
        port = free_port()
        with tempfile.TemporaryDirectory() as logs:
            files = [open(Path(logs) / f"rank{r}.log", "w+") for r in range(world)]
            procs = [subprocess.Popen([str(a) for a in argv_for_rank(r)],
                                      env=dict(env or os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world),
                                               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)),
                                      stdout=files[r], stderr=subprocess.STDOUT, text=True) for r in range(world)]
            end, failed_at = time.monotonic() + timeout, None
            while any(p.poll() is None for p in procs) and time.monotonic() < end:
                if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
                    failed_at = time.monotonic()
                if failed_at is not None and time.monotonic() > failed_at + 20:
                    break
                time.sleep(0.1)
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            outs = []
            for f in files:
                f.seek(0)
                outs.append(f.read())
                f.close()
        rcs = [p.returncode for p in procs]
        taken = any(rc != 0 for rc in rcs) and any(m in o for o in outs for m in PORT_TAKEN)
        if not taken or attempt == tries - 1:
            if all(rc == 0 for rc in rcs):  # a group's HF folder output is loaded as run()'s are
                HF_OUTPUTS.record([str(a) for a in argv_for_rank(0)], None, None)
            return rcs, outs
        print(f"launch_ranks: port {port} was taken before the store listened; again on a fresh port", file=sys.stderr)
    raise AssertionError("unreachable")


def ranks_text(rcs, outs, tail: int = 400) -> str:
    """Each rank's exit and the end of its output, for a check's message."""
    return "; ".join(f"rank {r} exit {rc}: {o.strip()[-tail:]!r}" for r, (rc, o) in enumerate(zip(rcs, outs)))


def tree_digest(root) -> dict[str, str]:
    """Relative path -> "MODE SHA256" of a file, "dir MODE", or "link:TARGET", for everything
    under root, hidden files included: equal digests before and after prove a run left an input
    untouched (contents, names and permissions)."""
    root = str(root)
    out = {}
    for dp, dns, fns in os.walk(root):
        for d in dns:
            p = os.path.join(dp, d)
            out[os.path.relpath(p, root)] = "link:" + os.readlink(p) if os.path.islink(p) else f"dir {os.lstat(p).st_mode:o}"
        for f in fns:
            p = os.path.join(dp, f)
            if os.path.islink(p):
                out[os.path.relpath(p, root)] = "link:" + os.readlink(p)
                continue
            h = hashlib.sha256()
            with open(p, "rb") as fh:
                for b in iter(lambda: fh.read(1 << 20), b""):
                    h.update(b)
            out[os.path.relpath(p, root)] = f"{os.lstat(p).st_mode:o} {h.hexdigest()}"
    return out


def _bytes_of(t):
    import torch
    t = t.detach().contiguous().reshape(-1)
    if t.numel() == 0:
        return torch.empty(0, dtype=torch.uint8)
    return t.view(torch.uint8)


def same_tensor(a, b, *, requires_grad: bool = False) -> str | None:
    """None when a and b are tensors of one dtype and shape whose bytes all agree (so NaN equals
    the same NaN, and -0.0 differs from 0.0); else what differs. requires_grad=True compares that
    flag too."""
    import torch
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return f"not tensors: {type(a).__name__}, {type(b).__name__}"
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} != {b.dtype}"
    if tuple(a.shape) != tuple(b.shape):
        return f"shape {tuple(a.shape)} != {tuple(b.shape)}"
    if requires_grad and a.requires_grad != b.requires_grad:
        return f"requires_grad {a.requires_grad} != {b.requires_grad}"
    ra, rb = _bytes_of(a), _bytes_of(b)
    if not torch.equal(ra, rb):
        return f"{int((ra != rb).sum())} of {ra.numel()} bytes differ"
    return None


def old_torch_pythons(required: bool = False) -> list[str]:
    """The older torch interpreters to load dcpctl's outputs with: DCPCTL_OLD_TORCH_PYTHON, a
    colon-separated list (tools/dev.sh: torch 2.14.1's and 2.6.0's). Unset or empty: [] (or, with
    required, skip_or_fail). A name that is not an interpreter is a broken set-up: it fails."""
    pys = [p for p in os.environ.get("DCPCTL_OLD_TORCH_PYTHON", "").split(":") if p]
    if not pys and required:
        skip_or_fail("DCPCTL_OLD_TORCH_PYTHON is not set: no older torch to load the outputs with")
    for p in pys:
        if not os.access(p, os.X_OK):
            print(f"FAIL: DCPCTL_OLD_TORCH_PYTHON names {p}, which is not an interpreter", file=sys.stderr)
            sys.exit(1)
    return pys


def torch_version_of(python: str) -> str:
    """torch.__version__ as that interpreter has it (for messages)."""
    r = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                       timeout=300)
    return r.stdout.strip() or f"? ({python})"


def gpu_present() -> bool:
    """Whether this machine has an NVIDIA GPU, probed without dcpctl: a GPU test may skip only when
    this says no (never on dcpctl's own exit code alone)."""
    if any(Path("/dev").glob("nvidia[0-9]*")):
        return True
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
        return r.returncode == 0 and "GPU" in r.stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


if __name__ == "__main__":
    sys.exit("testlib.py is a module")
