#!/usr/bin/env bash
# tools/gpu-offline.sh: tools/gpu-check.sh on a GPU machine that has no network, CUDA torch, the CUDA
# toolkit, a compiler and CMake, but not the build's Debian packages (the GPU machines lent to this
# project: Ubuntu 24.04, torch 2.11.0+cu130 in python3, nvcc 13.0). Two steps:
#
#   tools/gpu-offline.sh fetch          here, with Debian's apt: the build's packages (headers, their
#                                       libraries, pkgconf) downloaded as .debs into .gpu-debs/
#                                       (git-ignored; ~8 MB)
#   tools/gpu-offline.sh check [ARGS]   there, in the repository root with .gpu-debs/ and .deps/
#                                       carried along: the .debs unpacked under $SYS (not over /),
#                                       build/ configured against them and that machine's python3
#                                       torch, then tools/gpu-check.sh ARGS (its outputs in
#                                       /tmp/gc); report.txt and gc.tgz (every log) land in $OUT
#
# dcpctl links libcrypto, libz, libzstd, libexpat, libsentencepiece, libutf8proc and libonig from $SYS (a RUNPATH
# there), so nothing the machine's own programs load is replaced. Environment: SYS (default /tmp/dcpctl-sys), PY (a Python
# whose torch has CUDA; default python3), BUILD (default build), OUT (default /tmp/gpu-offline).
# Exit: gpu-check.sh's, or 1 when unpacking or configuring failed (configure.log in $OUT), 2 usage.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
debs=$root/.gpu-debs
packages=(nlohmann-json3-dev libcli11-dev catch2 libzstd-dev libzstd1 zlib1g-dev zlib1g libssl-dev libssl3
  libexpat1-dev libexpat1 libcurl4-openssl-dev libsentencepiece-dev libsentencepiece0 libutf8proc-dev libutf8proc2
  libonig-dev libonig5 pkgconf pkgconf-bin libpkgconf3)

case ${1:-} in
  fetch)
    mkdir -p "$debs" && cd "$debs" || exit 1
    apt-get download "${packages[@]}" || { echo "gpu-offline.sh: apt-get download failed (apt-get update first?)" >&2; exit 1; }
    echo "gpu-offline.sh: $(find . -name '*.deb' | wc -l) packages in $debs ($(du -sh . | cut -f1)); carry .gpu-debs and .deps"
    exit 0 ;;
  check) shift ;;
  *) sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; exit $((2 * $?)) ;;
esac

out=${OUT:-/tmp/gpu-offline}
SYS=${SYS:-/tmp/dcpctl-sys}
PY=${PY:-$(command -v python3)}
BUILD=${BUILD:-build}
mkdir -p "$out" "$SYS"
compgen -G "$debs/*.deb" >/dev/null || { echo "gpu-offline.sh: no .debs in $debs: run 'tools/gpu-offline.sh fetch' where apt works, and carry .gpu-debs" >&2; exit 1; }
echo "== $(date -u +%FT%TZ) $(hostname), $(nproc) cores, $(. /etc/os-release && echo "$PRETTY_NAME")"
[ -d /usr/local/cuda/bin ] && export PATH=$PATH:/usr/local/cuda/bin
for t in g++ cmake nvcc; do command -v "$t" >/dev/null || { echo "gpu-offline.sh: no $t here" >&2; exit 1; }; done
"$PY" -c 'import torch as t; print("torch", t.__version__, "CUDA", t.version.cuda, "available", t.cuda.is_available())' || exit 1
for d in "$debs"/*.deb; do dpkg -x "$d" "$SYS" || exit 1; done
# Absolute links (zlib1g-dev's libz.so -> /lib/...) would reach the machine's own files: point them into $SYS.
find "$SYS" -type l | while read -r l; do
  t=$(readlink "$l")
  case $t in /*) ln -sfn "$SYS$t" "$l" ;; esac
done
lib=$SYS/usr/lib/x86_64-linux-gnu
cat >"$SYS/pkg-config" <<PC
#!/bin/sh
PKG_CONFIG_LIBDIR=$lib/pkgconfig:$SYS/usr/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$SYS LD_LIBRARY_PATH=$lib exec $SYS/usr/bin/pkgconf "\$@"
PC
chmod +x "$SYS/pkg-config"
export CPATH=$SYS/usr/include/x86_64-linux-gnu  # Debian's multiarch headers (curl, openssl's configuration.h)
t0=$SECONDS
if ! cmake -S "$root" -B "$root/$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDCPCTL_PYTHON="$PY" \
  -DCMAKE_PREFIX_PATH="$SYS/usr" -DCatch2_DIR="$SYS/usr/lib/cmake/Catch2" -DPKG_CONFIG_EXECUTABLE="$SYS/pkg-config" \
  -DOPENSSL_ROOT_DIR="$SYS/usr" -DCMAKE_BUILD_RPATH="$lib;$SYS/lib/x86_64-linux-gnu" >"$out/configure.log" 2>&1; then
  tail -n 40 "$out/configure.log"
  echo "gpu-offline.sh: configuring failed (configure.log)" >&2
  exit 1
fi
echo "== configured in $((SECONDS - t0)) s: $(grep -h 'dcpctl: LibTorch\|dcpctl: NCCL' "$out/configure.log" | paste -sd ';')"
rm -rf /tmp/gc
bash "$root/tools/gpu-check.sh" --python "$PY" --build "$root/$BUILD" --out /tmp/gc "$@"
rc=$?
cp /tmp/gc/report.txt "$out/report.txt" 2>/dev/null
tar -C /tmp -czf "$out/gc.tgz" gc 2>/dev/null
echo "gpu-offline.sh: gpu-check exit $rc; $out/report.txt, $out/gc.tgz"
exit $rc
