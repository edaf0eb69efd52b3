#!/usr/bin/env bash
# Runs `dcpctl bench staging` and PyTorch's own staging (bench/torch_staging.py) in one go, on
# the same GPU with the same sizes, and prints them side by side; both JSON reports are kept.
#
#   bench/staging.sh [--dcpctl PATH] [--python PY] [--out DIR] [--sizes LIST] [--iters N]
#                    [--warmup N] [--device N] [-- EXTRA DCPCTL OPTIONS...]
#
# Defaults: dcpctl from build/cmd/dcpctl (or PATH), the project's .venv python (needs torch with
# CUDA), sizes 4MiB,64MiB,256MiB,1GiB, 10 iterations after 2 warm-up, device 0, and a fresh
# directory under /tmp for the reports. Exit status: 5 when there is no usable GPU, otherwise
# the first failure of the two tools.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
dcpctl=""
py="$root/.venv/bin/python"
out=""
sizes="4MiB,64MiB,256MiB,1GiB"
iters=10
warmup=2
device=0
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --dcpctl) dcpctl=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "staging.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$dcpctl" ]; then
  if [ -x "$root/build/cmd/dcpctl" ]; then dcpctl=$root/build/cmd/dcpctl
  else dcpctl=$(command -v dcpctl || true); fi
fi
[ -x "$dcpctl" ] || { echo "staging.sh: no dcpctl binary (build it, or pass --dcpctl)" >&2; exit 2; }
[ -x "$py" ] || py=$(command -v python3)
[ -n "$out" ] || out=$(mktemp -d /tmp/dcpctl-staging-XXXXXX)
mkdir -p "$out"

echo "staging.sh: dcpctl bench staging ($dcpctl) ..." >&2
set +e
"$dcpctl" bench staging --json --sizes "$sizes" --iters "$iters" --warmup "$warmup" --device "$device" \
  "${extra[@]}" >"$out/dcpctl.json"
rc_d=$?
if [ $rc_d -eq 5 ]; then exit 5; fi
echo "staging.sh: bench/torch_staging.py ($py) ..." >&2
"$py" "$here/torch_staging.py" --sizes "$sizes" --iters "$iters" --warmup "$warmup" --device "$device" \
  >"$out/torch.json"
rc_t=$?
set -e
if [ $rc_d -ne 0 ] && [ ! -s "$out/dcpctl.json" ]; then exit $rc_d; fi
if [ $rc_t -ne 0 ] && [ ! -s "$out/torch.json" ]; then exit $rc_t; fi

python3 - "$out/dcpctl.json" "$out/torch.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t = json.load(open(sys.argv[2]))
dev = d.get("device") or {}
pcie = d.get("pcie") or {}
print(f"GPU {dev.get('name')} ({dev.get('pci_bus_id')}), PCIe {pcie.get('speed_gts')} GT/s x{pcie.get('width')}"
      f" (theory {pcie.get('theoretical_gbps') or 0:.1f} GB/s); torch {t['torch_version']}, CUDA {t['cuda_version']}")
def gb(r):
    g = (r.get("gbps") or {}).get("median")
    return f"{g:8.2f}" if g else "       -"
def ms(r):
    s = (r.get("seconds") or {}).get("median")
    return f"{s * 1e3:10.3f}" if s is not None else "         -"
print(f"\n{'SIZE':>12} {'TOOL':8} {'MODE':11} {'TIMING':12} {'MEDIAN ms':>10} {'GB/s':>8}  CHECK")
for n in d["config"]["sizes"]:
    rows = [("dcpctl", r) for r in d["results"] if r["bytes"] == n and r["direction"] == "d2h"]
    rows += [("torch", r) for r in t["results"] if r["bytes"] == n]
    order = {"pinned": 0, "registered": 1, "pageable": 2, "cold": 3}
    rows.sort(key=lambda x: (order.get(x[1]["mode"], 9), x[0]))
    for tool, r in rows:
        check = "ok" if r.get("verified") else ("WRONG" if r.get("verified") is False else "-")
        print(f"{n:>12} {tool:8} {r['mode']:11} {str(r.get('timing')):12} {ms(r)} {gb(r)}  {check}")
        if tool == "torch" and r.get("host_seconds") and r["timing"] == "cuda-events":
            hs = r["host_seconds"]["median"]
            print(f"{'':>12} {'':8} {'':11} {'host-clock':12} {hs * 1e3:10.3f} {n / hs / 1e9:8.2f}")
PY
echo "staging.sh: reports in $out/dcpctl.json and $out/torch.json" >&2
if [ $rc_d -ne 0 ]; then exit $rc_d; fi
exit $rc_t
