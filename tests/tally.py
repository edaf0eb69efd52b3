"""The checks a test script makes, counted (standard library only; tests/skip.py's neighbour).

    from tally import Tally
    TALLY = Tally()
    check = TALLY.check
    check(r.returncode == 0, f"consolidate: exit {r.returncode}")   # one check: a FAIL line if false
    ...
    return TALLY.summary("my_test")     # "my_test: N checks passed, M failed"; 1 on any failure

The count goes to the test's ledger (tests/ledger.py). Used by the key-map tests (tests/interop/map_oracle.py hands it on) and the S3 tests (tests/s3).
"""
import sys

import ledger


class Tally:
    """The checks a test script makes: check() counts one, problems() one for an empty list and
    one failure per problem; failures are printed as they happen."""

    def __init__(self) -> None:
        self.passed = 0
        self.failures: list[str] = []

    def check(self, cond: bool, msg: str) -> bool:
        if cond:
            self.passed += 1
        else:
            self.failures.append(msg)
            print("FAIL: " + msg, file=sys.stderr, flush=True)
        return cond

    def problems(self, ps: list[str]) -> bool:
        if not ps:
            self.passed += 1
        for p in ps:
            self.check(False, p)
        return not ps

    def summary(self, name: str, min_checks: int = 1) -> int:
        """Prints "NAME: N checks passed, M failed" and records the count in the test's ledger
        (tests/ledger.py); 1 on any failure, and when fewer than min_checks checks passed (at least
        1: a test that checked nothing has not passed)."""
        short = ledger.floor(name, self.passed, min_checks)
        if short and not self.failures:
            self.check(False, short)
        ledger.record(self.passed + len(self.failures), name)
        print(f"{name}: {self.passed} checks passed, {len(self.failures)} failed", flush=True)
        return 1 if self.failures else 0
