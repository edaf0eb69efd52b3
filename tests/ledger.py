"""The check ledger: how many checks each CTest test made, for the suite's own check that no test
passes having checked nothing (tests/ledger_judge.py; docs/testing.md#no-test-passes-on-nothing).

Every CTest test runs under tests/counted.sh, which gives it a ledger file in DCPCTL_CHECK_LEDGER;
the test's harness appends "checks N WHAT" to it when it sums up (tests/tally.py's Tally.summary,
testlib.summary, corruption/harness.py's finish, ...). Standard library only.

The variable is taken out of the environment when this module is imported, so that only the test's
own process records: a test script that runs another (a drift test running the checker it breaks)
does not get the child's checks counted as its own.
"""
import os

_PATH = os.environ.pop("DCPCTL_CHECK_LEDGER", None)


def record(checks: int, what: str) -> None:
    """Appends this process's count of checks (a comparison that could have failed, passed or not)
    to the test's ledger; nothing when the test was not started by CTest."""
    if _PATH:
        with open(_PATH, "a") as f:
            f.write(f"checks {int(checks)} {what}\n")


def floor(name: str, made: int, least: int) -> str | None:
    """The failure to report when a test made fewer than `least` checks (None when it made enough):
    a data-driven test that ran no case, or dropped most of them, has not passed. least must be >= 1."""
    if least < 1:
        raise ValueError(f"{name}: a floor of {least} checks lets a test pass having checked nothing")
    if made < least:
        return f"{name}: {made} checks made, fewer than the {least} this test always makes"
    return None
