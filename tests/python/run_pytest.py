#!/usr/bin/env python3
"""Runs the Python module's pytest suite (tests/python/test_*.py) in this process, against the
build tree's package (BUILD/python/dcpctl: python/CMakeLists.txt copies the Python files beside the
extension) and records its passed cases in the check ledger (tests/ledger.py).

    run_pytest.py DCPCTL BUILD_PYTHON_DIR FIXTURES [pytest args...]

Fails when a case fails, when the package does not import, and when fewer cases pass than the
suite always runs (a collection that found nothing, or lost most of it, has checked nothing).
Exit status: 0 pass, 1 failure, 77 skip (the virtualenv lacks pytest: a failure under CI).
"""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import ledger  # noqa: E402
from skip import skip_or_fail  # noqa: E402

# The suite's cases (parametrised ones counted each) number more than this; fewer passing is a failure.
FLOOR = 84

try:
    import pytest
except ImportError as e:
    skip_or_fail(f"the virtualenv lacks {e.name} (tools/requirements.txt)")


class Count:
    def __init__(self):
        self.passed = self.failed = 0

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and report.passed:
            self.passed += 1
        elif report.failed:
            self.failed += 1


def main() -> int:
    dcpctl, build_python, fixtures = sys.argv[1:4]
    os.environ["DCPCTL_TEST_BIN"] = os.path.abspath(dcpctl)
    os.environ["DCPCTL_TEST_FIXTURES"] = os.path.abspath(fixtures)
    sys.path.insert(0, os.path.abspath(build_python))
    import dcpctl as module

    where = Path(module.__file__).resolve().parent
    if where != Path(build_python).resolve() / "dcpctl":
        print(f"FAIL: dcpctl imported from {where}, not the build tree's {build_python}", file=sys.stderr)
        return 1
    count = Count()
    # -s: the cases that measure (two threads reading) print their figures.
    rc = pytest.main(["-q", "-s", "-p", "no:cacheprovider", str(HERE), *sys.argv[4:]], plugins=[count])
    ledger.record(count.passed, "pytest cases passed")
    print(f"{count.passed} cases passed, {count.failed} failed (pytest exit {int(rc)})")
    if rc != 0 or count.failed:
        return 1
    if len(sys.argv) == 4 and (msg := ledger.floor("python-module", count.passed, FLOOR)):
        print(f"FAIL: {msg}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
