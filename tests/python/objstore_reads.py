"""dcpctl.open() of s3:// and gs:// checkpoints (the Python module, docs/python.md), run inside
tests/s3/s3_read_test.py and tests/gcs/gcs_test.py against the server each has started (one server
start for both front ends): every tensor equal to torch's view of the same checkpoint, byte for
byte; a slice equal to the same slice of it; a missing checkpoint raising CheckpointIOError (exit 4,
as the command line). The module reads the store's credentials and endpoint from the environment,
as the command line does: this process's environment is the test's `env` while it runs.
"""
import contextlib
import os
import sys


@contextlib.contextmanager
def environment(env: dict):
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def python_reads(build_python: str, env: dict, cases, missing_url: str, check, same_tensor) -> int:
    """cases: [(URL, {key: torch tensor})]. check(ok, what) and same_tensor(a, b) -> None or why:
    the calling test's (tests/testlib.py). Returns the tensors compared."""
    sys.path.insert(0, os.path.abspath(build_python))
    import dcpctl

    compared = 0
    with environment(env):
        for url, want in cases:
            check(bool(want), f"python: {url}: torch's view holds no tensor")
            with dcpctl.open(url, framework="pt") as ck:
                check(sorted(ck.keys()) == sorted(want), f"python: dcpctl.open({url!r}).keys() differ from torch's: "
                      f"{sorted(set(ck.keys()) ^ set(want))[:6]}")
                for key, t in want.items():
                    if key in ck:
                        why = same_tensor(ck.get(key), t)
                        compared += check(why is None, f"python: {url}: {key}: {why}")
                key = max(want, key=lambda k: want[k].numel())
                t = want[key]
                if t.dim() >= 1 and t.shape[0] > 1:
                    why = same_tensor(ck.get_slice(key)[1::2].contiguous(), t[1::2].contiguous())
                    check(why is None, f"python: {url}: get_slice({key!r})[1::2]: {why}")
        try:
            dcpctl.open(missing_url)
            check(False, f"python: dcpctl.open({missing_url!r}) opened a missing checkpoint")
        except dcpctl.CheckpointIOError as e:
            check(missing_url in str(e), f"python: a missing checkpoint: {e}")
    print(f"  python: {compared} tensors of {len(cases)} checkpoint(s) read through dcpctl.open, equal to torch's",
          flush=True)
    return compared
