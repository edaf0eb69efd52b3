#!/usr/bin/env bash
# gpu-check-no-gpu: tools/gpu-check.sh on a machine without a GPU exits 5 at once, before it builds
# or writes anything, listing every check it would run (the same list as --list); a bad argument
# is a usage error (2); the script is shellcheck-clean. Skips (77) where a GPU is present.
#   gpu_check_test.sh SOURCE_DIR
set -euo pipefail
src=$1
script=$src/tools/gpu-check.sh
# shellcheck source=tests/skip.sh
source "$(dirname "${BASH_SOURCE[0]}")/../skip.sh"
# shellcheck source=tests/ledger.sh
source "$(dirname "${BASH_SOURCE[0]}")/../ledger.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }

command -v shellcheck >/dev/null || skip_or_fail "shellcheck is not installed (tools/dev.sh setup installs it)"
(cd "$src" && shellcheck -x tools/gpu-check.sh tools/gpu-offline.sh tests/bench/gpu_check_test.sh) || fail "shellcheck"
passed
if compgen -G '/dev/nvidia[0-9]*' >/dev/null ||
  { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  skip_absent "a GPU is present, so the no-GPU path cannot be tested here (run tools/gpu-check.sh itself)"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
# "Before building anything": the CPU time of the script and everything it ran (user + system, from
# bash's `time`), which a loaded machine does not stretch as it does the wall clock; building the
# four targets takes minutes of CPU.
TIMEFORMAT='%3U %3S'
{ time "$script" --out "$tmp/out" --build "$tmp/build" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?; } 2>"$tmp/time"
cpu_ms=$(awk '{ printf "%d", ($1 + $2) * 1000 }' "$tmp/time")
[ $rc = 5 ] || fail "exit $rc, expected 5; stderr: $(cat "$tmp/stderr")"
[ "$cpu_ms" -lt 10000 ] || fail "took $cpu_ms ms of CPU; it must decide before building anything"
passed
[ ! -s "$tmp/stdout" ] || fail "stdout is not empty: $(cat "$tmp/stdout")"
if [ -e "$tmp/out" ] || [ -e "$tmp/build" ]; then fail "it wrote $(ls "$tmp")"; fi
head -n 1 "$tmp/stderr" | grep -q '^gpu-check.sh: no NVIDIA GPU here .*nothing was run' ||
  fail "the first line does not say why: $(head -n 1 "$tmp/stderr")"
for c in build version ctest staging nccl; do
  grep -q "^  $c  " "$tmp/stderr" || fail "the listing does not name the check '$c'"
  passed
done
for what in "bench staging" "torch_staging.py" "DefaultStager" "4GiB" "--backend nccl" "--version" "bench_tests"; do
  grep -qF -- "$what" "$tmp/stderr" || fail "the listing does not mention $what"
  passed
done
"$script" --list >"$tmp/list"
diff <(tail -n +3 "$tmp/stderr") "$tmp/list" >&2 || fail "the no-GPU listing differs from --list"
passed

for bad in --bogus --out; do
  rc=0
  "$script" "$bad" >/dev/null 2>"$tmp/err" || rc=$?
  if [ $rc != 2 ] || [ ! -s "$tmp/err" ]; then fail "gpu-check.sh $bad: exit $rc, expected 2 with a message"; fi
done
checks_at_least 15
echo "ok: exit 5 in $cpu_ms ms of CPU with nothing written, listing build, version, ctest, staging, nccl; usage errors exit 2"
