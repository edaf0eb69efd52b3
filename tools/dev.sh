#!/usr/bin/env bash
# dcpctl's one entry point for a fresh machine. Every step is idempotent and quick the second time.
#
#   tools/dev.sh demo       set up what the binary needs (no test tools, no LibTorch), build
#                           dcpctl, run it on the bundled sample
#   tools/dev.sh test       set up, build, run the whole test suite (CTest), then build the clang
#                           ASan+UBSan tree (build-asan, which also holds the libFuzzer targets)
#                           and run its pass; what .ci/run runs
#   tools/dev.sh test-fast  set up, build, run the fast tier only (ctest -L fast, a few minutes)
#   tools/dev.sh tsan       ThreadSanitizer build (build-tsan/): the threaded unit tests (chunk
#                           exchange, memory gate, window reader, CRC ledger, hash pipeline), torchrun consolidates and a
#                           threaded reshard (tests/dist/tsan_consolidate.sh); not in `test`
#   tools/dev.sh setup      only install what is missing (Debian packages, the Python virtualenv,
#                           .venv-megatron: megatron-core 0.19.2 for the megatron-load test)
#   tools/dev.sh build      setup + build (build/)
#   tools/dev.sh format     clang-format 14 over every C++ source (the format-lint test checks it)
#
# Environment: DCPCTL_JOBS (parallel jobs, default nproc), DCPCTL_SKIP_ASAN=1 (test without the
# sanitizer pass, and so without the fuzz smoke runs), DCPCTL_LIBTORCH=system (use Debian's libtorch-dev instead of the PyPI wheel),
# CCACHE_DIR (the compiler cache every build shares, default ~/.cache/ccache; DCPCTL_CCACHE=0: none).
# test and test-fast export DCPCTL_REQUIRE_VENV=1 (not with DCPCTL_LIBTORCH=system): what set-up
# provides (the virtualenv, its torch, the Debian tools, the fuzz build) must be there, and a test
# that would skip for want of it fails instead (tests/skip.sh); so does CI=true. Only what the
# machine truly lacks (a GPU) still skips.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
JOBS=${DCPCTL_JOBS:-$(nproc)}
VENV=$ROOT/.venv
PY=$VENV/bin/python

# What building dcpctl's core takes (DEMO_PACKAGES, all `demo` installs on a fresh machine), what
# its modules take (MODULE_PACKAGES: the GGUF module's SentencePiece, utf8proc and Oniguruma, the
# object-store module's libcurl and expat), the virtualenv's, then what the tests use (Catch2: the
# unit tests, which the demo does not build).
DEMO_PACKAGES=(cmake g++ make pkg-config libcli11-dev nlohmann-json3-dev libzstd-dev zlib1g-dev libssl-dev ccache)
MODULE_PACKAGES=(libsentencepiece-dev libutf8proc-dev libonig-dev libcurl4-openssl-dev libexpat1-dev)
# The modules' options (src/CMakeLists.txt, "the modules"): on for every tree but a fresh demo's.
MODULES=(GGUF OBJSTORE TORCH_CHECKPOINTING LORA)
VENV_PACKAGES=(python3 python3-venv)
# chromium + chromium-driver: report --html opened in a real browser (tests/browser/report_page_test.py;
# 26 packages, 131 MB downloaded, 348 MB installed, ~20 s to install on the 2-core VM).
APT_PACKAGES=("${DEMO_PACKAGES[@]}" "${MODULE_PACKAGES[@]}" "${VENV_PACKAGES[@]}" catch2 mandoc shellcheck zsh fish time util-linux-extra clang-format
  chromium chromium-driver)
# The sanitizer tree of `test` (build-asan, with the libFuzzer targets) and tools/fuzz.sh: Debian
# 12's clang 14 and its runtime libraries.
FUZZ_PACKAGES=(clang libclang-rt-14-dev)

log() { printf '\033[1m==> [%s] %s\033[0m\n' "$(date +%T)" "$*" >&2; }

setup_apt() {  # setup_apt [extra packages...]; SETUP_PACKAGES names the base set (default APT_PACKAGES)
  local missing=() p base=("${APT_PACKAGES[@]}")
  [ "${SETUP_PACKAGES:-}" = demo ] && base=("${DEMO_PACKAGES[@]}")
  for p in "${base[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${DCPCTL_LIBTORCH:-wheel}" = system ]; then
    dpkg-query -W -f='${Status}' libtorch-dev 2>/dev/null | grep -q "install ok installed" || missing+=(libtorch-dev)
  fi
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Packages go into a virtualenv through uv (PyPI's `uv`, pinned here, installed into that
# virtualenv first by pip): it resolves as pip does and links the files from its cache (~/.cache/uv)
# instead of unpacking each wheel again, so a fresh clone's virtualenvs take seconds, not the
# minutes pip spends unpacking torch into each (3 s against about 4 min for .venv, measured
# 2026-11-25). Where uv cannot be installed, pip does it all.
# --compile-bytecode: uv, unlike pip, writes no .pyc files, and with PYTHONDONTWRITEBYTECODE=1 in
# the environment (as on this project's machines) no test writes them either, so every Python
# process of a fresh clone compiled each module it imported again: about 4.5 s of CPU for torch and
# transformers, 1 s for torch alone. Compiled once here (about 15 s more of set-up under a load of
# 9), lora-peft took 17.7 s of CPU against 37.0 s, reshard-load-b 10.1 against 22.2, layouts-cases
# 22.1 against 29.3 (2026-11-28, the same venv compiled or not). Not for `demo` (PIP_BYTECODE=0),
# which runs no Python.
UV_VERSION=0.13.9
pip_install() {  # pip_install PYTHON pip-args...: into PYTHON's virtualenv
  local py=$1 bytecode=(--compile-bytecode)
  shift
  [ "${PIP_BYTECODE:-1}" = 1 ] || bytecode=()
  if "$py" -m pip install -q "uv==$UV_VERSION" >/dev/null 2>&1 && [ -x "$(dirname "$py")/uv" ]; then
    "$(dirname "$py")/uv" pip install -q "${bytecode[@]}" --python "$py" "$@"
  else
    "$py" -m pip install -q "$@"
  fi
}

# setup_venv [demo]: the virtualenv with tools/requirements.txt (what the tests need); with
# `demo`, only tools/requirements-demo.txt (LibTorch for the build, without torch's dependencies),
# unless the whole set is there already. The marker file holds the hash of what was installed.
setup_venv() {
  local full demo have=""
  full=$(sha256sum tools/requirements.txt | cut -d' ' -f1)
  demo=$(sha256sum tools/requirements-demo.txt | cut -d' ' -f1)
  [ -f "$VENV/.dcpctl-requirements" ] && have=$(cat "$VENV/.dcpctl-requirements")
  [ -x "$PY" ] && { [ "$have" = "$full" ] || { [ "${1:-}" = demo ] && [ "$have" = "$demo" ]; }; } && return 0
  [ -x "$PY" ] || python3 -m venv "$VENV"
  if [ "${1:-}" = demo ]; then
    log "creating the Python virtualenv (.venv) with LibTorch only (the pinned torch wheel, no dependencies)"
    PIP_BYTECODE=0 pip_install "$PY" --no-deps -r tools/requirements-demo.txt
    echo "$demo" >"$VENV/.dcpctl-requirements"
    return 0
  fi
  log "creating the Python virtualenv (.venv) with pinned torch, safetensors, numpy and the test servers"
  "$PY" -m pip install -q --upgrade pip  # tests/install's pip build wants a current pip
  pip_install "$PY" -r tools/requirements.txt
  if [ "$have" = "$demo" ]; then  # uv compiles only what it installs: the demo's torch, installed without
    "$PY" -m compileall -q -j 0 "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
      >/dev/null 2>&1 || true     # (a few files of some packages do not compile, on purpose)
  fi
  echo "$full" >"$VENV/.dcpctl-requirements"
}

# llama.cpp's converter, the oracle of the GGUF output (tests/interop/gguf_test.py): the pinned
# llama-cpp-python sdist, downloaded once into ~/.cache/dcpctl and checked by its SHA-256.
setup_gguf_oracle() {
  "$PY" tools/gguf_oracle.py fetch >/dev/null
}

# llama.cpp itself, the load and logits oracle of the GGUF output (tests/interop/gguf_llama_test.py)
# and of the quantizers (ggml's own reference functions): llama-cpp-python 0.3.36 built from that
# sdist, CPU only with portable flags, once (tools/gguf_oracle.py build keeps the wheel and its
# install under ~/.cache/dcpctl, keyed by the sdist's SHA-256 and the flags; the next run finds them
# and costs nothing: 0.5 s). The first build took 614 s of CPU (88 min of wall time with one job,
# the 2 cores shared with five other builds; docs/gguf.md). Only `test` needs it.
setup_llama_cpp() {
  "$PY" -c 'import sys; sys.path.insert(0, "tools"); import gguf_oracle; sys.exit(0 if (gguf_oracle.build_dir() / "built").exists() else 1)' &&
    return 0
  log "building llama-cpp-python 0.3.36 from its sdist (CPU, portable; once, kept in ~/.cache/dcpctl)"
  DCPCTL_LLAMA_JOBS=${DCPCTL_LLAMA_JOBS:-$JOBS} "$PY" tools/gguf_oracle.py build >/dev/null
}

# The older torch releases that the interop tests load dcpctl's outputs with
# (DCPCTL_OLD_TORCH_PYTHON, a colon-separated list of interpreters), so that what dcpctl writes is
# checked against the releases users still run, not only the pinned one: torch 2.14.1
# (tools/requirements-torch214.txt: the last release before 2.15's 6-tuple TensorProperties, so
# the one that refuses 2.15's .metadata) and torch 2.6.0 (tools/requirements-old-torch.txt).
# Only `test` needs them.
OLD_VENVS=("$ROOT/.venv-torch214:tools/requirements-torch214.txt:2.14." "$ROOT/.venv-torch26:tools/requirements-old-torch.txt:2.6.")
setup_old_torch() {
  local spec dir req ver want have
  for spec in "${OLD_VENVS[@]}"; do
    IFS=: read -r dir req ver <<<"$spec"
    want=$(sha256sum "$req" | cut -d' ' -f1)
    have=""
    [ -f "$dir/.dcpctl-requirements" ] && have=$(cat "$dir/.dcpctl-requirements")
    [ "$want" = "$have" ] && [ -x "$dir/bin/python" ] && continue
    log "creating the older-torch virtualenv ($(basename "$dir"): torch ${ver}x) for the interop tests"
    [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
    pip_install "$dir/bin/python" -r "$req"
    "$dir/bin/python" -c "import torch; assert torch.__version__.startswith('$ver'), torch.__version__"
    echo "$want" >"$dir/.dcpctl-requirements"
  done
}
old_torch_pythons() {  # the interpreters of OLD_VENVS, colon-separated, newest first
  local spec dir out=""
  for spec in "${OLD_VENVS[@]}"; do
    dir=${spec%%:*}
    out="${out:+$out:}$dir/bin/python"
  done
  printf '%s' "$out"
}

# megatron-core for the megatron-load test (tools/requirements-megatron.txt): .venv-megatron, a
# second virtualenv that sees .venv's packages (torch pinned as there) through a .pth file, with
# megatron-core 0.19.2 built from its sdist (it declares Python >= 3.12; --ignore-requires-python,
# --no-deps so nothing in .venv is replaced). uv cannot: it will not install a wheel built for 3.11
# under --python-version 3.12 and does not see the .pth'd torch, so this is pip, whose wheel cache
# keeps the sdist build (about 45 s warm on a busy 2-core machine, 100 s cold).
MEGATRON_VENV=$ROOT/.venv-megatron
setup_megatron() {
  local req=tools/requirements-megatron.txt want have="" mpy=$MEGATRON_VENV/bin/python
  want=$(sha256sum "$req" | cut -d' ' -f1)
  [ -f "$MEGATRON_VENV/.dcpctl-requirements" ] && have=$(cat "$MEGATRON_VENV/.dcpctl-requirements")
  [ "$want" = "$have" ] && [ -x "$mpy" ] && return 0
  log "creating the megatron-core virtualenv (.venv-megatron: megatron-core 0.19.2 from its sdist, .venv's torch)"
  rm -rf "$MEGATRON_VENV"
  python3 -m venv "$MEGATRON_VENV"
  "$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
    >"$("$mpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_dcpctl_venv.pth"
  # Built outside the repository: megatron-core's build appends the git commit of the directory it
  # is built in to its version ("0.19.2+a7ab040"), and pip's cache then keeps that wheel.
  (cd "$(mktemp -d)" && "$mpy" -m pip install -q --no-deps --ignore-requires-python --no-binary megatron-core -r "$ROOT/$req")
  "$mpy" -W ignore -c 'import megatron.core, torch, sys; v = megatron.core.__version__; assert v.split("+")[0] == "0.19.2", v' ||
    { echo "dev.sh: .venv-megatron does not import megatron-core 0.19.2" >&2; return 1; }
  echo "$want" >"$MEGATRON_VENV/.dcpctl-requirements"
}

# Gloo's headers: the torch wheel carries Gloo compiled into libtorch_cpu and c10d's
# ProcessGroupGloo.hpp, but not the Gloo headers that header includes. Debian's libgloo-dev
# provides them; only the headers are unpacked (into .deps/gloo, nothing installed system-wide).
setup_gloo() {
  local dest=$ROOT/.deps/gloo
  [ -f "$dest/include/gloo/rendezvous/store.h" ] && return 0
  log "unpacking Gloo headers from Debian's libgloo-dev into .deps/gloo"
  local tmp
  tmp=$(mktemp -d)
  if ! (cd "$tmp" && apt-get download libgloo-dev >/dev/null 2>&1); then
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    "${sudo[@]}" apt-get update -qq
    (cd "$tmp" && apt-get download libgloo-dev >/dev/null 2>&1)
  fi
  dpkg-deb -x "$tmp"/libgloo-dev_*.deb "$tmp/x"
  mkdir -p "$dest/include"
  rm -rf "$dest/include/gloo"
  cp -r "$tmp/x/usr/include/gloo" "$dest/include/"
  rm -rf "$tmp"
}

setup() {  # setup [extra Debian packages...]
  setup_apt "$@"
  setup_venv
  setup_gguf_oracle
  setup_megatron
  setup_gloo
  use_ccache
}

# ccache in front of every compiler of every build (build/, build-asan/, build-fuzz/, the pip
# test's build-pip-test/, build-tsan/): CMake takes CMAKE_<LANG>_COMPILER_LAUNCHER from the environment.
# Paths under the checkout are hashed relative to it (CCACHE_BASEDIR, and no working directory in
# the hash: debug info then names sources relative to the build), so a fresh clone elsewhere hits
# what an earlier one compiled. A cold cache costs what no cache costs.
use_ccache() {
  [ "${DCPCTL_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null || return 0
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR=$ROOT CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-16G}
  export CCACHE_DIR=${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ccache}
}

# configure <build dir> [cmake args...]: once, and again when the tree was configured with
# LibTorch and is wanted without, or the reverse (WITH_TORCH, ON unless the demo says OFF), or
# when a -DNAME=VALUE argument differs from the tree's cache.
configure() {
  local dir=$1
  shift
  local with_torch=${WITH_TORCH:-ON}
  local torch_args=(-DDCPCTL_PYTHON="$PY")
  if [ "${DCPCTL_LIBTORCH:-wheel}" = system ] || [ "$with_torch" = OFF ]; then torch_args=(); fi
  local again=0 arg
  [ -f "$dir/CMakeCache.txt" ] && grep -q "^DCPCTL_WITH_TORCH:BOOL=$with_torch\$" "$dir/CMakeCache.txt" || again=1
  for arg in "$@"; do
    [[ $arg =~ ^-D([A-Za-z0-9_]+)=(.*)$ ]] || continue
    grep -qxF "${BASH_REMATCH[1]}:BOOL=${BASH_REMATCH[2]}" "$dir/CMakeCache.txt" 2>/dev/null ||
      grep -qxF "${BASH_REMATCH[1]}:STRING=${BASH_REMATCH[2]}" "$dir/CMakeCache.txt" 2>/dev/null || again=1
  done
  if [ $again = 1 ]; then
    log "configuring $dir"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDCPCTL_WITH_TORCH="$with_torch" "${torch_args[@]}" "$@" >/dev/null
  fi
}

# -DDCPCTL_WITH_<MODULE>=ON|OFF for every module.
module_args() {
  local m
  for m in "${MODULES[@]}"; do echo "-DDCPCTL_WITH_$m=$1"; done
}

build() {  # build <build dir> [cmake args...]: with every module, and the Python module
  local dir=$1
  shift
  # The Python module whenever the virtualenv has nanobind (setup installs it): CMake decides
  # DCPCTL_WITH_PYTHON once, so a tree configured before nanobind was there would keep it OFF.
  # Not in a sanitizer tree, which builds no extension (CMakeLists.txt: an instrumented one would
  # not load into an uninstrumented Python).
  local python=()
  if [[ " $* " != *" -DDCPCTL_SANITIZE=ON "* && " $* " != *" -DDCPCTL_TSAN=ON "* ]]; then
    "$PY" -m nanobind --cmake_dir >/dev/null 2>&1 && python=(-DDCPCTL_WITH_PYTHON=ON)
  fi
  # shellcheck disable=SC2046  # one word per module
  configure "$dir" $(module_args ON) "${python[@]}" "$@"
  log "building $dir"
  cmake --build "$dir" -j "$JOBS"
}

# The sanitizer tree: clang, ASan+UBSan, and the libFuzzer targets (tests/fuzz, with their own
# coverage-instrumented copy of the parsers) built in it, so that there is no third tree to
# configure and build. clang compiles the sanitized tree in about half the CPU time GCC 12 takes
# (the same sanitizers; both runtimes are compiler-rt's). A build-asan configured otherwise (GCC,
# by an older dev.sh) is configured anew.
build_asan() {
  local dir=build-asan
  if [ -f "$dir/CMakeCache.txt" ] && ! grep -q '^DCPCTL_FUZZ:BOOL=ON$' "$dir/CMakeCache.txt"; then
    log "$dir is not the clang sanitizer+fuzz tree: configuring it anew"
    rm -rf "$dir"
  fi
  CC=clang CXX=clang++ build "$dir" -DDCPCTL_SANITIZE=ON -DDCPCTL_FUZZ=ON
}

run_tests() {  # run_tests <build dir> [ctest args...]
  local dir=$1
  shift
  log "testing $dir"
  # No test reaches the instance metadata service's link-local address: a run with no
  # credentials ends its chain at IMDS (objstore/aws_credentials.h), so the tests that want IMDS serve
  # it themselves on 127.0.0.1 (AWS_EC2_METADATA_SERVICE_ENDPOINT) and lift this.
  AWS_EC2_METADATA_DISABLED=${AWS_EC2_METADATA_DISABLED:-true} DCPCTL_VENV="$VENV" DCPCTL_MEGATRON_PYTHON="${DCPCTL_MEGATRON_PYTHON:-$MEGATRON_VENV/bin/python}" DCPCTL_OLD_TORCH_PYTHON="${DCPCTL_OLD_TORCH_PYTHON:-$(old_torch_pythons)}" \
    ctest --test-dir "$dir" --output-on-failure -j "$JOBS" "$@"
}

# The tests may not skip for want of what set-up provides (tests/skip.sh). With
# DCPCTL_LIBTORCH=system the build has no virtualenv torch, and its torch tests skip as documented.
require_venv() {
  [ "${DCPCTL_LIBTORCH:-wheel}" = system ] || export DCPCTL_REQUIRE_VENV=1
}

# What each step of `test` took, printed when it ends (passed or not), so that a CI log shows
# where its minutes went (docs/testing.md, "CI"): `lap NAME` closes the step begun at the
# previous lap (or at the start) under NAME, with its wall seconds and the CPU seconds of the
# processes it waited for.
LAPS=()
LAP_WALL=$SECONDS
LAP_CPU=0
cpu_seconds() {  # the CPU seconds (user + system) of this shell's children it has waited for
  # /proc/PID/stat's cutime and cstime (fields 16, 17, in clock ticks) of the shell itself: $$, not
  # the subshell a command substitution runs in.
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%d", ($16 + $17) / hz }' "/proc/$$/stat"
}
lap() {
  local cpu
  cpu=$(cpu_seconds)
  LAPS+=("$1|$((SECONDS - LAP_WALL))|$((cpu - LAP_CPU))")
  LAP_WALL=$SECONDS
  LAP_CPU=$cpu
}
report_laps() {
  local rc=$? l name wall cpu
  [ ${#LAPS[@]} -gt 0 ] || return $rc
  [ $rc -eq 0 ] || lap "(the step that failed)"
  printf '\n==> where the time went (wall s, CPU s of the processes waited for):\n' >&2
  for l in "${LAPS[@]}"; do
    IFS='|' read -r name wall cpu <<<"$l"
    printf '    %-36s %6s %7s\n' "$name" "$wall" "$cpu" >&2
  done
  printf '    %-36s %6s\n' total "$SECONDS" >&2
  return $rc
}

cmd=${1:-}
case "$cmd" in
  setup) setup ;;
  build)
    setup
    build build -DDCPCTL_UNIT_TESTS_IN_ALL=ON
    ;;
  demo)
    # Only what the binary needs: the Debian packages that build its core, and the dcpctl target
    # without the modules (GGUF, s3:// and gs://), which the demo does not run. No LibTorch:
    # dcpctl reads and writes torch.save archives itself and loads LibTorch's plugin only for a
    # torchrun rank, which the demo does not run either. A tree already configured (a
    # developer's) keeps what it has, LibTorch's plugin and the modules; `build`, `test` and
    # `pip install` add the rest either way.
    SETUP_PACKAGES=demo setup_apt
    with_torch=OFF
    modules=()
    # shellcheck disable=SC2207  # one word per module
    [ -f build/CMakeCache.txt ] || modules=($(module_args OFF))
    if [ -f build/CMakeCache.txt ]; then
      if grep -q '^DCPCTL_WITH_TORCH:BOOL=' build/CMakeCache.txt; then
        with_torch=$(sed -n 's/^DCPCTL_WITH_TORCH:BOOL=//p' build/CMakeCache.txt)
      elif grep -q '^Torch_DIR:' build/CMakeCache.txt; then
        with_torch=ON
      fi
    fi
    targets=(dcpctl)
    if [ "$with_torch" = ON ]; then
      SETUP_PACKAGES=demo setup_apt "${VENV_PACKAGES[@]}"
      setup_venv demo
      setup_gloo
      targets+=(dcpctl_torch)
    fi
    use_ccache
    WITH_TORCH=$with_torch configure build "${modules[@]}"
    log "building ${targets[*]}"
    cmake --build build -j "$JOBS" --target "${targets[@]}"
    sample=tests/fixtures/sample/ckpt
    mkdir -p out
    log "dcpctl inspect $sample"
    build/cmd/dcpctl inspect "$sample"
    log "dcpctl verify --deep $sample"
    build/cmd/dcpctl verify --deep "$sample"
    log "dcpctl consolidate $sample --select app.model -o out/sample-model.safetensors"
    build/cmd/dcpctl consolidate "$sample" --select app.model -o out/sample-model.safetensors --force
    log "dcpctl consolidate $sample -o out/sample.pt (the whole app state, as dcp_to_torch_save nests it)"
    build/cmd/dcpctl consolidate "$sample" -o out/sample.pt --force
    log "dcpctl reshard $sample -o out/sample-w3 --world-size 3 --dtype bf16"
    build/cmd/dcpctl reshard "$sample" -o out/sample-w3 --world-size 3 --dtype bf16 --force
    ;;
  test)
    trap report_laps EXIT
    require_venv
    setup "${FUZZ_PACKAGES[@]}"
    lap setup
    # The older-torch virtualenvs are mostly download and unpacking: made in the background while
    # llama.cpp and build/ compile, and waited for before the first test (their lap is the wait).
    old_torch_log=$(mktemp)
    setup_old_torch >"$old_torch_log" 2>&1 &
    old_torch_pid=$!
    setup_llama_cpp
    lap "setup: llama.cpp"
    # The unit tests run in the sanitizer pass only: build/ leaves their executable out then.
    unit_in_all=OFF
    [ "${DCPCTL_SKIP_ASAN:-0}" = 1 ] && unit_in_all=ON
    build build -DDCPCTL_UNIT_TESTS_IN_ALL=$unit_in_all
    lap "build build/"
    if ! wait "$old_torch_pid"; then
      cat "$old_torch_log" >&2
      echo "dev.sh: the older-torch virtualenvs were not made (above)" >&2
      exit 1
    fi
    cat "$old_torch_log" >&2
    rm -f "$old_torch_log"
    lap "setup: older torch (the wait)"
    if [ "${DCPCTL_SKIP_ASAN:-0}" = 1 ]; then
      run_tests build
      lap "tests: build/"
    else
      # What the sanitizer pass runs below runs there only: the write paths labelled sanitize,
      # checked by the same real torch, the damaged-items sweep (label instrumented), and every test
      # it runs whole (label asan in this tree too: tests/CMakeLists.txt). The every-byte
      # .metadata sweeps and the CRC flips (label sweep) run here, five times faster than
      # instrumented, and so does the whole of each test the sanitizer pass samples (--sanitized);
      # the sanitizer pass runs the strided sample of the same cuts and the fuzzers.
      # The sanitizer tree compiles meanwhile at the lowest priority (nice 19, in a process group
      # of its own so that a failed pass stops it): it takes the CPU the tests leave idle (their
      # waits on servers, subprocesses and each other), and the pass below waits for the rest.
      asan_log=$(mktemp)
      setsid -w nice -n 19 "$ROOT/tools/dev.sh" _build-asan >"$asan_log" 2>&1 &
      asan_pid=$!
      if ! run_tests build -LE 'instrumented|sanitize|asan'; then
        kill -- "-$asan_pid" 2>/dev/null || true
        exit 1
      fi
      lap "tests: build/ (first pass)"
      log "waiting for build-asan, compiled beside the first pass"
      if ! wait "$asan_pid"; then
        tail -n 100 "$asan_log" >&2
        echo "dev.sh: building build-asan failed (above)" >&2
        exit 1
      fi
      rm -f "$asan_log"
      lap "build build-asan/ (beyond the first pass)"
    fi
    if [ "${DCPCTL_SKIP_ASAN:-0}" != 1 ]; then
      # The sanitizer pass covers dcpctl's own code paths (unit, end-to-end, corruption, docs),
      # the fuzz smoke runs (the tree's libFuzzer targets, label fuzz), and the write paths of
      # the tests labelled "torch" (label "sanitize": consolidate, reshard, the torchrun
      # exchange), in one CTest run (label asan, tests/CMakeLists.txt: every test not labelled
      # torch, install or sweep, and the sanitize ones). The other torch tests repeat those paths
      # on more fixtures with more Python checks, and ran in the first pass; the install tests
      # check packaging.
      # intercept_tls_get_addr=0: LeakSanitizer (compiler-rt's code, in GCC 12 and clang 14 alike)
      # guesses the extent of dlopen'd libraries' dynamic TLS (the LibTorch plugin's) with a
      # glibc-2.19 heuristic that misfires on glibc 2.36 by address; its tracer then scans a bogus
      # range and dies with "Tracer caught signal 11" at exit, at random (google/sanitizers#1322;
      # seen in CI on e2e-cli-refusals, then a GCC build).
      export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1
      export LSAN_OPTIONS="suppressions=$ROOT/tests/corruption/lsan.supp:print_suppressions=0"
      run_tests build-asan -L '^asan$'
      lap "tests: build-asan/ (sanitizer pass)"
    fi
    ;;
  _build-asan)  # test's background build of the sanitizer tree (the environment is test's)
    build_asan
    ;;
  tsan)
    require_venv
    setup
    configure build-tsan -DDCPCTL_TSAN=ON
    log "building build-tsan (dcpctl, its LibTorch plugin, the unit tests)"
    cmake --build build-tsan -j "$JOBS" --target dcpctl dcpctl_torch unit_tests
    # LibTorch is not instrumented: what it synchronises internally (Gloo, the TCPStore) is
    # invisible to TSan, so reports from inside it are suppressed (tests/dist/tsan.supp); dcpctl's
    # own threads, buffers and gates are all instrumented.
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/tests/dist/tsan.supp"
    log "unit tests under TSan: the chunk exchange, the memory gate, the window reader, the CRC ledger"
    build-tsan/tests/unit_tests "[exchange],memory gate*,window*,ledger*,hash_streams*"
    log "torchrun consolidates under TSan"
    DCPCTL_VENV="$VENV" bash tests/dist/tsan_consolidate.sh build-tsan/cmd/dcpctl "$PY" tests/fixtures
    ;;
  format)
    # Debian 12's clang-format (14): another version formats some constructs otherwise.
    git -C "$ROOT" ls-files '*.cpp' '*.h' '*.cu' '*.hpp' | (cd "$ROOT" && xargs clang-format -i)
    ;;
  test-fast)
    require_venv
    setup
    build build -DDCPCTL_UNIT_TESTS_IN_ALL=ON
    run_tests build -L fast
    ;;
  *)
    sed -n '2,/^set -euo/{/^set -euo/d;p}' "$0" >&2
    exit 2
    ;;
esac
