#!/usr/bin/env bash
# completions-behave-zsh: zsh's completion system, driven on a pseudo-terminal, completes with
# the committed _dcpctl, and with the fixture model's (nested commands, aliases, choices, paths).
#   behave_zsh.sh SOURCE_DIR DOCS_FIXTURE_GEN_BINARY
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
need zsh
src=$(cd "$1" && pwd)
gen=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A machine (a container) without pseudo-terminals truly lacks what this test needs.
if ! zsh -f -c 'zmodload zsh/zpty && zpty t true' >/dev/null 2>&1; then
  skip_absent "zsh cannot open a pseudo-terminal (zsh/zpty) here"
fi
mkdir -p "$tmp/w/ckpt_dir"
touch "$tmp/w/ckpt_file"
"$gen" zsh >"$tmp/fixture_zsh"
cd "$tmp/w"

zsh_complete "$src/completions/_dcpctl" "dcpctl ins" "dcpctl " "dcpctl inspect --" "dcpctl inspect ckpt"
has "${ZR[0]}" inspect || fail "zsh: 'dcpctl ins<TAB>' offers [${ZR[0]}]"
passed
has "${ZR[1]}" inspect && lacks "${ZR[1]}" generate || fail "zsh: 'dcpctl <TAB>' offers [${ZR[1]}]"
passed
has "${ZR[2]}" --help || fail "zsh: 'dcpctl inspect --<TAB>' offers [${ZR[2]}]"
passed
[ "${ZR[3]}" = ckpt_dir ] || fail "zsh: 'dcpctl inspect ckpt<TAB>' offers [${ZR[3]}], not just ckpt_dir"
passed

zsh_complete "$tmp/fixture_zsh" "dcpctl convert --dtype " "dcpctl convert -d f" "dcpctl convert --dtype=" \
  "dcpctl remote " "dcpctl remote up --" "dcpctl convert --" "dcpctl convert --out-dir " "dcpctl convert src " \
  "dcpctl convert --name "
[ "${ZR[0]}" = $'bf16\nfp16\nfp32' ] || fail "zsh fixture: --dtype offers [${ZR[0]}]"
passed
[ "${ZR[1]}" = $'fp16\nfp32' ] || fail "zsh fixture: -d f offers [${ZR[1]}]"
passed
[ "${ZR[2]}" = $'bf16\nfp16\nfp32' ] || fail "zsh fixture: --dtype= offers [${ZR[2]}]"
passed
[ "${ZR[3]}" = $'push\nup' ] || fail "zsh fixture: remote offers [${ZR[3]}]"
passed
has "${ZR[4]}" --help || fail "zsh fixture: 'remote up --' offers [${ZR[4]}]"
passed
has "${ZR[5]}" --threads && lacks "${ZR[5]}" --secret || fail "zsh fixture: convert options [${ZR[5]}]"
passed
[ "${ZR[6]}" = ckpt_dir ] || fail "zsh fixture: --out-dir offers [${ZR[6]}]"
passed
has "${ZR[7]}" ckpt_file || fail "zsh fixture: dst offers [${ZR[7]}]"
passed
[ -z "${ZR[8]}" ] || fail "zsh fixture: --name (free text) offers [${ZR[8]}]"
passed
checks_at_least 13
echo "ok: zsh completes dcpctl and the fixture model"
