#!/usr/bin/env bash
# install-layout: `cmake --install` puts the binary, the man page and the three completion
# scripts where packagers and shells look for them.
#   install_layout.sh CMAKE_COMMAND BUILD_DIR SOURCE_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
cmake=$1
build=$2
src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$cmake" --install "$build" --prefix "$tmp/prefix" >"$tmp/log" 2>&1 || { cat "$tmp/log"; fail "cmake --install"; }
passed
p=$tmp/prefix
[ -x "$p/bin/dcpctl" ] || fail "bin/dcpctl not installed"
passed
check() {  # check INSTALLED SOURCE
  [ -f "$p/$1" ] || fail "$1 not installed"
  passed
  cmp -s "$p/$1" "$src/$2" || fail "$1 differs from $2"
  passed
}
check share/man/man1/dcpctl.1 man/dcpctl.1
check share/bash-completion/completions/dcpctl completions/dcpctl.bash
check share/zsh/vendor-completions/_dcpctl completions/_dcpctl
check share/fish/vendor_completions.d/dcpctl.fish completions/dcpctl.fish
checks_at_least 10
echo "ok: installed under $p"
