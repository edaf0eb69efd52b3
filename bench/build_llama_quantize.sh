#!/usr/bin/env bash
# llama-quantize, the anchor of bench/gguf.sh's Q8_0 rows, built once from the llama.cpp that
# llama-cpp-python 0.3.36's sdist vendors (the same sdist whose convert_hf_to_gguf.py is the oracle
# of docs/gguf.md; tools/gguf_oracle.py fetch downloads it and checks its SHA-256). Prints the
# binary's path; a second run finds it and costs nothing.
#
#   bench/build_llama_quantize.sh        (cache: ~/.cache/dcpctl/llama-quantize-0.3.36/, outside the repo)
#
# Built as a user builds llama.cpp for their own machine (Release, GGML_NATIVE on: ggml's SIMD
# quantizers for this CPU), without what llama-quantize does not need (tests, examples, server,
# OpenSSL). One job (the cores are shared): DCPCTL_LLAMA_JOBS sets more.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/dcpctl
src=$cache/llama-quantize-0.3.36/llama_cpp_python-0.3.36/vendor/llama.cpp
build=$cache/llama-quantize-0.3.36/build
bin=$build/bin/llama-quantize
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
if [ ! -f "$src/CMakeLists.txt" ]; then
  "$py" "$root/tools/gguf_oracle.py" fetch >&2   # the sdist, checked by its SHA-256
  mkdir -p "$cache/llama-quantize-0.3.36"
  tar xzf "$cache/llama-cpp-python-0.3.36/llama_cpp_python-0.3.36.tar.gz" -C "$cache/llama-quantize-0.3.36" \
    llama_cpp_python-0.3.36/vendor/llama.cpp
fi
start=$(date +%s)
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF >&2
cmake --build "$build" --target llama-quantize -j "${DCPCTL_LLAMA_JOBS:-1}" >&2
echo "built in $(( $(date +%s) - start )) s with ${DCPCTL_LLAMA_JOBS:-1} job(s)" > "$build/built"
echo "$bin"
