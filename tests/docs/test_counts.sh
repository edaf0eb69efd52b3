#!/usr/bin/env bash
# docs/testing.md states how many tests the tree registers, in all and per label: those numbers
# must be what CTest lists for this build tree (ctest -N), so the page cannot drift.
# usage: test_counts.sh BUILD_DIR DOCS_TESTING_MD
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build=$1 page=$2
fail=0
# -FA '.*': not the check ledger's ledger-reset and ledger-judge, which CTest adds to any selection
# (tests/CMakeLists.txt); they count in the total, which is every test registered.
count() { ctest --test-dir "$build" -N -FA '.*' "$@" | sed -n 's/^Total Tests: //p'; }
all=$(count)
said=$(sed -n 's/.*registers \([0-9]*\) tests in all.*/\1/p' "$page")
if [ "$said" != "$all" ]; then echo "FAIL $page says $said tests in all; the tree has $all"; fail=1; else passed; fi
rows=0
while IFS='|' read -r _ label n _; do
  label=${label//[\` ]/} n=${n// /}
  [[ $n =~ ^[0-9]+$ ]] || continue
  rows=$((rows + 1))
  have=$(count -L "^$label\$")
  if [ "$have" != "$n" ]; then echo "FAIL $page: label $label: $n tests, the tree has $have"; fail=1; else passed; fi
done < <(sed -n '/^| label | tests |/,/^$/p' "$page")
if [ "$rows" -lt 4 ]; then echo "FAIL $page: the tiers table lists $rows labels with counts"; fail=1; fi
[ $fail -eq 0 ] || exit 1
echo "docs/testing.md: $all tests in all and $rows labels, as the tree has them"
checks_at_least 5
