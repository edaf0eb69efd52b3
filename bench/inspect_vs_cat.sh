#!/usr/bin/env bash
# `dcpctl inspect --json` of a 5-million-chunk `.metadata` against `cat` of the same file from the
# page cache, and against an anchor binary, side by side in one run (issue 59 item 4: inspect
# within 10x of cat, as a ratio).
#
#   bench/inspect_vs_cat.sh [DIR] [DCPCTL] [BASE_DCPCTL]
#
# DIR (default /tmp/dcpctl-bench/meta5m) is made by bench/make_big_metadata.py when it holds no
# .metadata (10,000 tensors x 512 ranks = 5,120,000 chunks, 722 MB; several minutes and a few GB
# of RAM; no .distcp files, so inspect reports them missing, as bench/inspect_5m.sh does).
# DCPCTL defaults to build/cmd/dcpctl; BASE_DCPCTL (optional) is the anchor binary (e.g. main's).
# RUNS rounds (env, default 5), each running in turn: cat, then each binary's `inspect --json`,
# then each binary's `inspect` (the text report), all from the page cache; minima (the least
# disturbed round, on a machine shared with others) and medians of wall time, CPU time (user +
# system) and peak RSS (GNU time), and the ratio of each minimum and median wall time to cat's.
# The machine's load average is printed before and after: on a shared machine wall times mean
# little, CPU times a little more. The outputs of both binaries (JSON and text) are compared
# byte for byte (inspect's report holds no timing field).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${1:-/tmp/dcpctl-bench/meta5m}
NEW=${2:-$ROOT/build/cmd/dcpctl}
BASE=${3:-}
PY=${DCPCTL_PYTHON:-$ROOT/.venv/bin/python}
MD=$DIR/.metadata
RUNS=${RUNS:-5}

[ -x "$NEW" ] || { echo "no dcpctl binary at $NEW" >&2; exit 2; }
[ -z "$BASE" ] || [ -x "$BASE" ] || { echo "no anchor binary at $BASE" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (GNU time)" >&2; exit 2; }
[ -f "$MD" ] || "$PY" "$ROOT/bench/make_big_metadata.py" "$DIR"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

field() { sed -n "s/^[[:space:]]*$2: //p" "$1"; }
wall_s() {
  field "$1" "Elapsed (wall clock) time (h:mm:ss or m:ss)" | awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s }'
}
cpu_s() { echo "$(field "$1" "User time (seconds)") $(field "$1" "System time (seconds)")" | awk '{ print $1 + $2 }'; }
rss_mb() { field "$1" "Maximum resident set size (kbytes)" | awk '{ printf "%.0f\n", $1 / 1024 }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
minimum() { sort -g | head -1; }

# name -> command (the binary, then its arguments); stdout to $TMP/<name>.out
names=(cat)
declare -A cmd
cmd[cat]="cat $MD"
names+=(new-json)
cmd[new-json]="$NEW inspect --json $DIR"
if [ -n "$BASE" ]; then
  names+=(base-json)
  cmd[base-json]="$BASE inspect --json $DIR"
fi
names+=(new-text)
cmd[new-text]="$NEW inspect $DIR"
if [ -n "$BASE" ]; then
  names+=(base-text)
  cmd[base-text]="$BASE inspect $DIR"
fi

cat "$MD" >/dev/null  # into the page cache: every command reads from memory
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for k in $(seq "$RUNS"); do
  for n in "${names[@]}"; do
    # (inspect reports the missing data files in its report and exits 0.)
    rc=0
    # shellcheck disable=SC2086
    /usr/bin/time -v -o "$TMP/$n.$k" ${cmd[$n]} >"$TMP/$n.out" 2>"$TMP/$n.err" || rc=$?
    if [ "$rc" != 0 ]; then
      echo "$n exited $rc:" >&2
      cat "$TMP/$n.err" >&2
      exit 1
    fi
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

size=$(stat -c %s "$MD")
chunks=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['summary']['chunks'])" "$TMP/new-json.out")
cat_s=$(for k in $(seq "$RUNS"); do wall_s "$TMP/cat.$k"; done | median)
cat_min=$(for k in $(seq "$RUNS"); do wall_s "$TMP/cat.$k"; done | minimum)
printf '\n.metadata: %d bytes (%.1f MiB), %d chunks; %d rounds\n\n' "$size" "$(awk -v b="$size" 'BEGIN { print b / 1048576 }')" "$chunks" "$RUNS"
printf '%-34s %8s %8s %10s %8s %8s %10s %12s   %s\n' "" "min wall" "min CPU" "x cat min" "med wall" "med CPU" "x cat med" "peak RSS MiB" "wall of each round"
for n in "${names[@]}"; do
  w=$(for k in $(seq "$RUNS"); do wall_s "$TMP/$n.$k"; done | median)
  c=$(for k in $(seq "$RUNS"); do cpu_s "$TMP/$n.$k"; done | median)
  wm=$(for k in $(seq "$RUNS"); do wall_s "$TMP/$n.$k"; done | minimum)
  cm=$(for k in $(seq "$RUNS"); do cpu_s "$TMP/$n.$k"; done | minimum)
  m=$(for k in $(seq "$RUNS"); do rss_mb "$TMP/$n.$k"; done | median)
  all=$(for k in $(seq "$RUNS"); do wall_s "$TMP/$n.$k"; done | paste -sd' ')
  case $n in
    cat) label="cat .metadata > /dev/null" ;;
    new-json) label="dcpctl inspect --json" ;;
    base-json) label="anchor: dcpctl inspect --json" ;;
    new-text) label="dcpctl inspect (text)" ;;
    base-text) label="anchor: dcpctl inspect (text)" ;;
  esac
  printf '%-34s %8.2f %8.2f %10s %8.2f %8.2f %10s %12d   %s\n' "$label" "$wm" "$cm" \
    "$(awk -v a="$wm" -v b="$cat_min" 'BEGIN { printf (b > 0 ? "%.1fx" : "-"), a / b }')" "$w" "$c" \
    "$(awk -v a="$w" -v b="$cat_s" 'BEGIN { printf (b > 0 ? "%.1fx" : "-"), a / b }')" "$m" "$all"
done
printf '\nload average (1/5/15 min) before: %s; after: %s\n' "$load_before" "$load_after"
new_s=$(for k in $(seq "$RUNS"); do wall_s "$TMP/new-json.$k"; done | minimum)
awk -v a="$new_s" -v b="$cat_min" 'BEGIN { printf "target (issues 59 item 4, 72 item 1): inspect --json <= 10x cat (minima): %s (%.1fx)\n", (b > 0 && a / b <= 10) ? "met" : "NOT met", (b > 0 ? a / b : 0) }'
# CPU time (user + system) medians, which a loaded machine disturbs less than wall time.
cat_cpu=$(for k in $(seq "$RUNS"); do cpu_s "$TMP/cat.$k"; done | median)
new_cpu=$(for k in $(seq "$RUNS"); do cpu_s "$TMP/new-json.$k"; done | median)
awk -v a="$new_cpu" -v b="$cat_cpu" 'BEGIN { printf "CPU (medians): inspect --json %.2f s, cat %.2f s: %s\n", a, b, (b > 0 ? sprintf("%.1fx", a / b) : "-") }'
if [ -n "$BASE" ]; then
  base_cpu=$(for k in $(seq "$RUNS"); do cpu_s "$TMP/base-json.$k"; done | median)
  awk -v a="$new_cpu" -v b="$base_cpu" 'BEGIN { printf "CPU (medians): inspect --json %.2f s, the anchor'"'"'s %.2f s (%+.0f%%)\n", a, b, (b > 0 ? 100 * (a - b) / b : 0) }'
fi
if [ -n "$BASE" ]; then
  if cmp -s "$TMP/new-json.out" "$TMP/base-json.out"; then
    echo "inspect --json: byte-identical to the anchor's"
  else
    echo "inspect --json: DIFFERS from the anchor's" >&2
    exit 1
  fi
  if cmp -s "$TMP/new-text.out" "$TMP/base-text.out"; then
    echo "inspect (text): byte-identical to the anchor's"
  else
    echo "inspect (text): DIFFERS from the anchor's" >&2
    exit 1
  fi
fi
