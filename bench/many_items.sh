#!/usr/bin/env bash
# Benchmark: per-item costs. A checkpoint of ITEMS items (default 2000 tensors x 256 ranks =
# 512,000), consolidated by dcpctl and by torch's dcp_to_torch_save side by side.
#
#   bench/many_items.sh [WORKDIR]          (default /tmp/dcpctl-bench-items; ~1 GB there)
#
# Environment: DCPCTL, PYTHON as in bench/common.sh (its big checkpoint is not used here);
# TENSORS (default 2000), RANKS (default 256), ROWS (rows per tensor, default 256, 16 float32
# columns), TIMEOUT (seconds for each run, default 1800), TORCH=0 to leave out torch's run (c),
# BASE=/path/to/an/older/dcpctl to run (a) and (b) with it too (x_base_*: e.g. the cost of a check).
#
# How the checkpoint is made: real torch (dcp.save, one process) writes TENSORS tensors of
# ROWS x 16 float32; dcpctl reshard splits each over RANKS target ranks (dim 0), so every tensor
# becomes RANKS chunks, each its own torch.save item in __R_0.distcp, as DCP writes for FSDP
# shards. (torch itself cannot make 256 ranks on this machine.) `dcpctl verify --deep` and
# torch's own .metadata reader check the result before the runs.
#
# Runs (page cache dropped before each when possible, under /usr/bin/time -v):
#   (a) dcpctl consolidate CKPT -o out.safetensors
#   (b) dcpctl consolidate CKPT -o out.pt
#   (c) torch: dcp_to_torch_save(CKPT, out_torch.pt)
# then a table: seconds, items per second, peak RSS; and out.pt against out_torch.pt (torch.load,
# every tensor equal).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:-/tmp/dcpctl-bench-items}
py=${PYTHON:-$root/.venv/bin/python}
dcpctl=${DCPCTL:-$root/build/cmd/dcpctl}
tensors=${TENSORS:-2000} ranks=${RANKS:-256} rows=${ROWS:-256} timeout=${TIMEOUT:-1800}
mkdir -p "$work"
src=$work/src-$tensors ckpt=$work/ckpt-$tensors-x$ranks

if [ ! -f "$src/.metadata" ]; then
  echo "== torch writes $tensors tensors of $rows x 16 float32 ($src)"
  "$py" - "$src" "$tensors" "$rows" <<'EOF'
import sys, warnings
warnings.filterwarnings("ignore")
import torch, torch.distributed.checkpoint as dcp
path, n, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
g = torch.Generator().manual_seed(0)
state = {f"layers.{i // 8}.w{i % 8}": torch.randn(rows, 16, generator=g) for i in range(n)}
dcp.save(state, checkpoint_id=path, no_dist=True)
EOF
fi
if [ ! -f "$ckpt/.metadata" ]; then
  echo "== dcpctl reshard to $ranks ranks ($ckpt)"
  /usr/bin/time -f "   %e s, peak RSS %M KB" "$dcpctl" reshard "$src" -o "$ckpt" -w "$ranks" -q
fi
items=$("$dcpctl" inspect --json "$ckpt" | "$py" -c "import json,sys; s=json.load(sys.stdin)['summary']; print(s['chunks'] + s['bytes_items'])")
echo "== $ckpt: $items items in $(find "$ckpt" -name '*.distcp' | wc -l) files, $(du -sh "$ckpt" | cut -f1)"
"$dcpctl" verify --deep "$ckpt" | tail -n 1
"$py" -c "
import sys, time; t = time.time()
from torch.distributed.checkpoint import FileSystemReader
md = FileSystemReader(sys.argv[1]).read_metadata()
print(f'   torch reads its .metadata: {sum(len(m.chunks) for m in md.state_dict_metadata.values())} chunks ({time.time() - t:.1f} s)')" "$ckpt"

cold=0
if sync && (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then cold=1; fi
run() {  # run NAME COMMAND...
  local name=$1
  shift
  rm -f "$work/out-$name"*
  if [ $cold = 1 ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi
  echo "== $name (load $(cut -d' ' -f1 /proc/loadavg)): $*"
  /usr/bin/time -v -o "$work/time-$name.txt" timeout "$timeout" "$@" || true
}
run a_dcpctl_safetensors "$dcpctl" consolidate "$ckpt" -o "$work/out-a_dcpctl_safetensors.safetensors" -q
run b_dcpctl_pt "$dcpctl" consolidate "$ckpt" -o "$work/out-b_dcpctl_pt.pt" -q
if [ -n "${BASE:-}" ]; then
  run x_base_safetensors "$BASE" consolidate "$ckpt" -o "$work/out-x_base_safetensors.safetensors" -q
  run x_base_pt "$BASE" consolidate "$ckpt" -o "$work/out-x_base_pt.pt" -q
fi
[ "${TORCH:-1}" = 0 ] || run c_torch_dcp_to_torch_save "$py" -c "
import sys, warnings
warnings.filterwarnings('ignore')
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
dcp_to_torch_save(sys.argv[1], sys.argv[2])" "$ckpt" "$work/out-c_torch_dcp_to_torch_save.pt"

"$py" - "$work" "$items" "$cold" "$root/bench" <<'EOF'
import os, sys, warnings
warnings.filterwarnings("ignore")
work, items, cold = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
sys.path.insert(0, sys.argv[4])
from timing import parse_time  # noqa: E402
print(f"\n{items} items; page cache {'dropped before each run' if cold else 'warm'}")
print(f"{'run':28} {'exit':>4} {'seconds':>8} {'items/s':>9} {'max RSS':>10}")
rows = {}
for n in ("a_dcpctl_safetensors", "b_dcpctl_pt", "x_base_safetensors", "x_base_pt", "c_torch_dcp_to_torch_save"):
    if n.startswith("x_") and not os.environ.get("BASE") or n.startswith("c_") and os.environ.get("TORCH") == "0":
        continue
    t = parse_time(os.path.join(work, f"time-{n}.txt"))
    rows[n] = t
    print(f"{n:28} {t['rc']:>4} {t['secs']:8.2f} {items / t['secs'] if t['secs'] else 0:9.0f} {t['rss'] / 2**20:8.0f} MiB")
if "x_base_pt" in rows:
    for n in ("safetensors", "pt"):
        a, b = rows[[k for k in rows if k.endswith("_" + n) and k.startswith(("a_", "b_"))][0]], rows["x_base_" + n]
        print(f"  {n}: {a['secs'] / b['secs']:.2f}x the BASE binary's time")
if "c_torch_dcp_to_torch_save" not in rows:
    sys.exit(0)
ts = rows["c_torch_dcp_to_torch_save"]["secs"]
for n in ("a_dcpctl_safetensors", "b_dcpctl_pt"):
    print(f"  {n}: {ts / rows[n]['secs']:.1f}x torch's time")
import torch
a = torch.load(os.path.join(work, "out-b_dcpctl_pt.pt"), weights_only=True)
b = torch.load(os.path.join(work, "out-c_torch_dcp_to_torch_save.pt"), weights_only=True)
same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
print("out.pt against torch's:", "every tensor equal" if same else "DIFFERENT")
sys.exit(0 if same else 1)
EOF
