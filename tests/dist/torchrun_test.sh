#!/usr/bin/env bash
# Distributed runs under the virtualenv's torchrun and a plain environment launcher (2 and 3
# processes on this machine, c10d TCPStore): outputs must be byte-identical to the single-process run, and a rank that dies must
# make the others fail cleanly, leaving nothing behind.
# usage: torchrun_test.sh DCPCTL VENV_PYTHON FIXTURES_DIR
set -uo pipefail
dcpctl=$1 py=$2 fixtures=$3
source "$(dirname "${BASH_SOURCE[0]}")/../skip.sh"
source "$(dirname "${BASH_SOURCE[0]}")/../ledger.sh"
if [ -z "$py" ] || [ ! -x "$(dirname "$py")/torchrun" ]; then
  skip_or_fail "no virtualenv torchrun (tools/dev.sh creates it)"
fi
torchrun=$(dirname "$py")/torchrun
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
# The --timeout every run gets (seconds): how long a rank waits for a peer before it gives up.
# Checks on how long a failing run took are stated against it, never against a fixed number
# (a sanitizer build is several times slower; DCPCTL_DIST_TIMEOUT lengthens both together). 300 s is
# far above what a loaded 2-core machine stretches a rank's start (LibTorch's plugin loaded: seconds)
# to, so a peer that is merely slow is never taken for a dead one; only a failing run waits for it.
timeout=${DCPCTL_DIST_TIMEOUT:-300}
check() { # check NAME COMMAND...
  if "${@:2}"; then echo "ok   $1"; passed "$1"; else echo "FAIL $1"; fail=1; fi
}
# Through torchrun (its agent hosts the c10d store; every rank is a client).
run_tr() { # run_tr NPROC ARGS... (dcpctl arguments)
  "$torchrun" --standalone --nproc-per-node "$1" --no-python "$dcpctl" "${@:2}" --timeout "$timeout" >"$work/log" 2>&1
}
# As any other launcher would: RANK/WORLD_SIZE/MASTER_* set by hand, rank 0 hosts the store.
# (torchrun costs ~10 s of Python start-up per launch on this machine; this keeps the suite short.)
next_port=$((29300 + RANDOM % 200))
run_tr3() { # run_tr3 NPROC ARGS...: torchrun with {rank} passed through to dcpctl
  "$torchrun" --standalone --nproc-per-node "$1" --no-python "$dcpctl" "${@:2}" --timeout "$timeout" >"$work/log" 2>&1
}
# expect_fail CODE OTHERS TEXT COMMAND...: the run_env command fails, rank 0 exits CODE exactly
# and its log names TEXT, every other rank exits OTHERS exactly (so a crash, 134/137/139, fails);
# OTHERS may list codes as A/B, any of which will do.
expect_fail() {
  local code=$1 others=$2 text=$3 r rc
  shift 3
  "$@" && return 1
  for r in "$work"/rc-*; do
    r=${r##*/rc-}
    rc=$(cat "$work/rc-$r")
    local want=$others
    [ "$r" = 0 ] && want=$code
    [[ "/$want/" == *"/$rc/"* ]] || { echo "rank $r exited $rc, expected $want" >&2; cat "$work/log-$r" >&2; return 1; }
  done
  grep -q "$text" "$work/log-0" || { cat "$work/log-0" >&2; return 1; }
}
run_env() { # run_env NPROC ARGS... (each rank's exit code in $work/rc-RANK)
  local n=$1 r rc=0 pids=()
  shift
  rm -f "$work"/rc-*
  next_port=$((next_port + 1))
  for ((r = 0; r < n; r++)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$next_port \
      "$dcpctl" "$@" --timeout "$timeout" >"$work/log-$r" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < n; r++)); do
    local one=0
    wait "${pids[$r]}" || one=$?
    echo "$one" >"$work/rc-$r"
    [ "$one" = 0 ] || rc=1
  done
  return $rc
}
same_tree() { # same_tree A B: same files with the same bytes (.metadata holds a fresh save id, and the
  # manifest its digest), and the manifests' digests of every other file the same
  diff <(cd "$1" && find . -type f ! -name .metadata | sort) <(cd "$2" && find . -type f ! -name .metadata | sort) >/dev/null || return 1
  local f
  while read -r f; do cmp -s "$1/$f" "$2/$f" || return 1; done < <(cd "$1" && find . -type f ! -name .metadata ! -name dcpctl-manifest.json)
  same_manifest "$1/dcpctl-manifest.json" "$2/dcpctl-manifest.json" '"\.metadata"|"source"'
}
same_manifest() { # same_manifest A B [IGNORE]: the manifests equal but for lines matching IGNORE
  # and their per-tensor digests: a run under torchrun writes none (`tensors` null, write/tensor_hash.h),
  # one process does; every file's size and SHA-256 are compared.
  local ignore=${3:-'"source"'}
  [ -f "$1" ] && [ -f "$2" ] || { echo "no manifest: $1 or $2"; return 1; }
  diff <(files_of_manifest "$1" | grep -Ev "$ignore") <(files_of_manifest "$2" | grep -Ev "$ignore")
}
files_of_manifest() { # the manifest without its `tensors`, one key a line as dcpctl writes it
  python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); m.pop("tensors", None); print(json.dumps(m, indent=2, sort_keys=True))' "$1"
}
same_output() { # same_output A B: the same outputs byte for byte, and their manifests the same but for
  # the source each names (the --local-files run reads its own copies)
  diff -r -x '*dcpctl-manifest.json' "$1" "$2" || return 1
  local m
  while read -r m; do same_manifest "$1/$m" "$2/$m" || return 1; done < <(cd "$1" && find . -name '*dcpctl-manifest.json')
  [ "$(cd "$1" && find . -name '*dcpctl-manifest.json' | sort)" = "$(cd "$2" && find . -name '*dcpctl-manifest.json' | sort)" ]
}

for case in sample dtensor_2d_mesh all_dtypes_sharded; do
  ck=$fixtures/$case/ckpt
  # The single-process outputs each distributed run must equal: every output format, and a reshard
  # to 4 target ranks (made once a case: under ASan each run is seconds of start-up).
  "$dcpctl" consolidate "$ck" -o "$work/s-$case.safetensors" -q --force
  "$dcpctl" consolidate "$ck" -o "$work/s-$case-hf/" --max-shard-size 20KB -q --force
  "$dcpctl" consolidate "$ck" -o "$work/s-$case.pt" -q --force
  "$dcpctl" reshard "$ck" -o "$work/s-$case-w4" -w 4 -q --force
  for n in 2 3; do
    launch=run_env
    [ $case = sample ] && [ $n = 2 ] && launch=run_tr
    check "$case consolidate safetensors x$n" $launch "$n" consolidate "$ck" -o "$work/d-$case-$n.safetensors" -q
    check "$case safetensors identical x$n" cmp "$work/s-$case.safetensors" "$work/d-$case-$n.safetensors"
    check "$case consolidate hf x$n" $launch "$n" consolidate "$ck" -o "$work/d-$case-hf-$n/" --max-shard-size 20KB -q
    check "$case hf identical x$n" same_output "$work/s-$case-hf" "$work/d-$case-hf-$n"
    check "$case consolidate pt x$n" $launch "$n" consolidate "$ck" -o "$work/d-$case-$n.pt" -q
    check "$case pt identical x$n" cmp "$work/s-$case.pt" "$work/d-$case-$n.pt"
    check "$case reshard x$n" $launch "$n" reshard "$ck" -o "$work/d-$case-w4-$n" -w 4 -q
    check "$case reshard identical x$n" same_tree "$work/s-$case-w4" "$work/d-$case-w4-$n"
    check "$case reshard verifies x$n" "$dcpctl" verify --deep "$work/d-$case-w4-$n"
  done
done

# Casting on the way, and --parallel-write (each rank writes whole shards).
ck=$fixtures/all_dtypes_sharded/ckpt
"$dcpctl" consolidate "$ck" -o "$work/s-cast.safetensors" --dtype bf16 -q
check "consolidate --dtype bf16 x3" run_env 3 consolidate "$ck" -o "$work/d-cast.safetensors" --dtype bf16 -q
check "cast output identical x3" cmp "$work/s-cast.safetensors" "$work/d-cast.safetensors"
# Saved views that are not contiguous (all_dtypes' layout.*): whether a .pt record streams is
# decided by one rule for both launchers, so the files are byte-identical (they were not: the
# single-process run assembled those records, torchrun streamed them).
ck=$fixtures/all_dtypes/ckpt
for dt in none bf16; do
  extra=()
  [ $dt = bf16 ] && extra=(--dtype bf16)
  "$dcpctl" consolidate "$ck" -o "$work/s-views-$dt.pt" "${extra[@]}" -q
  check "non-contiguous views .pt ($dt) x2" run_env 2 consolidate "$ck" -o "$work/d-views-$dt.pt" "${extra[@]}" -q
  check "non-contiguous views .pt ($dt) identical" cmp "$work/s-views-$dt.pt" "$work/d-views-$dt.pt"
done
for case in sample dtensor_2d_mesh; do
  check "$case --parallel-write x3" run_env 3 consolidate "$fixtures/$case/ckpt" -o "$work/pw-$case/" --max-shard-size 20KB --parallel-write -q
  check "$case --parallel-write identical" same_output "$work/s-$case-hf" "$work/pw-$case"
done

# --local-files: the data files dealt out over per-rank directories, .metadata only in rank 0's
# (the others receive it); every output format byte-identical to the single-process run.
for case in sample dtensor_2d_mesh zstd; do
  ck=$fixtures/$case/ckpt
  split=$work/split-$case
  mkdir -p "$split/r0" "$split/r1" "$split/r2"
  cp "$ck/.metadata" "$split/r0/"
  i=0
  for f in "$ck"/*.distcp; do cp "$f" "$split/r$((i % 3))/"; i=$((i + 1)); done
  for out in x.safetensors x.pt hf/; do
    extra=()
    [ $out = hf/ ] && extra=(--max-shard-size 20KB)
    rm -rf "$work/lf-s" "$work/lf-d" && mkdir -p "$work/lf-s" "$work/lf-d"
    "$dcpctl" consolidate "$ck" -o "$work/lf-s/$out" "${extra[@]}" -q
    launch=run_env
    [ $case = sample ] && [ $out = x.pt ] && launch=run_tr3
    check "$case --local-files $out x3" $launch 3 consolidate "$split/r{rank}" --local-files -o "$work/lf-d/$out" "${extra[@]}" -q
    check "$case --local-files $out identical" same_output "$work/lf-s" "$work/lf-d"
  done
done
# A file no rank can see is refused before anything is written.
rm "$work/split-sample/r1/"*.distcp
check "--local-files: a file nobody sees is refused" expect_fail 3 3 "no rank can read" run_env 3 consolidate "$work/split-sample/r{rank}" --local-files -o "$work/lf-missing.safetensors" -q

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
# to tear the job down), rank 0 must give up after --timeout, name rank 1, exit 4 (the lost peer
# is an I/O error), and leave no output or temporary file behind.
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
  check "$what: surviving rank 0 exits 4 (rc $rc0)" test "$rc0" = 4
  check "$what: rank 1 killed by the failpoint's SIGKILL (rc $rc1)" test "$rc1" = 137
  check "$what: rank 0 names rank 1" grep -q "rank 1" "$work/fault-0.log"
  check "$what: nothing left behind" test -z "$(find "$work" -maxdepth 1 -name "*fault-$what*" -o -maxdepth 1 -name ".*dcpctl-tmp*")"
  port=$((port + 1))
done
# Rank 1 dies mid-transfer (SIGKILL after pushing two windows to rank 0): rank 0 names it and
# fails within seconds (the dead peer's connection closes; no --timeout wait) with exit 4, rank 2
# learns that rank 0 ended the run and exits with the same code (4: rank 0's announcement carries
# it), and nothing is left behind.
start=$SECONDS
DCPCTL_FAILPOINT=exchange-push:1 run_env 3 consolidate "$fixtures/sample/ckpt" -o "$work/mid.safetensors" -q
check "mid-run kill: rank 0 exits 4 (rc $(cat "$work/rc-0"))" test "$(cat "$work/rc-0")" = 4
check "mid-run kill: rank 1 killed by SIGKILL (rc $(cat "$work/rc-1"))" test "$(cat "$work/rc-1")" = 137
check "mid-run kill: rank 2 exits 4, rank 0's code (rc $(cat "$work/rc-2"))" test "$(cat "$work/rc-2")" = 4
check "mid-run kill: rank 0 names rank 1" grep -q "rank 1 died" "$work/log-0"
check "mid-run kill: rank 2 names rank 0's outcome" grep -q "rank 0 ended the run" "$work/log-2"
# Within seconds means: before --timeout could have fired (a run that waited for it took longer).
check "mid-run kill: over in $((SECONDS - start)) s, before --timeout ($timeout s) could end it" \
  test $((SECONDS - start)) -lt "$timeout"
check "mid-run kill: rank 0 did not wait for --timeout" bash -c '! grep -q "no answer from" "$1"' _ "$work/log-0"
check "mid-run kill: nothing left behind" test -z "$(find "$work" -maxdepth 1 -name "mid*" -o -maxdepth 1 -name ".*dcpctl-tmp*")"
# A rank that cannot read its share (a truncated file) stops the run at once with its message
# and the exit code of a broken checkpoint (3).
cp -r "$fixtures/sample/ckpt" "$work/broken"
truncate -s 3000 "$work/broken/__1_0.distcp"
check "owner's read error reaches rank 0" expect_fail 3 3 "could not read its share: .*__1_0.distcp: offset" \
  run_env 3 consolidate "$work/broken" -o "$work/broken.safetensors" -q
check "owner's read error: nothing left behind" test ! -e "$work/broken.safetensors"
# One bit flipped in tensor data of rank 1's file (headers and .metadata intact): the rank that
# reads those bytes checks the record's CRC-32 and the run stops, rank 0 with exit 3 naming the
# record, leaving nothing (consolidate over 3 processes, reshard over 2). The other ranks exit 3
# with rank 0's announcement, or 4 where rank 0, which hosts the store under this launcher, was
# gone before a rank blocked in a transfer could read it (seen once in ~20 runs; not a crash).
cp -r "$fixtures/sample/ckpt" "$work/flipped"
rec=$(python3 "$(dirname "$0")/../corruption/crc_test.py" --flip-tensor "$work/flipped/__1_0.distcp")
check "flipped bit: consolidate stops with exit 3, naming the CRC-32" \
  expect_fail 3 3/4 "__1_0.distcp: offset $rec: .*CRC-32" run_env 3 consolidate "$work/flipped" -o "$work/flipped.safetensors" -q
check "flipped bit: reshard too" \
  expect_fail 3 3 "__1_0.distcp: offset $rec: .*CRC-32" run_env 2 reshard "$work/flipped" -o "$work/flipped-w2" -w 2 -q
check "flipped bit: nothing left behind" test -z "$(find "$work" -maxdepth 1 -name "flipped.*" -o -maxdepth 1 -name "flipped-w2*" -o -maxdepth 1 -name ".flipped*")"
# reshard: a target rank only process 1 writes reads a damaged item (the zip header of
# tok_emb's second dim-0 shard, rows 48.. = target rank 1 of 2); rank 0 reports process 1's
# failure with its exit code (3, a damaged checkpoint), not 1.
cp -r "$fixtures/sample/ckpt" "$work/damaged"
at=$("$dcpctl" inspect --json --chunks "$work/damaged" | python3 -c '
import json, sys
it = [i for i in json.load(sys.stdin)["items"] if i["key"] == "app.model.tok_emb.weight"][0]
print(next(c["offset"] for c in it["chunk_list"] if c["offsets"][0] == 48 and c["file"] == "__1_0.distcp"))')
printf '\0\0\0\0' | dd of="$work/damaged/__1_0.distcp" bs=1 seek="$at" conv=notrunc status=none
check "reshard: rank 1's read error keeps its exit code on rank 0" \
  expect_fail 3 3 "rank 1 failed: .*__1_0.distcp: offset $at: key 'app.model.tok_emb.weight'" \
  run_env 2 reshard "$work/damaged" -o "$work/damaged-w2" -w 2 -q
check "reshard: rank 1's read error: nothing left behind" \
  test -z "$(find "$work" -maxdepth 1 -name "damaged-w2*" -o -maxdepth 1 -name ".damaged-w2*")"
# The same with a third process that writes no target rank: it learns of the failure only from
# rank 0's announcement, and must exit with its code (3), not a generic 1.
check "reshard: a bystander rank exits with the failure's code" \
  expect_fail 3 3 "rank 1 failed: .*__1_0.distcp: offset $at: key 'app.model.tok_emb.weight'" \
  run_env 3 reshard "$work/damaged" -o "$work/damaged-w2" -w 2 -q
check "reshard: bystander: rank 2 says rank 0 ended the run" grep -q "rank 0 ended the run: .*rank 1 failed" "$work/log-2"
# Rank 0's own failure in set-up (the output exists, no --force: a usage error) reaches the others
# with its code: every rank exits 2.
mkdir -p "$work/exists-out"
check "setup failure: every rank exits rank 0's code 2" \
  expect_fail 2 2 "exists" run_env 2 reshard "$fixtures/sample/ckpt" -o "$work/exists-out" -w 2 -q
check "setup failure: rank 1 names rank 0's refusal" grep -q "rank 0 failed: .*exists" "$work/log-1"
check "setup failure: consolidate too" \
  expect_fail 2 2 "exists" run_env 2 consolidate "$fixtures/sample/ckpt" -o "$work/exists-out" --format hf -q
check "setup failure: consolidate's other rank names rank 0's refusal" grep -q "rank 0 failed: .*exists" "$work/log-1"
# A dry run refuses what the real run would, on every rank (rank 1 used to exit 0 here).
check "setup failure: a dry run too" \
  expect_fail 2 2 "exists" run_env 2 consolidate "$fixtures/sample/ckpt" -o "$work/exists-out" --format hf --dry-run -q
check "setup failure: a reshard dry run too" \
  expect_fail 2 2 "exists" run_env 2 reshard "$fixtures/sample/ckpt" -o "$work/exists-out" -w 2 --dry-run -q
check "setup failure: reshard dry run: rank 1 names rank 0's refusal (the message consolidate gives)" grep -q "rank 0 failed: .*exists" "$work/log-1"
rmdir "$work/exists-out"
# Ranks given different commands fail together (usage error) before any work.
next_port=$((next_port + 1))
for r in 0 1; do
  dt=()
  [ $r = 1 ] && dt=(--dtype bf16)
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$next_port "$dcpctl" consolidate "$fixtures/sample/ckpt" \
    -o "$work/mismatch.safetensors" "${dt[@]}" -q --timeout 30 >"$work/log-$r" 2>&1 &
  pids[$r]=$!
done
wait "${pids[0]}"; rc0=$?
wait "${pids[1]}"; rc1=$?
check "different commands: both exit 2 ($rc0, $rc1)" test "$rc0" = 2 -a "$rc1" = 2
check "different commands: named" grep -q "different command" "$work/log-0"

# --backend nccl: the plugin is built wherever NCCL is (tools/dev.sh installs nothing else for
# it); on a machine without GPUs every rank refuses (exit 5); with a GPU the run's output equals
# the gloo run's. Whichever applies is said, never passed over in silence.
if [ ! -f "$(dirname "$dcpctl")/libdcpctl_nccl.so" ]; then
  if grep -q '^DCPCTL_NCCL_BUILT:INTERNAL=ON' "$(dirname "$dcpctl")/../CMakeCache.txt" 2>/dev/null; then
    check "--backend nccl: libdcpctl_nccl.so was configured but is not built" false
  else
    echo "note --backend nccl not checked: this build found no NCCL (no libdcpctl_nccl.so)"
  fi
elif nvidia-smi -L 2>/dev/null | grep -q GPU; then
  check "--backend nccl on GPUs: the run succeeds" run_env 2 consolidate "$fixtures/sample/ckpt" \
    -o "$work/nccl.safetensors" --backend nccl -q
  check "--backend nccl on GPUs: its output equals the gloo run's" run_env 2 consolidate \
    "$fixtures/sample/ckpt" -o "$work/gloo.safetensors" -q
  check "--backend nccl on GPUs: byte-identical" cmp "$work/nccl.safetensors" "$work/gloo.safetensors"
else
  check "--backend nccl without a GPU is refused" expect_fail 5 5 "has 0 GPU" \
    run_env 2 consolidate "$fixtures/sample/ckpt" -o "$work/nccl.safetensors" --backend nccl -q
fi

# A second run succeeds.
check "second run after a fault succeeds" run_tr 2 consolidate "$fixtures/sample/ckpt" -o "$work/after.safetensors" -q
[ $fail -eq 0 ] || { echo "torchrun tests FAILED"; exit 1; }
echo "torchrun tests passed"
# What a full run always makes: 3 fixtures x 2 launches x 9, the cast 2, the views 4, --parallel-write
# 4, --local-files 18, 2 more, the failpoints 8, and the 22 checks after them (the --backend nccl
# ones depend on the machine and are not counted here).
checks_at_least 114
