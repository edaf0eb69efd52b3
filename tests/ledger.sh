# shellcheck shell=bash
# The check ledger for shell tests (the twin of tests/ledger.py; docs/testing.md#no-test-passes-on-nothing).
# Sourced by a test script. `passed WHAT` after each check that held (`checked WHAT` after each
# check made, in a script whose fail only counts the failure): one check, appended to the
# test's ledger (DCPCTL_CHECK_LEDGER, given by tests/counted.sh) at once, so a check made in a
# subshell or a pipeline counts too. `checks_at_least N` at the end: exit 1 when fewer than N
# checks passed in this shell (a data-driven script that ran no case, or dropped its cases, fails
# by itself, not only in the suite's ledger check).
# The variable is taken out of the environment here: a script this test runs does not record into it.
LEDGER_FILE=${DCPCTL_CHECK_LEDGER:-}
unset DCPCTL_CHECK_LEDGER
LEDGER_CHECKS=0

passed() {  # passed [WHAT]: one check made, and it held
  LEDGER_CHECKS=$((LEDGER_CHECKS + 1))
  if [ -n "$LEDGER_FILE" ]; then echo "checks 1 ${0##*/}${1:+: $*}" >>"$LEDGER_FILE"; fi
}

checked() {  # checked [WHAT]: one check made, in a script that counts its own failures (its fail
  passed "$@"  # does not exit; it exits 1 at the end when any failed)
}

checks_at_least() {  # checks_at_least N: the fewest checks this script makes on a full run (N >= 1)
  if [ "$1" -lt 1 ]; then
    echo "FAIL: checks_at_least $1: a floor under 1 lets a test pass having checked nothing" >&2
    exit 1
  fi
  if [ "$LEDGER_CHECKS" -lt "$1" ]; then
    echo "FAIL: ${0##*/}: $LEDGER_CHECKS checks passed, fewer than the $1 it makes on a full run" >&2
    exit 1
  fi
  echo "${0##*/}: $LEDGER_CHECKS checks passed"
}
