#!/usr/bin/env bash
# The 1 T plan: dcpctl plans the FP8 export of a Kimi-K2-shaped torchtitan checkpoint (1.04 T
# parameters: DeepSeek-V3's architecture, 61 layers, 384 routed experts, hidden 7168) saved with
# FSDP2 and expert parallelism over 2,048 ranks with Adam, from its `.metadata` alone.
#
#   bench/plan_1t.sh [DIR] [DCPCTL]
#
# DIR (default /tmp/dcpctl-bench/kimi-k2) is made by bench/make_big_metadata.py when it holds no
# .metadata (--model kimi-k2-titan --ranks 2048 --ep 64: torch's own classes, pickle.dump;
# torchtitan 0.3's names, every weight but the experts Shard(0) over the 2,048 ranks, the experts
# split 64 ways on dim 0 (EP) and 32 on dim 1 (FSDP); float32 with exp_avg, exp_avg_sq and step;
# a config.json written by transformers' DeepseekV3Config; ~15 GB of RAM, 10-40 minutes). No data
# file is written: a dry run reads only `.metadata` (and config.json).
#
# Rows, the file in the page cache, RUNS times each (default 3), medians; wall time and peak RSS
# of the whole process (/usr/bin/time):
# (and user + system CPU seconds: on a loaded machine the wall clock is mostly waiting):
#   (a) cat .metadata > /dev/null                                   the anchor: reading the file
#   (b) dcpctl inspect --json DIR > /dev/null                       parse and describe everything
#   (c) dcpctl consolidate DIR --map torchtitan-deepseek-v3 -o OUT/ --dry-run --json --max-memory 16GiB
#       the map to Hugging Face names (each stacked expert tensor unstacked into 384 per layer)
#   (d) the same with --quantize fp8-block: every Linear but the carve-outs as FP8 128x128 blocks
#       and their weight_scale_inv; then the plan's own figures (tensors, bytes, files, records,
#       pieces, the largest record's buffer, each process's memory from the one memory model)
#   (e), (f) (c) and (d) without --json: the text dry run (the records, not their pieces)
# BASE=/path/to/another/dcpctl adds (c) to (f) with that binary in the same rounds, and says
# whether its plans (the --json and the text) are byte for byte the same.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${1:-/tmp/dcpctl-bench/kimi-k2}
DCPCTL=${2:-$ROOT/build/cmd/dcpctl}
PY=${DCPCTL_PYTHON:-$ROOT/.venv/bin/python}
RUNS=${RUNS:-3}
MD=$DIR/.metadata

[ -x "$DCPCTL" ] || { echo "no dcpctl binary at $DCPCTL" >&2; exit 2; }
[ -f "$MD" ] || "$PY" "$ROOT/bench/make_big_metadata.py" "$DIR" --model kimi-k2-titan --ranks 2048 --ep 64
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat "$MD" >/dev/null

field() { sed -n "s/^[[:space:]]*$2: //p" "$1"; }
wall_s() { field "$1" "Elapsed (wall clock) time (h:mm:ss or m:ss)" | awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s }'; }
cpu_s() { awk -v u="$(field "$1" "User time (seconds)")" -v s="$(field "$1" "System time (seconds)")" 'BEGIN { printf "%.2f\n", u + s }'; }
rss_mb() { field "$1" "Maximum resident set size (kbytes)" | awk '{ printf "%.0f\n", $1 / 1024 }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
plan() {  # plan OUTFILE TIMEFILE [extra args]: one dry run, its exit checked (BIN: the binary; JSON= for text)
  local out=$1 tf=$2 rc=0
  shift 2
  /usr/bin/time -v -o "$tf" "${BIN:-$DCPCTL}" consolidate "$DIR" --map torchtitan-deepseek-v3 -o "$TMP/out/" --dry-run ${JSON---json} \
    --max-memory 16GiB "$@" >"$out" || rc=$?
  [ "$rc" = 0 ] || { echo "consolidate --dry-run $* exited $rc" >&2; exit 1; }
}

echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $MD: $(stat -c %s "$MD") bytes"
for k in $(seq "$RUNS"); do  # interleaved rounds
  /usr/bin/time -v -o "$TMP/a$k" cat "$MD" >/dev/null
  /usr/bin/time -v -o "$TMP/b$k" "$DCPCTL" inspect --json "$DIR" >/dev/null
  plan "$TMP/plan-map.json" "$TMP/c$k"
  plan "$TMP/plan-fp8.json" "$TMP/d$k" --quantize fp8-block
  JSON= plan "$TMP/plan-map.txt" "$TMP/e$k"
  JSON= plan "$TMP/plan-fp8.txt" "$TMP/f$k" --quantize fp8-block
  if [ -n "${BASE:-}" ]; then
    BIN=$BASE plan "$TMP/base-map.json" "$TMP/g$k"
    BIN=$BASE plan "$TMP/base-fp8.json" "$TMP/h$k" --quantize fp8-block
    BIN=$BASE JSON= plan "$TMP/base-map.txt" "$TMP/i$k"
    BIN=$BASE JSON= plan "$TMP/base-fp8.txt" "$TMP/j$k" --quantize fp8-block
  fi
done

row() {  # row LABEL PREFIX
  local w c r
  w=$(for k in $(seq "$RUNS"); do wall_s "$TMP/$2$k"; done | median)
  c=$(for k in $(seq "$RUNS"); do cpu_s "$TMP/$2$k"; done | median)
  r=$(for k in $(seq "$RUNS"); do rss_mb "$TMP/$2$k"; done | median)
  printf '| %-62s | %8s s | %8s s | %8s MB |\n' "$1" "$w" "$c" "$r"
}
echo
printf '| %-62s | %10s | %10s | %11s |\n' "run (median of $RUNS, file in the page cache)" "wall" "CPU" "peak RSS"
echo "|---|---|---|---|"
row "(a) cat .metadata" a
row "(b) dcpctl inspect --json" b
row "(c) consolidate --map torchtitan-deepseek-v3 --dry-run --json" c
row "(d) the same, --quantize fp8-block" d
row "(e) (c) without --json (the text dry run)" e
row "(f) (d) without --json" f
if [ -n "${BASE:-}" ]; then
  row "(c) with BASE ($(basename "$BASE"))" g
  row "(d) with BASE" h
  row "(e) with BASE" i
  row "(f) with BASE" j
  for f in map.json fp8.json map.txt fp8.txt; do
    cmp -s "$TMP/plan-$f" "$TMP/base-$f" && echo "($f: the plan is BASE's, byte for byte)" ||
      echo "($f: the plan differs from BASE's)"
  done
fi
for f in map fp8; do
  echo
  echo "The plan's own figures ($f):"
  python3 "$ROOT/bench/plan_figures.py" "$TMP/plan-$f.json"
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
