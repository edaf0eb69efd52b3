#!/usr/bin/env bash
# Distributed runs under the virtualenv's torchrun and a plain environment launcher (2 and 3
# processes on this machine, c10d TCPStore): outputs must be byte-identical to the single-process run, and a rank that dies must
# make the others fail cleanly, leaving nothing behind.
# usage: torchrun_test.sh DCPCTL VENV_PYTHON FIXTURES_DIR
set -uo pipefail
dcpctl=$1 py=$2 fixtures=$3
if [ -z "$py" ] || [ ! -x "$(dirname "$py")/torchrun" ]; then
  echo "SKIP: no virtualenv torchrun (tools/dev.sh creates it)" >&2
  exit 77
fi
torchrun=$(dirname "$py")/torchrun
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
check() { # check NAME COMMAND...
  if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi
}
# Through torchrun (its agent hosts the c10d store; every rank is a client).
run_tr() { # run_tr NPROC ARGS... (dcpctl arguments)
  "$torchrun" --standalone --nproc-per-node "$1" --no-python "$dcpctl" "${@:2}" --timeout 60 >"$work/log" 2>&1
}
# As any other launcher would: RANK/WORLD_SIZE/MASTER_* set by hand, rank 0 hosts the store.
# (torchrun costs ~10 s of Python start-up per launch on this machine; this keeps the suite short.)
next_port=$((29300 + RANDOM % 200))
run_env() { # run_env NPROC ARGS...
  local n=$1 r rc=0 pids=()
  shift
  next_port=$((next_port + 1))
  for ((r = 0; r < n; r++)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$next_port \
      "$dcpctl" "$@" --timeout 60 >"$work/log-$r" 2>&1 &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || rc=1; done
  return $rc
}
same_tree() { # same_tree A B: same files with the same bytes (.metadata holds a fresh save id)
  diff <(cd "$1" && find . -type f ! -name .metadata | sort) <(cd "$2" && find . -type f ! -name .metadata | sort) >/dev/null || return 1
  local f
  while read -r f; do cmp -s "$1/$f" "$2/$f" || return 1; done < <(cd "$1" && find . -type f ! -name .metadata)
}

for case in sample dtensor_2d_mesh all_dtypes_sharded; do
  ck=$fixtures/$case/ckpt
  for n in 2 3; do
    launch=run_env
    [ $case = sample ] && [ $n = 2 ] && launch=run_tr
    # consolidate: every output format.
    "$dcpctl" consolidate "$ck" -o "$work/s-$case.safetensors" -q --force
    check "$case consolidate safetensors x$n" $launch "$n" consolidate "$ck" -o "$work/d-$case-$n.safetensors" -q
    check "$case safetensors identical x$n" cmp "$work/s-$case.safetensors" "$work/d-$case-$n.safetensors"
    "$dcpctl" consolidate "$ck" -o "$work/s-$case-hf/" --max-shard-size 20KB -q --force
    check "$case consolidate hf x$n" $launch "$n" consolidate "$ck" -o "$work/d-$case-hf-$n/" --max-shard-size 20KB -q
    check "$case hf identical x$n" diff -r "$work/s-$case-hf" "$work/d-$case-hf-$n"
    "$dcpctl" consolidate "$ck" -o "$work/s-$case.pt" -q --force
    check "$case consolidate pt x$n" $launch "$n" consolidate "$ck" -o "$work/d-$case-$n.pt" -q
    check "$case pt identical x$n" cmp <(unzip -p "$work/s-$case.pt" '*/data.pkl' '*/data/*') \
      <(unzip -p "$work/d-$case-$n.pt" '*/data.pkl' '*/data/*')
    # reshard to 4 target ranks.
    "$dcpctl" reshard "$ck" -o "$work/s-$case-w4" -w 4 -q --force
    check "$case reshard x$n" $launch "$n" reshard "$ck" -o "$work/d-$case-w4-$n" -w 4 -q
    check "$case reshard identical x$n" same_tree "$work/s-$case-w4" "$work/d-$case-w4-$n"
    check "$case reshard verifies x$n" "$dcpctl" verify --deep "$work/d-$case-w4-$n"
  done
done

# The resharded output loads in real torch (dcp_to_torch_save) like the single-process one.
check "distributed reshard loads in torch" "$py" - "$work/s-sample-w4" "$work/d-sample-w4-3" <<'EOF'
import sys, torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
dcp_to_torch_save(sys.argv[1], "/tmp/dcpctl-dist-a.pt"); dcp_to_torch_save(sys.argv[2], "/tmp/dcpctl-dist-b.pt")
a = torch.load("/tmp/dcpctl-dist-a.pt", weights_only=False); b = torch.load("/tmp/dcpctl-dist-b.pt", weights_only=False)
def flat(d, p=""):
    for k, v in d.items():
        if isinstance(v, dict): yield from flat(v, p + k + ".")
        else: yield p + k, v
fa, fb = dict(flat(a)), dict(flat(b))
assert fa.keys() == fb.keys()
for k in fa:
    if isinstance(fa[k], torch.Tensor): assert torch.equal(fa[k], fb[k]), k
    else: assert fa[k] == fb[k], k
EOF

# Faults: rank 1 dies (SIGKILL) before writing its share. Launched by hand (no torchrun agent
# to tear the job down), rank 0 must give up after --timeout, name rank 1, exit non-zero, and
# leave no output or temporary file behind.
port=$((29600 + RANDOM % 300))
for what in consolidate reshard; do
  out=$work/fault-$what
  [ $what = consolidate ] && args=(consolidate "$fixtures/sample/ckpt" -o "$out.safetensors")
  [ $what = reshard ] && args=(reshard "$fixtures/sample/ckpt" -o "$out" -w 2)
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DCPCTL_FAILPOINT="$what-write:1" \
      "$dcpctl" "${args[@]}" -q --timeout 5 >"$work/fault-$r.log" 2>&1 &
    pids[$r]=$!
  done
  wait "${pids[0]}"; rc0=$?
  wait "${pids[1]}"; rc1=$?
  check "$what: surviving rank 0 fails (rc $rc0)" test "$rc0" -ne 0
  check "$what: killed rank 1 (rc $rc1)" test "$rc1" -ne 0
  check "$what: rank 0 names rank 1" grep -q "rank 1" "$work/fault-0.log"
  check "$what: nothing left behind" test -z "$(find "$work" -maxdepth 1 -name "*fault-$what*" -o -maxdepth 1 -name ".*dcpctl-tmp*")"
  port=$((port + 1))
done
# A second run succeeds.
check "second run after a fault succeeds" run_tr 2 consolidate "$fixtures/sample/ckpt" -o "$work/after.safetensors" -q
[ $fail -eq 0 ] && echo "torchrun tests passed" || echo "torchrun tests FAILED"
exit $fail
