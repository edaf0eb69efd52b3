#!/usr/bin/env bash
# A GGUF of a real-sized model at the DEFAULT --max-memory (issue 82 item 3): Qwen3-1.7B's
# config.json as released (1.72 B parameters, its 151,936 x 2,048 embedding tied to the head,
# bfloat16), random weights saved by transformers, converted by
#   consolidate MODEL -o x.gguf --outtype q8_0      and      --outtype f16
# beside the plain `consolidate MODEL -o x.safetensors` export of the same model, in the same run,
# each under /usr/bin/time -v: wall time and peak RSS. The GGUF writer converts a tensor a window
# of whole rows at a time (src/gguf/rows.h); before, the embedding alone needed 2.2 GB at q8_0 and
# was refused (exit 5). The target: peak RSS <= 1.5 GiB.
#
#   bench/gguf_rows.sh [DCPCTL]      (default build/cmd/dcpctl)
#
# The model is made once under $DCPCTL_BENCH_DIR (default /tmp/dcpctl-gguf-rows; about 3.5 GB) and
# kept: its tokenizer is Qwen2's rebuilt from llama.cpp's vocabulary (tools/gguf_oracle.py: what
# dcpctl's GGUF path writes today; Qwen's released tokenizer.json has an NFC normalizer that it does
# not yet, issue 82 item 1). One run of each, not a sweep: the machine is shared.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DCPCTL=$(realpath "${1:-$ROOT/build/cmd/dcpctl}")
DIR=${DCPCTL_BENCH_DIR:-/tmp/dcpctl-gguf-rows}
MODEL=$DIR/qwen3-1.7b
OUT=$DIR/out
[ -x /usr/bin/time ] || { echo "gguf_rows.sh: needs GNU time (/usr/bin/time; Debian's time package)" >&2; exit 1; }

"$ROOT/bench/make_qwen3_model.sh" "$MODEL"

rm -rf "$OUT"
mkdir -p "$OUT"
printf '%-34s %9s %12s\n' "run" "wall s" "peak RSS MiB"
run() {  # run NAME ARGS...
  local name=$1
  shift
  /usr/bin/time -v -o "$OUT/time.txt" "$DCPCTL" consolidate "$MODEL" -q "$@" >/dev/null
  local wall rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, t, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + t[i]; print s}' "$OUT/time.txt")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$OUT/time.txt")
  printf '%-34s %9.2f %12s\n' "$name" "$wall" "$rss"
  rm -rf "${OUT:?}"/x.*
}
run "plain -o x.safetensors" -o "$OUT/x.safetensors"
run "-o x.gguf --outtype q8_0" -o "$OUT/x.gguf" --outtype q8_0
run "-o x.gguf --outtype f16" -o "$OUT/x.gguf" --outtype f16
rm -rf "$OUT"
