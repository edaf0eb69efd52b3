#!/usr/bin/env bash
# Benchmark: the compressed-tensors exports (issue 57's bench rows; issue 59 item 2's ratio) beside
# the plain export and beside llm-compressor's model_free_ptq on CPU, on the 2.79 GB float32
# Qwen3ForCausalLM of bench/quantize.sh (bench/quantize_peer.py make: 697 M parameters, hidden 2048,
# 12 layers, seeded; kept in the work dir). Side by side, in one run:
#   dcpctl_plain     dcpctl consolidate SRC/ -o OUT/ -q                      (the same export, no codec)
#   dcpctl_fp8dyn    ... --quantize fp8-dynamic    peer_fp8dyn   model_free_ptq scheme FP8_DYNAMIC
#   dcpctl_nvfp4     ... --quantize nvfp4          peer_nvfp4    model_free_ptq scheme NVFP4A16
#   dcpctl_mxfp8     ... --quantize mxfp8          peer_mxfp8    model_free_ptq scheme MXFP8A16
# No --dtype: model_free_ptq leaves the tensors it does not quantize as saved (float32), and so does
# dcpctl here, so both write the same bytes. Each run under /usr/bin/time -v (wall clock, CPU, max
# RSS), page cache dropped before each when possible (bench/common.sh), REPEAT rounds (default 2)
# in a shuffled order; then a table (median wall, worst RSS), each codec's wall and CPU over
# dcpctl_plain's (what quantizing adds to the same export: issue 59 asks at most 1.2x), each peer
# over its dcpctl row, and the agreement: every tensor of each dcpctl output against the peer's,
# byte for byte (bench/quantize_ct_peer.py check).
#
#   bench/quantize_ct.sh [WORKDIR]   (default /tmp/dcpctl-bench-quantize, shared with quantize.sh; ~10 GB free)
#
# Environment: DCPCTL, PYTHON (torch 2.15.0, transformers 5.23.0: makes the model), PEER_PYTHON (a
# venv with llmcompressor 0.14.0.1 over compressed-tensors 0.20.0: bench/quantize_ct_peer.py says
# how; PEERS=0 leaves the peers out), REPEAT, CODECS (default "fp8dyn nvfp4 mxfp8").
set -euo pipefail
set -- "${1:-/tmp/dcpctl-bench-quantize}"
own_ckpt=1
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

src=$work/src
peer_py=${PEER_PYTHON:-}
if [ -z "$peer_py" ] && [ "${PEERS:-1}" != 0 ]; then
  echo "== no PEER_PYTHON (a venv with llmcompressor: bench/quantize_ct_peer.py says how): the peers are left out"
  PEERS=0
fi
echo "== the model: $work/src (bench/quantize_peer.py make; kept between runs)"
"$py" "$root/bench/quantize_peer.py" make "$work"
echo "   src/ $(du -sh --apparent-size "$src" | cut -f1); $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB;" \
     "dcpctl $("$dcpctl" --version | head -n 1)"
codecs=(${CODECS:-fp8dyn nvfp4 mxfp8})
names=(dcpctl_plain)
for c in "${codecs[@]}"; do names+=("dcpctl_$c"); done
if [ "${PEERS:-1}" != 0 ]; then
  "$peer_py" -c "import llmcompressor, compressed_tensors, torch, transformers; print('   peer: llmcompressor', llmcompressor.__version__, \
'compressed-tensors', compressed_tensors.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
  for c in "${codecs[@]}"; do names+=("peer_$c"); done
fi
word() { case $1 in fp8dyn) echo fp8-dynamic ;; *) echo "$1" ;; esac; }
scheme() { case $1 in fp8dyn) echo FP8_DYNAMIC ;; nvfp4) echo NVFP4A16 ;; mxfp8) echo MXFP8A16 ;; esac; }
cmd_for() {
  case $1 in
    dcpctl_plain) echo "'$dcpctl' consolidate '$src' -o '$work/out-ct-plain/' -q" ;;
    dcpctl_*) echo "'$dcpctl' consolidate '$src' -o '$work/out-ct-${1#dcpctl_}/' --quantize $(word "${1#dcpctl_}") -q" ;;
    peer_*) echo "'$peer_py' '$root/bench/quantize_ct_peer.py' $(scheme "${1#peer_}") '$src' '$work/out-ct-peer-${1#peer_}' 2>> '$work/peer_ct.log'" ;;
  esac
}
before_run() {
  case $1 in
    dcpctl_*) rm -rf "$work/out-ct-${1#dcpctl_}" ;;
    peer_*) rm -rf "$work/out-ct-peer-${1#peer_}" ;;
  esac
}
# The peer returns with its output in the page cache; dcpctl fsyncs before it exits: a sync after
# each peer run, timed apart.
after_run() {
  case $1 in
    peer_*) /usr/bin/time -f "round $2: sync after $1 took %e s" -a -o "$work/peer_ct_sync.log" sync ;;
  esac
}
rm -f "$work/peer_ct.log" "$work/peer_ct_sync.log"
refill_for $(( 2 * $(du -sb "$src" | cut -f1) + (512 << 20) )) 0
refill_fixed=1
warm_up
repeat=${REPEAT:-2}
run_rounds quantize_ct

grep -h "model_free_ptq" "$work/peer_ct.log" | grep -v INFO | sed 's/^/   /' || true
sed 's/^/   /' "$work/peer_ct_sync.log" 2>/dev/null || true
"$py" - "$work" "$repeat" "$root/bench" "${codecs[*]}" "${names[@]}" <<'PY'
import json, os, sys
work, repeat, codecs, names = sys.argv[1], int(sys.argv[2]), sys.argv[4].split(), sys.argv[5:]
sys.path.insert(0, sys.argv[3])
from timing import print_paired, print_paired_cpu, report, table
info = json.load(open(os.path.join(work, "info.json")))
print("\nper run (in round order):")
rows = {n: report(work, "quantize_ct", n, repeat, 14) for n in names}
print(f"\nmodel: {info['parameters']:,} parameters ({info['bytes'] / 1e9:.2f} GB float32)")
table(rows, repeat, 14)
for c in codecs:
    for a, b in ((f"dcpctl_{c}", "dcpctl_plain"), (f"peer_{c}", f"dcpctl_{c}")):
        if a in names and b in names:
            print_paired(work, "quantize_ct", a, b, repeat)
            print_paired_cpu(work, "quantize_ct", a, b, repeat)
PY
if [ "${PEERS:-1}" != 0 ]; then
  echo "== agreement, every tensor of dcpctl's output against model_free_ptq's:"
  for c in "${codecs[@]}"; do
    echo "   $c:"
    "$peer_py" "$root/bench/quantize_ct_peer.py" check "$work/out-ct-$c" "$work/out-ct-peer-$c" || true
  done
fi
