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

# The benchmark loop. A script defines `names` (its commands) and `cmd_for NAME` (the command line),
# sets `repeat`, and may define hooks: before_run NAME (e.g. remove the previous output),
# after_run NAME ROUND, after_round ROUND (e.g. warm runs).
#
# (names and repeat are the sourcing script's.)
#
# shellcheck disable=SC2154
# warm_up: when the page cache cannot be dropped, every command once untimed, so all runs are warm.
warm_up() {
  [ "$cold" = 1 ] && return 0
  echo "== cannot drop the page cache: running every command once untimed (all runs warm)"
  local n
  for n in "${names[@]}"; do
    if declare -F before_run >/dev/null; then before_run "$n"; fi
    bash -c "$(cmd_for "$n")" >/dev/null 2>&1 || true
  done
}

# time_one TAG NAME ROUND: the command under /usr/bin/time -v into $work/TAG_NAME_ROUND.txt. A
# failing command does not stop the benchmark: its exit status is in that file, and the table
# shows it (and misses the targets).
time_one() {
  local c
  c=$(cmd_for "$2")
  echo "== round $3 $2 (load $(cut -d' ' -f1 /proc/loadavg)): $c"
  /usr/bin/time -v -o "$work/$1_$2_$3.txt" bash -c "$c" || true
}

# shellcheck disable=SC2154
# run_rounds TAG: `repeat` rounds of every command, the order rotated each round (no command
# always runs first, after the others warmed the disk), the page cache dropped before each.
run_rounds() {
  local tag=$1 r i n
  rm -f "$work/${tag}"_*.txt
  echo "== $repeat round(s), the order rotated each round; load average before: $(cut -d' ' -f1-3 /proc/loadavg);" \
       "page cache: $([ "$cold" = 1 ] && echo dropped before each run || echo warm)"
  for ((r = 1; r <= repeat; r++)); do
    for ((i = 0; i < ${#names[@]}; i++)); do
      n=${names[$(( (i + r - 1) % ${#names[@]} ))]}
      if declare -F before_run >/dev/null; then before_run "$n"; fi
      drop_cache
      time_one "$tag" "$n" "$r"
      if declare -F after_run >/dev/null; then after_run "$n" "$r"; fi
    done
    if declare -F after_round >/dev/null; then after_round "$r"; fi
  done
  echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
}
