#!/usr/bin/env bash
# Runs a Python script with the project's virtualenv (real torch). Exits 77 (CTest: skipped)
# with the reason when the virtualenv is absent; tools/dev.sh always creates it, so CI never skips.
py=$1
shift
if [ -z "$py" ] || [ ! -x "$py" ]; then
  echo "SKIP: no virtualenv with torch (configure with -DDCPCTL_PYTHON=.venv/bin/python; tools/dev.sh does)" >&2
  exit 77
fi
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "SKIP: $py cannot import torch" >&2
  exit 77
fi
exec "$py" "$@"
