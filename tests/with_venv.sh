#!/usr/bin/env bash
# Runs a Python script with the project's virtualenv (real torch). When the virtualenv is absent
# or its torch does not import, exits 77 (CTest: skipped) with the reason on a partial developer
# set-up, and fails (exit 1) under CI=true or DCPCTL_REQUIRE_VENV=1 (tools/dev.sh test), where a
# broken virtualenv must not turn every torch test into a green skip (tests/skip.sh).
source "$(dirname "${BASH_SOURCE[0]}")/skip.sh"
py=$1
shift
if [ -z "$py" ] || [ ! -x "$py" ]; then
  skip_or_fail "no virtualenv with torch at '${py}' (configure with -DDCPCTL_PYTHON=.venv/bin/python; tools/dev.sh does)"
fi
if ! err=$("$py" -c "import torch" 2>&1); then
  skip_or_fail "$py cannot import torch: $(printf '%s\n' "$err" | tail -n 1)"
fi
exec "$py" "$@"
