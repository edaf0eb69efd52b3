# shellcheck shell=bash
# Sourced by the benchmarks that share the >= 4 GB checkpoint of bench/make_big_ckpt.py (8 ranks,
# written by real torch; generated on first use, never committed). Sets root, work ($1 of the
# script, default /tmp/dcpctl-bench), py (PYTHON), dcpctl (DCPCTL), ckpt; checks the tools;
# sets cold=1 when the page cache can be dropped, and drop_cache drops it (a no-op otherwise).
# A script that makes its own checkpoints sets own_ckpt=1 before sourcing: no $work/ckpt then.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:-/tmp/dcpctl-bench}
py=${PYTHON:-$root/.venv/bin/python}
dcpctl=${DCPCTL:-$root/build/cmd/dcpctl}
ckpt=$work/ckpt
mkdir -p "$work"
[ -x "$dcpctl" ] || { echo "no dcpctl at $dcpctl (set DCPCTL)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (GNU time)" >&2; exit 2; }

if [ "${own_ckpt:-0}" != 1 ] && [ ! -f "$ckpt/.metadata" ]; then
  echo "== generating the checkpoint under $ckpt (8 ranks, real torch)"
  "$py" "$root/bench/make_big_ckpt.py" "$ckpt"
fi

cold=0
if sync && (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then cold=1; fi

# Free page reporting (virtio-balloon, feature bit 5, VIRTIO_BALLOON_F_REPORTING): a VM with it
# hands memory that stayed free for about 2 s back to its host, and the next command to allocate
# it waits while the host faults it in again. On this project's VM that made the anchors swing:
# `cat` of 2.4 GB took 0.69 s right after the page cache was dropped and 2.4-3.3 s five to ten
# seconds later (all of it system time), so whichever command followed a quiet one, or one that
# used little memory, paid; dcpctl's direct paths, which take ~200 MiB, barely did. With it,
# drop_cache touches `refill` bytes (refill_for sets them; REFILL=0 turns it off) right after the
# drop and frees them (bench/refill.py), untimed: every run starts with that much memory backed,
# as on a machine that is not a VM. A script that does not call refill_for gets twice its $ckpt
# plus 512 MiB, set by run_rounds.
reporting=0
for f in /sys/bus/virtio/drivers/virtio_balloon/virtio*/features; do
  [ -r "$f" ] && [ "$(cut -c6 "$f")" = 1 ] && reporting=1
done
refill=0
# refill_for BYTES [FIXED]: what each run may take of fresh memory (the page cache it fills, its
# writes' dirty pages), capped at half of MemAvailable and at REFILL_MAX bytes (default 8 GiB): on
# a shared machine the touch must leave the other processes room to grow while it holds the memory
# (uncapped, it was OOM-killed once); with free page reporting only. FIXED 0 (run_rounds' own call)
# lets the next run_rounds set it again from its $ckpt.
refill_for() {
  local avail cap
  refill_fixed=${2:-1}
  avail=$(( $(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) * 1024 ))
  cap=$(( avail / 2 < ${REFILL_MAX:-8 << 30} ? avail / 2 : ${REFILL_MAX:-8 << 30} ))
  refill=$(( $1 < cap ? $1 : cap ))
  if [ "${REFILL:-}" = 0 ] || [ "$reporting" = 0 ] || [ "$cold" = 0 ]; then refill=0; fi
  if [ "$refill" -gt 0 ]; then
    echo "== free page reporting is on (virtio-balloon): $((refill >> 20)) MiB touched and freed before each run (REFILL=0: not)"
  fi
}
drop_cache() {
  if [ "$cold" = 1 ]; then
    sync
    echo 3 > /proc/sys/vm/drop_caches
    if [ "$refill" -gt 0 ]; then
      "$py" "$root/bench/refill.py" "$refill" 2>/dev/null || echo "== the refill failed: this run may pay the host's faults" >&2
    fi
  fi
}

# Memory cgroups (root; the v1 memory controller, or v2 when that is what the machine mounts), for
# runs that must be OOM-killed alone rather than take the machine down. cg_new NAME LIMIT makes a
# fresh cgroup limited to LIMIT (IEC: 16G), swap included where the controller offers it, and
# prints its path; a command joins it with `echo $$ > CG/cgroup.procs`. cg_peak CG prints its peak
# usage in bytes (page cache included: the kernel reclaims it under the limit); cg_del CG removes it.
cg_new() {
  local v1=/sys/fs/cgroup/memory v2=/sys/fs/cgroup/unified cg bytes
  bytes=$(numfmt --from=iec "$2")
  if [ -w "$v1" ] && [ -f "$v1/memory.limit_in_bytes" ]; then
    cg=$v1/dcpctl-bench-$1
    rmdir "$cg" 2>/dev/null || true
    mkdir -p "$cg"
    echo "$bytes" > "$cg/memory.limit_in_bytes"
    if [ -f "$cg/memory.memsw.limit_in_bytes" ]; then echo "$bytes" > "$cg/memory.memsw.limit_in_bytes"; fi
  elif [ -w "$v2" ] && [ -f "$v2/cgroup.controllers" ] && grep -qw memory "$v2/cgroup.controllers"; then
    cg=$v2/dcpctl-bench-$1
    rmdir "$cg" 2>/dev/null || true
    mkdir -p "$cg"
    echo "$bytes" > "$cg/memory.max"
    echo 0 > "$cg/memory.swap.max" 2>/dev/null || true
  else
    echo "no writable memory cgroup (v1 $v1 or v2 $v2): run as root on a machine that has one" >&2; return 2
  fi
  echo "$cg"
}
cg_peak() { cat "$1/memory.max_usage_in_bytes" 2>/dev/null || cat "$1/memory.peak" 2>/dev/null || echo 0; }
# (rmdir fails while the last processes are still exiting: a few tries.)
cg_del() { local _; for _ in 1 2 3 4 5; do rmdir "$1" 2>/dev/null && return 0; sleep 1; done; return 0; }

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

# The block device $work is on (its /proc/diskstats name: vda, nvme0n1p1, dm-0), or "" when it is
# not on one (tmpfs, overlay): what disk_stats reads.
disk_dev=$(df -P "$work" 2>/dev/null | awk 'NR == 2 { print $1 }')
disk_dev=$(case $disk_dev in /dev/*) basename "$(readlink -f "$disk_dev")" ;; esac)
# disk_stats: that device's counters now: reads completed, sectors read, writes completed, sectors
# written, milliseconds with requests in flight (fields 4, 6, 8, 10, 13 of /proc/diskstats).
# (Status 0 either way: a caller under set -e keeps going without them.)
disk_stats() {
  if [ -n "$disk_dev" ]; then awk -v d="$disk_dev" '$3 == d { print $4, $6, $8, $10, $13 }' /proc/diskstats; fi
}

# time_one TAG NAME ROUND: the command under /usr/bin/time -v into $work/TAG_NAME_ROUND.txt, and
# the disk's counters before and after it into TAG_NAME_ROUND.disk (the profile beside the wall
# time: how long the disk was busy, in how many requests; bench/timing.py reads both). A failing
# command does not stop the benchmark: its exit status is in that file, and the table shows it
# (and misses the targets).
time_one() {
  local c before
  c=$(cmd_for "$2")
  echo "== round $3 $2 (load $(cut -d' ' -f1 /proc/loadavg)): $c"
  before=$(disk_stats)
  /usr/bin/time -v -o "$work/$1_$2_$3.txt" bash -c "$c" || true
  if [ -n "$before" ]; then printf '%s\n%s\n' "$before" "$(disk_stats)" > "$work/$1_$2_$3.disk"; else rm -f "$work/$1_$2_$3.disk"; fi
}

# shellcheck disable=SC2154
# run_rounds TAG: `repeat` rounds of every command, in another order each round (a shuffle seeded
# by the round: no command always runs first, after the others warmed the disk, nor always right
# after the same one, whose writes the disk may still be absorbing; a rotation kept neighbours
# together), the page cache dropped before each.
run_rounds() {
  local tag=$1 r n
  local -a order
  if [ "${refill_fixed:-0}" != 1 ] && [ -d "${ckpt:-}" ]; then
    refill_for $(( 2 * $(du -sb "$ckpt" | cut -f1) + (512 << 20) )) 0
  fi
  rm -f "$work/${tag}"_*.txt "$work/${tag}"_*.disk
  echo "== $repeat round(s), the order shuffled each round; load average before: $(cut -d' ' -f1-3 /proc/loadavg);" \
       "page cache: $([ "$cold" = 1 ] && echo dropped before each run || echo warm)"
  for ((r = 1; r <= repeat; r++)); do
    mapfile -t order < <(printf '%s\n' "${names[@]}" | awk -v seed="$r" 'BEGIN { srand(seed) } { print rand() "\t" $0 }' |
                           sort -k1,1 | cut -f2-)
    for n in "${order[@]}"; do
      if declare -F before_run >/dev/null; then before_run "$n"; fi
      drop_cache
      time_one "$tag" "$n" "$r"
      if declare -F after_run >/dev/null; then after_run "$n" "$r"; fi
    done
    if declare -F after_round >/dev/null; then after_round "$r"; fi
  done
  echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
}
