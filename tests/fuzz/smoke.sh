#!/usr/bin/env bash
# CTest fuzz-metadata-smoke: runs the libFuzzer target for a bounded time on the seed corpus.
# Skips (77) when there is no fuzz build (tools/fuzz.sh makes one with clang).
# usage: smoke.sh FUZZ_BINARY CORPUS_DIR [SECONDS]
set -euo pipefail
bin=$1 corpus=$2 secs=${3:-60}
if [ ! -x "$bin" ]; then
  echo "skipped: no fuzz build at $bin (run tools/fuzz.sh, or configure build-fuzz with CC=clang CXX=clang++ -DDCPCTL_FUZZ_ONLY=ON)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # crash-* artifacts land here and are printed below
if "$bin" "$work" "$corpus" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
  >"$work/log" 2>&1; then
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)|^Done" "$work/log"
  exit 0
fi
tail -n 60 "$work/log"
for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
  [ -e "$f" ] && { echo "reproducer $f:"; od -A d -t x1 "$f" | head -n 20; }
done
exit 1
