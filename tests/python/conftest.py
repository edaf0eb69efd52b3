"""Shared fixtures of the Python module's tests (run by tests/python/run_pytest.py, which puts the
build tree's dcpctl package first on sys.path and names the CLI binary and the fixtures)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "interop"))


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return Path(os.environ["DCPCTL_TEST_FIXTURES"])


@pytest.fixture(scope="session")
def cli():
    """Runs the dcpctl binary: cli(*args) -> CompletedProcess (text)."""
    exe = os.environ["DCPCTL_TEST_BIN"]

    def run(*args):
        return subprocess.run([exe, *map(str, args)], capture_output=True, text=True)

    return run


@pytest.fixture(scope="session")
def cli_json(cli):
    def run(*args):
        r = cli(*args, "--json")
        return r.returncode, json.loads(r.stdout) if r.stdout.strip() else None

    return run
