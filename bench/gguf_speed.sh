#!/usr/bin/env bash
# Benchmark (issue 82 item 5, "at the copy's speed"): dcpctl's GGUF and 4-bit exports beside the
# plain safetensors export of the same model and beside llama.cpp's converter and quantizer, in one
# run, on Qwen3-1.7B's config (bench/make_qwen3_model.sh: 1.72 B parameters, 3.44 GB bfloat16,
# random weights; made once under DIR and kept). Side by side, each under /usr/bin/time -v (wall,
# user + system CPU, peak RSS), all at the default --max-memory:
#   plain       dcpctl consolidate M -o x.safetensors                (the anchor: a copy)
#   f16 bf16 q8_0 q4_k [q5_k q6_k]   dcpctl consolidate M -o x.gguf --outtype T
#   w4a16 nvfp4 dcpctl consolidate M -o DIR/ --quantize W
#   conv_q8_0 conv_f16 conv_bf16     convert_hf_to_gguf.py M --outtype T (llama-cpp-python 0.3.36's sdist, its gguf-py)
#   lq_q4_k [lq_q5_k lq_q6_k]        llama_model_quantize --pure of conv_bf16's file (bench/llama_quantize.py: the
#                                    oracle's portable -O1 build of llama.cpp, no SIMD; llama-quantize's own code)
# Then the ratios the issue sets (F16/BF16 <= 1.5x plain, Q8_0 <= 2x plain and <= 0.5x the
# converter, the K-quants >= 3x faster than converter + llama-quantize, w4a16 and nvfp4 <= 2x
# plain) and the agreement: dcpctl's F16, BF16 and Q8_0 files against the converter's with cmp,
# its K-quant files against llama-quantize --pure's tensor by tensor and key by key
# (bench/gguf_check.py: llama-quantize orders its tensors by name). The quantizers read float32,
# so the K-quants' anchor quantizes the converter's BF16 file (the bfloat16 weights exactly); its
# F16 file's time is shown beside it (the issue's "converter (F16) + llama-quantize").
#
#   bench/gguf_speed.sh [DCPCTL]      (default build/cmd/dcpctl)
#
# Environment: DCPCTL_BENCH_DIR (default /tmp/dcpctl-gguf-speed; about 3.5 GB for the model, 5 GB
# for the outputs at once), KQ="q4_k q5_k q6_k" (the K-quants run; default q4_k), CONV=0 (leave out
# the converter and llama-quantize), DCPCTL_SCALAR=1 (dcpctl's scalar encoders, util/scalar.h). One run of
# each, warm page cache (the model read once before): the machine is shared. Check `uptime` first.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DCPCTL=$(realpath "${1:-$ROOT/build/cmd/dcpctl}")
PY=${DCPCTL_VENV:-$ROOT/.venv}/bin/python
DIR=${DCPCTL_BENCH_DIR:-/tmp/dcpctl-gguf-speed}
MODEL=$DIR/qwen3-1.7b
OUT=$DIR/out
KQ=${KQ:-q4_k}
[ -x /usr/bin/time ] || { echo "gguf_speed.sh: needs GNU time (/usr/bin/time; Debian's time package)" >&2; exit 1; }

"$ROOT/bench/make_qwen3_model.sh" "$MODEL"
llama=$("$PY" "$ROOT/tools/gguf_oracle.py" fetch)
site=""
if [ "${CONV:-1}" != 0 ]; then site=$("$PY" "$ROOT/tools/gguf_oracle.py" build); fi
rm -rf "$OUT"
mkdir -p "$OUT"
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); dcpctl $("$DCPCTL" --version | head -n 1); model $(du -sh --apparent-size "$MODEL" | cut -f1)"
cat "$MODEL"/*.safetensors >/dev/null  # warm: every run reads from the page cache
# An untimed plain export first: on this project's VM the first run after the page cache filled
# pays the host's reclaim (free page reporting, performance.md "Huge pages and the free page
# reporting"): a plain export took 6.9 s (7.8 sys-s) then, 1.7 s (1.1 sys-s) the next two times.
mkdir -p "$OUT/warm"
"$DCPCTL" consolidate "$MODEL" -q -o "$OUT/warm/x.safetensors"
rm -rf "$OUT/warm"
sync

# run NAME OUTPUT COMMAND...: timed; OUTPUT (a file or folder) kept for the agreement or removed.
run() {
  local name=$1 keep=$2
  shift 2
  /usr/bin/time -v -o "$OUT/$name.time" "$@" >"$OUT/$name.log" 2>&1 || echo "   $name: exit $? ($(tail -n 1 "$OUT/$name.log"))"
  sync
  [ "$keep" = keep ] || rm -rf "$OUT/$name.out"
}
dc=("$DCPCTL" consolidate "$MODEL" -q)
conv=(env PYTHONPATH="$llama/gguf-py" "$PY" "$llama/convert_hf_to_gguf.py" "$MODEL")

mkdir -p "$OUT/plain.out"
run plain drop "${dc[@]}" -o "$OUT/plain.out/x.safetensors"
for t in f16 bf16 q8_0 $KQ; do mkdir -p "$OUT/$t.out"; run "$t" keep "${dc[@]}" -o "$OUT/$t.out/qwen3-1.7b.gguf" --outtype "$t"; done
for w in w4a16 nvfp4; do run "$w" drop "${dc[@]}" -o "$OUT/$w.out/" --quantize "$w"; done
if [ "${CONV:-1}" != 0 ]; then
  for t in q8_0 f16 bf16; do mkdir -p "$OUT/conv_$t.out"; run "conv_$t" keep "${conv[@]}" --outtype "$t" --outfile "$OUT/conv_$t.out/qwen3-1.7b.gguf"; done
  for t in $KQ; do
    mkdir -p "$OUT/lq_$t.out"
    run "lq_$t" keep "$PY" "$ROOT/bench/llama_quantize.py" "$site" "$OUT/conv_bf16.out/qwen3-1.7b.gguf" "$OUT/lq_$t.out/qwen3-1.7b.gguf" "${t^^}" --pure
  done
fi

"$PY" - "$OUT" "$KQ" <<'PY'
import os, re, sys
out, kq = sys.argv[1], sys.argv[2].split()
def read(name):
    p = os.path.join(out, name + ".time")
    if not os.path.exists(p):
        return None
    t = open(p).read()
    g = lambda k: re.search(re.escape(k) + r": (.*)", t).group(1)  # noqa: E731
    wall = 0.0
    for part in g("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        wall = wall * 60 + float(part)
    return dict(wall=wall, cpu=float(g("User time (seconds)")) + float(g("System time (seconds)")),
                rss=int(g("Maximum resident set size (kbytes)")) / 1024, rc=int(g("Exit status")))
r = {n: read(n) for n in ["plain", "f16", "bf16", "q8_0", *kq, "w4a16", "nvfp4", "conv_q8_0", "conv_f16", "conv_bf16",
                          *("lq_" + k for k in kq)]}
print(f"\n{'run':12} {'wall s':>8} {'CPU s':>8} {'peak RSS MiB':>13} {'exit':>5}")
for n, v in r.items():
    if v:
        print(f"{n:12} {v['wall']:8.1f} {v['cpu']:8.1f} {v['rss']:13.0f} {v['rc']:5d}")
def ratio(what, a, b, limit):
    if not (r.get(a) and r.get(b)) or r[a]["rc"] or r[b]["rc"] or not r[b]["wall"]:
        return
    q = r[a]["wall"] / r[b]["wall"]
    print(f"  {what:44} {q:6.2f}x  (target <= {limit}x: {'met' if q <= limit else 'NOT met'})")
print("\nratios of wall time:")
ratio("GGUF F16 / plain", "f16", "plain", 1.5)
ratio("GGUF BF16 / plain", "bf16", "plain", 1.5)
ratio("GGUF Q8_0 / plain", "q8_0", "plain", 2.0)
ratio("GGUF Q8_0 / converter q8_0", "q8_0", "conv_q8_0", 0.5)
ratio("w4a16 / plain", "w4a16", "plain", 2.0)
ratio("nvfp4 / plain", "nvfp4", "plain", 2.0)
for k in kq:
    for anchor in ("conv_bf16", "conv_f16"):
        if r.get(anchor) and r.get("lq_" + k) and r.get(k) and r[k]["wall"] and not r[k]["rc"]:
            both = r[anchor]["wall"] + r["lq_" + k]["wall"]
            q = both / r[k]["wall"]
            print(f"  {'(' + anchor + ' + lq_' + k + ') / ' + k + ' (speed-up)':44} {q:6.2f}x  (target >= 3x: {'met' if q >= 3 else 'NOT met'})")
PY

echo "== agreement"
same() { if cmp -s "$1" "$2"; then echo "   $3: byte-identical (cmp)"; else echo "   $3: DIFFERS ($(cmp "$1" "$2" 2>&1 | head -n 1))"; fi; }
g() { echo "$OUT/$1.out/qwen3-1.7b.gguf"; }
if [ "${CONV:-1}" != 0 ]; then
  # cmp, and where the files differ (the converter's metadata can hold a key dcpctl's lacks),
  # tensor by tensor and key by key.
  for t in f16 bf16 q8_0; do
    same "$(g "$t")" "$(g "conv_$t")" "dcpctl ${t^^} vs the converter's"
    cmp -s "$(g "$t")" "$(g "conv_$t")" ||
      { PYTHONPATH="$llama/gguf-py" "$PY" "$ROOT/bench/gguf_check.py" "$(g "$t")" "$(g "conv_$t")" || true; } | sed 's/^/     /'
  done
  for t in $KQ; do
    echo "   dcpctl ${t^^} vs llama-quantize --pure ${t^^} of the converter's BF16, tensor by tensor (bench/gguf_check.py):"
    { PYTHONPATH="$llama/gguf-py" "$PY" "$ROOT/bench/gguf_check.py" "$(g "$t")" "$(g "lq_$t")" || true; } | sed 's/^/     /'
  done
fi
[ "${KEEP:-0}" = 1 ] || rm -rf "$OUT"
