#!/usr/bin/env bash
# Benchmark: the >= 4 GB checkpoint of bench/make_big_ckpt.py consolidated and resharded inside a
# memory cgroup of 1 GiB, where any tool that holds the model (or a large part of it) in memory
# is killed. Side by side with torch's own converter in the same cgroup.
#
#   bench/cgroup.sh [WORKDIR]          (default /tmp/dcpctl-bench; needs ~10 GB free there; root)
#
# Environment: DCPCTL, PYTHON as in bench/common.sh; LIMIT (default 1G).
#
# Each command runs alone in a fresh cgroup (v1 memory controller, or v2 when that is what the
# machine mounts) with memory.limit_in_bytes / memory.max = LIMIT (swap included where the
# controller offers it), page cache dropped first. Reported: exit status (137 = killed by the
# OOM killer), wall seconds, the cgroup's peak usage (memory.max_usage_in_bytes / memory.peak:
# page cache included, which the kernel reclaims under the limit) and the process's own peak RSS
# (GNU time).
set -euo pipefail

# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
limit=${LIMIT:-1G}

# in_cgroup NAME COMMAND...: runs COMMAND in a new cgroup limited to $limit (common.sh's cg_new);
# prints one line.
in_cgroup() {
  local name=$1 cg
  shift
  cg=$(cg_new "$name" "$limit") || exit 2
  drop_cache
  local start rc=0 peak rss
  start=$(date +%s.%N)
  # The subshell moves itself into the cgroup, then becomes GNU time running the command.
  bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec /usr/bin/time -f "%M" -o "$0" "$@"' \
    "$work/cg-$name.rss" "$cg" "$@" > "$work/cg-$name.log" 2>&1 || rc=$?
  local secs
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  peak=$(cg_peak "$cg")
  rss=$(tail -n 1 "$work/cg-$name.rss" 2>/dev/null | grep -E '^[0-9]+$' || echo 0)
  printf '%-24s exit %3d  %7.2f s  cgroup peak %6d MiB  process peak RSS %6d MiB\n' "$name" "$rc" "$secs" \
    $((peak >> 20)) $((rss >> 10))
  cg_del "$cg"
}

echo "== $ckpt ($(du -sh "$ckpt" | cut -f1)) in a memory cgroup of $limit; page cache dropped before each"
echo "   load average: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "$work/cg-out.safetensors" "$work/cg-out.pt" "$work/cg-w2" "$work/cg-torch.pt"
in_cgroup dcpctl_safetensors "$dcpctl" consolidate "$ckpt" -o "$work/cg-out.safetensors" -q
rm -f "$work/cg-out.safetensors"
in_cgroup dcpctl_pt "$dcpctl" consolidate "$ckpt" -o "$work/cg-out.pt" -q
rm -f "$work/cg-out.pt"
in_cgroup dcpctl_reshard_w2 "$dcpctl" reshard "$ckpt" -o "$work/cg-w2" -w 2 -q
rm -rf "$work/cg-w2"
in_cgroup torch_dcp_to_torch "$py" -m torch.distributed.checkpoint.format_utils dcp_to_torch "$ckpt" "$work/cg-torch.pt"
rm -f "$work/cg-torch.pt"
echo "(exit 137: killed by the kernel's OOM killer at the limit)"
