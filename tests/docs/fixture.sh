#!/usr/bin/env bash
# docs-generator-fixture: the generators on a made-up model harder than dcpctl's (fixture_app.cpp):
# the output lints clean and completes nested subcommands, aliases, choices, path validators and
# option groups, and leaves out what is hidden.
#   fixture.sh DOCS_FIXTURE_GEN_BINARY
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
need bash shellcheck zsh fish mandoc
gen=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for w in bash zsh fish man; do "$gen" "$w" >"$tmp/out.$w"; done
bash "$here/lint_completions.sh" "$tmp/out.bash" "$tmp/out.zsh" "$tmp/out.fish"
out=$(mandoc -T lint -W warning "$tmp/out.man" 2>&1 | grep -v 'WARNING: missing date' || true)
[ -z "$out" ] || fail "mandoc on the fixture's page: $out"
passed

b=$tmp/out.bash
r=$(bash_complete "$b" dcpctl "")
has "$r" convert && has "$r" remote || fail "bash: top level offers [$r]"
passed
lacks "$r" secret || fail "bash: the hidden secret command is offered"
passed
r=$(bash_complete "$b" dcpctl convert --dtype "")
[ "$r" = $'bf16\nfp16\nfp32' ] || fail "bash: --dtype offers [$r]"
passed
r=$(bash_complete "$b" dcpctl convert -d f)
[ "$r" = $'fp16\nfp32' ] || fail "bash: -d f offers [$r]"
passed
r=$(bash_complete "$b" dcpctl convert --dtype = "")
[ "$r" = $'bf16\nfp16\nfp32' ] || fail "bash: --dtype= offers [$r]"
passed
r=$(bash_complete "$b" dcpctl convert --dtype = fp16 --)
has "$r" --threads || fail "bash: option-group option --threads missing from [$r]"
passed
lacks "$r" --secret || fail "bash: hidden --secret offered"
passed
r=$(bash_complete "$b" dcpctl remote "")
has "$r" push && has "$r" up || fail "bash: remote offers [$r]"
passed
r=$(bash_complete "$b" dcpctl remote up --)
has "$r" --help || fail "bash: 'remote up --' offers [$r]"
passed

mkdir -p "$tmp/w/d1"
touch "$tmp/w/f1"
r=$(cd "$tmp/w" && bash_complete "$b" dcpctl convert "")
has "$r" d1 && lacks "$r" f1 || fail "bash: the src checkpoint offers [$r]"
passed
r=$(cd "$tmp/w" && bash_complete "$b" dcpctl convert -v src "")
has "$r" d1 && has "$r" f1 || fail "bash: the dst file offers [$r]"
passed
r=$(cd "$tmp/w" && bash_complete "$b" dcpctl convert --out-dir "")
has "$r" d1 && lacks "$r" f1 || fail "bash: --out-dir offers [$r]"
passed
r=$(cd "$tmp/w" && bash_complete "$b" dcpctl convert --config "")
has "$r" f1 || fail "bash: --config offers [$r]"
passed
r=$(cd "$tmp/w" && bash_complete "$b" dcpctl convert --name "")
[ -z "$r" ] || fail "bash: --name (free text) offers [$r]"
passed
r=$(cd "$tmp/w" && bash_complete "$b" dcpctl remote push a "")
has "$r" f1 || fail "bash: remote push inputs offer [$r]"
passed

f=$tmp/out.fish
r=$(fish_complete "$f" "dcpctl ")
has "$r" convert && lacks "$r" secret || fail "fish: top level offers [$r]"
passed
r=$(fish_complete "$f" "dcpctl convert --dtype ")
[ "$r" = $'bf16\nfp16\nfp32' ] || fail "fish: --dtype offers [$r]"
passed
r=$(fish_complete "$f" "dcpctl remote ")
has "$r" push && has "$r" up || fail "fish: remote offers [$r]"
passed
r=$(fish_complete "$f" "dcpctl remote push --")
has "$r" --help || fail "fish: 'remote push --' offers [$r]"
passed

m=$tmp/out.man
grep -qx '\\&.starts with a dot, '"'"'starts with a quote' "$m" || fail "man: a leading dot is not escaped"
passed
grep -q 'Gr\\\[u00F6\]\\\[u00DF\]e \\\[u2014\]' "$m" || fail "man: non-ASCII is not escaped"
passed
grep -q 'back\\eslash \\(dq\|back\\eslash "quotes"' "$m" || fail "man: backslash is not escaped"
passed
grep -q 'DCPCTL_THREADS' "$m" || fail "man: no ENVIRONMENT entry"
passed
grep -q 'One of: bf16, fp16, fp32. Default: bf16.' "$m" || fail "man: choices or default missing"
passed
grep -q '^\.SS "dcpctl remote push"' "$m" || fail "man: nested command missing"
passed
grep -qi 'secret' "$m" && fail "man: hidden things documented"
passed
grep -q '^A footer of convert\.$' "$m" || fail "man: convert's own footer missing"
passed
grep -q '^Root footer' "$m" && fail "man: the inherited root footer is repeated"
passed
checks_at_least 29
echo "ok: generators on the fixture model"
