#!/usr/bin/env bash
# Benchmark: GGUF and W4A16 exports beside their anchors, in one run (issue 71 item 4), on Llama 3.2
# 1B's architecture with random weights in bfloat16 (bench/make_gguf_model.py: 1.24 B parameters,
# 2.47 GB, a real Llama 3 tokenizer; a Hugging Face folder WORK/llama and a DCP checkpoint WORK/dcp
# of the same tensors, made once and kept). Side by side:
#   dcpctl_f16        dcpctl consolidate llama/ -o llama.gguf --outtype f16    conv_f16   convert_hf_to_gguf.py llama/ --outtype f16
#   dcpctl_q8         ... --outtype q8_0                                      conv_q8    convert_hf_to_gguf.py llama/ --outtype q8_0
#                                                                             lq_q8      llama-quantize F16.gguf Q8_0 (its input: the F16 file, made untimed)
#   dcpctl_dcp_f16    dcpctl consolidate dcp/ --assets llama/ -o llama.gguf   the anchor from DCP: dcpctl_dcp_hf, then conv_f16
#   dcpctl_dcp_q8     ... --outtype q8_0                                      (the converter reads only a Hugging Face folder)
#   dcpctl_dcp_hf     dcpctl consolidate dcp/ --assets llama/ -o hf/          (step 1 of the anchor from DCP)
#   dcpctl_plain      dcpctl consolidate llama/ -o plain/                     (the plain export, no codec)
#   dcpctl_w4a16      ... --quantize w4a16                                    peer_w4a16 llm-compressor's model_free_ptq, scheme W4A16
# The converter is llama-cpp-python 0.3.36's sdist's convert_hf_to_gguf.py with its own gguf-py
# (tools/gguf_oracle.py fetch), run by PYTHON; llama-quantize is that sdist's llama.cpp, built once by
# bench/build_llama_quantize.sh (LQ=0 leaves it out; the first build takes long: run that script
# first). The two-step anchors are sums of their steps' medians (wall and CPU; RSS the larger):
# "converter f16 + llama-quantize" = conv_f16 + lq_q8, "DCP -> HF -> converter" = dcpctl_dcp_hf +
# conv_X (the converter's input is then dcpctl's HF folder, the same tensors as llama/).
# dcpctl runs with --max-memory 3GiB: the GGUF writer converts a tensor whole, and Llama 3's
# embedding (128,256 x 2048) needs 1.86 GB of it (the default 1 GiB refuses it, exit 5).
# Each run under /usr/bin/time -v (wall, user+sys CPU, max RSS), page cache dropped before each when
# possible (bench/common.sh; else all runs warm, said), REPEAT rounds (default 1: about 6 min on a
# quiet 2-core machine; REPEAT=3 for medians) in a shuffled order. Then the table, the ratios, and
# the agreement: dcpctl's F16 and Q8_0 files (from llama/ and from dcp/) against the converter's with
# cmp (byte for byte); llama-quantize's Q8_0 against the converter's tensor by tensor
# (bench/gguf_check.py: llama-quantize orders the tensors by name and quantizes F16 values with
# ggml's SIMD rows, so bytes may differ: counted, not required); dcpctl's W4A16 against
# model_free_ptq's, every tensor byte for byte (bench/quantize_ct_peer.py check).
#
#   bench/gguf.sh [WORKDIR]   (default /tmp/dcpctl-bench-gguf; ~25 GB free; the model is made there on first use)
#
# Environment: DCPCTL, PYTHON (.venv: torch 2.15.0, transformers 5.23.0, sentencepiece: makes the
# model, runs the converter), PEER_PYTHON (a venv with llmcompressor 0.14.0.1 over compressed-tensors
# 0.20.0, as bench/quantize_ct_peer.py says; PEERS=0 leaves it out), LQ=0, REPEAT, KEEP=1 (keep the outputs).
set -euo pipefail
set -- "${1:-/tmp/dcpctl-bench-gguf}"
own_ckpt=1
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

hf=$work/llama
dcp=$work/dcp
mem=--max-memory=3GiB
peer_py=${PEER_PYTHON:-}
if [ -z "$peer_py" ] && [ "${PEERS:-1}" != 0 ]; then
  echo "== no PEER_PYTHON (a venv with llmcompressor: bench/quantize_ct_peer.py says how): the peer is left out"
  PEERS=0
fi
llama=$("$py" "$root/tools/gguf_oracle.py" fetch)
conv="PYTHONPATH='$llama/gguf-py' '$py' '$llama/convert_hf_to_gguf.py'"
# llama-quantize: the native tool when bench/build_llama_quantize.sh has built it (LQ=build builds it
# now: about 1.5 h with one job on 2 busy cores), else llama.cpp's llama_model_quantize (what the
# tool calls) from the oracle's portable llama-cpp-python build through bench/llama_quantize.py.
lq="" lq_bin=${XDG_CACHE_HOME:-$HOME/.cache}/dcpctl/llama-quantize-0.3.36/build/bin/llama-quantize
if [ "${LQ:-1}" = build ]; then lq_bin=$("$root/bench/build_llama_quantize.sh"); fi
if [ "${LQ:-1}" != 0 ] && [ -x "$lq_bin" ]; then
  lq="'$lq_bin'"
  echo "   llama-quantize: $lq_bin ($(cat "$(dirname "$(dirname "$lq_bin")")/built" 2>/dev/null || echo built))"
elif [ "${LQ:-1}" != 0 ]; then
  lq="'$py' '$root/bench/llama_quantize.py' '$("$py" "$root/tools/gguf_oracle.py" build)'"
  echo "   llama-quantize: not built (bench/build_llama_quantize.sh); llama_model_quantize of the oracle's portable" \
       "llama-cpp-python 0.3.36 build instead (bench/llama_quantize.py: no SIMD, a Python start-up)"
fi
echo "== the model: $hf and $dcp (bench/make_gguf_model.py; kept between runs)"
"$py" "$root/bench/make_gguf_model.py" "$work"
echo "   llama/ $(du -sh --apparent-size "$hf" | cut -f1), dcp/ $(du -sh --apparent-size "$dcp" | cut -f1);" \
     "$(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB; dcpctl $("$dcpctl" --version | head -n 1)"
echo "   converter: $llama/convert_hf_to_gguf.py (llama-cpp-python 0.3.36), gguf-py" \
     "$(PYTHONPATH="$llama/gguf-py" "$py" -c 'import gguf, importlib.metadata as m; print(m.version("gguf"))' 2>/dev/null || echo '?')"

names=(dcpctl_f16 dcpctl_q8 dcpctl_dcp_f16 dcpctl_dcp_q8 dcpctl_dcp_hf conv_f16 conv_q8 dcpctl_plain dcpctl_w4a16)
if [ -n "$lq" ]; then
  names+=(lq_q8)
  # Its input, untimed: dcpctl's F16 file (the agreement below shows it is the converter's, byte for byte).
  if [ ! -f "$work/in-f16/llama.gguf" ]; then
    mkdir -p "$work/in-f16"
    "$dcpctl" consolidate "$hf" -o "$work/in-f16/llama.gguf" --outtype f16 $mem -q
  fi
fi
if [ "${PEERS:-1}" != 0 ]; then
  "$peer_py" -c "import llmcompressor, compressed_tensors, torch, transformers; print('   peer: llmcompressor', llmcompressor.__version__, \
'compressed-tensors', compressed_tensors.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)" 2>/dev/null
  names+=(peer_w4a16)
fi
# Every GGUF output is OUTDIR/llama.gguf: the converter names the model after its input folder,
# dcpctl after the output's stem, both "Llama" then.
out() { echo "$work/out-$1"; }
cmd_for() {
  case $1 in
    dcpctl_f16) echo "mkdir -p '$(out "$1")' && '$dcpctl' consolidate '$hf' -o '$(out "$1")/llama.gguf' --outtype f16 $mem -q" ;;
    dcpctl_q8) echo "mkdir -p '$(out "$1")' && '$dcpctl' consolidate '$hf' -o '$(out "$1")/llama.gguf' --outtype q8_0 $mem -q" ;;
    dcpctl_dcp_f16) echo "mkdir -p '$(out "$1")' && '$dcpctl' consolidate '$dcp' --assets '$hf' -o '$(out "$1")/llama.gguf' --outtype f16 $mem -q" ;;
    dcpctl_dcp_q8) echo "mkdir -p '$(out "$1")' && '$dcpctl' consolidate '$dcp' --assets '$hf' -o '$(out "$1")/llama.gguf' --outtype q8_0 $mem -q" ;;
    dcpctl_dcp_hf) echo "mkdir -p '$(out "$1")' && '$dcpctl' consolidate '$dcp' --assets '$hf' -o '$(out "$1")/llama/' -q" ;;
    conv_f16) echo "mkdir -p '$(out "$1")' && $conv '$hf' --outtype f16 --outfile '$(out "$1")/llama.gguf' 2>> '$work/conv.log'" ;;
    conv_q8) echo "mkdir -p '$(out "$1")' && $conv '$hf' --outtype q8_0 --outfile '$(out "$1")/llama.gguf' 2>> '$work/conv.log'" ;;
    lq_q8) echo "mkdir -p '$(out "$1")' && $lq '$work/in-f16/llama.gguf' '$(out "$1")/llama.gguf' Q8_0 >> '$work/lq.log' 2>&1" ;;
    dcpctl_plain) echo "'$dcpctl' consolidate '$hf' -o '$(out "$1")/' -q" ;;
    dcpctl_w4a16) echo "'$dcpctl' consolidate '$hf' -o '$(out "$1")/' --quantize w4a16 -q" ;;
    peer_w4a16) echo "'$peer_py' '$root/bench/quantize_ct_peer.py' W4A16 '$hf' '$(out "$1")' 2>> '$work/peer.log'" ;;
  esac
}
before_run() { rm -rf "$(out "$1")"; }
# The converter, llama-quantize and the peer return with their output in the page cache; dcpctl
# fsyncs before it exits: a sync after each of theirs, timed apart.
after_run() {
  case $1 in
    conv_*|lq_*|peer_*) /usr/bin/time -f "round $2: sync after $1 took %e s" -a -o "$work/sync.log" sync ;;
  esac
}
rm -f "$work/conv.log" "$work/lq.log" "$work/peer.log" "$work/sync.log"
refill_for $(( 2 * $(du -sb "$hf" | cut -f1) + (512 << 20) )) 0
refill_fixed=1
warm_up
repeat=${REPEAT:-1}
t0=$(date +%s)
run_rounds gguf
echo "== the rounds took $(( $(date +%s) - t0 )) s"
sed 's/^/   /' "$work/sync.log" 2>/dev/null || true

"$py" - "$work" "$repeat" "$root/bench" "${names[@]}" <<'PY'
import json, os, sys
work, repeat, names = sys.argv[1], int(sys.argv[2]), sys.argv[4:]
sys.path.insert(0, sys.argv[3])
from timing import report, runs, summary
info = json.load(open(os.path.join(work, "info.json")))
print("\nper run (in round order):")
for n in names:
    report(work, "gguf", n, repeat, 15)
m = {n: summary(runs(work, "gguf", n, repeat)) for n in names}
def two(a, b):  # a two-step anchor: the sum of its steps' medians, the larger RSS
    if a in m and b in m:
        return {"secs": m[a]["secs"] + m[b]["secs"], "cpu": m[a]["cpu"] + m[b]["cpu"],
                "rss": max(m[a]["rss"], m[b]["rss"]), "rc": max(m[a]["rc"], m[b]["rc"])}
rows = [
    ("HF -> GGUF F16", "dcpctl_f16", "conv_f16", m.get("conv_f16")),
    ("HF -> GGUF Q8_0", "dcpctl_q8", "conv_q8", m.get("conv_q8")),
    ("HF -> GGUF Q8_0", "dcpctl_q8", "conv_f16 + lq_q8", two("conv_f16", "lq_q8")),
    ("DCP -> GGUF F16", "dcpctl_dcp_f16", "dcpctl_dcp_hf + conv_f16", two("dcpctl_dcp_hf", "conv_f16")),
    ("DCP -> GGUF Q8_0", "dcpctl_dcp_q8", "dcpctl_dcp_hf + conv_q8", two("dcpctl_dcp_hf", "conv_q8")),
    ("HF -> W4A16", "dcpctl_w4a16", "peer_w4a16", m.get("peer_w4a16")),
    ("HF -> W4A16", "dcpctl_w4a16", "dcpctl_plain", m.get("dcpctl_plain")),
]
print(f"\nmodel: {info['parameters']:,} parameters ({info['bytes'] / 1e9:.2f} GB bfloat16)")
print(f"median of {repeat} round(s) (two-step anchors: the sum of their steps' medians); max RSS and exit: the worst round")
f = lambda r: f"{r['secs']:7.1f} s {r['cpu']:7.1f} CPU-s {r['rss'] / 2**20:6.0f} MiB{'' if r['rc'] == 0 else ' exit ' + str(r['rc'])}"  # noqa: E731
print(f"{'':17} {'dcpctl':14} {'wall':>9} {'CPU':>11} {'max RSS':>10}   {'anchor':24} {'wall':>9} {'CPU':>11} {'max RSS':>10}  anchor / dcpctl, wall / CPU")
for what, a, bname, b in rows:
    if a not in m or b is None:
        continue
    ra = m[a]
    ratio = f"{b['secs'] / ra['secs']:.1f}x / {b['cpu'] / ra['cpu']:.1f}x" if ra["secs"] and ra["cpu"] else "-"
    if bname == "dcpctl_plain":  # what quantizing adds to the same export: dcpctl's over the plain one
        ratio = f"(w4a16 / plain: {ra['secs'] / b['secs']:.1f}x / {ra['cpu'] / b['cpu']:.1f}x)" if b["secs"] and b["cpu"] else "-"
    print(f"{what:17} {a:14} {f(ra)}   {bname:24} {f(b)}  {ratio}")
PY

echo "== agreement"
same() { if cmp -s "$1" "$2"; then echo "   $3: byte-identical (cmp)"; else echo "   $3: DIFFERS ($(cmp "$1" "$2" 2>&1 | head -n 1))"; fi; }
g() { echo "$(out "$1")/llama.gguf"; }
if [ -f "$(g conv_f16)" ]; then
  same "$(g dcpctl_f16)" "$(g conv_f16)" "dcpctl F16 from llama/ vs the converter's F16"
  same "$(g dcpctl_dcp_f16)" "$(g conv_f16)" "dcpctl F16 from dcp/ vs the converter's F16"
  if [ -n "$lq" ]; then same "$work/in-f16/llama.gguf" "$(g conv_f16)" "llama-quantize's input (dcpctl's F16) vs the converter's F16"; fi
fi
if [ -f "$(g conv_q8)" ]; then
  same "$(g dcpctl_q8)" "$(g conv_q8)" "dcpctl Q8_0 from llama/ vs the converter's Q8_0"
  same "$(g dcpctl_dcp_q8)" "$(g conv_q8)" "dcpctl Q8_0 from dcp/ vs the converter's Q8_0"
  if [ -n "$lq" ]; then
    echo "   llama-quantize's Q8_0 vs the converter's Q8_0, tensor by tensor (bench/gguf_check.py):"
    { PYTHONPATH="$llama/gguf-py" "$py" "$root/bench/gguf_check.py" "$(g lq_q8)" "$(g conv_q8)" || true; } | sed 's/^/     /'
  fi
fi
if [ "${PEERS:-1}" != 0 ]; then
  echo "   dcpctl W4A16 vs model_free_ptq W4A16, every tensor:"
  { "$peer_py" "$root/bench/quantize_ct_peer.py" check "$(out dcpctl_w4a16)" "$(out peer_w4a16)" 2>&1 || true; } | sed 's/^/     /'
fi
if [ "${KEEP:-0}" != 1 ]; then for n in "${names[@]}"; do rm -rf "$(out "$n")"; done; fi
