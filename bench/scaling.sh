#!/usr/bin/env bash
# Benchmark: how the cost grows with the checkpoint size. The same commands on checkpoints of
# ~1, ~4.8 and ~16 GB written by real torch (bench/make_big_ckpt.py, 8 ranks; generated here,
# never committed): time should grow linearly in bytes, dcpctl's peak RSS should stay flat.
#
#   bench/scaling.sh [WORKDIR]    (default /tmp/dcpctl-scaling; root; needs ~2.1x the largest
#                                  checkpoint free there: ~34 GB for 38 layers)
#
# Environment: DCPCTL, PYTHON as in bench/common.sh (and DCPCTL_TORCH_PLUGIN, dcpctl's own, when the
# binary lies apart from its libdcpctl_torch.so); LAYERS (make_big_ckpt.py --layers of each
# size, default "1 10 38": 1.19, 4.83 and 16.17 GB; the embedding and output are a fixed 0.79 GB,
# each layer 0.40 GB); RANKS (generator ranks, default 8); REUSE ("N:DIR ...": an existing
# make_big_ckpt.py checkpoint of N layers used instead of generating one, and never deleted);
# REPEAT (rounds, default 1: the 16 GB rounds are long); WORLD (reshard target, default 2);
# POOL (make_big_ckpt.py --pool, default 256 MiB, at least one rank's largest shard: 66 MB at 8
# ranks; the ranks map their shards from a random pool instead of holding them, so the 16 GB
# checkpoint can be written on a 24 GiB machine; 0 = fresh
# randn shards held in RAM, as consolidate.sh's checkpoint); GEN_LIMIT (memory cgroup of the
# generator, default 12G: an OOM must kill the generator, not the machine); TORCH_LIMIT (memory
# cgroup of dcp_to_torch, default 16G: it holds the whole model); KEEP=1 keeps the checkpoints.
#
# Per size, smallest first: the checkpoint is generated inside its cgroup (time and cgroup peak
# recorded), then each of these runs under /usr/bin/time -v (wall clock, max RSS), page cache
# dropped before each (bench/common.sh), its output deleted as soon as it is timed:
#   a  dcpctl consolidate CKPT -o out.safetensors -q
#   b  dcpctl consolidate CKPT -o out.pt -q
#   c  dcpctl reshard CKPT -o out_reshard -w WORLD -q
#   d  cat CKPT/*.distcp > cat.out && sync         (anchor of a, b, f: the same bytes, plain copy,
#                                                  made durable as dcpctl makes its outputs: without
#                                                  the sync a 1 GB copy ends in the page cache)
#   e  cp -r CKPT copy && sync                     (anchor of c)
#   f  python -m torch.distributed.checkpoint.format_utils dcp_to_torch CKPT out_torch.pt, in a
#      memory cgroup of TORCH_LIMIT (exit 137: killed by the OOM killer, a result, not an error)
# Then one table (size = GB of .distcp data, exit, seconds, GB/s, CPU seconds, peak RSS, ratio to
# cat / cp -r), and per command the seconds and the CPU seconds per GB at each size (linearity: the
# spread, max/min) and the peak RSS at each size (flatness). The table is also written to
# WORKDIR/scaling_results.txt.
#
# MODE=kimi: the same loop on bench/plan_1t.sh's Kimi-K2 shape scaled down (bench/make_kimi_ckpt.py:
# torchtitan 0.3's DeepSeek-V3 names, every width divided by 8, FSDP + expert parallelism over RANKS
# ranks, EP of them on the experts, float32 with Adam's state, written by torch's dcp.save) at
# KIMI="LAYERS:EXPERTS ..." (default "2:48 8:48 15:96": 0.96, 3.51 and 12.04 GB of tensors, a third
# of them the model's weights, the rest Adam's; ~26 GB free disk for the largest); EP (default 4);
# REUSE entries "L:E:DIR"; CHECK (first, all or 0: which sizes' exports kimi_check checks). Commands:
#   a  dcpctl consolidate CKPT --map torchtitan-deepseek-v3 --max-memory 16GiB -o out_map/ -q
#   b  the same with --quantize fp8-block, -o out_fp8/
#   d  cat CKPT/*.distcp > cat.out && sync         (anchor of a and b: every byte of the checkpoint,
#                                                  where a and b read the weights' third of it)
# The seconds per GB are per GB of .distcp data in both modes (the weights are the same share of it
# at every size: the spread is the same per GB of weights).
set -euo pipefail

set -- "${1:-/tmp/dcpctl-scaling}"
own_ckpt=1  # read by common.sh: no default checkpoint
export own_ckpt
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
mode=${MODE:-plain}
case $mode in
  plain) sizes=${LAYERS:-1 10 38} ;;
  kimi) sizes=${KIMI:-2:48 8:48 15:96} ;;
  *) echo "MODE=$mode: plain or kimi" >&2; exit 2 ;;
esac
ranks=${RANKS:-8}
ep=${EP:-4}
world=${WORLD:-2}
repeat=${REPEAT:-1}
pool=${POOL:-256}
gen_limit=${GEN_LIMIT:-12G}
torch_limit=${TORCH_LIMIT:-16G}

outs=("$work/out.safetensors" "$work/out.pt" "$work/out_reshard" "$work/cat.out" "$work/copy" "$work/out_torch.pt"
      "$work/out_map" "$work/out_fp8")
clean() { rm -rf "${outs[@]}" "$work"/.out*dcpctl-tmp* "$work"/out*.dcpctl-manifest.json; }  # (the manifests beside a file output)
free_bytes() { df -B1 --output=avail "$work" | tail -n 1 | tr -d ' '; }

# Each command, then its anchor (the table's "vs anchor" column).
if [ "$mode" = kimi ]; then
  anchors=(a_dcpctl_map=d_cat b_dcpctl_map_fp8=d_cat d_cat=d_cat)
else
  anchors=(a_dcpctl_safetensors=d_cat b_dcpctl_pt=d_cat c_dcpctl_reshard=e_cp d_cat=d_cat e_cp=e_cp
           f_torch_dcp_to_torch=d_cat)
fi
names=("${anchors[@]%%=*}")
cg_torch=
cmd_for() {
  case $1 in
    a_dcpctl_safetensors) echo "'$dcpctl' consolidate '$ckpt' -o '$work/out.safetensors' -q" ;;
    b_dcpctl_pt) echo "'$dcpctl' consolidate '$ckpt' -o '$work/out.pt' -q" ;;
    c_dcpctl_reshard) echo "'$dcpctl' reshard '$ckpt' -o '$work/out_reshard' -w $world -q" ;;
    d_cat) echo "cat '$ckpt'/*.distcp > '$work/cat.out' && sync" ;;
    e_cp) echo "cp -r '$ckpt' '$work/copy' && sync" ;;
    f_torch_dcp_to_torch) echo "echo \$\$ > '$cg_torch/cgroup.procs' && exec '$py' -m torch.distributed.checkpoint.format_utils dcp_to_torch '$ckpt' '$work/out_torch.pt'" ;;
    a_dcpctl_map) echo "'$dcpctl' consolidate '$ckpt' --map torchtitan-deepseek-v3 --max-memory 16GiB -o '$work/out_map/' -q" ;;
    b_dcpctl_map_fp8) echo "'$dcpctl' consolidate '$ckpt' --map torchtitan-deepseek-v3 --quantize fp8-block --max-memory 16GiB -o '$work/out_fp8/' -q" ;;
  esac
}
before_run() {
  clean
  if [ "${1:0:1}" = f ]; then cg_torch=$(cg_new scaling-torch "$torch_limit"); fi
}
after_run() {
  # the output's size (a check that it was written whole), then it goes: disk space
  { du -sb "${outs[@]}" 2>/dev/null || true; } | awk '{s += $1} END {printf "%.0f\n", s}' > "$work/${tag}_$1_$2.out_bytes"
  if [ "${1:0:1}" = f ]; then cg_peak "$cg_torch" > "$work/${tag}_$1_$2.cg_peak"; cg_del "$cg_torch"; fi
  clean
}

# estimate SIZE: the bytes of every tensor the checkpoint of SIZE holds, then those of the model's weights.
estimate() {
  if [ "$mode" = kimi ]; then
    "$py" "$root/bench/make_kimi_ckpt.py" --estimate --layers "${1%%:*}" --experts "${1#*:}"
    return
  fi
  "$py" - "$root/bench" "$1" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import torch
from make_big_ckpt import shapes
n = sum(torch.Size(s).numel() * torch.empty(0, dtype=d).element_size() for _, s, d in shapes(int(sys.argv[2]), 4096, 11008, 32003))
print(n, n)
EOF
}
# generator SIZE CKPT: sets gen, the command line that writes the checkpoint of SIZE into CKPT.
generator() {
  if [ "$mode" = kimi ]; then
    gen=("$py" "$root/bench/make_kimi_ckpt.py" "$2" --layers "${1%%:*}" --experts "${1#*:}" --ranks "$ranks" --ep "$ep" --pool "$pool")
  else
    gen=("$py" "$root/bench/make_big_ckpt.py" "$2" --layers "$1" --ranks "$ranks" --pool "$pool")
  fi
}

# kimi_check (MODE=kimi, at the first size; CHECK=all: every size, CHECK=0: none): the two exports
# made again (untimed) and checked: `dcpctl diff CKPT OUT --map torchtitan-deepseek-v3` (the plain
# export bit-equal to the checkpoint through the map, the fp8 one within half an e4m3 step of it),
# then by transformers and torch (make_kimi_ckpt.py --check: the plain export's from_pretrained has
# no missing or unexpected keys, the fp8 weights dequantized are the plain export's within e4m3's
# rounding, every other tensor its bytes). Into $work/check.txt; a failure fails the script.
check_failed=0
kimi_check() {
  local out rc
  clean
  {
    echo "checks of the exports of $n ($ckpt):"
    for out in map fp8; do
      rc=0
      bash -c "$(cmd_for "$([ $out = map ] && echo a_dcpctl_map || echo b_dcpctl_map_fp8)")" || rc=$?
      echo "  consolidate -o out_$out/: exit $rc"
      [ $rc = 0 ] || check_failed=1
      rc=0
      "$dcpctl" diff "$ckpt" "$work/out_$out" --map torchtitan-deepseek-v3 > "$work/diff_$out.txt" 2>&1 || rc=$?
      echo "  dcpctl diff CKPT out_$out/ --map torchtitan-deepseek-v3: exit $rc;" \
           "$(grep -E 'values bit-equal|within codec error|unexplained' "$work/diff_$out.txt" | awk '{$1 = $1; print}' | paste -sd ';' - | sed 's/;/; /g')"
      [ $rc = 0 ] || check_failed=1
    done
    rc=0
    "$py" "$root/bench/make_kimi_ckpt.py" --check "$work/out_map" "$work/out_fp8" > "$work/check_py.txt" 2>&1 || rc=$?
    grep -v -e 'Loading weights' "$work/check_py.txt" | sed 's/^/  /'
    echo "  make_kimi_ckpt.py --check: exit $rc"
    [ $rc = 0 ] || check_failed=1
  } > "$work/check_$label.txt"
  tee -a "$work/check.txt" < "$work/check_$label.txt"
  clean
}

echo "== dcpctl $dcpctl; torch $("$py" -c 'import torch; print(torch.__version__)'); mode $mode; sizes: $sizes;" \
     "$repeat round(s); work $work"
: > "$work/sizes.tsv"
: > "$work/check.txt"
for n in $sizes; do
  label=${n//:/E}  # a directory and file name: kimi's 8:48 is 8E48
  ckpt=$work/L$label/ckpt reused=0 gen_rc=0 gen_peak=0
  for r in ${REUSE:-}; do if [ "${r#"$n":}" != "$r" ]; then ckpt=${r#"$n":} reused=1; fi; done
  clean
  est=$(estimate "$n")
  read -r est weights <<< "$est"
  echo
  echo "== $n $([ "$mode" = kimi ] && echo layers:experts || echo layers): ~$((est / 1000000)) MB of tensors, $((weights / 1000000)) MB of" \
       "them the model's weights; $(df -h --output=avail,size "$work" | tail -n 1 | awk '{print $1 " free of " $2}') at $work"
  if [ $reused = 1 ]; then
    [ -f "$ckpt/.metadata" ] || { echo "REUSE $n:$ckpt has no .metadata" >&2; exit 2; }
    echo "== reusing $ckpt"
  else
    need=$(( est * 21 / 10 ))
    if [ "$(free_bytes)" -lt "$need" ]; then
      echo "== SKIPPED $n: $(( $(free_bytes) >> 30 )) GiB free, needs ~$(( need >> 30 )) GiB (checkpoint + largest output)"
      printf '%s\t%s\t0\tskipped-disk\t0\t0\t0\t%s\n' "$n" "$ckpt" "$weights" >> "$work/sizes.tsv"
      continue
    fi
    rm -rf "$work/L$label"
    mkdir -p "$work/L$label"
    cg=$(cg_new scaling-gen "$gen_limit")
    drop_cache
    echo "== generating $ckpt: $ranks ranks, real torch, pool $pool MiB, in a memory cgroup of $gen_limit (load $(cut -d' ' -f1 /proc/loadavg))"
    generator "$n" "$ckpt"
    bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec /usr/bin/time -v -o "$0" "$@"' "$work/gen_L$label.txt" "$cg" \
      "${gen[@]}" > "$work/L$label/gen.log" 2>&1 || gen_rc=$?
    gen_peak=$(cg_peak "$cg")
    cg_del "$cg"
    echo "   exit $gen_rc, $(grep -o 'Elapsed.*' "$work/gen_L$label.txt" | sed 's/.*: //') wall, cgroup peak $((gen_peak >> 20)) MiB"
    if [ $gen_rc != 0 ] || [ ! -f "$ckpt/.metadata" ]; then
      echo "== SKIPPED $n: the generator failed (exit $gen_rc; 137 = OOM-killed at $gen_limit); its log:"
      tail -n 5 "$work/L$label/gen.log" | sed 's/^/   /'
      printf '%s\t%s\t0\tgen-failed-%s\t0\t%s\t0\t%s\n' "$n" "$ckpt" "$gen_rc" "$gen_peak" "$weights" >> "$work/sizes.tsv"
      rm -rf "$work/L$label/ckpt"
      continue
    fi
  fi
  data=$(du -cb "$ckpt"/*.distcp | tail -n 1 | cut -f1)
  echo "== $ckpt: $data bytes of .distcp data; $(df -h --output=avail "$work" | tail -n 1 | tr -d ' ') free"
  if [ "$(free_bytes)" -lt $(( data * 11 / 10 )) ]; then
    echo "== SKIPPED $n: $(( $(free_bytes) >> 30 )) GiB free, the outputs need ~$(( data * 11 / 10 >> 30 )) GiB"
    printf '%s\t%s\t0\tskipped-disk\t0\t0\t0\t%s\n' "$n" "$ckpt" "$weights" >> "$work/sizes.tsv"
    if [ $reused = 0 ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$work/L$label/ckpt"; fi
    continue
  fi
  tag=s$label
  warm_up
  run_rounds "$tag"
  clean
  if [ "$mode" = kimi ] && { [ "${CHECK:-first}" = all ] || { [ "${CHECK:-first}" = first ] && [ ! -s "$work/check.txt" ]; }; }; then
    kimi_check
  fi
  gen_secs=0
  if [ $reused = 0 ]; then gen_secs=$(grep -o 'Elapsed.*' "$work/gen_L$label.txt" | sed 's/.*: //'); fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$ckpt" "$data" ok "$gen_secs" "$gen_peak" "$reused" "$weights" >> "$work/sizes.tsv"
  if [ $reused = 0 ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$work/L$label/ckpt"; fi
done

"$py" - "$work" "$repeat" "$root/bench" "$cold" "$torch_limit" "$mode" "${anchors[@]}" <<'EOF' | tee "$work/scaling_results.txt"
import os, sys
work, repeat, cold, torch_limit, mode = sys.argv[1], int(sys.argv[2]), sys.argv[4] == "1", sys.argv[5], sys.argv[6]
sys.path.insert(0, sys.argv[3])
from timing import runs, summary
anchor = dict(a.split("=") for a in sys.argv[7:])  # command -> its anchor, in the script's order
names = list(anchor)
sizes = [l.rstrip("\n").split("\t") for l in open(os.path.join(work, "sizes.tsv")) if l.strip()]
def read(path, default=0):
    try:
        return int(float(open(path).read().split()[0]))
    except Exception:
        return default
def tag(size):
    return "s" + size.replace(":", "E")
print(f"page cache {'dropped before each run' if cold else 'warm (each run once untimed first)'}; "
      f"{repeat} round(s): median seconds, worst RSS and exit")
res = {}  # (size, name) -> (GB, summary)
done = []  # the sizes measured, in the script's order
size_col = "L:E" if mode == "kimi" else "layers"
print(f"{'size GB':>7} {size_col:>6}  {'command':22} {'exit':>4} {'seconds':>8} {'GB/s':>6} {'CPU s':>6} {'peak RSS MiB':>12}  {'vs anchor':>12}  output bytes")
for size, ckpt, data, status, gen_secs, gen_peak, reused, weights in sizes:
    if status != "ok":
        print(f"{'-':>7} {size:>6}  {'(size not measured: ' + status + ', generator cgroup peak ' + str(int(gen_peak) >> 20) + ' MiB)'}")
        continue
    done.append(size)
    gb = int(data) / 1e9
    m = {n: summary(runs(work, tag(size), n, repeat)) for n in names}
    for n in names:
        s = m[n]
        res[(size, n)] = (gb, s)
        a = m[anchor[n]]["secs"]
        out = read(os.path.join(work, f"{tag(size)}_{n}_{repeat}.out_bytes"))
        extra = ""
        if n.startswith("f_"):
            extra = f"  (cgroup {torch_limit}: peak {read(os.path.join(work, f'{tag(size)}_{n}_{repeat}.cg_peak')) >> 20} MiB" + \
                    (", OOM-killed)" if s["rc"] == 137 else ")")
        rate = f"{gb / s['secs']:.2f}" if s["rc"] == 0 and s["secs"] else "-"
        print(f"{gb:7.2f} {size:>6}  {n:22} {s['rc']:>4} {s['secs']:8.2f} {rate:>6} {s['cpu']:6.2f} "
              f"{s['rss'] / 2**20:12.0f}  {s['secs'] / a if a else 0:6.2f}x {anchor[n][2:]:5} {out:>12}{extra}")
    gen = 'reused ' + ckpt if reused == '1' else f'{gen_secs} wall, cgroup peak {int(gen_peak) >> 20} MiB'
    print(f"{'':7} {'':6}  model weights {int(weights) / 1e9:.2f} GB; generator: {gen}")
print()
print("seconds per GB at each size (exit 0 runs only; spread = max/min over the sizes; linear in bytes = 1.00):")
print(f"  {'command':22} " + " ".join(f"{res[(l, names[0])][0]:>7.2f}GB" for l in done) + "   spread")
for n in names:
    v = [res[(l, n)][1]["secs"] / res[(l, n)][0] if res[(l, n)][1]["rc"] == 0 else None for l in done]
    ok = [x for x in v if x]
    spread = f"{max(ok) / min(ok):6.2f}x" if len(ok) > 1 else "     -"
    print(f"  {n:22} " + " ".join(f"{x:9.3f}" if x else f"{'exit ' + str(res[(l, n)][1]['rc']):>9}" for x, l in zip(v, done)) + f"   {spread}")
print()
print("CPU seconds (user + system) per GB at each size (spread = max/min):")
print(f"  {'command':22} " + " ".join(f"{res[(l, names[0])][0]:>7.2f}GB" for l in done) + "   spread")
for n in names:
    v = [res[(l, n)][1]["cpu"] / res[(l, n)][0] for l in done]
    print(f"  {n:22} " + " ".join(f"{x:9.3f}" for x in v) + (f"   {max(v) / min(v):6.2f}x" if len(v) > 1 and min(v) else "     -"))
print()
# Where CPU per GB grows, user or system: the user time is dcpctl's own work (flat if it scales),
# the system time the kernel's (page-cache copies and reclaim), which the anchor, made of nothing
# else, measures on the same machine in the same rounds (issue 72 item 5).
for part in ("user", "sys"):
    print(f"{part} CPU seconds per GB at each size (median of the rounds; spread = max/min):")
    print(f"  {'command':22} " + " ".join(f"{res[(l, names[0])][0]:>7.2f}GB" for l in done) + "   spread")
    for n in names:
        v = [res[(l, n)][1][part] / res[(l, n)][0] for l in done]
        print(f"  {n:22} " + " ".join(f"{x:9.3f}" for x in v) + (f"   {max(v) / min(v):6.2f}x" if len(v) > 1 and min(v) else "     -"))
print()
print("peak RSS (MiB) at each size (spread = max/min; flat = 1.00):")
print(f"  {'command':22} " + " ".join(f"{res[(l, names[0])][0]:>7.2f}GB" for l in done) + "   spread")
for n in names:
    v = [res[(l, n)][1]["rss"] / 2**20 for l in done]
    mark = ["" if res[(l, n)][1]["rc"] == 0 else "*" for l in done]
    print(f"  {n:22} " + " ".join(f"{x:8.0f}{k or ' '}" for x, k in zip(v, mark)) + f"   {max(v) / min(v) if min(v) else 0:6.2f}x")
print("  (* the run did not exit 0: its peak is the RSS it reached before it ended)")
EOF
if [ -s "$work/check.txt" ]; then cat "$work/check.txt" >> "$work/scaling_results.txt"; fi
echo "== results in $work/scaling_results.txt"
if [ "$check_failed" = 1 ]; then echo "== FAILED: an export's check failed (above)" >&2; exit 1; fi
