#!/usr/bin/env bash
# Benchmark: planning the bf16 export of a DeepSeek-V3 671B-shaped block-scaled FP8 Hugging Face
# folder (bench/make_deepseek_fp8_folder.py: the release's 91,992 tensors over 163 shard files,
# 688.5 GB, every data region a hole, so it takes ~20 MB of disk). Only headers are read: no data
# moves, and no command here writes an output (a real export of this folder would write 1.37 TB
# of bf16 zeros).
#
#   bench/deepseek_fp8_plan.sh [WORKDIR]     (default /tmp/dcpctl-bench-deepseek; ~20 MB of disk,
#                                            on a filesystem with sparse files: ext4, xfs, btrfs)
#
# Environment: DCPCTL, PYTHON as in bench/common.sh (PYTHON needs torch for the anchor); REPEAT
# (rounds, default 3: the table shows medians). Runs, each under /usr/bin/time -v, the page cache
# dropped before each when it can be (else every command runs once untimed first: all warm):
#   inspect     dcpctl inspect DIR --json                           (163 headers + the index)
#   plan_16g    dcpctl consolidate DIR -o OUT/ --dtype bf16 --dry-run --json --max-memory 16GiB
#   plan_4g     the same with --max-memory 4GiB
#   torch_meta  python: QuantizedHuggingFaceStorageReader(DIR).read_metadata()  (torch reads the
#               index and every header too; the import of torch is timed apart, in-process)
# then prints wall s, peak RSS and the plan's figures (records, bytes, files, the largest record's
# memory need, the weights it dequantizes) from each plan's JSON.
set -euo pipefail
set -- "${1:-/tmp/dcpctl-bench-deepseek}"   # common.sh's work dir ($1)
own_ckpt=1
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
dir=$work/DeepSeek-V3-fp8
out=$work/out-bf16   # never written: every consolidate here is --dry-run
repeat=${REPEAT:-3}

if [ ! -f "$dir/model.safetensors.index.json" ]; then
  echo "== generating $dir (sparse)"
  "$py" "$root/bench/make_deepseek_fp8_folder.py" "$dir"
fi
echo "== $dir: $(find "$dir" -name '*.safetensors' | wc -l) shard files," \
     "$(du -sh --apparent-size "$dir" | cut -f1) logical, $(du -sh "$dir" | cut -f1) on disk;" \
     "$(nproc) cores; dcpctl $("$dcpctl" --version | head -n 1)"
rm -rf "$out"

names=(inspect plan_16g plan_4g torch_meta)
cmd_for() {
  case $1 in
    inspect) echo "'$dcpctl' inspect '$dir' --json > '$work/inspect.json'" ;;
    plan_16g) echo "'$dcpctl' consolidate '$dir' -o '$out/' --dtype bf16 --dry-run --json --max-memory 16GiB > '$work/plan_16g.json' 2> '$work/plan_16g.err'" ;;
    plan_4g) echo "'$dcpctl' consolidate '$dir' -o '$out/' --dtype bf16 --dry-run --json --max-memory 4GiB > '$work/plan_4g.json' 2> '$work/plan_4g.err'" ;;
    torch_meta) echo "'$py' -c \"
import time, resource
t0 = time.perf_counter()
from torch.distributed.checkpoint.quantized_hf_storage import QuantizedHuggingFaceStorageReader
t1 = time.perf_counter(); rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
md = QuantizedHuggingFaceStorageReader('$dir').read_metadata()
t2 = time.perf_counter()
print(f'{t1 - t0:.3f} {t2 - t1:.3f} {rss} {len(md.state_dict_metadata)}')
\" >> '$work/torch_meta.out'" ;;
  esac
}
before_run() { [ -e "$out" ] && { echo "$out exists: a --dry-run wrote something" >&2; exit 1; }; return 0; }
rm -f "$work/torch_meta.out"
warm_up
rm -f "$work/torch_meta.out"
run_rounds dp

"$py" - "$work" "$repeat" "$dir" <<'EOF'
import json, re, statistics, sys
work, repeat, ckpt = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def timev(name, r):
    t = open(f"{work}/dp_{name}_{r}.txt").read()
    w = re.search(r"Elapsed \(wall clock\).*: (\S+)", t).group(1)
    s = 0.0
    for part in w.split(":"):
        s = s * 60 + float(part)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1)) / 1024
    rc = re.search(r"Exit status: (\d+)", t)
    return s, rss, int(rc.group(1)) if rc else -1

rows = {
    "inspect": "dcpctl inspect DIR --json",
    "plan_16g": "dcpctl consolidate --dtype bf16 --dry-run --json --max-memory 16GiB",
    "plan_4g": "dcpctl consolidate --dtype bf16 --dry-run --json --max-memory 4GiB",
    "torch_meta": "torch QuantizedHuggingFaceStorageReader.read_metadata() (process)",
}
print(f"\n{'run':<72} {'exit':>4} {'wall s':>7} {'peak RSS MiB':>13}   (median of {repeat}; each round)")
for name, label in rows.items():
    runs = [timev(name, r) for r in range(1, repeat + 1)]
    rcs = sorted({x[2] for x in runs})
    each = " ".join(f"{x[0]:.2f}s/{x[1]:.0f}" for x in runs)
    print(f"{label:<72} {','.join(map(str, rcs)):>4} {statistics.median(x[0] for x in runs):7.2f} "
          f"{statistics.median(x[1] for x in runs):13.0f}   {each}")
tm = [line.split() for line in open(f"{work}/torch_meta.out")]
if tm:
    print(f"{'  of which import torch (in-process)':<72} {'':>4} {statistics.median(float(x[0]) for x in tm):7.2f}"
          f" {statistics.median(int(x[2]) for x in tm) / 1024:13.0f}   (RSS after the import)")
    print(f"{'  of which read_metadata() (in-process)':<72} {'':>4} {statistics.median(float(x[1]) for x in tm):7.2f}"
          f" {'':>13}   ({tm[0][3]} keys)")

ins = json.load(open(f"{work}/inspect.json"))
s = ins["summary"]
print(f"\ninspect: layout {ins['layout']}, {s['files']} files, {s['tensors']:,} tensors, "
      f"{s['tensor_bytes']:,} bytes of tensors; headers + index {ins['metadata']['bytes']:,} bytes; "
      f"quantization {json.dumps(ins.get('quantization'))}")
for name in ("plan_16g", "plan_4g"):
    try:
        d = json.load(open(f"{work}/{name}.json"))
    except ValueError:
        d = {}
    err = open(f"{work}/{name}.err").read().strip()
    if "plan" not in d:
        print(f"{name}: no plan; error {json.dumps(d.get('error'))}; stderr: {err!r}")
        continue
    p, files = d["plan"], [f for f in d["files"] if "bytes" in f]
    big = max(p, key=lambda r: r["need"])
    print(f"{name}: max_memory {d['max_memory']:,}; {len(p):,} records, tensor_bytes {d['tensor_bytes']:,}, "
          f"{len(files)} shard files (+ index), largest {max(f['bytes'] for f in files):,} bytes; "
          f"streamed {sum(r['streams'] for r in p):,}/{len(p):,}; largest record need {big['need']:,} "
          f"({big['key']}); dequantized {json.dumps(d['dequantized'])}; cast {d['cast']['tensors']:,} tensors; "
          f"lanes {d['deal']['lanes']}, budget {d['deal']['budget']:,}" + (f"; stderr: {err!r}" if err else ""))
EOF
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
