#!/usr/bin/env bash
# Benchmark: Megatron -> Hugging Face on a >= 2 GB MoE checkpoint (docs/maps.md, issue 50). The
# checkpoint is written by megatron-core 0.19.2 itself on CPU (bench/megatron_moe.py make: a
# Qwen3-MoE-style GPTModel, 16 experts x 9 layers, random float32 weights, 2.18 GB, torch_dist);
# generated on first use under WORKDIR/src, never committed. Side by side, page cache dropped
# before each run:
#   (a) dcpctl consolidate SRC/ckpt -o OUT/ --map megatron-gpt --config SRC/config.json
#   (b) Megatron-Bridge 0.6.2: the model built on CPU, megatron-core's dist_checkpointing.load,
#       AutoBridge.export_hf_weights(cpu=True) into safetensors (bench/megatron_moe.py bridge),
#       under BRIDGE_PYTHON (a venv as the fixtures README's recipe 12); left out without it
#   (c) cat SRC/ckpt/*.distcp > out && sync   the anchor: the durable copy of the same bytes
# and, with (b), whether the two exports hold the same tensors bit for bit.
# Wall seconds, CPU seconds and peak RSS (GNU time) of each, the median of REPEAT rounds (default 1).
#
#   bench/megatron_hf.sh [WORKDIR]     (default /tmp/dcpctl-bench-megatron)
set -euo pipefail
own_ckpt=1
set -- "${1:-/tmp/dcpctl-bench-megatron}"
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
mpy=${MEGATRON_PYTHON:-$root/.venv-megatron/bin/python}
src=$work/src
if [ ! -f "$src/ckpt/.metadata" ]; then
  echo "== generating the megatron-core checkpoint under $src (bench/megatron_moe.py make)"
  "$mpy" "$root/bench/megatron_moe.py" make "$src"
fi
ckpt=$src/ckpt
names=(a_dcpctl c_cat_sync)
[ -n "${BRIDGE_PYTHON:-}" ] && names+=(b_bridge)
cmd_for() {
  case $1 in
    a_dcpctl) echo "'$dcpctl' consolidate '$ckpt' -o '$work/hf-dcpctl/' --map megatron-gpt --config '$src/config.json' -q" ;;
    b_bridge) echo "'$BRIDGE_PYTHON' '$root/bench/megatron_moe.py' bridge '$src' '$work/hf-bridge'" ;;
    c_cat_sync) echo "cat '$ckpt'/*.distcp > '$work/m.cat' && sync" ;;
  esac
}
before_run() {  # each run's own output only: the two exports are compared at the end
  case $1 in a_dcpctl) rm -rf "$work/hf-dcpctl" ;; b_bridge) rm -rf "$work/hf-bridge" ;; c_cat_sync) rm -f "$work/m.cat" ;; esac
}
warm_up
repeat=${REPEAT:-1}
run_rounds megatron
"$py" - "$work" "$repeat" "$root/bench" "$ckpt" "${names[@]}" <<'PY'
import os
import sys

work, repeat, ckpt = sys.argv[1], int(sys.argv[2]), sys.argv[4]
sys.path.insert(0, sys.argv[3])
from timing import runs, summary
data = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt) if f.endswith(".distcp"))
print(f"\nsource: {ckpt}: {data/1e9:.2f} GB; median of {repeat} round(s); max RSS and exit: the worst round")
print(f"{'run':12} {'exit':>4} {'seconds':>8} {'CPU s':>6} {'max RSS':>10}")
for n in sys.argv[5:]:
    m = summary(runs(work, "megatron", n, repeat))
    print(f"{n:12} {m['rc']:>4} {m['secs']:8.2f} {m['cpu']:6.2f} {m['rss']/2**20:7.0f} MiB")
bridge = os.path.join(work, "hf-bridge")
if os.path.isdir(bridge):  # the two exports hold the same tensors, bit for bit
    import torch
    from safetensors.torch import load_file

    def tensors(d):
        out = {}
        for f in sorted(os.listdir(d)):
            if f.endswith(".safetensors"):
                out.update(load_file(os.path.join(d, f)))
        return out

    a, b = tensors(os.path.join(work, "hf-dcpctl")), tensors(bridge)
    same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    print(f"dcpctl's export vs Megatron-Bridge's: {len(a)} / {len(b)} tensors, {'equal bit for bit' if same else 'DIFFERENT'}")
PY
