#!/usr/bin/env bash
# Benchmark: one dcpctl binary against another (BASE, e.g. main's) on the compressed-tensors and
# ModelOpt encoders, side by side in one run (issue 59 item 2): for each codec, ROUNDS rounds, each
# running BASE then DCPCTL on the same folder (the 2.79 GB float32 Qwen3 that bench/quantize_ct.sh
# makes and keeps), each under /usr/bin/time (wall, user and sys CPU-s, max RSS); after the first
# round every output file of the two binaries is compared with cmp (dcpctl-manifest.json included:
# both write to the same OUT path, so it holds the same source and output names). The page cache is
# not dropped: both binaries see the same warm source. CPU seconds are the steadier figure on a
# loaded machine.
#
#   BASE=/path/to/main/dcpctl DCPCTL=build/cmd/dcpctl bench/quantize_ct_ab.sh [WORKDIR]
#     (default WORKDIR /tmp/dcpctl-bench-quantize, its src/ made by bench/quantize_ct.sh or
#      bench/quantize_peer.py make; ~3 GB free for two outputs)
#
# Environment: ROUNDS (default 2), CODECS (default: plain, fp8-dynamic, nvfp4 in both forms, mxfp8,
# mxfp4 in compressed-tensors' form; ',' joins a word to its flags, e.g. "nvfp4,--quantize-format,modelopt").
set -uo pipefail
work=${1:-/tmp/dcpctl-bench-quantize}
src=$work/src
root=$(cd "$(dirname "$0")/.." && pwd)
dcpctl=${DCPCTL:-$root/build/cmd/dcpctl}
base=${BASE:?BASE: the dcpctl binary to compare against (e.g. a copy of main build/cmd/dcpctl)}
[ -f "$src/config.json" ] || { echo "no model in $src: run bench/quantize_ct.sh first" >&2; exit 2; }
# shellcheck disable=SC2206  # CODECS is a list of words, as quantize_ct.sh takes it
codecs=(${CODECS:-plain fp8-dynamic nvfp4 nvfp4,--quantize-format,modelopt mxfp8 mxfp4,--quantize-format,compressed-tensors})
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); base $("$base" --version | head -n 1); dcpctl $("$dcpctl" --version | head -n 1)"
status=0
for spec in "${codecs[@]}"; do
  flags=()
  # shellcheck disable=SC2206  # the flags, split at the commas
  [ "$spec" = plain ] || flags=(--quantize ${spec//,/ })
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for who in base dcpctl; do
      bin=$base; [ $who = dcpctl ] && bin=$dcpctl
      out=$work/out-ab-$who
      rm -rf "$out"; sync
      /usr/bin/time -f "$spec $who round $round: wall %e s, user %U s, sys %S s, max RSS %M KiB" \
        "$bin" consolidate "$src" -o "$work/out-ab/" "${flags[@]}" -q 2>&1 | tail -n 1
      rm -rf "$out"; mv "$work/out-ab" "$out"
    done
    if [ "$round" = 1 ]; then
      files=$(cd "$work/out-ab-base" && find . -type f | sort)
      if [ "$files" != "$(cd "$work/out-ab-dcpctl" && find . -type f | sort)" ]; then
        echo "$spec: DIFFERENT FILE LISTS"; status=1
      fi
      n=0 bad=0
      for f in $files; do
        n=$((n + 1))
        cmp -s "$work/out-ab-base/$f" "$work/out-ab-dcpctl/$f" || { bad=$((bad + 1)); echo "$spec: $f DIFFERS"; status=1; }
      done
      echo "$spec: $n files compared, $bad differ"
    fi
  done
done
rm -rf "$work/out-ab-base" "$work/out-ab-dcpctl"
echo "== load after $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
