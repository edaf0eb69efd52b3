#!/usr/bin/env bash
# Benchmark: `dcpctl diff` of a >= 4 GB checkpoint (8 ranks, written by real torch:
# bench/make_big_ckpt.py, generated on first use, never committed) against its own consolidated
# safetensors, side by side with the Python way: load both with torch / safetensors and compare.
#
#   bench/diff.sh [WORKDIR]          (default /tmp/dcpctl-bench; needs ~10 GB free there)
#
# Environment: DCPCTL (default build/cmd/dcpctl), PYTHON (default .venv/bin/python),
# REPEAT (rounds, default 1; the table shows medians), KEEP=1 to keep model.safetensors.
#
# Runs, each under /usr/bin/time -v (wall clock, max RSS), page cache dropped before each when
# /proc/sys/vm/drop_caches is writable (else every command runs once untimed first: all warm):
#   (a) dcpctl diff CKPT model.safetensors -q --exclude step       (exact, bit for bit; exit 0)
#   (b) the same with --atol 0 --rtol 1e-5                          (allclose in float64)
#   (c) dcpctl stats CKPT -q                                       (one side, every statistic)
#   (d) python: dcp_to_torch_save's loader (_load_state_dict, _EmptyStateDictLoadPlanner) for
#       CKPT, safetensors.torch.load_file for the file, torch.equal per tensor key
#   (e) cat CKPT/*.distcp model.safetensors > /dev/null              (reading the same bytes)
# (`step` is the checkpoint's one non-tensor value, which the safetensors export cannot hold: diff
# would rightly report it as only in A; the Python way looks at tensors only.)
# and prints a table (seconds, GB/s of both sides' bytes, max RSS, ratio to the Python way).
set -euo pipefail

# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

model=$work/model.safetensors
if [ ! -f "$model" ]; then
  echo "== consolidating $ckpt to $model (once, untimed)"
  "$dcpctl" consolidate "$ckpt" -o "$model" -q
fi
pyway=$work/diff_python.py
cat >"$pyway" <<'PY'
import sys, warnings
warnings.filterwarnings("ignore")
import torch
from safetensors.torch import load_file
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
ckpt, model = sys.argv[1], sys.argv[2]
a = {}
_load_state_dict(a, storage_reader=FileSystemReader(ckpt), planner=_EmptyStateDictLoadPlanner(), no_dist=True)
b = load_file(model)
ta = {k: v for k, v in a.items() if isinstance(v, torch.Tensor)}
diff = sorted(set(ta) ^ set(b)) + [k for k in ta if k in b and not torch.equal(ta[k], b[k])]
print("different:" if diff else "same", diff[:5])
sys.exit(1 if diff else 0)
PY

names=(a_dcpctl_diff b_dcpctl_diff_allclose c_dcpctl_stats d_python_load_compare e_cat)
cmd_for() {
  case $1 in
    a_dcpctl_diff) echo "'$dcpctl' diff '$ckpt' '$model' -q --exclude step" ;;
    b_dcpctl_diff_allclose) echo "'$dcpctl' diff '$ckpt' '$model' -q --exclude step --atol 0 --rtol 1e-5" ;;
    c_dcpctl_stats) echo "'$dcpctl' stats '$ckpt' -q" ;;
    d_python_load_compare) echo "'$py' '$pyway' '$ckpt' '$model'" ;;
    e_cat) echo "cat '$ckpt'/*.distcp '$model' > /dev/null" ;;
  esac
}

warm_up
repeat=${REPEAT:-1}
run_rounds dtime

"$py" - "$work" "$ckpt" "$model" "$cold" "$repeat" "$root/bench" <<'EOF'
import os, sys
work, ckpt, model, cold, repeat = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", int(sys.argv[5])
sys.path.insert(0, sys.argv[6])
from timing import runs, summary
a = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt) if f.endswith(".distcp"))
b = os.path.getsize(model)
rows = {}
for n in ["a_dcpctl_diff", "b_dcpctl_diff_allclose", "c_dcpctl_stats", "d_python_load_compare", "e_cat"]:
    m = summary(runs(work, "dtime", n, repeat))
    rows[n] = (m["secs"], m["rss"], m["rc"])
py_s = rows["d_python_load_compare"][0]
print()
print(f"checkpoint {ckpt}: {a/1e9:.2f} GB; consolidated {model}: {b/1e9:.2f} GB; "
      f"page cache {'dropped before each run' if cold else 'warm'}; median of {repeat}")
print(f"{'run':24} {'exit':>4} {'seconds':>8} {'GB/s':>6} {'max RSS':>10} {'vs python':>9} {'vs cat':>7}")
cat_s = rows["e_cat"][0]
for n, (s, rss, rc) in rows.items():
    data = a if n == "c_dcpctl_stats" else a + b
    print(f"{n:24} {rc:>4} {s:8.2f} {data/1e9/s if s else 0:6.2f} {rss/2**20:8.0f} MiB {py_s/s if s else 0:8.2f}x"
          f" {s/cat_s if cat_s else 0:6.2f}x")
EOF
[ "${KEEP:-1}" = 1 ] || rm -f "$model"
