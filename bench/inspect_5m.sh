#!/usr/bin/env bash
# dcpctl inspect vs Python's pickle.load on a 5-million-chunk `.metadata`, side by side.
#
#   bench/inspect_5m.sh [DIR] [DCPCTL]
#
# DIR (default /tmp/dcpctl-bench/meta5m) is made by bench/make_big_metadata.py when it holds no
# .metadata (10,000 tensors x 512 ranks = 5,120,000 chunks, 722 MB; 10-20 minutes and ~10 GB of
# RAM). pickle.load of it needs another ~11 GB.
# DCPCTL defaults to build/cmd/dcpctl. Each command runs once under /usr/bin/time -v after the
# file is in the page cache; wall time and peak RSS are reported for:
#   (a) dcpctl inspect --json DIR > /dev/null      (the whole process: LibTorch load included)
#   (b) python: import torch; pickle.load(...)     (the whole process, and the load alone)
#   (c) python: import torch                       (to separate the import from the load)
# Targets: dcpctl at least 5x faster than pickle.load alone; dcpctl peak RSS at most 3x the file.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${1:-/tmp/dcpctl-bench/meta5m}
DCPCTL=${2:-$ROOT/build/cmd/dcpctl}
PY=${DCPCTL_PYTHON:-$ROOT/.venv/bin/python}
MD=$DIR/.metadata

[ -x "$DCPCTL" ] || { echo "no dcpctl binary at $DCPCTL" >&2; exit 2; }
[ -f "$MD" ] || "$PY" "$ROOT/bench/make_big_metadata.py" "$DIR"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

cat "$MD" >/dev/null  # page cache: both sides read from memory

# field <time -v output> <label>: the value after "label: ".
field() { sed -n "s/^[[:space:]]*$2: //p" "$1"; }
wall_s() {  # "h:mm:ss" or "m:ss.cc" -> seconds
  field "$1" "Elapsed (wall clock) time (h:mm:ss or m:ss)" | awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s }'
}
rss_mb() { field "$1" "Maximum resident set size (kbytes)" | awk '{ printf "%.0f", $1 / 1024 }'; }
cpu_s() { echo "$(field "$1" "User time (seconds)") $(field "$1" "System time (seconds)")" | awk '{ print $1 + $2 }'; }

echo "== (a) dcpctl inspect --json" >&2
/usr/bin/time -v -o "$TMP/a" "$DCPCTL" inspect --json "$DIR" >"$TMP/a.json"
echo "== (c) python: import torch" >&2
/usr/bin/time -v -o "$TMP/c" "$PY" -c "import torch, pickle"
echo "== (b) python: import torch; pickle.load" >&2
/usr/bin/time -v -o "$TMP/b" "$PY" -c "
import time
t0, c0 = time.perf_counter(), time.process_time()
import torch, pickle, resource
t1, c1 = time.perf_counter(), time.process_time()
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open('$MD', 'rb') as f:
    md = pickle.load(f)
t2, c2 = time.perf_counter(), time.process_time()
print(f'{t1 - t0:.3f} {t2 - t1:.3f} {rss0} {c1 - c0:.3f} {c2 - c1:.3f}')
" >"$TMP/b.out"

read -r py_import_s py_load_s py_rss_after_import_kb py_import_cpu py_load_cpu <"$TMP/b.out"
size=$(stat -c %s "$MD")
chunks=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['summary']['chunks'])" "$TMP/a.json")
a_s=$(wall_s "$TMP/a") a_mb=$(rss_mb "$TMP/a") a_cpu=$(cpu_s "$TMP/a")
b_s=$(wall_s "$TMP/b") b_mb=$(rss_mb "$TMP/b") b_cpu=$(cpu_s "$TMP/b")
c_s=$(wall_s "$TMP/c") c_mb=$(rss_mb "$TMP/c") c_cpu=$(cpu_s "$TMP/c")
size_mb=$(awk -v b="$size" 'BEGIN { printf "%.1f", b / 1048576 }')

awk -v size="$size" -v size_mb="$size_mb" -v chunks="$chunks" -v a_s="$a_s" -v a_mb="$a_mb" -v b_s="$b_s" -v b_mb="$b_mb" \
  -v c_s="$c_s" -v c_mb="$c_mb" -v imp="$py_import_s" -v load="$py_load_s" -v rss_imp="$py_rss_after_import_kb" \
  -v a_cpu="$a_cpu" -v b_cpu="$b_cpu" -v c_cpu="$c_cpu" -v imp_cpu="$py_import_cpu" -v load_cpu="$py_load_cpu" '
BEGIN {
  printf "\n.metadata: %d bytes (%s MiB), %d chunks\n\n", size, size_mb, chunks
  printf "%-48s %9s %9s %12s\n", "", "wall s", "CPU s", "peak RSS MiB"
  printf "%-48s %9.2f %9.2f %12d\n", "(a) dcpctl inspect --json > /dev/null", a_s, a_cpu, a_mb
  printf "%-48s %9.2f %9.2f %12d\n", "(b) python: import torch + pickle.load (process)", b_s, b_cpu, b_mb
  printf "%-48s %9.2f %9.2f %12d\n", "    of which pickle.load alone (in-process)", load, load_cpu, b_mb - rss_imp / 1024
  printf "%-48s %9.2f %9.2f %12s\n", "    of which import torch (in-process)", imp, imp_cpu, ""
  printf "%-48s %9.2f %9.2f %12d\n", "(c) python: import torch only (process)", c_s, c_cpu, c_mb
  printf "\n"
  printf "speed-up, pickle.load alone / dcpctl process:          %6.1fx wall, %6.1fx CPU  (target >= 5x)\n", load / a_s, load_cpu / a_cpu
  printf "speed-up, python process (import + load) / dcpctl:     %6.1fx wall, %6.1fx CPU\n", b_s / a_s, b_cpu / a_cpu
  printf "dcpctl peak RSS / .metadata size:                      %6.2fx  (target <= 3x)\n", a_mb * 1048576 / size
  printf "python peak RSS / .metadata size:                      %6.2fx\n", b_mb * 1048576 / size
}'
