"""Shared helpers of the corruption tests: run the real dcpctl binary under limits and judge how it
failed. Standard library only (the tests run without the virtualenv).

A run "failed cleanly" when the process exited (no signal), printed no sanitizer report, stayed
under the time and peak-RSS limits, and exited with the documented code the test expects.
"""
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ledger  # noqa: E402
from testlib import SANITIZER_MARKERS, tree_digest  # noqa: E402,F401 (tree_digest: for the tests that import harness)

# dcpctl's documented exit codes (README, man page, cmd/exit_codes.h).
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INVALID, EXIT_IO, EXIT_UNSUPPORTED = 0, 1, 2, 3, 4, 5

# Leaks inside LibTorch that dcpctl cannot avoid (see the file).
LSAN_SUPPRESSIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lsan.supp")

# How far above its CPU limit a run's wall clock may go before it counts as blocked (see Checker.run).
WALL_BACKSTOP_FACTOR = 20



class Result:
    def __init__(self, args, rc, stdout, stderr, seconds, max_rss_mb, cpu_seconds=0.0):
        self.args, self.rc, self.stdout, self.stderr = args, rc, stdout, stderr
        self.seconds, self.max_rss_mb, self.cpu_seconds = seconds, max_rss_mb, cpu_seconds

    def describe(self):
        return (f"{' '.join(self.args)}: rc {self.rc}, {self.seconds:.2f} s ({self.cpu_seconds:.2f} CPU-s), "
                f"{self.max_rss_mb:.0f} MiB peak\n"
                f"  stderr: {self.stderr.strip()[:600]}")


class Checker:
    """Collects failures instead of stopping at the first, like dcpctl verify."""

    def __init__(self, sanitized):
        self.sanitized = sanitized
        self.failures = []
        self.checks = 0
        # ASan's shadow memory makes RLIMIT_AS useless and inflates RSS; LibTorch alone is ~160 MiB.
        self.max_rss_mb = 1536 if sanitized else 512
        self.address_space = None if sanitized else 2 << 30

    def fail(self, msg):
        self.failures.append(msg)
        print("FAIL", msg, flush=True)

    def expect(self, cond, msg):
        self.checks += 1
        if not cond:
            self.fail(msg)
        return cond

    def run(self, args, timeout=60, cwd=None):
        """Runs args; returns a Result with its exit status, output, time, CPU time and peak RSS.
        Records a failure for a signal, a sanitizer report, a hang or too much memory.

        `timeout` is in CPU seconds (the kernel's RLIMIT_CPU: SIGXCPU, then SIGKILL), so a loaded
        machine cannot trip it: a process that spins uses CPU, one that waits for its turn does not.
        A process that blocks (a read that never returns) uses none; the wall-clock backstop for
        that is far above any scheduling delay (WALL_BACKSTOP_FACTOR times the CPU limit, at least
        10 minutes), since the runs here take milliseconds to seconds."""
        limit = self.address_space
        cpu_limit = max(1, int(math.ceil(timeout)))
        wall_limit = max(600.0, WALL_BACKSTOP_FACTOR * timeout)

        def preexec():
            if limit:
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit, cpu_limit + 5))

        env = dict(os.environ)
        lsan = env.get("LSAN_OPTIONS", "")
        env["LSAN_OPTIONS"] = (lsan + ":" if lsan else "") + f"suppressions={LSAN_SUPPRESSIONS}:print_suppressions=0"
        hung = False
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            start = time.monotonic()
            p = subprocess.Popen(args, stdout=out, stderr=err, cwd=cwd, preexec_fn=preexec, env=env)
            # Reap the child ourselves: wait4 gives this child's own peak RSS and CPU time.
            while True:
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() - start > wall_limit:
                    p.kill()
                    pid, status, ru = os.wait4(p.pid, 0)
                    hung = True
                    self.fail(f"{' '.join(args)}: still running after {wall_limit:.0f} s of wall clock (blocked?)")
                    break
                time.sleep(0.005)
            p.returncode = os.waitstatus_to_exitcode(status)
            seconds = time.monotonic() - start
            out.seek(0)
            err.seek(0)
            res = Result(args, p.returncode, out.read().decode("utf-8", "replace"),
                         err.read().decode("utf-8", "replace"), seconds, ru.ru_maxrss / 1024.0,
                         ru.ru_utime + ru.ru_stime)
        if not hung and (res.rc == -signal.SIGXCPU or (res.rc == -signal.SIGKILL and res.cpu_seconds >= cpu_limit)):
            self.fail(f"{' '.join(args)}: used its {cpu_limit} s of CPU (hang?)")
        self.checks += 1
        if res.rc < 0:
            self.fail(f"killed by signal {signal.Signals(-res.rc).name}: {res.describe()}")
        if any(m in res.stderr for m in SANITIZER_MARKERS):
            self.fail(f"sanitizer report: {res.describe()}")
        if res.max_rss_mb > self.max_rss_mb:
            self.fail(f"peak RSS {res.max_rss_mb:.0f} MiB > {self.max_rss_mb} MiB: {res.describe()}")
        return res


def finish(checker, name, min_checks=1):
    """Prints the count, records it in the test's ledger (tests/ledger.py) and returns the exit
    status: 1 on any failure, or when fewer than min_checks checks were made (at least 1; a full
    run's honest floor where it is known)."""
    short = ledger.floor(name, checker.checks, min_checks)
    if short and not checker.failures:
        checker.fail(short)
    ledger.record(checker.checks, name)
    print(f"{name}: {checker.checks} checks, {len(checker.failures)} failures")
    return 1 if checker.failures else 0


def parse_args(argv):
    sanitized = "--sanitized" in argv
    rest = [a for a in argv[1:] if a != "--sanitized"]
    return rest, sanitized


if __name__ == "__main__":
    sys.exit("harness.py is a module")
