"""How a test that cannot run ends (the Python twin of tests/skip.sh; standard library only).

CTest marks exit 77 as skipped. ``skip_absent`` is for what the machine truly lacks (a GPU) and
always skips; ``skip_or_fail`` is for what tools/dev.sh provides (the virtualenv, torch,
safetensors, a Debian tool, another filesystem in /dev/shm): it skips on a partial developer
set-up but fails (exit 1) under CI=true or DCPCTL_REQUIRE_VENV=1, where it means the set-up broke.
"""
import os
import sys

SKIP = 77


def strict() -> bool:
    return os.environ.get("CI", "") in ("true", "TRUE", "True", "1", "yes") or \
        os.environ.get("DCPCTL_REQUIRE_VENV") == "1"


def skip_absent(reason: str) -> None:
    print(f"SKIP: {reason}", file=sys.stderr)
    sys.exit(SKIP)


def skip_or_fail_code(reason: str) -> int:
    """The exit status for a missing prerequisite (for callers that return their status)."""
    if strict():
        print(f"FAIL: {reason} (a skip is not allowed here: CI={os.environ.get('CI', '')} "
              f"DCPCTL_REQUIRE_VENV={os.environ.get('DCPCTL_REQUIRE_VENV', '')}; tools/dev.sh setup provides it)",
              file=sys.stderr)
        return 1
    print(f"SKIP: {reason}", file=sys.stderr)
    return SKIP


def skip_or_fail(reason: str) -> None:
    sys.exit(skip_or_fail_code(reason))
