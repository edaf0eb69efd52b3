#!/usr/bin/env bash
# CTest fuzz-*-smoke: runs one libFuzzer target for a bounded time on its seed corpus. The tests
# exist only in a tree that builds the targets (the clang sanitizer tree, tests/CMakeLists.txt); a
# missing binary skips (77) on a developer's machine and fails under CI=true or DCPCTL_REQUIRE_VENV=1.
# usage: smoke.sh FUZZ_BINARY CORPUS_DIR [SECONDS]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../skip.sh"
source "$(dirname "${BASH_SOURCE[0]}")/../ledger.sh"
bin=$1 corpus=$2 secs=${3:-60}
if [ ! -x "$bin" ]; then
  skip_or_fail "no fuzz build at $bin (tools/fuzz.sh --build makes one with clang; tools/dev.sh test runs it)"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # crash-* artifacts land here and are printed below
# -timeout is libFuzzer's per-input hang guard, on the wall clock (SIGALRM): inputs take
# microseconds to milliseconds instrumented, so 60 s is far above what a loaded machine adds.
if "$bin" "$work" "$corpus" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=60 -print_final_stats=1 \
  >"$work/log" 2>&1; then
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)|^Done" "$work/log"
  # a check per input the target ran without a crash, a leak or a hang: libFuzzer's own count
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)
  [ "${runs:-0}" -gt 0 ] || { echo "FAIL: $bin ran no input (no stat::number_of_executed_units)" >&2; exit 1; }
  if [ -n "$LEDGER_FILE" ]; then echo "checks $runs ${bin##*/}: inputs run clean" >>"$LEDGER_FILE"; fi
  exit 0
fi
tail -n 60 "$work/log"
for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
  [ -e "$f" ] && { echo "reproducer $f:"; od -A d -t x1 "$f" | head -n 20; }
done
exit 1
