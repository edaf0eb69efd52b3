# shellcheck shell=bash
# Shared by the tests/docs scripts (sourced, not run).

source "$(dirname "${BASH_SOURCE[0]}")/../skip.sh"
# `passed` and `checks_at_least` (the check ledger: docs/testing.md#no-test-passes-on-nothing)
source "$(dirname "${BASH_SOURCE[0]}")/../ledger.sh"

# need TOOL...: names the first missing tool and exits 77 (CTest: skipped), or 1 under CI /
# DCPCTL_REQUIRE_VENV=1: tools/dev.sh installs every one of them (tests/skip.sh).
need() {
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null 2>&1 || skip_or_fail "$t is not installed (tools/dev.sh setup installs it)"
  done
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# has LIST WORD / lacks LIST WORD: whether the newline-separated LIST holds the line WORD. A here-string,
# not `printf | grep -q`: under pipefail, grep -q leaving at the first match can kill printf with
# SIGPIPE, and the pipeline then fails although the word is there (seen under load: 2 runs in 3).
has() { grep -qxF -- "$2" <<<"$1"; }
lacks() { ! has "$1" "$2"; }

# bash_complete FILE WORD...: what FILE's completion offers for the command line WORD...,
# completing the last WORD (pass "" to complete an empty word), one candidate per line.
bash_complete() {
  local file=$1
  shift
  bash --norc --noprofile -c '
    source "$1" || exit 1
    shift
    COMP_WORDS=("$@")
    COMP_CWORD=$(($# - 1))
    COMP_LINE="$*"
    COMP_POINT=${#COMP_LINE}
    fn=$(complete -p dcpctl | sed -n "s/.*-F \([^ ]*\) .*/\1/p")
    [ -n "$fn" ] || { echo "no complete -F for dcpctl" >&2; exit 1; }
    "$fn" dcpctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    printf "%s\n" "${COMPREPLY[@]}"' _ "$file" "$@"
}

# fish_complete FILE LINE: what FILE's completions offer for the command line LINE.
fish_complete() {
  fish --no-config -c 'source $argv[1]; complete -C $argv[2]' "$1" "$2" | cut -f1
}

# zsh_complete FILE LINE...: what zsh offers for each LINE<TAB> with FILE installed as _dcpctl,
# into the array ZR (ZR[i] for the i-th LINE, candidates one per line). One zsh serves all LINEs.
zsh_complete() {
  local d rc=0 block="" l
  d=$(mktemp -d)
  cp "$1" "$d/_dcpctl"
  shift
  ZR=()
  zsh -f "$(dirname "${BASH_SOURCE[0]}")/zsh_complete.zsh" "$d" "$@" >"$d/out" || rc=$?
  while IFS= read -r l; do
    if [ "$l" = @@ ]; then
      ZR+=("${block%$'\n'}")
      block=""
    else
      block+=$l$'\n'
    fi
  done <"$d/out"
  rm -rf "$d"
  [ "$rc" -eq 0 ] && [ "${#ZR[@]}" -eq "$#" ] || fail "zsh_complete: zsh answered ${#ZR[@]} of $# lines (exit $rc)"
}
