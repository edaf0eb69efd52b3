#!/usr/bin/env bash
# Benchmark: `dcpctl consolidate -o s3://...` (multipart uploads fed by the writing lanes) against
# the two-step way, a local consolidate followed by `aws s3 cp` of the file, on the same S3 server.
#
#   bench/s3_write.sh [WORKDIR]      (default /tmp/dcpctl-bench-s3w; needs ~1 GB free there)
#
# Environment: DCPCTL (default build/cmd/dcpctl); PYTHON (default .venv/bin/python: torch, and
# moto[server] + boto3 from tools/requirements.txt); ENDPOINT: an S3-compatible server to use
# (with AWS_* credentials in the environment and a bucket BUCKET, default dcpctl-bench) instead of
# the moto server this script starts on 127.0.0.1; MB (checkpoint size, default 350); REPEAT
# (default 3: the table shows medians).
#
# The second step is `aws s3 cp` when the AWS CLI is on PATH, else boto3's upload_file: the same
# transfer manager (s3transfer) `aws s3 cp` uses, with its defaults (8 MiB parts, 10 threads).
# Every output is checked: the object dcpctl wrote equals the local file, byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/dcpctl-bench-s3w}
dcpctl=${DCPCTL:-build/cmd/dcpctl}
py=${PYTHON:-.venv/bin/python}
repeat=${REPEAT:-3}
mb=${MB:-350}
bucket=${BUCKET:-dcpctl-bench}
mkdir -p "$work"

server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -f "$work/local.safetensors"; }
trap cleanup EXIT
if [ -z "${ENDPOINT:-}" ]; then
  port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$py" -m moto.server -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
  server=$!
  export ENDPOINT=http://127.0.0.1:$port AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1
  for _ in $(seq 100); do "$py" -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null && break; sleep 0.1; done
fi
export AWS_ENDPOINT_URL=$ENDPOINT
"$py" - "$bucket" <<'EOF'
import sys, boto3
s3 = boto3.client("s3")
if sys.argv[1] not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
    s3.create_bucket(Bucket=sys.argv[1])
EOF

ckpt=$work/ckpt-$mb
if [ ! -f "$ckpt/.metadata" ]; then
  echo "writing a ${mb} MB checkpoint with torch (dcp.save, one process) to $ckpt" >&2
  "$py" - "$ckpt" "$mb" <<'EOF' 2>/dev/null
import sys, torch, torch.distributed.checkpoint as dcp
g = torch.Generator().manual_seed(1)
n = max(1, int(sys.argv[2]) * 1000 * 1000 // (1400 * 1024 * 4))
sd = {f"layers.{i}.w": torch.randn(1200 + (i * 37) % 400, 1024, generator=g) for i in range(n)}
dcp.save({"model": sd}, checkpoint_id=sys.argv[1], no_dist=True)
EOF
fi

upload() {  # upload FILE KEY: the second step
  if command -v aws >/dev/null; then
    aws s3 cp --only-show-errors "$1" "s3://$bucket/$2"
  else
    "$py" -c "import sys, boto3; boto3.client('s3').upload_file(sys.argv[1], sys.argv[2], sys.argv[3])" "$1" "$bucket" "$2"
  fi
}
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }

a=() b=() b1=()
for _ in $(seq "$repeat"); do
  a+=("$(secs "$dcpctl" consolidate "$ckpt" -o "s3://$bucket/direct.safetensors" --force -q)")
  rm -f "$work/local.safetensors"
  t1=$(secs "$dcpctl" consolidate "$ckpt" -o "$work/local.safetensors" -q)
  t2=$(secs upload "$work/local.safetensors" two-step.safetensors)
  b1+=("$t1")
  b+=("$(echo "$t1 + $t2" | bc)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
bytes=$(stat -c %s "$work/local.safetensors")
ma=$(median "${a[@]}") mb_=$(median "${b[@]}") mb1=$(median "${b1[@]}")
printf '%-48s %8s %8s\n' "run (median of $repeat, $((bytes / 1000000)) MB output)" seconds MB/s
printf '%-48s %8.2f %8.0f\n' "dcpctl consolidate -o s3://" "$ma" "$(echo "$bytes / $ma / 1000000" | bc -l)"
printf '%-48s %8.2f %8.0f\n' "dcpctl consolidate (local) + $(command -v aws >/dev/null && echo 'aws s3 cp' || echo 'boto3 upload_file')" "$mb_" "$(echo "$bytes / $mb_ / 1000000" | bc -l)"
printf '%-48s %8.2f\n' "  of which the local consolidate" "$mb1"
"$py" - "$bucket" "$work/local.safetensors" <<'EOF'
import sys, boto3
body = boto3.client("s3").get_object(Bucket=sys.argv[1], Key="direct.safetensors")["Body"].read()
same = body == open(sys.argv[2], "rb").read()
print("s3:// object equals the local file:", same)
sys.exit(0 if same else 1)
EOF
