#!/usr/bin/env bash
# Benchmark: the device's limit, found by fio, beside dcpctl's reads and writes of the same bytes.
# On the 2.4 GB checkpoint of bench/integrity.sh (bench/make_big_ckpt.py --ranks 4 --layers 4,
# written by real torch, generated on first use under WORKDIR/ckpt-4l-4r, never committed):
#
#   1. The sweep, once (page cache dropped before each run): fio reading every .distcp file, one
#      job per file, over ioengine x block size x queue depth x jobs per file x O_DIRECT or buffered
#      (a virtual disk whose host caches it can read faster through the page cache), and
#      the same reads beside a write of as many bytes (O_DIRECT or buffered, as the reads) into one new file, fsync'd at the
#      end (what `consolidate -o X.safetensors` does). The fastest configuration of each is the
#      anchor: the best this device gives, not one guess at it.
#   2. Rounds (REPEAT, default 3, interleaved, page cache dropped before each run; medians):
#        (r) the best fio read                  anchor of (a), (b)
#        (a) dcpctl verify --deep               every record read, its CRC-32 checked
#        (b) dcpctl verify --deep --checksum    and a SHA-256 of every tensor
#        (w) the best fio read + write + fsync  anchor of (c)
#        (c) dcpctl consolidate -o X.safetensors
#        (e) cat *.distcp > /dev/null, (f) cat *.distcp > X && sync   (the plain-tool anchors)
#      and each dcpctl row's ratio to its fio anchor (issue 59's target: within 5%).
#
#   bench/fio.sh [WORKDIR]     (default /tmp/dcpctl-bench; root, for dropping the page cache;
#                               needs fio: apt-get install fio; ~6 GB free)
#
# Environment: DCPCTL, PYTHON as in bench/common.sh; REPEAT; SWEEP="engines;sizes;depths;jobs;direct"
# (default "io_uring libaio psync;4M 16M;16 64;1 2 4;1 0": 60 configurations, two runs each (psync
# ignores the depth);
# a partial sweep of 1M-16M x depth 1-64 x 1-2 jobs on this project's VM put its best reads at 1.66-1.9 s
# for 2.4 GB, each configuration within noise of the next above depth 4); LAYERS, RANKS as bench/integrity.sh.
set -euo pipefail
own_ckpt=1
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
command -v fio >/dev/null || { echo "needs fio (apt-get install fio)" >&2; exit 2; }
[ "$cold" = 1 ] || { echo "needs root to drop the page cache: the anchors would read from memory" >&2; exit 2; }
layers=${LAYERS:-4} ranks=${RANKS:-4}
ckpt=$work/ckpt-${layers}l-${ranks}r
if [ ! -f "$ckpt/.metadata" ]; then
  echo "== generating the checkpoint under $ckpt ($ranks ranks, $layers layers, real torch)"
  "$py" "$root/bench/make_big_ckpt.py" "$ckpt" --ranks "$ranks" --layers "$layers"
fi
mapfile -t files < <(ls "$ckpt"/*.distcp)
total=0
for f in "${files[@]}"; do total=$((total + $(stat -c %s "$f"))); done
out=$work/fio.out
refill_for $((total + (512 << 20)))
IFS=';' read -r engines sizes depths jobs directs <<<"${SWEEP:-io_uring libaio psync;4M 16M;16 64;1 2 4;1 0}"
directs=${directs:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$out" "$work/fio.safetensors" "$work/fio.cat"' EXIT

# fio_args ENGINE BS DEPTH JOBS DIRECT WRITE: one job per file (JOBS jobs each reading its own part
# of it), with O_DIRECT or through the page cache, and with WRITE=1 one more job writing $total
# bytes into $out, fsync'd when done.
fio_args() {
  local eng=$1 bs=$2 qd=$3 nj=$4 direct=$5 wr=$6 f i=0 size part
  printf '%s\n' --ioengine="$eng" --direct="$direct" --bs="$bs" --iodepth="$qd" --group_reporting \
    --output-format=terse --invalidate=1
  for f in "${files[@]}"; do
    size=$(stat -c %s "$f")
    # each of nj jobs reads an aligned share of the file (the last takes the rest)
    part=$(( (size / nj) / (1 << 20) * (1 << 20) ))
    for ((j = 0; j < nj; j++)); do
      printf '%s\n' --name="r$i.$j" --filename="$f" --rw=read --offset=$((j * part))
      if [ $j -lt $((nj - 1)) ]; then printf '%s\n' --size=$part; else printf '%s\n' --size=$((size - j * part)); fi
    done
    i=$((i + 1))
  done
  if [ "$wr" = 1 ]; then
    printf '%s\n' --name=w --filename="$out" --rw=write --size=$((total / (1 << 20) * (1 << 20))) --end_fsync=1 \
      --fallocate=none --create_on_open=1
  fi
}
# timed LABEL CMD...: wall seconds of one run, page cache dropped first, written to $tmp/LABEL.
timed() {
  local label=$1 t0 t1
  shift
  rm -f "$out" "$work/fio.safetensors" "$work/fio.cat"
  drop_cache
  t0=$(date +%s.%N)
  "$@" >/dev/null
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l | tee -a "$tmp/$(file_of "$label")" | xargs printf "   %-60s %6.2f s\n" "$label"
}
file_of() { tr -c 'A-Za-z0-9_.=\n-' _ <<<"$1"; }  # a label as a file name under $tmp
run_fio() {  # run_fio ENGINE BS DEPTH JOBS DIRECT WRITE
  local args
  mapfile -t args < <(fio_args "$@")
  fio "${args[@]}"
}

echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $ckpt: ${#files[@]} files, $total bytes; $(df -h "$work" | awk 'NR==2 {print $1}')"
echo "== 1. the sweep (one run each)"
best_r="" best_r_t=999999 best_w="" best_w_t=999999
for eng in $engines; do
  for bs in $sizes; do
    for qd in $depths; do
      [ "$eng" != psync ] || [ "$qd" = "${depths%% *}" ] || continue  # psync has no queue: one depth
      for nj in $jobs; do
        for d in $directs; do
          for wr in 0 1; do
            label="fio $eng bs=$bs iodepth=$qd jobs/file=$nj direct=$d"
            [ "$wr" = 0 ] || label="$label +write+fsync"
            if ! timed "$label" run_fio "$eng" "$bs" "$qd" "$nj" "$d" "$wr"; then echo "   ($label failed: skipped)"; continue; fi
            t=$(tail -1 "$tmp/$(file_of "$label")")
            if [ "$wr" = 0 ] && (($(echo "$t < $best_r_t" | bc -l))); then best_r="$eng $bs $qd $nj $d"; best_r_t=$t; fi
            if [ "$wr" = 1 ] && (($(echo "$t < $best_w_t" | bc -l))); then best_w="$eng $bs $qd $nj $d"; best_w_t=$t; fi
          done
        done
      done
    done
  done
done
if [ -z "$best_r" ] || [ -z "$best_w" ]; then echo "every fio configuration failed" >&2; exit 1; fi
echo "== best read: $best_r ($best_r_t s); best read+write+fsync: $best_w ($best_w_t s)"

echo "== 2. rounds"
rm -f "$tmp"/*
# shellcheck disable=SC2086
for k in $(seq "${REPEAT:-3}"); do
  echo "-- round $k (load $(cut -d' ' -f1 /proc/loadavg))"
  timed r_fio_read run_fio $best_r 0
  timed a_verify_deep "$dcpctl" verify --deep "$ckpt"
  timed b_verify_checksum "$dcpctl" verify --deep --checksum "$ckpt"
  timed w_fio_read_write run_fio $best_w 1
  timed c_consolidate "$dcpctl" consolidate "$ckpt" -o "$work/fio.safetensors" -q
  timed e_cat bash -c "cat '$ckpt'/*.distcp > /dev/null"
  timed f_cat_sync bash -c "cat '$ckpt'/*.distcp > '$work/fio.cat' && sync"
done
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '\n%-22s %8s %8s  %s\n' run median GB/s "ratio to anchor"
for l in r_fio_read a_verify_deep b_verify_checksum w_fio_read_write c_consolidate e_cat f_cat_sync; do
  m=$(median "$tmp/$l")
  case $l in a_* | b_* | e_*) anchor=$(median "$tmp/r_fio_read") ;; c_* | f_*) anchor=$(median "$tmp/w_fio_read_write") ;; *) anchor="" ;; esac
  ratio=""
  [ -n "$anchor" ] && ratio=$(printf '%.2fx of fio' "$(echo "$m / $anchor" | bc -l)")
  printf '%-22s %8.2f %8.2f  %s\n' "$l" "$m" "$(echo "$total / $m / 1000000000" | bc -l)" "$ratio"
done
