"""Runs a test script as __main__ after checking, in the same process, that torch imports
(tests/with_venv.sh runs it with the virtualenv's python).

    torch_main.py SCRIPT [ARGS...]

The check is the import the script itself needs: done here once, it costs nothing more when the
script imports torch again (before, a separate `python -c "import torch"` paid a second import,
about 1.5 s of CPU, for every torch test). When torch does not import, the test skips (77) on a
partial developer set-up and fails under CI=true / DCPCTL_REQUIRE_VENV=1 (tests/skip.py).
SCRIPT runs as `python SCRIPT ARGS` would run it: sys.argv, sys.path[0] (the script's folder)
and __main__ (torch.multiprocessing's spawn re-imports it from __main__.__file__).
"""
import os
import runpy
import sys

from skip import skip_or_fail

try:
    import torch  # noqa: F401
except Exception as e:  # noqa: BLE001 - any failure to import is the set-up's, not the test's
    skip_or_fail(f"{sys.executable} cannot import torch: {type(e).__name__}: {e}")

script = os.path.abspath(sys.argv[1])
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(script)
runpy.run_path(script, run_name="__main__")
