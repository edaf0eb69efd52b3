#!/usr/bin/env bash
# dcpctl inspect vs Python's pickle.load on a 5-million-chunk `.metadata`, side by side.
#
#   bench/inspect_5m.sh [DIR] [DCPCTL]
#
# DIR (default /tmp/dcpctl-bench/meta5m) is made by bench/make_big_metadata.py when it holds no
# .metadata (10,000 tensors x 512 ranks = 5,120,000 chunks, 722 MB; 10-20 minutes and ~10 GB of
# RAM). pickle.load of it needs another ~11 GB.
# DCPCTL defaults to build/cmd/dcpctl. Every command runs after the file is in the page cache
# (inspect reads from memory); wall time and peak RSS are reported for:
#   (a) dcpctl inspect --json DIR > /dev/null      (the whole process), RUNS times, median
#   (p) dcpctl's parse alone: `dcpctl ls --json` of a run folder whose one step is a link to DIR
#       reports timing.open_seconds (reading and parsing .metadata into the model), RUNS times
#   (b) python: import torch; pickle.load(...)     (the whole process, and the load alone), once
#   (c) python: import torch                       (to separate the import from the load), once
# Targets (issue 24): the parse in <= 1.5 s, and dcpctl's peak RSS <= 1x the file; and dcpctl at
# least 5x faster than pickle.load alone. RUNS (env, default 3); SKIP_PYTHON=1 skips (b) and (c)
# (pickle.load needs ~11 GB and a minute). The machine's load average is printed with the results:
# the numbers mean little when something else runs.
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
rss_mb() { field "$1" "Maximum resident set size (kbytes)" | awk '{ printf "%.0f\n", $1 / 1024 }'; }
cpu_s() { echo "$(field "$1" "User time (seconds)") $(field "$1" "System time (seconds)")" | awk '{ print $1 + $2 }'; }

RUNS=${RUNS:-3}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "== (a) dcpctl inspect --json, $RUNS runs" >&2
for k in $(seq "$RUNS"); do
  /usr/bin/time -v -o "$TMP/a$k" "$DCPCTL" inspect --json "$DIR" >"$TMP/a.json"
done
echo "== (p) dcpctl's parse (ls --json timing), $RUNS runs" >&2
mkdir -p "$TMP/run"
ln -s "$(cd "$DIR" && pwd)" "$TMP/run/step-1"
for k in $(seq "$RUNS"); do
  "$DCPCTL" ls --json "$TMP/run" >"$TMP/p$k.json" || true  # no .distcp files: the step is incomplete
done
load_after_dcpctl=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "${SKIP_PYTHON:-0}" = 1 ]; then
  echo "0 0 0 0 0" >"$TMP/b.out"
  for x in b c; do printf 'Elapsed (wall clock) time (h:mm:ss or m:ss): 0:00\nMaximum resident set size (kbytes): 0\nUser time (seconds): 0\nSystem time (seconds): 0\n' >"$TMP/$x"; done
else
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
fi

read -r py_import_s py_load_s py_rss_after_import_kb py_import_cpu py_load_cpu <"$TMP/b.out"
size=$(stat -c %s "$MD")
chunks=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['summary']['chunks'])" "$TMP/a.json")
a_s=$(for k in $(seq "$RUNS"); do wall_s "$TMP/a$k"; done | median)
a_mb=$(for k in $(seq "$RUNS"); do rss_mb "$TMP/a$k"; done | median)
a_cpu=$(for k in $(seq "$RUNS"); do cpu_s "$TMP/a$k"; done | median)
a_all=$(for k in $(seq "$RUNS"); do echo "$(wall_s "$TMP/a$k")s/$(rss_mb "$TMP/a$k")MiB"; done | paste -sd' ')
p_field() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['checkpoints'][0]['timing'][sys.argv[2]])" "$1" "$2"; }
p_s=$(for k in $(seq "$RUNS"); do p_field "$TMP/p$k.json" open_seconds; done | median)
p_all=$(for k in $(seq "$RUNS"); do printf '%.3f ' "$(p_field "$TMP/p$k.json" open_seconds)"; done)
p_bytes=$(p_field "$TMP/p1.json" metadata_bytes)
b_s=$(wall_s "$TMP/b") b_mb=$(rss_mb "$TMP/b") b_cpu=$(cpu_s "$TMP/b")
c_s=$(wall_s "$TMP/c") c_mb=$(rss_mb "$TMP/c") c_cpu=$(cpu_s "$TMP/c")
size_mb=$(awk -v b="$size" 'BEGIN { printf "%.1f", b / 1048576 }')

awk -v size="$size" -v size_mb="$size_mb" -v chunks="$chunks" -v a_s="$a_s" -v a_mb="$a_mb" -v b_s="$b_s" -v b_mb="$b_mb" \
  -v c_s="$c_s" -v c_mb="$c_mb" -v imp="$py_import_s" -v load="$py_load_s" -v rss_imp="$py_rss_after_import_kb" \
  -v a_cpu="$a_cpu" -v b_cpu="$b_cpu" -v c_cpu="$c_cpu" -v imp_cpu="$py_import_cpu" -v load_cpu="$py_load_cpu" \
  -v p_s="$p_s" -v p_all="$p_all" -v p_bytes="$p_bytes" -v a_all="$a_all" -v runs="$RUNS" \
  -v load1="$load_before" -v load2="$load_after_dcpctl" -v skip="${SKIP_PYTHON:-0}" '
BEGIN {
  printf "\n.metadata: %d bytes (%s MiB), %d chunks\n\n", size, size_mb, chunks
  printf "%-48s %9s %9s %12s\n", "", "wall s", "CPU s", "peak RSS MiB"
  printf "%-48s %9.2f %9.2f %12d   (median of %d: %s)\n", "(a) dcpctl inspect --json > /dev/null", a_s, a_cpu, a_mb, runs, a_all
  printf "%-48s %9.2f %9s %12s   (median of %d: %s)\n", "(p) dcpctl parse alone (ls --json open_seconds)", p_s, "", "", runs, p_all
  printf "%-48s %9.2f %9.2f %12d\n", "(b) python: import torch + pickle.load (process)", b_s, b_cpu, b_mb
  printf "%-48s %9.2f %9.2f %12d\n", "    of which pickle.load alone (in-process)", load, load_cpu, b_mb - rss_imp / 1024
  printf "%-48s %9.2f %9.2f %12s\n", "    of which import torch (in-process)", imp, imp_cpu, ""
  printf "%-48s %9.2f %9.2f %12d\n", "(c) python: import torch only (process)", c_s, c_cpu, c_mb
  printf "\n"
  printf "dcpctl parse of %d bytes:                %6.2f s        (target <= 1.5 s: %s)\n", p_bytes, p_s, p_s <= 1.5 ? "met" : "NOT met"
  printf "dcpctl peak RSS / .metadata size:                      %6.2fx  (target <= 1x: %s)\n", a_mb * 1048576 / size, a_mb * 1048576 <= size ? "met" : "NOT met"
  printf "load average (1/5/15 min) before dcpctl: %s; after: %s\n", load1, load2
  if (skip == 1) { printf "(python skipped: SKIP_PYTHON=1)\n"; exit }
  printf "speed-up, pickle.load alone / dcpctl process:          %6.1fx wall, %6.1fx CPU  (target >= 5x)\n", load / a_s, load_cpu / a_cpu
  printf "speed-up, python process (import + load) / dcpctl:     %6.1fx wall, %6.1fx CPU\n", b_s / a_s, b_cpu / a_cpu
  printf "python peak RSS / .metadata size:                      %6.2fx\n", b_mb * 1048576 / size
}'
