#!/usr/bin/env bash
# A newcomer's first run, timed step by step: a fresh clone of this checkout, cold caches (no
# ccache, empty uv and pip caches: the torch wheel is downloaded from PyPI), then the README's
# first command, `tools/dev.sh demo`, to its first output and to its end.
#
#   bench/first_run.sh [WORKDIR]     (default: a new directory under /tmp; removed unless KEEP=1)
#
# Prints every line of the demo with the seconds since the start, then a table: each step (the
# Debian packages, the virtualenv, Gloo's headers, configure, the build, the demo's commands) with
# its duration, the time to the first output of dcpctl, and the total. The Debian packages step
# installs only what is missing: on a machine that has them it takes no time, and the table says so.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${1:-$(mktemp -d /tmp/dcpctl-first-run.XXXXXX)}
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK"
git clone -q "$ROOT" "$WORK/dcpctl"
export DCPCTL_CCACHE=0 UV_CACHE_DIR=$WORK/uv-cache PIP_CACHE_DIR=$WORK/pip-cache PIP_NO_CACHE_DIR=1
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); clone of $(git -C "$ROOT" rev-parse --short HEAD) in $WORK/dcpctl"
start=$(date +%s.%N)
set +e
(cd "$WORK/dcpctl" && tools/dev.sh demo) 2>&1 | while IFS= read -r line; do
  printf '%7.1f %s\n' "$(echo "$(date +%s.%N) - $start" | bc)" "$line"
done | tee "$WORK/log"
rc=${PIPESTATUS[0]}
set -e
total=$(echo "$(date +%s.%N) - $start" | bc)
echo
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg); demo exit $rc"
# The steps: each "==>" line starts one; it lasts until the next one (the last until the end).
python3 - "$WORK/log" "$total" <<'EOF'
import re, sys
lines = [l.rstrip("\n") for l in open(sys.argv[1])]
total = float(sys.argv[2])
steps, first_output = [], None
for l in lines:
    m = re.match(r"\s*([\d.]+) (.*)", l)
    if not m:
        continue
    t, text = float(m.group(1)), m.group(2)
    if "==> " in text:
        steps.append([t, re.sub(r".*==> ", "", re.sub(r"\x1b\[[0-9;]*m", "", text))])
    elif first_output is None and steps and "dcpctl inspect" in steps[-1][1]:
        first_output = t
print("| step | seconds |")
print("|---|---|")
if steps and "Debian packages" not in steps[0][1]:
    # setup_apt logs only when it installs: the time before the first step is its check.
    print(f"| Debian packages: checked, none missing here | {steps[0][0]:.1f} |")
for i, (t, name) in enumerate(steps):
    if i == 0 and "Debian packages" in name and t > 1:
        print(f"| (before the first step) | {t:.1f} |")
    end = steps[i + 1][0] if i + 1 < len(steps) else total
    print(f"| {name} | {end - t:.1f} |")
print(f"| **first output of dcpctl** | **{first_output:.1f}** |" if first_output else "| first output | (none) |")
print(f"| **total** | **{total:.1f}** |")
EOF
exit "$rc"
