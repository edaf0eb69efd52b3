#!/usr/bin/env bash
# Benchmark: the manifest's cost (docs/integrity.md). consolidate, reshard and cast hash each file
# of their output as they write it (write/write_hash.h) instead of reading the output back once
# written. On an HF folder of >= 2 GB (SRC, default the 2.79 GB float32 Qwen3 bench/quantize_peer.py
# makes under WORKDIR/src), side by side in one run, page cache dropped before each:
#   (a) dcpctl consolidate SRC/ -o OUT/       an HF folder out, its manifest hashed as written
#   (b) dcpctl reshard SRC/ -o OUT -w 2       a DCP checkpoint out, likewise
#   (c) cat SRC/*.safetensors > out && sync   the anchor: the durable copy of the same bytes
# With BASE=/path/to/dcpctl (another binary: 3468cd5, the tensor digests hashed in series with the
# file's, an HF folder's lanes a whole tensor each), (a) and (b) with it too (x_base_*); with
# PRE=/path/to/dcpctl (30bc1c7, before the tensor digests), again (x_pre_*). Prints each run, a table
# with each row against the anchor, the bytes each run read from the disk (/proc/diskstats), and
# the JSON manifest_bytes (what was hashed as written and what had to be read back) of (a) and (b)
# with this binary and BASE's. The machine may be shared: compare CPU seconds and disk bytes.
#
#   bench/manifest.sh [WORKDIR]     (default /tmp/dcpctl-bench-quantize; REPEAT rounds, default 3)
set -euo pipefail
own_ckpt=1
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
src=${SRC:-$work/src}
if [ ! -f "$src/config.json" ]; then
  echo "== generating the HF folder under $src (bench/quantize_peer.py make)"
  "$py" "$root/bench/quantize_peer.py" make "$src"
fi
ckpt=$src  # what run_rounds sizes its refill by
names=(a_consolidate b_reshard c_cat_sync)
[ -n "${BASE:-}" ] && names+=(x_base_consolidate x_base_reshard)
[ -n "${PRE:-}" ] && names+=(x_pre_consolidate x_pre_reshard)
cmd_for() {
  local bin=$dcpctl n=$1
  case $n in x_base_*) bin=$BASE; n=${n#x_base_} ;; x_pre_*) bin=$PRE; n=${n#x_pre_} ;; esac
  case $n in
    a_consolidate|consolidate) echo "'$bin' consolidate '$src/' -o '$work/m-hf/' -q" ;;
    b_reshard|reshard) echo "'$bin' reshard '$src/' -o '$work/m-w2' -w 2 -q" ;;
    c_cat_sync) echo "cat '$src'/*.safetensors > '$work/m.cat' && sync" ;;
  esac
}
before_run() { rm -rf "$work/m-hf" "$work/m-w2" "$work/m.cat"; }
warm_up
repeat=${REPEAT:-3}
run_rounds manifest
before_run x
for bin in "$dcpctl" ${BASE:+"$BASE"}; do
  echo "== what the manifests hashed as written and read back ($bin)"
  "$bin" consolidate "$src/" -o "$work/m-hf/" -q --json | "$py" -c "import json,sys; print('consolidate:', json.load(sys.stdin)['manifest_bytes'])"
  "$bin" reshard "$src/" -o "$work/m-w2" -w 2 -q --json | "$py" -c "import json,sys; print('reshard:', json.load(sys.stdin)['manifest_bytes'])"
  "$dcpctl" verify "$work/m-hf" > /dev/null && "$dcpctl" verify "$work/m-w2" > /dev/null && echo "both outputs verify against their manifests"
  before_run x
done

"$py" - "$work" "$src" "$repeat" "$root/bench" "${names[@]}" <<'PY'
import os, statistics, sys
work, src, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, sys.argv[4])
from timing import paired, report, runs, summary
names = sys.argv[5:]
data = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src) if f.endswith(".safetensors"))
print("\nper run (in round order):")
rows = {}
for n in names:
    report(work, "manifest", n, repeat, 22)
    rows[n] = summary(runs(work, "manifest", n, repeat))
print(f"\nsource: {src}: {data/1e9:.2f} GB; median of {repeat} round(s); max RSS and exit: the worst round")
print(f"{'run':22} {'exit':>4} {'seconds':>8} {'CPU s':>6} {'max RSS':>10} {'disk read GB':>14} {'vs cat+sync (by round)':>30}")
for n, m in rows.items():
    vs = "" if n == "c_cat_sync" else " ".join(f"{x:.2f}" for x in paired(work, "manifest", n, "c_cat_sync", repeat))
    rs = runs(work, "manifest", n, repeat)
    read = " ".join(f"{x['disk']['read_mb'] / 1e3:.2f}" for x in rs) if all(x["disk"] for x in rs) else "-"
    print(f"{n:22} {m['rc']:>4} {m['secs']:8.2f} {m['cpu']:6.2f} {m['rss']/2**20:7.0f} MiB {read:>14} {vs:>30}")
for n in ("a_consolidate", "b_reshard"):
    for other in ("x_base_", "x_pre_"):
        if other + n[2:] in rows:
            rs = paired(work, "manifest", n, other + n[2:], repeat)
            print(f"  {n} / {other[2:-1].upper()}, round by round: {' '.join(f'{x:.2f}' for x in rs)} (median {statistics.median(rs):.2f})")
PY
