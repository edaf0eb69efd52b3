#!/usr/bin/env bash
# The command every CTest test runs under (tests/CMakeLists.txt's dcpctl_add_test): counted.sh
# LEDGER_DIR NAME COMMAND... runs COMMAND with DCPCTL_CHECK_LEDGER naming the test's ledger file,
# LEDGER_DIR/NAME, into which the test's harness writes how many checks it made (tests/ledger.py,
# tests/ledger.sh, the Catch2 listener of tests/unit/main.cpp, corruption/metadata_mutations.cpp).
# It writes "started" before and "exit RC" after; a COMMAND that exits 0 having recorded no check,
# or only zeros, fails here (exit 1) naming itself, and the suite's last test,
# ledger-judge (tests/ledger_judge.py), fails on it too. Exit 77 (skipped) and failures pass through.
# docs/testing.md#no-test-passes-on-nothing.
set -uo pipefail
dir=$1 name=$2
shift 2
mkdir -p "$dir"
ledger=$dir/$name
echo "started $name" >"$ledger"
DCPCTL_CHECK_LEDGER=$ledger "$@"
rc=$?
echo "exit $rc" >>"$ledger"
if [ "$rc" -eq 0 ]; then
  made=$(awk '$1 == "checks" { n += $2 } END { print n + 0 }' "$ledger")
  if [ "$made" -eq 0 ]; then
    echo "FAIL: $name exited 0 having recorded $(grep -c '^checks ' "$ledger") counts and 0 checks in $ledger:" \
      "a test that checked nothing has not passed (docs/testing.md#no-test-passes-on-nothing)" >&2
    echo "verdict empty" >>"$ledger"
    exit 1
  fi
fi
exit "$rc"
