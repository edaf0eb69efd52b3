#!/usr/bin/env bash
# dcpctl's CRC-32 (src/util/crc32.cpp) against zlib's crc32_z, side by side on one 256 MiB buffer
# in one run (bench/crc32_ab.cpp), compiled as the tree compiles it (-O2). Issue 78 item 6: zlib's
# unless the hand one is faster. Usage: bench/crc32.sh [MiB] [rounds]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
${CXX:-g++} -std=c++17 -O2 -I"$root/src" "$root/bench/crc32_ab.cpp" "$root/src/util/crc32.cpp" -lz -o "$out/crc32_ab"
echo "zlib $(dpkg-query -W -f='${Version}' zlib1g 2>/dev/null || echo '?'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
"$out/crc32_ab" "${1:-256}" "${2:-7}"
