# shellcheck shell=bash
# Sourced by the benchmarks that share the >= 4 GB checkpoint of bench/make_big_ckpt.py (8 ranks,
# written by real torch; generated on first use, never committed). Sets root, work ($1 of the
# script, default /tmp/dcpctl-bench), py (PYTHON), dcpctl (DCPCTL), ckpt; checks the tools;
# sets cold=1 when the page cache can be dropped, and drop_cache drops it (a no-op otherwise).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:-/tmp/dcpctl-bench}
py=${PYTHON:-$root/.venv/bin/python}
dcpctl=${DCPCTL:-$root/build/cmd/dcpctl}
ckpt=$work/ckpt
mkdir -p "$work"
[ -x "$dcpctl" ] || { echo "no dcpctl at $dcpctl (set DCPCTL)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (GNU time)" >&2; exit 2; }

if [ ! -f "$ckpt/.metadata" ]; then
  echo "== generating the checkpoint under $ckpt (8 ranks, real torch)"
  "$py" "$root/bench/make_big_ckpt.py" "$ckpt"
fi

cold=0
if sync && (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then cold=1; fi
drop_cache() { if [ "$cold" = 1 ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi; }
