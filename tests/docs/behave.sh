#!/usr/bin/env bash
# completions-behave: the committed bash and fish completions really complete dcpctl's
# subcommands, options and checkpoint directories.
#   behave.sh SOURCE_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
need bash fish
src=$(cd "$1" && pwd)
bashf=$src/completions/dcpctl.bash
fishf=$src/completions/dcpctl.fish
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

r=$(bash_complete "$bashf" dcpctl ins)
has "$r" inspect || fail "bash: 'dcpctl ins<TAB>' offers [$r], not inspect"
passed
r=$(bash_complete "$bashf" dcpctl "")
has "$r" inspect || fail "bash: 'dcpctl <TAB>' offers [$r], not inspect"
passed
lacks "$r" generate || fail "bash: 'dcpctl <TAB>' offers the hidden generate"
passed
r=$(bash_complete "$bashf" dcpctl inspect --)
has "$r" --help || fail "bash: 'dcpctl inspect --<TAB>' offers [$r], not --help"
passed
r=$(bash_complete "$bashf" dcpctl --)
has "$r" --version || fail "bash: 'dcpctl --<TAB>' offers [$r], not --version"
passed

# The checkpoint argument completes to directories only, also after a flag.
mkdir -p "$tmp/ckpt_dir"
touch "$tmp/ckpt_file"
r=$(cd "$tmp" && bash_complete "$bashf" dcpctl inspect ckpt)
has "$r" ckpt_dir || fail "bash: 'dcpctl inspect ckpt<TAB>' offers [$r], not ckpt_dir"
passed
lacks "$r" ckpt_file || fail "bash: 'dcpctl inspect ckpt<TAB>' offers the file ckpt_file"
passed
r=$(cd "$tmp" && bash_complete "$bashf" dcpctl inspect -h ckpt)
has "$r" ckpt_dir || fail "bash: 'dcpctl inspect -h ckpt<TAB>' offers [$r], not ckpt_dir"
passed

r=$(fish_complete "$fishf" "dcpctl ins")
has "$r" inspect || fail "fish: 'dcpctl ins<TAB>' offers [$r], not inspect"
passed
r=$(fish_complete "$fishf" "dcpctl ")
lacks "$r" generate || fail "fish: 'dcpctl <TAB>' offers the hidden generate"
passed
r=$(fish_complete "$fishf" "dcpctl inspect --")
has "$r" --help || fail "fish: 'dcpctl inspect --<TAB>' offers [$r], not --help"
passed
r=$(cd "$tmp" && fish_complete "$fishf" "dcpctl inspect ckpt")
has "$r" ckpt_dir/ || fail "fish: 'dcpctl inspect ckpt<TAB>' offers [$r], not ckpt_dir/"
passed
lacks "$r" ckpt_file || fail "fish: 'dcpctl inspect ckpt<TAB>' offers the file ckpt_file"
passed
checks_at_least 13
echo "ok: bash and fish complete dcpctl"
