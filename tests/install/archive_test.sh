#!/usr/bin/env bash
# The release archive runs bare (issue: install where our users are).
#   archive_test.sh BUILD_DIR SOURCE_DIR VENV_PYTHON
#
# Makes the archive with CPack from BUILD_DIR's configuration (into a temporary directory, the
# build tree is not touched), unpacks it into an empty directory and checks:
#   - what is in it: bin/dcpctl, lib/dcpctl/libdcpctl_torch.so, the LibTorch libraries the plugin
#     loads and no others (no CUDA LibTorch, no NCCL plugin), the man page, the completions;
#   - RUNPATHs $ORIGIN/../lib (binary) and $ORIGIN/.. (plugin);
#   - run from another directory with a bare environment (env -i, PATH=/usr/bin:/bin): inspect,
#     verify --deep, consolidate (.safetensors, .pt), reshard, diff, stats exit 0, and their
#     outputs are byte-identical to the build tree's binary's (which the interop tests check
#     against torch); the .pt also loads in torch (weights_only=True);
#   - every library the loader maps (LD_DEBUG=libs) in a run that loads the plugin (rank 0 of a
#     two-rank consolidate under torchrun's environment) comes from the archive or the system:
#     none from the virtualenv or the build tree.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../skip.sh"
source "$here/../ledger.sh"
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
py=${3:-}
command -v cpack >/dev/null || skip_or_fail "no cpack"
[ -n "$py" ] && [ -x "$py" ] || skip_or_fail "no virtualenv python ('$py')"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

version=$(sed -n 's/^#define DCPCTL_VERSION "\(.*\)"$/\1/p' "$build/cmd/build_info.h")
name="dcpctl-$version-linux-$(uname -m)"
(cd "$tmp" && cpack -G TGZ --config "$build/CPackConfig.cmake" -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1) ||
  { cat "$tmp/cpack.log" >&2; echo "FAIL: cpack" >&2; exit 1; }
archive="$tmp/pkg/$name.tar.gz"
[ -f "$archive" ] || { ls -la "$tmp/pkg" >&2; echo "FAIL: no $name.tar.gz" >&2; exit 1; }
echo "archive: $name.tar.gz, $(du -m "$archive" | cut -f1) MB packed"
mkdir "$tmp/x"
tar -xzf "$archive" -C "$tmp/x"
root="$tmp/x/$name"
echo "unpacked: $(du -sm "$root" | cut -f1) MB"

# What is in it.
for f in bin/dcpctl lib/dcpctl/libdcpctl_torch.so lib/libtorch_cpu.so lib/libc10.so share/man/man1/dcpctl.1 \
  share/bash-completion/completions/dcpctl share/zsh/vendor-completions/_dcpctl \
  share/fish/vendor_completions.d/dcpctl.fish; do
  [ -e "$root/$f" ] || fail "the archive lacks $f"
  checked
done
while IFS= read -r f; do
  case "$f" in
    bin/dcpctl | lib/dcpctl/libdcpctl_torch.so | share/*) ;;
    lib/libtorch_cpu.so | lib/libc10.so | lib/libgomp.so.1 | lib/libcudart.so.* | lib/libcupti.so.*) ;;
    *) fail "unexpected file in the archive: $f" ;;
  esac
done < <(cd "$root" && find . -type f -o -type l | sed 's|^\./||' | sort)
runpath() { readelf -d "$1" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p'; }
[ "$(runpath "$root/bin/dcpctl")" = '$ORIGIN/../lib' ] || fail "bin/dcpctl RUNPATH is '$(runpath "$root/bin/dcpctl")'"
[ "$(runpath "$root/lib/dcpctl/libdcpctl_torch.so")" = '$ORIGIN/..' ] ||
  fail "the plugin's RUNPATH is '$(runpath "$root/lib/dcpctl/libdcpctl_torch.so")'"

# Run bare, from another directory, against the build tree's binary.
sample="$src/tests/fixtures/sample/ckpt"
ref="$build/cmd/dcpctl"
mkdir "$tmp/run" "$tmp/ref"
bare() { (cd "$tmp/run" && env -i PATH=/usr/bin:/bin HOME="$tmp/run" LANG=C "$@"); }
check() {  # check NAME ARGS... (outputs land in $tmp/run/NAME and $tmp/ref/NAME)
  local what=$1 rc=0
  shift
  bare "$root/bin/dcpctl" "$@" >"$tmp/run/$what.out" 2>"$tmp/run/$what.err" || rc=$?
  [ "$rc" = 0 ] || fail "archive dcpctl $* exited $rc: $(head -c 400 "$tmp/run/$what.err")"
}
check version --version
grep -q "^dcpctl $version" "$tmp/run/version.out" || fail "--version says $(head -1 "$tmp/run/version.out")"
check inspect inspect "$sample"
check verify verify --deep "$sample"
check st consolidate "$sample" --select app.model -o "$tmp/run/model.safetensors"
check pt consolidate "$sample" -o "$tmp/run/all.pt"
check reshard reshard "$sample" --world-size 3 -o "$tmp/run/w3"
check diff diff "$sample" "$tmp/run/model.safetensors" --select app.model
check stats stats --json "$sample"
"$ref" inspect "$sample" >"$tmp/ref/inspect.out"
cmp -s "$tmp/run/inspect.out" "$tmp/ref/inspect.out" || fail "inspect prints differently from the build tree's dcpctl"
checked
"$ref" stats --json "$sample" >"$tmp/ref/stats.out"
# Equal but for the timings.
python3 - "$tmp/run/stats.out" "$tmp/ref/stats.out" <<'PY' || fail "stats --json differs from the build tree's dcpctl"
import json, sys
def load(p):
    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k != "seconds"}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v
    return strip(json.load(open(p)))
sys.exit(0 if load(sys.argv[1]) == load(sys.argv[2]) else 1)
PY
checked
"$ref" consolidate "$sample" --select app.model -o "$tmp/ref/model.safetensors" >/dev/null 2>&1
"$ref" consolidate "$sample" -o "$tmp/ref/all.pt" >/dev/null 2>&1
"$ref" reshard "$sample" --world-size 3 -o "$tmp/ref/w3" >/dev/null 2>&1
for f in model.safetensors all.pt w3/__0_0.distcp w3/__1_0.distcp w3/__2_0.distcp; do
  cmp -s "$tmp/run/$f" "$tmp/ref/$f" || fail "$f written by the archive's dcpctl differs from the build tree's"
  checked
done
"$py" -c "import sys, torch; sd = torch.load(sys.argv[1], weights_only=True); assert 'app' in sd, list(sd)" "$tmp/run/all.pt" ||
  fail "torch.load(weights_only=True) refuses the archive dcpctl's .pt"
# The .metadata carries a fresh save_id (a uuid, as torch writes): torch must read the same plan.
"$py" - "$tmp/run/w3" "$tmp/ref/w3" <<'PY' || fail "torch reads different metadata from the archive's reshard"
import sys
from torch.distributed.checkpoint import FileSystemReader
a, b = (FileSystemReader(p).read_metadata() for p in sys.argv[1:3])
assert a.state_dict_metadata == b.state_dict_metadata, "state_dict_metadata"
assert a.storage_data == b.storage_data, "storage_data"
PY
checked

# Where every library came from, in a run that loads the plugin: a two-rank consolidate under
# torchrun's environment (the process group is the only part of dcpctl that needs LibTorch).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
launch="WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port"
bare env $launch RANK=1 LOCAL_RANK=1 "$root/bin/dcpctl" consolidate "$sample" -o "$tmp/ld.safetensors" -q \
  >/dev/null 2>"$tmp/ld1.log" &
rank1=$!
bare env $launch RANK=0 LOCAL_RANK=0 LD_DEBUG=libs "$root/bin/dcpctl" consolidate "$sample" -o "$tmp/ld.safetensors" -q \
  >/dev/null 2>"$tmp/ld.log" || fail "rank 0 of a two-rank consolidate under LD_DEBUG: $(grep -v '^ *[0-9]*:' "$tmp/ld.log" | head -c 400)"
wait "$rank1" || fail "rank 1 of a two-rank consolidate: $(head -c 400 "$tmp/ld1.log")"
[ -s "$tmp/ld.safetensors" ] || fail "the two-rank consolidate wrote no output"
checked
grep -q "calling init: .*libtorch_cpu.so" "$tmp/ld.log" || fail "LD_DEBUG shows no libtorch_cpu loaded (is the log empty?)"
checked
while IFS= read -r lib; do
  case "$lib" in
    "$root"/*) ;;
    /lib/* | /lib64/* | /usr/lib/* | /usr/lib64/*) ;;
    *) fail "a library came from outside the archive and the system: $lib" ;;
  esac
done < <(sed -n 's/.*calling init: //p' "$tmp/ld.log" | sort -u)
grep -E "\.venv|$build" <(sed -n 's/.*calling init: //p' "$tmp/ld.log") && fail "a library resolved into the virtualenv or the build tree"
checked

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s)" >&2
  exit 1
fi
# 8 files, the RUNPATHs' and runs' 11 checks (docs/testing.md#no-test-passes-on-nothing)
checks_at_least 19
echo "ok: the archive runs bare; outputs identical to the build tree's"
