#!/usr/bin/env bash
# Start-up time of dcpctl (issue: instant start, target <= 20 ms median for `inspect` of the
# sample), next to `python -c 'import torch'`, in one run. Usage: bench/startup.sh [RUNS]
# Environment: DCPCTL (default build/cmd/dcpctl), PYTHON (default .venv/bin/python).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dcpctl=${DCPCTL:-$root/build/cmd/dcpctl}
py=${PYTHON:-$root/.venv/bin/python}
[ -x "$dcpctl" ] || { echo "no dcpctl at $dcpctl (set DCPCTL)" >&2; exit 2; }
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $dcpctl"
python3 "$root/bench/startup.py" --dcpctl "$dcpctl" --python "$py" \
  --sample "$root/tests/fixtures/sample/ckpt" --runs "${1:-30}"
