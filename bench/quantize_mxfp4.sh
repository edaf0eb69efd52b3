#!/usr/bin/env bash
# Benchmark: `consolidate --quantize mxfp4` (issue 48) on a 2.3 GB float32 GptOssForCausalLM that
# transformers 5.23 writes (bench/quantize_peer.py make-gpt-oss: hidden 1024, 16 experts, 10
# layers, seeded; kept in the work dir), beside:
#   dcpctl_mxfp4      dcpctl consolidate SRC/ -o OUT/ --quantize mxfp4 -q
#   dcpctl_plain      dcpctl consolidate SRC/ -o OUT2/ -q (the same export, not quantized)
#   peer_save         python bench/quantize_peer.py save SRC OUT3: from_pretrained + save_pretrained
# The peers' way to MXFP4 is not run: transformers 5.23 quantizes to MXFP4
# (from_pretrained(quantization_config=Mxfp4Config())) only with the `kernels` package, whose
# triton kernels it fetches from the Hugging Face Hub (without it, on CPU: "MXFP4 quantization is
# only supported on GPUs ... or CPU", a ValueError); torchao's to_mx quantizes tensors, not a
# folder. So the rows say what MXFP4 adds to a plain export, and what a load-and-save costs.
# Each under /usr/bin/time -v (wall clock, max RSS), page cache dropped before each run when
# possible (bench/common.sh), REPEAT rounds (default 2) in a shuffled order.
#
#   bench/quantize_mxfp4.sh [WORKDIR]    (default /tmp/dcpctl-bench-quantize; ~8 GB free)
#
# With BASE=/path/to/another/dcpctl (e.g. main's), the same two dcpctl exports with it too
# (base_mxfp4, base_plain), in the same rounds; PEERS=0 leaves out peer_save. Each round also
# prints dcpctl_mxfp4 over dcpctl_plain in wall and in CPU seconds (issue 59: at most 1.2x).
#
# Environment: DCPCTL, BASE, PEERS, PYTHON (torch 2.15.0, transformers 5.23.0), REPEAT.
set -euo pipefail
set -- "${1:-/tmp/dcpctl-bench-quantize}"
own_ckpt=1
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

src=$work/src-gpt-oss
echo "== the model: $src (bench/quantize_peer.py make-gpt-oss; kept between runs)"
"$py" "$root/bench/quantize_peer.py" make-gpt-oss "$work"
echo "   $(du -sh --apparent-size "$src" | cut -f1); $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB;" \
     "load average $(cut -d' ' -f1-3 /proc/loadavg); dcpctl $("$dcpctl" --version | head -n 1)"
names=(dcpctl_mxfp4 dcpctl_plain)
if [ "${PEERS:-1}" != 0 ]; then names+=(peer_save); fi
if [ -n "${BASE:-}" ]; then names+=(base_mxfp4 base_plain); echo "   BASE: $("$BASE" --version | head -n 1) ($BASE)"; fi
cmd_for() {
  case $1 in
    base_mxfp4) echo "'$BASE' consolidate '$src' -o '$work/out-base-mxfp4/' --quantize mxfp4 -q" ;;
    base_plain) echo "'$BASE' consolidate '$src' -o '$work/out-base-plain/' -q" ;;
    dcpctl_mxfp4) echo "'$dcpctl' consolidate '$src' -o '$work/out-dcpctl-mxfp4/' --quantize mxfp4 -q" ;;
    dcpctl_plain) echo "'$dcpctl' consolidate '$src' -o '$work/out-dcpctl-plain/' -q" ;;
    peer_save) echo "'$py' '$root/bench/quantize_peer.py' save '$src' '$work/out-peer-save' 2>> '$work/peer_phases.log'" ;;
  esac
}
before_run() {
  case $1 in
    dcpctl_mxfp4) rm -rf "$work/out-dcpctl-mxfp4" ;;
    dcpctl_plain) rm -rf "$work/out-dcpctl-plain" ;;
    base_*) rm -rf "$work/out-base-${1#base_}" ;;
  esac
}
# The peer returns with its output in the page cache; dcpctl fsyncs before it exits: a sync after
# each peer run, timed apart.
after_run() {
  case $1 in
    peer_*) /usr/bin/time -f "round $2: sync after $1 took %e s" -a -o "$work/peer_sync.log" sync ;;
  esac
}
rm -f "$work/peer_phases.log" "$work/peer_sync.log"
refill_for $(( 2 * $(du -sb "$src" | cut -f1) + (512 << 20) )) 0
refill_fixed=1
warm_up
repeat=${REPEAT:-2}
run_rounds quantize-mxfp4

sed 's/^/   /' "$work/peer_phases.log" "$work/peer_sync.log" || true
echo "   load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" - "$work" "$repeat" "$root/bench" "${names[@]}" <<'PY'
import json, os, sys
work, repeat, names = sys.argv[1], int(sys.argv[2]), sys.argv[4:]
sys.path.insert(0, sys.argv[3])
from timing import print_paired, print_paired_cpu, report, table
info = json.load(open(os.path.join(work, "info-gpt-oss.json")))
print("\nper run (in round order):")
rows = {n: report(work, "quantize-mxfp4", n, repeat, 14) for n in names}
print(f"\nmodel: {info['parameters']:,} parameters ({info['bytes'] / 1e9:.2f} GB float32)")
table(rows, repeat, 14)
for a, b in (("dcpctl_mxfp4", "dcpctl_plain"), ("peer_save", "dcpctl_mxfp4"), ("base_mxfp4", "base_plain"),
             ("dcpctl_mxfp4", "base_mxfp4")):
    if a in names and b in names:
        print_paired(work, "quantize-mxfp4", a, b, repeat)
        print_paired_cpu(work, "quantize-mxfp4", a, b, repeat)
PY
if [ -n "${BASE:-}" ]; then
  echo "== dcpctl_mxfp4's output against BASE's, byte for byte:"
  (cd "$work/out-dcpctl-mxfp4" && find . -type f | sort | while read -r f; do cmp "$f" "$work/out-base-mxfp4/$f" && echo "   $f same"; done)
fi
echo "== the MXFP4 output: sizes"
du -sh --apparent-size "$work/out-dcpctl-mxfp4" "$work/out-dcpctl-plain" | sed 's/^/   /'
