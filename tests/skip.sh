# shellcheck shell=bash
# How a test that cannot run ends (sourced by the test scripts; tests/skip.py is the same for
# Python). CTest marks exit 77 as skipped (SKIP_RETURN_CODE 77); a skip must never hide a
# failure of the set-up, so there are two kinds:
#
#   skip_absent REASON   the machine truly lacks the thing (a GPU): exit 77, always.
#   skip_or_fail REASON  something tools/dev.sh provides (the virtualenv and its torch, a Debian
#                        tool, the clang fuzz build) is missing or broken: exit 77 on a partial
#                        developer set-up, but exit 1 under CI (CI=true) or DCPCTL_REQUIRE_VENV=1
#                        (tools/dev.sh test and test-fast set it), where it means the set-up broke.

skip_strict() {
  case "${CI:-}" in true | TRUE | True | 1 | yes) return 0 ;; esac
  [ "${DCPCTL_REQUIRE_VENV:-0}" = 1 ]
}

skip_absent() {
  echo "SKIP: $*" >&2
  exit 77
}

skip_or_fail() {
  if skip_strict; then
    echo "FAIL: $* (a skip is not allowed here: CI=${CI:-} DCPCTL_REQUIRE_VENV=${DCPCTL_REQUIRE_VENV:-}; tools/dev.sh setup provides it)" >&2
    exit 1
  fi
  echo "SKIP: $*" >&2
  exit 77
}
