#!/usr/bin/env bash
# Torchrun consolidates under ThreadSanitizer (tools/dev.sh tsan): a TSan build of dcpctl, two
# and three ranks through the virtualenv's torchrun, with several lanes per rank (--threads), so
# the chunk exchange's pusher threads, the writer lanes and the memory gate all run at once. Each
# output (a file, or an HF directory written by every rank with --parallel-write) must be byte-identical to the single-process run of the same build, and TSan must stay
# silent (halt_on_error: a report ends the rank with exit 66, which fails the check).
# usage: tsan_consolidate.sh DCPCTL VENV_PYTHON FIXTURES_DIR
set -uo pipefail
dcpctl=$1 py=$2 fixtures=$3
source "$(dirname "${BASH_SOURCE[0]}")/../skip.sh"
[ -x "$(dirname "$py")/torchrun" ] || skip_or_fail "no virtualenv torchrun (tools/dev.sh creates it)"
torchrun=$(dirname "$py")/torchrun
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
n=0
# case NPROC FIXTURE OUTPUT-NAME [dcpctl options...]
case_() {
  local nproc=$1 name=$2 ck=$fixtures/$2/ckpt out=$3
  shift 3
  n=$((n + 1))
  local single=() a
  for a in "$@"; do [ "$a" = --parallel-write ] || single+=("$a"); done  # one process writes it all
  "$dcpctl" consolidate "$ck" -o "$work/single-$n-$out" "${single[@]}" -q >"$work/single.log" 2>&1 || {
    echo "FAIL single-process $out ($*)"; cat "$work/single.log"; fail=1; return; }
  if "$torchrun" --standalone --nproc-per-node "$nproc" --no-python "$dcpctl" consolidate "$ck" \
      -o "$work/tr-$n-$out" "$@" -q --timeout 120 >"$work/tr.log" 2>&1 &&
    ! grep -q "ThreadSanitizer" "$work/tr.log" && diff -r "$work/single-$n-$out" "$work/tr-$n-$out" >/dev/null; then
    echo "ok   $nproc ranks: $name -> $out $*"
  else
    echo "FAIL $nproc ranks: $name -> $out $*"
    tail -60 "$work/tr.log"
    fail=1
  fi
}
case_ 2 sample model.safetensors --threads 3
case_ 3 dtensor_2d_mesh model.safetensors --threads 2 --dtype bf16
case_ 2 zstd model.pt --threads 2
case_ 3 sample model.pt --threads 2
case_ 2 dtensor_2d_mesh hf/ --parallel-write --max-shard-size 4KiB --threads 2
# One process, several threads sharing decoded zstd chunks (reshard to 8 ranks: most source chunks
# feed several target chunks), against the same reshard on one thread.
"$dcpctl" reshard "$fixtures/zstd/ckpt" -o "$work/rs1" -w 8 --threads 1 -q &&
  "$dcpctl" reshard "$fixtures/zstd/ckpt" -o "$work/rs4" -w 8 --threads 4 -q >"$work/rs.log" 2>&1 &&
  (for f in "$work"/rs1/*.distcp; do cmp -s "$f" "$work/rs4/${f##*/}" || exit 1; done)
rc=$?
if [ $rc -eq 0 ] && ! grep -q ThreadSanitizer "$work/rs.log"; then
  echo "ok   reshard zstd -w 8 --threads 4 (decoded chunks shared by threads)"
else
  echo "FAIL reshard zstd -w 8 --threads 4"
  tail -60 "$work/rs.log"
  fail=1
fi
[ $fail -eq 0 ] && echo "tsan consolidates passed" || echo "tsan consolidates FAILED"
exit $fail
