#!/usr/bin/env bash
# docs-examples-detects-drift: check_examples.py passes on a copy of the README and docs/, and
# fails, naming the place, when one thing in the copy is broken at a time: a command that fails,
# a wrong announced exit code, a broken link or anchor, an option or command that does not exist,
# a block that invokes dcpctl without running or saying why not, a stale path, a tools/dev.sh
# command that does not exist, CI running a command the README does not show, a missing exit code,
# an option docs/commands.md forgets.
#   check_examples_detects_drift.sh DCPCTL_BINARY SOURCE_DIR PYTHON
# It works on copies (the rest of the tree is linked, read-only use), never on the repository.
set -euo pipefail
bin=$1
src=$(cd "$2" && pwd)
py=${3:-python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/docs/lib.sh
source "$here/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
copy=$tmp/src

fresh() {  # a copy of the pages and .ci/, beside links to the rest of the tree
  rm -rf "$copy"
  mkdir "$copy"
  local e
  for e in "$src"/* "$src"/.ci; do
    case ${e##*/} in
      README.md | docs | .ci) cp -r "$e" "$copy/" ;;
      *) ln -s "$e" "$copy/${e##*/}" ;;
    esac
  done
}

check() {  # check [--no-run] FILE...: runs check_examples.py on the copy
  "$py" "$here/check_examples.py" "$bin" "$copy" --fixtures "$src/tests/fixtures" "$@" >"$tmp/log" 2>&1
}

# expect_fail WHAT PATTERN [--no-run] FILE...: the check must fail with a FAIL line matching PATTERN.
expect_fail() {
  local what=$1 pattern=$2
  shift 2
  if check "$@"; then
    cat "$tmp/log"
    fail "check_examples.py passed after $what"
  fi
  grep -qE "^FAIL $pattern" "$tmp/log" || { cat "$tmp/log"; fail "after $what: no FAIL line matching '$pattern'"; }
  passed
  echo "ok: caught $what"
}

append() {  # append FILE TEXT: adds a paragraph at the end of a page of the copy
  printf '\n%s\n' "$2" >>"$copy/$1"
}

fresh
check README.md || { cat "$tmp/log"; fail "check_examples.py fails on an unchanged copy of README.md"; }
passed
if ! grep -qE " [1-9][0-9]* command\(s\) run" "$tmp/log"; then
  cat "$tmp/log"
  fail "no README command ran"
fi
check --no-run README.md docs/commands.md docs/ci-recipes.md ||
  { cat "$tmp/log"; fail "check_examples.py --no-run fails on unchanged copies"; }

# Commands that run.
fresh
append README.md $'```sh\ndcpctl verify tests/fixtures/sample/no-such-ckpt\n```'
expect_fail "a command that fails (exit 4)" "README.md:[0-9]+: .*exited 4, expected 0" README.md
fresh
append README.md $'```sh\ndcpctl verify tests/fixtures/sample/ckpt   # exit 3: damaged\n```'
expect_fail "a wrong announced exit code" "README.md:[0-9]+: .*exited 0, expected 3" README.md
fresh
append README.md $'```sh\ndcpctl inspect --no-such-flag tests/fixtures/sample/ckpt\n```'
expect_fail "an option that does not exist, run" "README.md:[0-9]+: .*has no option --no-such-flag" README.md

# Blocks that do not run, and inline code.
fresh
append README.md $'<!-- norun: an example -->\n```sh\ndcpctl verify --deep --no-such-flag /ckpt\n```'
expect_fail "an option that does not exist, in a norun block" "README.md:[0-9]+: 'dcpctl verify' has no option --no-such-flag" --no-run README.md
fresh
# shellcheck disable=SC2016 # backticks: Markdown inline code, not a command substitution
append README.md 'Run `dcpctl frobnicate CKPT` to see.'
expect_fail "a command that does not exist, in inline code" "README.md:[0-9]+: 'dcpctl frobnicate': no such command" --no-run README.md
fresh
append README.md $'```yaml\nrun: dcpctl verify "$CKPT"\n```'
expect_fail "a yaml block invoking dcpctl without a norun marker" "README.md:[0-9]+: a \`\`\`yaml block invokes dcpctl" --no-run README.md
fresh
append README.md $'<!-- norun -->\n```sh\ndcpctl verify /ckpt\n```'
expect_fail "a norun marker without a reason" "README.md:[0-9]+: a norun marker must say why" --no-run README.md

# Links, paths, the promises of the README.
fresh
append docs/ci-recipes.md 'See [the page](no-such-page.md).'
expect_fail "a broken link" "docs/ci-recipes.md:[0-9]+: broken link: no-such-page.md" --no-run docs/ci-recipes.md
fresh
append README.md 'See [exit codes](docs/commands.md#no-such-heading).'
expect_fail "a broken anchor" "README.md:[0-9]+: broken link: docs/commands.md#no-such-heading \(no heading" --no-run README.md
fresh
# shellcheck disable=SC2016
append README.md 'It lives in `src/no/such.h`.'
expect_fail "a path that does not exist" "README.md:[0-9]+: \`src/no/such.h\`: no such file or folder" --no-run README.md
fresh
# shellcheck disable=SC2016
append README.md 'Run `tools/dev.sh frobnicate`.'
expect_fail "a tools/dev.sh command that does not exist" "README.md:[0-9]+: tools/dev.sh has no command 'frobnicate'" --no-run README.md
fresh
sed -i 's|^exec tools/dev.sh test$|exec tools/dev.sh test-everything|' "$copy/.ci/run"
grep -q '^exec tools/dev.sh test-everything$' "$copy/.ci/run" || fail ".ci/run has no 'exec tools/dev.sh test' line to change"
passed
expect_fail ".ci/run running a command the README does not show" "README.md: CI runs 'tools/dev.sh test-everything'" --no-run README.md
fresh
sed -i '/^| 5 |/d' "$copy/README.md"
expect_fail "a missing exit code" "README.md: the exit code table has no row for 5" --no-run README.md

# docs/commands.md documents every command and option.
fresh
sed -i '/--max-values/d' "$copy/docs/commands.md"
expect_fail "an option docs/commands.md forgets" "docs/commands.md: section 'dcpctl inspect' does not mention its option --max-values" --no-run docs/commands.md
fresh
sed -i 's/^## dcpctl prune$/## Pruning/' "$copy/docs/commands.md"
expect_fail "a command docs/commands.md forgets" "docs/commands.md: no section '## dcpctl prune'" --no-run docs/commands.md

echo "ok: check_examples.py catches each kind of drift"
