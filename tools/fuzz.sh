#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) in build-fuzz/ and runs one of them.
#
#   tools/fuzz.sh [TARGET] [SECONDS]   fuzz TARGET (default fuzz_metadata) for SECONDS (default 300)
#   tools/fuzz.sh --build              only build them all
# (CTest's smoke runs use the same targets built in the sanitizer tree, build-asan: tools/dev.sh test.)
#   tools/fuzz.sh --list               the targets and their seed corpora
#
# Targets (tests/fuzz): fuzz_metadata (.metadata and any pickle), fuzz_safetensors_header,
# fuzz_tensor_pickle (data.pkl -> tensor rebuild), fuzz_zstd (zstd-framed items, against libzstd's
# one-shot decoder), fuzz_pickle_roundtrip (pickle writer -> VM), fuzz_item (a whole item: zstd,
# the torch.save zip's directory and records, data.pkl, the strided copy).
# New inputs go to build-fuzz/corpus-work-TARGET (the committed seeds under tests/fuzz are only
# read); crashes are written as build-fuzz/crash-*. Needs Debian's clang and libclang-rt-14-dev.
# Environment: DCPCTL_JOBS (parallel fuzzing jobs, default nproc), DCPCTL_FUZZ_RSS_MB (default 2048).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build-fuzz
declare -A CORPUS=(
  [fuzz_metadata]=corpus [fuzz_tensor_pickle]=corpus [fuzz_pickle_roundtrip]=corpus
  [fuzz_safetensors_header]=corpus_safetensors [fuzz_zstd]=corpus_zstd [fuzz_item]=corpus_item [fuzz_gguf]=corpus_gguf)
if [ "${1:-}" = --list ]; then
  for t in "${!CORPUS[@]}"; do echo "$t tests/fuzz/${CORPUS[$t]}"; done | sort
  exit 0
fi
BUILD_ONLY=0
[ "${1:-}" = --build ] && BUILD_ONLY=1 && shift
TARGET=fuzz_metadata
if [ -n "${1:-}" ] && [[ ! "$1" =~ ^[0-9]+$ ]]; then TARGET=$1; shift; fi
[ -n "${CORPUS[$TARGET]:-}" ] || { echo "tools/fuzz.sh: unknown target $TARGET (see --list)" >&2; exit 2; }
SECONDS_TO_RUN=${1:-300}
JOBS=${DCPCTL_JOBS:-$(nproc)}

command -v clang++ >/dev/null || { echo "tools/fuzz.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -DDCPCTL_FUZZ_ONLY=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
if [ "$BUILD_ONLY" = 1 ]; then
  cmake --build "$BUILD" -j"$JOBS"  # every fuzz target
  exit 0
fi
cmake --build "$BUILD" -j"$JOBS" --target "$TARGET"

WORK=$BUILD/corpus-work-$TARGET
[ "$TARGET" = fuzz_metadata ] && WORK=$BUILD/corpus-work  # where earlier campaigns left theirs
mkdir -p "$WORK"
cd "$BUILD"
args=("$WORK" "$ROOT/tests/fuzz/${CORPUS[$TARGET]}" -max_total_time="$SECONDS_TO_RUN"
  -rss_limit_mb="${DCPCTL_FUZZ_RSS_MB:-2048}" -timeout=10 -print_final_stats=1)
if [ "$JOBS" -gt 1 ]; then
  # -fork keeps one corpus and stops at the first crash, like a single process.
  args+=(-fork="$JOBS")
fi
exec "$BUILD/tests/fuzz/$TARGET" "${args[@]}"
