#!/usr/bin/env bash
# Builds the libFuzzer target (clang, ASan+UBSan, no LibTorch) in build-fuzz/ and runs it.
#
#   tools/fuzz.sh [SECONDS]     fuzz fuzz_metadata for SECONDS (default 300) on all cores
#   tools/fuzz.sh --build       only build it (tools/dev.sh test does, for the CTest smoke run)
#
# New inputs go to build-fuzz/corpus-work (tests/fuzz/corpus holds the committed seeds and is only
# read); crashes are written as build-fuzz/crash-*. Needs Debian's clang and libclang-rt-14-dev.
# Environment: DCPCTL_JOBS (parallel fuzzing jobs, default nproc), DCPCTL_FUZZ_RSS_MB (default 2048).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_ONLY=0
[ "${1:-}" = --build ] && BUILD_ONLY=1 && shift
SECONDS_TO_RUN=${1:-300}
JOBS=${DCPCTL_JOBS:-$(nproc)}
BUILD=$ROOT/build-fuzz

command -v clang++ >/dev/null || { echo "tools/fuzz.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -DDCPCTL_FUZZ_ONLY=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
if [ "$BUILD_ONLY" = 1 ]; then
  cmake --build "$BUILD" -j"$JOBS"  # every fuzz target
  exit 0
fi
cmake --build "$BUILD" -j"$JOBS" --target fuzz_metadata

mkdir -p "$BUILD/corpus-work"
cd "$BUILD"
args=("$BUILD/corpus-work" "$ROOT/tests/fuzz/corpus" -max_total_time="$SECONDS_TO_RUN"
  -rss_limit_mb="${DCPCTL_FUZZ_RSS_MB:-2048}" -timeout=10 -print_final_stats=1)
if [ "$JOBS" -gt 1 ]; then
  # -fork keeps one corpus and stops at the first crash, like a single process.
  args+=(-fork="$JOBS")
fi
exec "$BUILD/tests/fuzz/fuzz_metadata" "${args[@]}"
