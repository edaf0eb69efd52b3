#!/usr/bin/env bash
# Benchmark: exports for serving (issue 48) beside the peers' way, on a 2.79 GB float32
# Qwen3ForCausalLM that transformers 5.23 writes (bench/quantize_peer.py make: 697 M parameters,
# hidden 2048, 12 layers, seeded; kept in the work dir). Side by side, in one run:
#   dcpctl_fp8        dcpctl consolidate SRC/ -o OUT/ --quantize fp8-block --dtype bf16 -q
#   peer_fp8          python bench/quantize_peer.py fp8 SRC OUT2: every tensor loaded, each Linear
#                     weight through transformers' own Fp8Quantize op (128x128), the rest cast to
#                     bf16, save_file (prime-rl #3348's script's way; transformers' own
#                     from_pretrained(quantization_config=FineGrainedFP8Config()) needs a GPU)
#   dcpctl_bf16       dcpctl consolidate SRC/ -o OUT3/ --dtype bf16 -q
#   peer_bf16         python bench/quantize_peer.py bf16 SRC OUT4: from_pretrained(dtype=bf16) +
#                     save_pretrained
# each under /usr/bin/time -v (wall clock, max RSS); dcpctl_fp8 also under bench/read_bytes.py (the
# bytes it read, /proc/PID/io's rchar: an fp8 weight is read once for its fp8 bytes and its
# weight_scale_inv together, not once each), page cache dropped before each run when
# possible (bench/common.sh), REPEAT rounds (default 2) in a shuffled order; then a table (median
# wall, worst RSS) and the agreement of the fp8 outputs: every tensor byte for byte
# (bench/quantize_peer.py check; dcpctl's bytes are transformers' op's).
#
#   bench/quantize.sh [WORKDIR]    (default /tmp/dcpctl-bench-quantize; ~10 GB free)
#
# --quantize mxfp4 on a GPT-OSS-layout model: bench/quantize_mxfp4.sh (the same work dir).
#
# With BASE=/path/to/another/dcpctl (e.g. main's), the same two dcpctl exports with it too (base_fp8,
# base_bf16), in the same rounds; PEERS=0 leaves out the peers (their rows and the agreement check).
# Each round also prints dcpctl_fp8 over dcpctl_bf16 in wall and in CPU seconds: what quantizing
# adds to the same export (issue 59: at most 1.2x).
#
# Environment: DCPCTL, BASE, PEERS, PYTHON (torch 2.15.0, transformers 5.23.0), REPEAT.
set -euo pipefail
set -- "${1:-/tmp/dcpctl-bench-quantize}"
own_ckpt=1
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

src=$work/src
echo "== the model: $work/src (bench/quantize_peer.py make; kept between runs)"
"$py" "$root/bench/quantize_peer.py" make "$work"
echo "   src/ $(du -sh --apparent-size "$src" | cut -f1); $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB;" \
     "dcpctl $("$dcpctl" --version | head -n 1)"
names=(dcpctl_fp8 dcpctl_bf16)
if [ "${PEERS:-1}" != 0 ]; then names+=(peer_fp8 peer_bf16); fi
if [ -n "${BASE:-}" ]; then names+=(base_fp8 base_bf16); echo "   BASE: $("$BASE" --version | head -n 1) ($BASE)"; fi
cmd_for() {
  case $1 in
    base_fp8) echo "'$BASE' consolidate '$src' -o '$work/out-base-fp8/' --quantize fp8-block --dtype bf16 -q" ;;
    base_bf16) echo "'$BASE' consolidate '$src' -o '$work/out-base-bf16/' --dtype bf16 -q" ;;
    dcpctl_fp8) echo "'$py' '$root/bench/read_bytes.py' '$dcpctl' consolidate '$src' -o '$work/out-dcpctl-fp8/' --quantize fp8-block --dtype bf16 -q 2>> '$work/read_bytes.log'" ;;
    peer_fp8) echo "'$py' '$root/bench/quantize_peer.py' fp8 '$src' '$work/out-peer-fp8' 2>> '$work/peer_phases.log'" ;;
    dcpctl_bf16) echo "'$dcpctl' consolidate '$src' -o '$work/out-dcpctl-bf16/' --dtype bf16 -q" ;;
    peer_bf16) echo "'$py' '$root/bench/quantize_peer.py' bf16 '$src' '$work/out-peer-bf16' 2>> '$work/peer_phases.log'" ;;
  esac
}
before_run() {
  case $1 in
    dcpctl_fp8) rm -rf "$work/out-dcpctl-fp8" ;;
    dcpctl_bf16) rm -rf "$work/out-dcpctl-bf16" ;;
    base_*) rm -rf "$work/out-base-${1#base_}" ;;
  esac
}
# The peers return with their output in the page cache; dcpctl fsyncs before it exits: a sync
# after each peer run, timed apart.
after_run() {
  case $1 in
    peer_*) /usr/bin/time -f "round $2: sync after $1 took %e s" -a -o "$work/peer_sync.log" sync ;;
  esac
}
rm -f "$work/peer_phases.log" "$work/peer_sync.log" "$work/read_bytes.log"
refill_for $(( 2 * $(du -sb "$src" | cut -f1) + (512 << 20) )) 0
refill_fixed=1
warm_up
repeat=${REPEAT:-2}
run_rounds quantize

sed 's/^/   /' "$work/peer_phases.log" "$work/peer_sync.log" || true
echo "== bytes dcpctl_fp8 read (rchar: page cache or not; read_bytes: the device), round by round:"
sed 's/^/   /' "$work/read_bytes.log" || true
"$py" - "$work" "$repeat" "$root/bench" "${names[@]}" <<'PY'
import json, os, sys
work, repeat, names = sys.argv[1], int(sys.argv[2]), sys.argv[4:]
sys.path.insert(0, sys.argv[3])
from timing import print_paired, print_paired_cpu, report, table
info = json.load(open(os.path.join(work, "info.json")))
print("\nper run (in round order):")
rows = {n: report(work, "quantize", n, repeat, 14) for n in names}
print(f"\nmodel: {info['parameters']:,} parameters ({info['bytes'] / 1e9:.2f} GB float32)")
table(rows, repeat, 14)
for a, b in (("peer_fp8", "dcpctl_fp8"), ("peer_bf16", "dcpctl_bf16"), ("dcpctl_fp8", "dcpctl_bf16"),
             ("base_fp8", "base_bf16"), ("dcpctl_fp8", "base_fp8")):
    if a in names and b in names:
        print_paired(work, "quantize", a, b, repeat)
        print_paired_cpu(work, "quantize", a, b, repeat)
PY
if [ "${PEERS:-1}" != 0 ]; then
  echo "== agreement of the fp8 outputs:"
  "$py" "$root/bench/quantize_peer.py" check "$work/out-dcpctl-fp8" "$work/out-peer-fp8"
fi
if [ -n "${BASE:-}" ]; then
  echo "== dcpctl_fp8's output against BASE's, byte for byte:"
  (cd "$work/out-dcpctl-fp8" && find . -type f | sort | while read -r f; do cmp "$f" "$work/out-base-fp8/$f" && echo "   $f same"; done)
fi
