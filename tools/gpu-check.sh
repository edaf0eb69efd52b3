#!/usr/bin/env bash
# tools/gpu-check.sh: every check of dcpctl that needs an NVIDIA GPU, in one command, one report.
#
#   tools/gpu-check.sh [--out DIR] [--build DIR] [--python PY] [--quick] [--force] [--list]
#
# Checks (each ends PASS, FAIL or SKIP with its reason, in DIR/report.txt):
#   build     build/ brought up to date (dcpctl, its LibTorch and NCCL plugins, bench_tests), or made
#   version   dcpctl --version names the NVIDIA driver and every CUDA device
#   ctest     the CUDA tests, ctest -R '^bench-' (bench_tests, bench-staging-gpu,
#             bench-torch-staging-script): with a GPU they must pass, not skip
#   staging   dcpctl bench staging in every mode (pinned, registered, pageable, cold) at 64MiB,
#             256MiB, 1GiB and 4GiB, next to torch staging the same sizes in the same run
#             (bench/torch_staging.py: a cached pinned copy_, gpu.cpu(), .to("cpu",
#             non_blocking=True), DefaultStager, async_save's own stager), as ratios to torch's
#             pinned copy; then 4 streams, 16MiB chunks, a checkpoint's tensors and --write-to
#   nccl      consolidate (.safetensors, .pt, HF dir) under torchrun --backend nccl, one rank per
#             GPU, byte-compared with the Gloo run and the single-process one, on three fixtures
#             and a 1.6 GB checkpoint written by torch; reshard under torchrun (it has no
#             --backend: its ranks move no bytes); a rank whose LOCAL_RANK has no GPU is refused
#
# With one GPU the torchrun runs have one rank (WORLD_SIZE=1 runs as one process: NCCL is not
# loaded), and transfers between NCCL ranks are a SKIP: NCCL refuses two ranks on one device.
#
#   --out DIR     report.txt and the raw outputs (JSON, tables, logs); default a fresh
#                 /tmp/dcpctl-gpu-check-XXXXXX
#   --build DIR   the CMake build tree (default build/); --python PY: torch with CUDA (default .venv)
#   --quick       sizes 64MiB and 1GiB, 3 iterations, fixtures only: for a short lease
#   --force       run even where no GPU is detected (each check then fails, saying why)
#   --list        print the checks and exit
#
# Needs what `tools/dev.sh setup` provides (run when .venv is missing; it needs the network) and,
# to build, the CUDA toolkit (nvcc): the CUDA torch wheel's CMake config will not configure
# without it. Building the four targets from scratch takes about 5 CPU-minutes (7.5 minutes on
# this project's 2-core CI VM; 75-81 s on the lent H100 machine's 16 cores). Measured there:
# --quick's checks about 3 minutes; a full run's more than 7.5 (stopped at 535 s in all, build
# included, in its last step): a full run needs a call of 10 minutes. OFFLINE machines (no network, as the GPU machines lent to this project):
# carry .venv, .deps and build/ along, with the repository at the same absolute path (build/
# records it, and its plugins find LibTorch in .venv through it), or pass --python a Python
# whose torch has CUDA and let it build (that needs the toolkit and the Debian packages there).
#
# Exit: 0 every check passed (a SKIP only for what the machine cannot do), 1 a check failed,
# 2 usage, 5 no GPU: seen from /dev/nvidia[0-9]* or nvidia-smi before anything is built or
# written, it lists what it would run, in well under a second.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="" build=$root/build py=$root/.venv/bin/python quick=0 force=0
checks() { sed -n '/^# Checks/,/^#$/{/^# Checks/d;/^#$/d;s/^# //;p}' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --out | --build | --python)
      [ $# -ge 2 ] || { echo "gpu-check.sh: $1 needs a value" >&2; exit 2; }
      case $1 in --out) out=$2 ;; --build) build=$2 ;; --python) py=$2 ;; esac
      shift 2 ;;
    --quick) quick=1; shift ;;
    --force) force=1; shift ;;
    --list) checks; exit 0 ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu-check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

# The device nodes the driver makes (/dev/nvidia0, ...), else nvidia-smi's list. Nothing slower.
gpu_seen() {
  compgen -G '/dev/nvidia[0-9]*' >/dev/null && return 0
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}
if [ $force = 0 ] && ! gpu_seen; then
  { echo "gpu-check.sh: no NVIDIA GPU here (no /dev/nvidia[0-9]*, and nvidia-smi lists none): nothing was run."
    echo "On a machine with one it runs:"; checks; } >&2
  exit 5
fi

[ -n "$out" ] || out=$(mktemp -d /tmp/dcpctl-gpu-check-XXXXXX)
mkdir -p "$out/logs" "$out/staging"
out=$(cd "$out" && pwd)
work=$out/work  # checkpoints and outputs, removed at the end
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
report=$out/report.txt
: >"$report"
dcpctl=$build/cmd/dcpctl
fixtures=$root/tests/fixtures
npass=0 nfail=0 nskip=0
note() { printf '%s\n' "$*" | tee -a "$report"; }  # the report, on stdout as it grows
result() { # result PASS|FAIL|SKIP CHECK TEXT
  case $1 in PASS) npass=$((npass + 1)) ;; FAIL) nfail=$((nfail + 1)) ;; SKIP) nskip=$((nskip + 1)) ;; esac
  note "$(printf '%-4s %-8s %s' "$1" "$2" "$3")"
}
# check CHECK LOG WHAT COMMAND...: PASS with WHAT, or FAIL with WHAT and the log's last line.
check() {
  local name=$1 log=$out/logs/$2.log what=$3
  shift 3
  if "$@" >"$log" 2>&1; then result PASS "$name" "$what"
  else result FAIL "$name" "$what: $(lastline "$log") (logs/${log##*/})"; fi
}
lastline() { grep -v '^[[:space:]]*$' "$1" | tail -n 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
if [ $quick = 1 ]; then sizes=64MiB,1GiB iters=3 warmup=1 big_sizes=1GiB
else sizes=64MiB,256MiB,1GiB,4GiB iters=10 warmup=2 big_sizes=1GiB,4GiB; fi

commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
how=$(if [ $quick = 1 ]; then echo ", --quick"; fi)
note "dcpctl GPU check, $(date -u +%FT%TZ) on $(hostname) ($(nproc) cores), commit $commit$how"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
  note "$(nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max \
    --format=csv,noheader 2>&1 | sed 's/^/GPU /')"
fi

# ---- build: set-up when .venv is missing, then configure (once) and build what the checks run.
build_tree() {
  if [ ! -x "$py" ]; then
    [ "$py" = "$root/.venv/bin/python" ] || { echo "no Python at $py"; return 1; }
    if ! "$root/tools/dev.sh" setup; then
      echo "tools/dev.sh setup failed (offline? carry .venv, .deps and build/: see --help)"
      return 1
    fi
  fi
  if ! command -v cmake >/dev/null; then
    [ -x "$dcpctl" ] || { echo "no cmake and no $dcpctl"; return 1; }
    echo "no cmake here: $build used as it is, not rebuilt"
    return 0
  fi
  if [ ! -f "$build/CMakeCache.txt" ]; then
    if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
      echo "no $build, and no CUDA toolkit (nvcc) to make it: the CUDA torch wheel's CMake config needs one"
      return 1
    fi
    if [ ! -f "$root/.deps/gloo/include/gloo/rendezvous/store.h" ] && ! "$root/tools/dev.sh" setup; then
      echo "tools/dev.sh setup failed (offline?): configuring with what is here"
    fi
    # The tests are Catch2 2; a machine with only Catch2 3 (Ubuntu 24.04) takes Debian's catch2
    # package unpacked into .deps/catch2 (usr/include and usr/lib moved up), carried along.
    local catch2=()
    [ -f "$root/.deps/catch2/lib/cmake/Catch2/Catch2Config.cmake" ] && catch2=(-DCatch2_DIR="$root/.deps/catch2/lib/cmake/Catch2")
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDCPCTL_PYTHON="$py" "${catch2[@]}" || return 1
  fi
  local home targets=(dcpctl bench_tests)
  home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
  if [ "$home" != "$root" ]; then
    echo "$build was configured for $home, not $root: carry the repository to the same path"
    return 1
  fi
  if [ -d "$build/src/CMakeFiles/dcpctl_nccl.dir" ]; then targets+=(dcpctl_nccl); fi
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" || return 1
  echo "${targets[*]} up to date"
}
t0=$SECONDS
check build build "$build" build_tree
if [ ! -x "$dcpctl" ]; then
  for c in version ctest staging nccl; do result FAIL "$c" "not run: no $dcpctl"; done
  note "$npass passed, $nfail failed, $nskip skipped in $SECONDS s: see $out"
  exit 1
fi
note "     build took $((SECONDS - t0)) s: $(lastline "$out/logs/build.log")"
"$py" -c 'import torch as t; print(t.__version__, t.version.cuda, t.cuda.is_available(), t.cuda.device_count())' \
  >"$out/logs/torch.log" 2>&1 || true
torch_info=$(lastline "$out/logs/torch.log")
read -r torch_version torch_cuda torch_ok ngpu <<<"$torch_info" || true
note "torch $torch_version (CUDA $torch_cuda): cuda.is_available() $torch_ok, $ngpu device(s) (logs/torch.log)"
[[ "$ngpu" =~ ^[0-9]+$ ]] || ngpu=0

# ---- version
"$dcpctl" --version >"$out/version.txt" 2>&1 || true
names_gpu() {
  grep -q '^CUDA: usable (.*; driver ' "$out/version.txt" && grep -q '^CUDA device 0: ' "$out/version.txt" && return 0
  echo "expected 'CUDA: usable (...); driver ...' and 'CUDA device 0: ...'"
  return 1
}
check version version "dcpctl --version: $(grep '^CUDA' "$out/version.txt" | paste -sd '|' | sed 's/|/; /g')" names_gpu

# ---- ctest: every bench- test passes, but bench-staging-no-gpu, which skips where there is a GPU.
ctest_gpu() {
  command -v ctest >/dev/null || { echo "no ctest (CMake) here"; return 1; }
  DCPCTL_REQUIRE_VENV=1 ctest --test-dir "$build" -R '^bench-' --output-on-failure --timeout 900 \
    >"$out/ctest.txt" 2>&1 || true
  "$py" - "$out/ctest.txt" <<'PY'
import re, sys
rows = re.findall(r"^\s*\d+/\d+ Test\s+#\d+: (.*?) \.*\s*(?:\*\*\*)?(\w[\w :]*?)\s+[\d.]+ sec$",
                  open(sys.argv[1]).read(), re.M)
bad = [f"{n}: {s}" for n, s in rows if s != "Passed" and not (n == "bench-staging-no-gpu" and s == "Skipped")]
print(f"{sum(s == 'Passed' for _, s in rows)} of {len(rows)} passed" + (", failed: " + "; ".join(bad) if bad else ""))
sys.exit(1 if bad or not rows else 0)
PY
}
status=FAIL
ctest_gpu >"$out/logs/ctest.log" 2>&1 && status=PASS
result $status ctest "ctest -R '^bench-': $(lastline "$out/logs/ctest.log") (ctest.txt)"

# ---- staging: the sweep beside torch, then streams, chunks, a checkpoint's tensors, --write-to.
ckpt=$fixtures/sample/ckpt
if [ $quick = 0 ]; then  # one rank's share of a real-sized model, for staging and for nccl
  check staging big-ckpt "a 1.6 GB checkpoint by torch (bench/make_big_ckpt.py --layers 2)" \
    "$py" "$root/bench/make_big_ckpt.py" "$work/big" --layers 2
  if [ -f "$work/big/.metadata" ]; then ckpt=$work/big; fi
fi
sweep() { bash "$root/bench/staging.sh" --dcpctl "$dcpctl" --python "$py" --out "$out/staging" "$@" \
  >"$out/staging/table.txt"; }
bench_json() { local f=$1; shift; "$dcpctl" bench staging --json "$@" >"$out/staging/$f"; }
check staging sweep "$sizes, every mode, dcpctl and torch (staging/table.txt)" \
  sweep --sizes "$sizes" --iters "$iters" --warmup "$warmup"
check staging streams "4 streams, $big_sizes" \
  bench_json streams4.json --streams 4 --sizes "$big_sizes" --iters "$iters" --warmup "$warmup"
check staging chunks "4 streams in 16MiB chunks, 1GiB" \
  bench_json chunks.json --streams 4 --chunk 16MiB --sizes 1GiB --iters "$iters" --warmup "$warmup"
mkdir -p "$work/scratch"
check staging checkpoint "rank 0 of ${ckpt#"$root/"}: per tensor vs flat, then written with and without fsync" \
  bench_json checkpoint.json --from-checkpoint "$ckpt" --rank 0 --write-to "$work/scratch" --fsync --iters 3 --warmup 1
"$py" - "$out/staging" <<'PY' | tee -a "$report" || true
import json, os, sys
d = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(d, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
dc, tc = load("dcpctl.json"), load("torch.json")
extra = [j for j in map(load, ("streams4.json", "chunks.json", "checkpoint.json")) if j]
def gbps(r):
    return (r.get("gbps") or {}).get("median") if r.get("status") == "ok" else None
def size(n):
    return f"{n >> 30} GiB" if n % (1 << 30) == 0 else f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n} B"
def line(n, tool, r, ref):
    g = gbps(r)
    gs, ratio = (f"{g:7.2f}", f"{g / ref:6.2f}x" if ref else "      -") if g else ("      -", "      -")
    why = "" if r.get("status") == "ok" else f"  {r.get('status')}: {r.get('reason')}"
    mode = r["mode"] + (f"/{size(r['chunk_bytes'])}" if r.get("chunk_bytes") else "")
    return (f"  {size(n):>8} {tool:6} {mode:18} {r.get('streams', 1):>2} {str(r.get('timing')):11} "
            f"{gs} {ratio}{why}")
if not dc or not tc:
    print("staging: no table (the sweep did not finish)")
    sys.exit(0)
dev = dc.get("device") or {}
pcie = dc.get("pcie") or {}
print(f"\nStaging on {dev.get('name')}, PCIe {pcie.get('speed_gts')} GT/s x{pcie.get('width')}: median GB/s, and the"
      " ratio to torch's pinned copy_ of the same size (cached pinned buffer, CUDA events)")
print(f"  {'SIZE':>8} {'TOOL':6} {'MODE':18} {'ST':>2} {'TIMING':11} {'GB/s':>7} {'RATIO':>7}")
for n in dc["config"]["sizes"]:
    ref = next((gbps(r) for r in tc["results"] if r["bytes"] == n and r["mode"] == "pinned"), None)
    for r in dc["results"] + [r for j in extra for r in j["results"]]:
        if r["bytes"] == n and r["direction"] == "d2h" and r["mode"] not in ("per-tensor", "flat"):
            print(line(n, "dcpctl", r, ref))
    for r in tc["results"]:
        if r["bytes"] == n:
            print(line(n, "torch", r, ref))
for j in extra:
    for r in j["results"]:
        if r["mode"] in ("per-tensor", "flat") or r["direction"] == "h2file":
            print(line(r["bytes"], "dcpctl", r, None) + f"  ({r['copies']} cop{'y' if r['copies'] == 1 else 'ies'})")
PY

# ---- nccl: consolidate under torchrun, NCCL against Gloo against one process; reshard; a refusal.
under_torchrun() { "$py" -m torch.distributed.run --standalone --nproc-per-node "$1" --no-python "$dcpctl" "${@:2}"; }
# consolidate_three CKPT OUT ARGS...: one process, then torchrun with Gloo, then with NCCL; all equal.
consolidate_three() {
  local ck=$1 o=$2 t
  shift 2
  rm -rf "$work/one" "$work/gloo" "$work/nccl" && mkdir -p "$work/one" "$work/gloo" "$work/nccl"
  "$dcpctl" consolidate "$ck" -o "$work/one/$o" -q "$@" || { echo "one process failed"; return 1; }
  for b in gloo nccl; do
    t=$(now)
    NCCL_DEBUG=WARN under_torchrun "$ngpu" consolidate "$ck" -o "$work/$b/$o" --backend "$b" --timeout 300 -q "$@" ||
      { echo "torchrun --backend $b failed"; return 1; }
    echo "$b: $(since "$t") s"
  done
  same_out "$work/gloo" "$work/nccl" && same_out "$work/one" "$work/nccl" && echo "identical"
}
# same_out A B: the same files byte for byte but the manifests, and those the same but for the
# `.metadata` line (a fresh save id) and the per-tensor digests a run under torchrun does not write
# (as tests/dist/torchrun_test.sh's same_output)
manifest_files() {
  "$py" -c 'import json, sys; m = json.load(open(sys.argv[1])); m.pop("tensors", None); print(json.dumps(m, indent=2, sort_keys=True))' "$1" |
    grep -v '"\.metadata"'
}
same_out() {
  diff -r -x .metadata -x '*dcpctl-manifest.json' "$1" "$2" || return 1
  local m
  while read -r m; do diff <(manifest_files "$1/$m") <(manifest_files "$2/$m") || return 1; done < <(cd "$1" && find . -name '*dcpctl-manifest.json')
}
reshard_two() { # the same files with the same bytes (but .metadata, which holds a fresh save id, and
  # the manifest's line for it), as tests/dist/torchrun_test.sh's same_tree
  rm -rf "$work/one" "$work/tr"
  "$dcpctl" reshard "$1" -o "$work/one" -w 4 -q &&
    under_torchrun "$ngpu" reshard "$1" -o "$work/tr" -w 4 --timeout 300 -q &&
    same_out "$work/one" "$work/tr" && echo "identical"
}
# A rank whose LOCAL_RANK has no GPU: that rank exits 5 naming it, no rank crashes, nothing is written.
refusal() {
  local n=$((ngpu + 1)) r rc port=$((29500 + RANDOM % 1000)) pids=() bad=0
  for ((r = 0; r < n; r++)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 300 "$dcpctl" consolidate \
      "$fixtures/sample/ckpt" -o "$work/refused.safetensors" --backend nccl --timeout 60 -q \
      >"$out/logs/refusal-$r.log" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < n; r++)); do
    rc=0
    wait "${pids[$r]}" || rc=$?
    echo "rank $r exited $rc: $(tail -n 1 "$out/logs/refusal-$r.log")"
    if [ $r = "$ngpu" ]; then
      grep -q "LOCAL_RANK $r but this machine has $ngpu GPU" "$out/logs/refusal-$r.log" && [ $rc = 5 ] || bad=1
    elif [ $rc = 0 ] || [ $rc -ge 124 ]; then
      bad=1  # a success, a timeout or a signal
    fi
  done
  [ -z "$(find "$work" -maxdepth 1 -name '*refused*')" ] || { echo "a refused run left files behind"; bad=1; }
  return $bad
}
if [ ! -f "$build/cmd/libdcpctl_nccl.so" ]; then
  result FAIL nccl "not run: no $build/cmd/libdcpctl_nccl.so (built only with CUDA LibTorch and the CUDA toolkit)"
elif [ "$ngpu" -lt 1 ]; then
  result FAIL nccl "not run: torch sees no CUDA device ($torch_info)"
else
  ranks="$ngpu rank(s)"
  [ "$ngpu" = 1 ] && ranks="1 rank: one process, NCCL not loaded"
  cases=(sample all_dtypes_sharded zstd)
  for c in "${cases[@]}"; do
    ck=$fixtures/$c/ckpt
    check nccl "nccl-$c-st" "$c .safetensors, $ranks" consolidate_three "$ck" x.safetensors
    check nccl "nccl-$c-pt" "$c .pt, $ranks" consolidate_three "$ck" x.pt
    check nccl "nccl-$c-hf" "$c HF dir, $ranks" consolidate_three "$ck" hf/ --max-shard-size 20KB
    check nccl "reshard-$c" "$c reshard -w 4 under torchrun, $ngpu rank(s), = one process" reshard_two "$ck"
  done
  if [ "$ckpt" = "$work/big" ]; then
    for f in x.safetensors x.pt; do
      check nccl "nccl-big-${f#x.}" "1.6 GB checkpoint ${f#x}, $ranks" consolidate_three "$ckpt" "$f"
      note "     $(grep -h '^gloo: \|^nccl: ' "$out/logs/nccl-big-${f#x.}.log" | paste -sd ' ')"
    done
    check nccl reshard-big "1.6 GB checkpoint reshard -w 4 under torchrun, $ngpu rank(s)" reshard_two "$ckpt"
  fi
  check nccl refusal "$((ngpu + 1)) ranks, rank $ngpu has no GPU: it exits 5 naming it, the others fail cleanly" refusal
  if [ "$ngpu" = 1 ]; then
    result SKIP nccl "transfers between NCCL ranks: one GPU here, and NCCL refuses two ranks on one device"
  fi
fi

note ""
note "$npass passed, $nfail failed, $nskip skipped in $SECONDS s; report and raw outputs in $out"
[ $nfail = 0 ]
