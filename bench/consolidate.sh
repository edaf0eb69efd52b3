#!/usr/bin/env bash
# Benchmark: `dcpctl consolidate` against torch's own converter and a plain copy, on a >= 4 GB
# checkpoint written by real torch with 8 ranks (bench/make_big_ckpt.py; generated on first use,
# never committed).
#
#   bench/consolidate.sh [WORKDIR]          (default /tmp/dcpctl-bench; needs ~25 GB free there)
#
# Environment: DCPCTL (default build/cmd/dcpctl), PYTHON (default .venv/bin/python),
# REPEAT (rounds, default 3: the table shows medians), VERIFY=0 to skip the final byte
# comparison, KEEP=1 to keep the outputs.
#
# Runs, each under /usr/bin/time -v (wall clock, max RSS), page cache dropped before each when
# /proc/sys/vm/drop_caches is writable (else every command runs once untimed first so all are warm):
#   (a) dcpctl consolidate CKPT -o out.safetensors
#   (b) dcpctl consolidate CKPT -o out.pt
#   (c) python -m torch.distributed.checkpoint.format_utils dcp_to_torch CKPT out_torch.pt
#   (d) cat CKPT/*.distcp > cat.out                       (the same bytes, plain copy)
#   (e) cat CKPT/*.distcp > cat.out && sync               (the copy made durable: dcpctl fsyncs
#                                                          its output before renaming it; torch
#                                                          and plain cat do not)
# then prints a table (seconds, GB/s of checkpoint data, max RSS, ratios to torch and to cat), the
# ratios to cat round by round (cat's system time in the per-run lines shows how dear the page
# cache was in each round), and checks the targets: dcpctl >= 5x faster than dcp_to_torch,
# safetensors <= 1.0x and .pt <= 1.2x cat's time (medians), peak RSS <= largest tensor + 512 MiB. Finally (VERIFY=1) compares every tensor of out.safetensors and
# out.pt with torch's out_torch.pt, bit for bit (memory-mapped, one tensor at a time).
set -euo pipefail

# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

outs=("$work/out.safetensors" "$work/out.pt" "$work/out_torch.pt" "$work/cat.out")
clean() { rm -rf "${outs[@]}" "$work"/.out*dcpctl-tmp*; }

names=(a_dcpctl_safetensors b_dcpctl_pt c_torch_dcp_to_torch d_cat e_cat_sync)
cmd_for() {
  case $1 in
    a_dcpctl_safetensors) echo "'$dcpctl' consolidate '$ckpt' -o '$work/out.safetensors' -q" ;;
    b_dcpctl_pt) echo "'$dcpctl' consolidate '$ckpt' -o '$work/out.pt' -q" ;;
    c_torch_dcp_to_torch) echo "'$py' -m torch.distributed.checkpoint.format_utils dcp_to_torch '$ckpt' '$work/out_torch.pt'" ;;
    d_cat) echo "cat '$ckpt'/*.distcp > '$work/cat.out'" ;;
    e_cat_sync) echo "cat '$ckpt'/*.distcp > '$work/cat.out' && sync" ;;
  esac
}

before_run() {
  # keep out.safetensors and out_torch.pt for the verification; disk space: nothing else stays
  case $1 in a_*) rm -f "$work/out.safetensors" ;; c_*) rm -f "$work/out_torch.pt" ;; esac
  rm -f "$work/out.pt" "$work/cat.out"
}
warm_up
repeat=${REPEAT:-3}
run_rounds time
rm -f "$work/cat.out"

"$py" - "$work" "$ckpt" "$cold" "$repeat" "$root/bench" <<'EOF'
import json, os, statistics, sys
work, ckpt, cold, repeat = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
sys.path.insert(0, sys.argv[5])
from timing import paired, report
data = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt) if f.endswith(".distcp"))
info = json.load(open(os.path.join(work, "ckpt_info.json"))) if os.path.exists(os.path.join(work, "ckpt_info.json")) else {}
largest = info.get("largest_tensor_bytes", 0)
def parse(n):
    return report(work, "time", n, repeat, 24)
print("\nper run (in round order):")
rows = {n: parse(n) for n in ["a_dcpctl_safetensors", "b_dcpctl_pt", "c_torch_dcp_to_torch", "d_cat", "e_cat_sync"]}
torch_s, cat_s, catsync_s = rows["c_torch_dcp_to_torch"][0], rows["d_cat"][0], rows["e_cat_sync"][0]
print()
print(f"checkpoint: {ckpt}: {data/1e9:.2f} GB in {len(os.listdir(ckpt))-1} data files, "
      f"largest tensor {largest/2**20:.0f} MiB ({largest} bytes); page cache {'dropped before each run' if cold else 'warm (each run once untimed first)'}")
print(f"median of {repeat} round(s); max RSS and exit: the worst round")
print(f"{'run':24} {'exit':>4} {'seconds':>8} {'GB/s':>6} {'max RSS':>10} {'vs torch':>9} {'vs cat':>7} {'vs cat+sync':>11}")
for n, (s, rss, rc) in rows.items():
    print(f"{n:24} {rc:>4} {s:8.2f} {data/1e9/s if s else 0:6.2f} {rss/2**20:8.0f} MiB "
          f"{torch_s/s if s else 0:8.2f}x {s/cat_s if cat_s else 0:6.2f}x {s/catsync_s if catsync_s else 0:10.2f}x")
for n in ("a_dcpctl_safetensors", "b_dcpctl_pt"):
    for anchor in ("d_cat", "c_torch_dcp_to_torch"):
        rs = paired(work, "time", n, anchor, repeat)
        print(f"{n} / {anchor}, round by round: {' '.join(f'{x:.2f}' for x in rs)} (median {statistics.median(rs):.2f})")
print()
limit = largest + (512 << 20)
ok = True
for n, cat_target in (("a_dcpctl_safetensors", 1.0), ("b_dcpctl_pt", 1.2)):
    s, rss, rc = rows[n]
    checks = [("exit 0", rc == 0), (f">= 5x faster than dcp_to_torch ({torch_s/s:.2f}x)", torch_s / s >= 5),
              (f"<= {cat_target}x cat ({s/cat_s:.2f}x)", s / cat_s <= cat_target),
              (f"peak RSS <= largest tensor + 512 MiB ({rss/2**20:.0f} <= {limit/2**20:.0f} MiB)", rss <= limit)]
    for what, good in checks:
        print(f"  {n}: {'PASS' if good else 'MISS'} {what}")
        ok = ok and good
print("targets:", "all met" if ok else "some missed")
EOF

if [ "${VERIFY:-1}" = 1 ]; then
  echo "== verifying out.safetensors and out.pt against torch's out_torch.pt (bit for bit)"
  # out.pt is rewritten for the comparison (it was removed only if the b run failed)
  [ -f "$work/out.pt" ] || "$dcpctl" consolidate "$ckpt" -o "$work/out.pt" -q
  "$py" - "$work" <<'EOF'
import sys, torch
from safetensors import safe_open
w = sys.argv[1]
ref = torch.load(f"{w}/out_torch.pt", mmap=True, weights_only=True)
pt = torch.load(f"{w}/out.pt", mmap=True, weights_only=True)
bad = 0
with safe_open(f"{w}/out.safetensors", framework="pt") as f:
    keys = set(f.keys())
    want = {k for k, v in ref.items() if isinstance(v, torch.Tensor)}
    if keys != want:
        print("safetensors keys differ:", sorted(keys ^ want)[:5]); bad += 1
    for k in sorted(want & keys):
        r = ref[k]
        for name, t in (("safetensors", f.get_tensor(k)), ("pt", pt[k])):
            if t.dtype != r.dtype or t.shape != r.shape or not torch.equal(t.reshape(-1).view(torch.uint8), r.reshape(-1).view(torch.uint8)):
                print(f"{name}: {k} differs"); bad += 1
if set(pt) != set(ref) or pt.get("step") != ref.get("step"):
    print("out.pt keys/values differ from torch's"); bad += 1
print("verify:", "OK, every tensor identical" if not bad else f"{bad} difference(s)")
sys.exit(1 if bad else 0)
EOF
fi
[ "${KEEP:-0}" = 1 ] || rm -f "$work/out.safetensors" "$work/out.pt" "$work/out_torch.pt"
