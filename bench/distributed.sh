#!/usr/bin/env bash
# Benchmark: consolidate under several processes (rank 0 gathers through Gloo) against the
# single-process run, on the >= 4 GB checkpoint of bench/consolidate.sh (bench/make_big_ckpt.py,
# 8 ranks, real torch; generated on first use, never committed).
#
#   bench/distributed.sh [WORKDIR]          (default /tmp/dcpctl-bench)
#
# Environment: DCPCTL (default build/cmd/dcpctl), PYTHON (default .venv/bin/python).
# Runs, each under /usr/bin/time -v, page cache dropped before each when possible (else all warm):
#   (a) dcpctl consolidate CKPT -o single.safetensors               (one process)
#   (b) 2 processes, rank 0 gathers                                 (RANK/WORLD_SIZE launcher)
#   (c) 3 processes, rank 0 gathers
#   (d) 2 processes --local-files (the .distcp files split over two directories of symlinks)
#   (e) 2 processes -o DIR/ --parallel-write --max-shard-size 1GB  vs  (f) one process, same DIR/
#   (g) (a) again, last
# Prints wall seconds, GB/s and the max RSS of rank 0 and of the busiest other rank, and checks
# every distributed output is byte-identical to its single-process twin. On a machine with fewer
# cores than processes this measures the transport's cost, not a speed-up.
set -euo pipefail

# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
out=$work/dist-out
rm -rf "$out" && mkdir -p "$out/split/r0" "$out/split/r1"
ln -s "$ckpt/.metadata" "$out/split/r0/.metadata"
i=0
for f in "$ckpt"/*.distcp; do ln -s "$f" "$out/split/r$((i % 2))/"; i=$((i + 1)); done
bytes=$(du -b --apparent-size -L -c "$ckpt"/*.distcp | tail -1 | cut -f1)

port=$((29800 + RANDOM % 100))
results=()
run() { # run NAME NPROC ARGS...
  local name=$1 n=$2 r pids=() t0 t1 rss0=0 rss1=0 v
  shift 2
  drop_cache
  port=$((port + 1))
  t0=$(date +%s.%N)
  for ((r = 0; r < n; r++)); do
    if [ "$n" = 1 ]; then
      /usr/bin/time -v "$dcpctl" "$@" -q 2>"$out/time-$name-$r" &
    else
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        /usr/bin/time -v "$dcpctl" "$@" -q 2>"$out/time-$name-$r" &
    fi
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || { echo "FAILED: $name" >&2; cat "$out"/time-"$name"-* >&2; exit 1; }; done
  t1=$(date +%s.%N)
  rss0=$(awk '/Maximum resident/ {print int($6/1024)}' "$out/time-$name-0")
  for ((r = 1; r < n; r++)); do
    v=$(awk '/Maximum resident/ {print int($6/1024)}' "$out/time-$name-$r")
    [ "$v" -gt "$rss1" ] && rss1=$v
  done
  results+=("$(awk -v n="$name" -v p="$n" -v a="$t0" -v b="$t1" -v by="$bytes" -v r0="$rss0" -v r1="$rss1" \
    'BEGIN { s = b - a; printf "%-34s %2d %8.2f %7.2f %9d %9s", n, p, s, by / s / 1e9, r0, (p > 1 ? r1 : "-") }')")
}

echo "== checkpoint: $ckpt ($bytes bytes of .distcp)"
run single 1 consolidate "$ckpt" -o "$out/single.safetensors"
run gather-2 2 consolidate "$ckpt" -o "$out/g2.safetensors" --timeout 600
run gather-3 3 consolidate "$ckpt" -o "$out/g3.safetensors" --timeout 600
run local-files-2 2 consolidate "$out/split/r{rank}" --local-files -o "$out/lf2.safetensors" --timeout 600
run hf-single 1 consolidate "$ckpt" -o "$out/hf1/" --max-shard-size 1GB
run hf-parallel-write-2 2 consolidate "$ckpt" -o "$out/hf2/" --max-shard-size 1GB --parallel-write --timeout 600
# The first run of a sequence has measured slow here (15-25 s against 7-8 s for the same bytes
# as HF shards): repeat the anchor last so an order effect shows.
run single-again 1 consolidate "$ckpt" -o "$out/single2.safetensors"

printf '%-34s %2s %8s %7s %9s %9s\n' run np seconds GB/s "rss0 MiB" "rss1 MiB"
printf '%s\n' "${results[@]}"
ok=1
for f in g2 g3 lf2 single2; do
  if cmp -s "$out/single.safetensors" "$out/$f.safetensors"; then echo "identical: $f"; else echo "DIFFERS: $f"; ok=0; fi
done
if diff -r "$out/hf1" "$out/hf2" >/dev/null; then echo "identical: hf parallel-write"; else echo "DIFFERS: hf parallel-write"; ok=0; fi
rm -rf "$out"/*.safetensors "$out"/hf1 "$out"/hf2
[ $ok = 1 ]
