#!/usr/bin/env bash
# Regenerates the committed shell completions and man page from the CLI model, with the hidden
# `dcpctl generate` command of a built dcpctl. Run it after changing any option or subcommand;
# the docs-sync test fails until you do.
#
#   tools/regen-docs.sh [BUILD_DIR | DCPCTL_BINARY] [DEST]
#
# BUILD_DIR defaults to build/ (its cmd/dcpctl is run). DEST defaults to the repository root;
# tests/docs/check_sync.sh passes a temporary directory.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
arg=${1:-$root/build}
if [ -f "$arg" ] && [ -x "$arg" ]; then
  bin=$arg
else
  bin=$arg/cmd/dcpctl
fi
if [ ! -x "$bin" ]; then
  echo "regen-docs: no dcpctl binary at $bin (build it first: cmake --build $arg --target dcpctl)" >&2
  exit 1
fi
dest=${2:-$root}

gen() {  # gen WHAT FILE: writes FILE (relative to DEST) atomically
  local out=$dest/$2
  mkdir -p "$(dirname "$out")"
  if ! "$bin" generate "$1" >"$out.tmp"; then
    rm -f "$out.tmp"
    echo "regen-docs: '$bin generate $1' failed" >&2
    exit 1
  fi
  mv "$out.tmp" "$out"
  echo "regen-docs: wrote $2" >&2
}

# The one list of generated files (install() rules in CMakeLists.txt name them too).
gen bash completions/dcpctl.bash
gen zsh completions/_dcpctl
gen fish completions/dcpctl.fish
gen man man/dcpctl.1
