#!/usr/bin/env bash
# pip install into the environment that has torch (issue: install where our users are).
#   pip_test.sh VENV_PYTHON SOURCE_DIR BUILD_DIR
#
# `pip install --no-build-isolation SOURCE_DIR` into the virtualenv of VENV_PYTHON (the project's,
# whose torch is the pinned one) must put a working `dcpctl` in that environment's bin/, the man
# page and completions under its share/, the LibTorch plugin in its lib/dcpctl/ pointing at the
# environment's torch (RUNPATH relative to the plugin first). Its outputs must be byte-identical
# to the build tree's binary's; `import dcpctl` must load the Python package (docs/python.md) from the
# same install. `pip wheel` must make a wheel tagged for the extension (cp312-abi3, or the Python's
# own version before 3.12) requiring the torch minor release it was built against. The package is uninstalled at the end (also on failure).
#
# The build is pip's (scikit-build-core, pyproject.toml), with what CMake is given taken from
# BUILD_DIR: its compilers, generator, build type and -Werror, in SOURCE_DIR/build-pip-test/ (as
# deep as BUILD_DIR). With the compiler cache tools/dev.sh sets up (ccache, CCACHE_BASEDIR) every
# object is then a hit from BUILD_DIR's compile, and this test compiles nothing of its own (a user's
# plain `pip install .` builds the Release type in build-pip/{wheel_tag}/ instead: same sources,
# same CMakeLists, other optimisation flags).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../skip.sh"
source "$here/../ledger.sh"
py=${1:-}
src=$(cd "$2" && pwd)
build=$(cd "$3" && pwd)
[ -n "$py" ] && [ -x "$py" ] || skip_or_fail "no virtualenv python ('$py')"
"$py" -c "import torch, scikit_build_core, nanobind" 2>/dev/null ||
  skip_or_fail "$py lacks torch, scikit-build-core or nanobind (tools/requirements.txt; tools/dev.sh setup)"
venv=$("$py" -c "import sys; print(sys.prefix)")
torch_mm=$("$py" -c "import torch; print('.'.join(torch.__version__.split('+')[0].split('.')[:2]))")

tmp=$(mktemp -d)
cleanup() {
  "$py" -m pip uninstall -y -q dcpctl >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
[ -f "$build/CMakeCache.txt" ] || { echo "FAIL: no $build/CMakeCache.txt" >&2; exit 1; }
werror=$(cache DCPCTL_WERROR)
config=(-C build-dir=build-pip-test -C "cmake.build-type=$(cache CMAKE_BUILD_TYPE)"
  -C "cmake.define.CMAKE_CXX_COMPILER=$(cache CMAKE_CXX_COMPILER)" -C "cmake.define.DCPCTL_WERROR=${werror:-ON}")
cc=$(cache CMAKE_C_COMPILER)
[ -z "$cc" ] || config+=(-C "cmake.define.CMAKE_C_COMPILER=$cc")
export CMAKE_GENERATOR
CMAKE_GENERATOR=$(cache CMAKE_GENERATOR)

start=$(date +%s)
if ! "$py" -m pip install --no-build-isolation -v "${config[@]}" "$src" >"$tmp/pip.log" 2>&1; then
  tail -40 "$tmp/pip.log" >&2
  echo "FAIL: pip install --no-build-isolation $src" >&2
  exit 1
fi
echo "pip install: $(($(date +%s) - start)) s ($(grep -c 'Building CXX object' "$tmp/pip.log") C++ objects compiled or taken from the cache)"

exe="$venv/bin/dcpctl"
plugin="$venv/lib/dcpctl/libdcpctl_torch.so"
for f in "$exe" "$plugin" "$venv/share/man/man1/dcpctl.1" "$venv/share/bash-completion/completions/dcpctl" \
  "$venv/share/zsh/vendor-completions/_dcpctl" "$venv/share/fish/vendor_completions.d/dcpctl.fish"; do
  [ -e "$f" ] || fail "pip install did not install $f"
  checked
done
if [ -f "$plugin" ]; then
  rp=$(readelf -d "$plugin" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  case "$rp" in
    '$ORIGIN/../python3.'*/site-packages/torch/lib:*) ;;
    *) fail "the plugin's RUNPATH is '$rp', not relative to the environment's torch first" ;;
  esac
  # The plugin's LibTorch is the environment's, found through the relative entry alone.
  torch_lib=$("$py" -c "import os, torch; print(os.path.realpath(os.path.join(os.path.dirname(torch.__file__), 'lib')))")
  got=$(cd "$venv/lib/dcpctl" && ldd ./libdcpctl_torch.so | sed -n 's/.*libtorch_cpu.so => \([^ ]*\).*/\1/p')
  [ "$(readlink -f "$got")" = "$torch_lib/libtorch_cpu.so" ] || fail "the plugin resolves libtorch_cpu to '$got', not $torch_lib"
  checked
fi

# The installed dcpctl, run the way a user would (the environment's bin on PATH), from elsewhere.
sample="$src/tests/fixtures/sample/ckpt"
mkdir "$tmp/run" "$tmp/ref"
run() { (cd "$tmp/run" && PATH="$venv/bin:/usr/bin:/bin" "$@"); }
[ "$(run sh -c 'command -v dcpctl')" = "$exe" ] || fail "dcpctl on the environment's PATH is '$(run sh -c 'command -v dcpctl' || true)'"
checked
run dcpctl --version >"$tmp/version" || fail "dcpctl --version"
checked
grep -q "^LibTorch $torch_mm" "$tmp/version" || fail "--version does not name LibTorch $torch_mm: $(cat "$tmp/version")"
run dcpctl verify --deep "$sample" >/dev/null || fail "installed dcpctl verify --deep"
checked
run dcpctl consolidate "$sample" -o "$tmp/run/all.pt" >/dev/null 2>&1 || fail "installed dcpctl consolidate .pt"
checked
run dcpctl consolidate "$sample" --select app.model -o "$tmp/run/model.safetensors" >/dev/null 2>&1 ||
  fail "installed dcpctl consolidate .safetensors"
"$build/cmd/dcpctl" consolidate "$sample" -o "$tmp/ref/all.pt" >/dev/null 2>&1
"$build/cmd/dcpctl" consolidate "$sample" --select app.model -o "$tmp/ref/model.safetensors" >/dev/null 2>&1
for f in all.pt model.safetensors; do
  cmp -s "$tmp/run/$f" "$tmp/ref/$f" || fail "$f written by the installed dcpctl differs from the build tree's"
  checked
done

# The Python package from the same install: `import dcpctl` (the extension beside its Python files in
# the environment's site-packages), a tensor read and verify --deep called in process.
run "$py" - "$sample" "$venv" <<'PY' || fail "import dcpctl from the installed package"
import sys, os, dcpctl
sample, venv = sys.argv[1], sys.argv[2]
assert os.path.realpath(dcpctl.__file__).startswith(os.path.realpath(venv)), dcpctl.__file__
with dcpctl.open(sample) as ck:
    a = ck.get(ck.keys()[0], dtype="float32")
    assert a.shape == tuple(ck.info(ck.keys()[0])["shape"]), a.shape
assert dcpctl.verify(sample, deep=True)["ok"]
print("import dcpctl:", dcpctl.__version__, dcpctl.__file__)
PY
checked

# pip wheel: tag and torch constraint (the build directory is reused: no rebuild).
if "$py" -m pip wheel --no-build-isolation --no-deps "${config[@]}" -w "$tmp/wheel" "$src" >"$tmp/wheel.log" 2>&1; then
  whl=$(ls "$tmp/wheel"/dcpctl-*.whl)
  # The extension's tag (pyproject.toml's wheel.py-api): CPython's stable ABI from 3.12, else the version's own.
  tag=$("$py" -c 'import sys; v = sys.version_info; print("cp312-abi3" if v >= (3, 12) else f"cp{v[0]}{v[1]}-cp{v[0]}{v[1]}")')
  case "$(basename "$whl")" in
    dcpctl-*-"$tag"-linux_x86_64.whl) ;;
    *) fail "wheel is tagged $(basename "$whl"), want $tag-linux_x86_64" ;;
  esac
  "$py" - "$whl" "$torch_mm" <<'PY' || fail "the wheel's METADATA does not require torch==$torch_mm.*"
import sys, zipfile
whl, mm = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    reqs = [l.split(":", 1)[1].strip() for l in z.read(meta).decode().splitlines() if l.startswith("Requires-Dist:")]
print("Requires-Dist:", reqs)
sys.exit(0 if reqs == [f"torch=={mm}.*"] else 1)
PY
  checked
else
  tail -30 "$tmp/wheel.log" >&2
  fail "pip wheel --no-build-isolation"
fi

"$py" -m pip uninstall -y -q dcpctl || fail "pip uninstall dcpctl"
checked
[ ! -e "$exe" ] && [ ! -e "$plugin" ] || fail "pip uninstall left $exe or $plugin behind"
checked
(cd "$tmp" && "$py" -c "import dcpctl" 2>/dev/null) && fail "pip uninstall left the dcpctl package importable"
checked

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s)" >&2
  exit 1
fi
# 6 files installed, 10 checks of the installed dcpctl, its Python package and the uninstall (the plugin's RUNPATH and the
# wheel's METADATA where they apply: not counted here)
checks_at_least 16
echo "ok: pip install --no-build-isolation puts a working dcpctl on the environment's PATH"
