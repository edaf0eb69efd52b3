#!/usr/bin/env bash
# Runs a Python script with the project's virtualenv (real torch). When the virtualenv is absent
# or its torch does not import, exits 77 (CTest: skipped) with the reason on a partial developer
# set-up, and fails (exit 1) under CI=true or DCPCTL_REQUIRE_VENV=1 (tools/dev.sh test), where a
# broken virtualenv must not turn every torch test into a green skip (tests/skip.sh).
#   with_venv.sh PYTHON SCRIPT [ARGS...]          torch is imported once, in the script's process
#                                                (tests/torch_main.py)
#   with_venv.sh PYTHON --fresh SCRIPT [ARGS...]  the script starts without torch imported (it checks
#                                                what imports torch); the check is a process of its own
source "$(dirname "${BASH_SOURCE[0]}")/skip.sh"
py=$1
shift
if [ -z "$py" ] || [ ! -x "$py" ]; then
  skip_or_fail "no virtualenv with torch at '${py}' (configure with -DDCPCTL_PYTHON=.venv/bin/python; tools/dev.sh does)"
fi
if [ "${1:-}" != --fresh ]; then
  exec "$py" "$(dirname "${BASH_SOURCE[0]}")/torch_main.py" "$@"
fi
shift
if ! err=$("$py" -c "import torch" 2>&1); then
  skip_or_fail "$py cannot import torch: $(printf '%s\n' "$err" | tail -n 1)"
fi
exec "$py" "$@"
