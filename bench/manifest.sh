#!/usr/bin/env bash
# Benchmark: what the manifest costs the copy (docs/integrity.md). consolidate and reshard digest
# each file of their output as they write it (write/write_hash.h): CRC-32 by default, joined from
# every write's CRC in any order; SHA-256 with --manifest sha256, in each file's order. On a 2.4 GB
# checkpoint written by real torch over 4 ranks (bench/make_big_ckpt.py --ranks 4 --layers 4;
# generated on first use under WORKDIR/ckpt-4l-4r, never committed; LAYERS and RANKS change it),
# side by side in one run, the page cache dropped before each, the order shuffled each round:
#   (a)  dcpctl consolidate CKPT -o X.safetensors                     the default (CRC-32) manifest
#   (a2) the same with --manifest sha256
#   (b)  dcpctl reshard CKPT -o OUT -w 2                              the default manifest
#   (b2) the same with --manifest sha256
#   (c)  cat CKPT/*.distcp > out && sync                              the anchor of (a): a durable copy
#   (d)  cp -r CKPT out && sync                                       the anchor of (b)
# With BASE=/path/to/dcpctl (main before CRC-32 manifests: SHA-256, hashed in the file's order),
# (a) and (b) with it too (x_base_*); with PRE=/path/to/dcpctl (4a5c849, before any manifest),
# again (x_pre_*). Each run's line records the load average as it starts (the machine may be
# shared: compare CPU seconds and the ratios round by round). Prints a table with each row against
# its anchor and against PRE round by round, and the JSON manifest_bytes of (a) and (b) (what was
# digested as written and what had to be read back).
#
#   bench/manifest.sh [WORKDIR]     (default /tmp/dcpctl-bench; REPEAT rounds, default 3)
set -euo pipefail
own_ckpt=1
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
layers=${LAYERS:-4} ranks=${RANKS:-4}
ckpt=$work/ckpt-${layers}l-${ranks}r
if [ ! -f "$ckpt/.metadata" ]; then
  echo "== generating the checkpoint under $ckpt ($ranks ranks, $layers layers, real torch)"
  "$py" "$root/bench/make_big_ckpt.py" "$ckpt" --ranks "$ranks" --layers "$layers"
fi
names=(a_consolidate a2_consolidate_sha256 b_reshard b2_reshard_sha256 c_cat_sync d_cp_sync)
[ -n "${BASE:-}" ] && names+=(x_base_consolidate x_base_reshard)
[ -n "${PRE:-}" ] && names+=(x_pre_consolidate x_pre_reshard)
cmd_for() {
  local bin=$dcpctl n=$1
  case $n in x_base_*) bin=$BASE; n=${n#x_base_} ;; x_pre_*) bin=$PRE; n=${n#x_pre_} ;; esac
  case $n in
    a_consolidate|consolidate) echo "'$bin' consolidate '$ckpt' -o '$work/m.safetensors' -q" ;;
    a2_consolidate_sha256) echo "'$bin' consolidate '$ckpt' -o '$work/m.safetensors' -q --manifest sha256" ;;
    b_reshard|reshard) echo "'$bin' reshard '$ckpt' -o '$work/m-w2' -w 2 -q" ;;
    b2_reshard_sha256) echo "'$bin' reshard '$ckpt' -o '$work/m-w2' -w 2 -q --manifest sha256" ;;
    c_cat_sync) echo "cat '$ckpt'/*.distcp > '$work/m.cat' && sync" ;;
    d_cp_sync) echo "cp -r '$ckpt' '$work/m.cp' && sync" ;;
  esac
}
before_run() { rm -rf "$work/m.safetensors" "$work/m.safetensors.dcpctl-manifest.json" "$work/m-w2" "$work/m.cat" "$work/m.cp"; }
warm_up
repeat=${REPEAT:-3}
run_rounds manifest
before_run x
echo "== what the manifests digested as written and read back"
for alg in crc32 sha256; do
  "$dcpctl" consolidate "$ckpt" -o "$work/m.safetensors" -q --json --manifest $alg |
    "$py" -c "import json,sys; print('consolidate ($alg):', json.load(sys.stdin)['manifest_bytes'])"
  "$dcpctl" reshard "$ckpt" -o "$work/m-w2" -w 2 -q --json --manifest $alg |
    "$py" -c "import json,sys; print('reshard ($alg):', json.load(sys.stdin)['manifest_bytes'])"
  "$dcpctl" verify "$work/m.safetensors" > /dev/null && "$dcpctl" verify "$work/m-w2" > /dev/null &&
    echo "both outputs verify against their $alg manifests"
  before_run x
done

"$py" - "$work" "$ckpt" "$repeat" "$root/bench" "${names[@]}" <<'PY'
import os, statistics, sys
work, ckpt, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, sys.argv[4])
from timing import paired, report, runs, summary
names = sys.argv[5:]
data = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt))
print("\nper run (in round order):")
rows = {}
for n in names:
    report(work, "manifest", n, repeat, 24)
    rows[n] = summary(runs(work, "manifest", n, repeat))
anchor = lambda n: "c_cat_sync" if "consolidate" in n else "d_cp_sync" if "reshard" in n else None
print(f"\ncheckpoint: {ckpt}: {data/1e9:.2f} GB; median of {repeat} round(s); max RSS and exit: the worst round")
print(f"{'run':24} {'exit':>4} {'seconds':>8} {'CPU s':>6} {'max RSS':>10} {'vs its anchor (by round)':>26} {'vs PRE (by round)':>20}")
for n, m in rows.items():
    a = anchor(n)
    vs = " ".join(f"{x:.2f}" for x in paired(work, "manifest", n, a, repeat)) if a else ""
    pre = "x_pre_" + ("consolidate" if "consolidate" in n else "reshard")
    vp = " ".join(f"{x:.2f}" for x in paired(work, "manifest", n, pre, repeat)) if a and pre in rows and n != pre else ""
    print(f"{n:24} {m['rc']:>4} {m['secs']:8.2f} {m['cpu']:6.2f} {m['rss']/2**20:7.0f} MiB {vs:>26} {vp:>20}")
for n in ("a_consolidate", "b_reshard"):
    a = anchor(n)
    rs = paired(work, "manifest", n, a, repeat)
    print(f"  {n} / {a}: median {statistics.median(rs):.2f}")
    for other in ("x_pre_", "x_base_"):
        o = other + n[2:]
        if o in rows:
            rs = paired(work, "manifest", n, o, repeat)
            print(f"  {n} / {o}: median {statistics.median(rs):.2f}")
PY
