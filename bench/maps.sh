#!/usr/bin/env bash
# Benchmark: what --map costs. Multi-GB checkpoints written by torchtitan 0.3.0's own models
# (bench/make_titan_ckpt.py, flavors registered by bench/titan_flavor.py; float32, dcp.save on one
# process), each exported to a Hugging Face folder three ways, side by side in one run:
#   dcpctl consolidate --map MAP                   (streamed; MAP below)
#   dcpctl consolidate                             (the same bytes without a map: the baseline)
#   torchtitan's scripts/checkpoint_conversion/convert_to_hf.py (model in RAM, dcp.load, to_hf,
#     HuggingFaceStorageWriter with consolidation), run unmodified by bench/run_convert_to_hf.py
# Wall time and peak RSS (GNU time), page cache dropped before each run when possible; the mapped
# export is then compared with torchtitan's, tensor for tensor (dcpctl diff, exit 0 = identical).
# The models (MODEL=llama|deepseek|all, default all: Llama first):
#   llama     flavor bench3g, Llama3Model: 889 M parameters, 3.56 GB (12 layers, dim 2048);
#             --map torchtitan-llama3 (renames + the q/k RoPE row permutation)
#   deepseek  flavor bench_moe, DeepSeekV3Model: 680 M parameters, 2.72 GB, 78% routed experts (MLA
#             with q LoRA, 1 dense + 7 MoE layers of 32 grouped experts, top-k 8, a shared expert,
#             expert_bias_E); --map torchtitan-deepseek-v3 (renames; each grouped w1_EFD/w2_EDF/
#             w3_EFD split into one key per expert: 672 tensors from 21)
#
#   [MODEL=...] bench/maps.sh [WORKDIR]   (default /tmp/dcpctl-bench-maps; needs ~20 GB free there
#                                          for both; the checkpoints are kept for the next run)
#
# Environment: DCPCTL as in bench/common.sh; TITAN_PYTHON (a venv with torchtitan 0.3.0, default
# /work/venvs/titan03/bin/python: tests/fixtures/layouts/README.md, recipe 7); CONVERT_TO_HF (the
# path of torchtitan 0.3's scripts/checkpoint_conversion/convert_to_hf.py: the sdist and wheel do
# not ship scripts/, take it from the source tree, e.g. `git clone --depth 1 -b release/0.3
# https://github.com/pytorch/torchtitan`; default $WORKDIR/torchtitan/scripts/...).
set -euo pipefail
set -- "${1:-/tmp/dcpctl-bench-maps}"   # common.sh's work dir ($1)
own_ckpt=1
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
tpy=${TITAN_PYTHON:-/work/venvs/titan03/bin/python}
convert=${CONVERT_TO_HF:-$work/torchtitan/scripts/checkpoint_conversion/convert_to_hf.py}
model=${MODEL:-all}
case $model in
  llama | deepseek | all) ;;
  *) echo "MODEL must be llama, deepseek or all (not $model)" >&2; exit 2 ;;
esac

[ -x "$tpy" ] || { echo "no torchtitan venv python at $tpy (set TITAN_PYTHON)" >&2; exit 2; }

# timed NAME COMMAND...: one line: exit status, wall seconds, peak RSS (MiB).
timed() {
  local name=$1 rc=0
  shift
  drop_cache
  /usr/bin/time -v -o "$work/$name.time" "$@" > "$work/$name.log" 2>&1 || rc=$?
  local wall rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$work/$name.time")
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/$name.time")
  printf '%-42s exit %3d  wall %10s  peak RSS %7d MiB\n' "$name" "$rc" "$wall" $((${rss:-0} / 1024))
  return 0
}

# bench_model TAG FLAVOR MAP CKPT_DIR: the checkpoint (made on first use), its HF config, the three
# exports and the diff. Logs and GNU time reports go to $work/NAME.log, $work/NAME.time.
bench_model() {
  local tag=$1 flavor=$2 map=$3 ck=$4 rc
  local assets=$work/hf-assets-$tag out_tt=$work/out-$tag-torchtitan out_map=$work/out-$tag-map
  local out_nomap=$work/out-$tag-nomap
  "$tpy" "$root/bench/make_titan_ckpt.py" "$ck" "$flavor"
  mkdir -p "$assets"
  "$tpy" "$root/bench/titan_flavor.py" hf-config "$flavor" > "$assets/config.json"

  echo "== $tag: $ck ($(du -sh "$ck" | cut -f1), $(find "$ck" -type f | wc -l) files; flavor $flavor);" \
       "page cache dropped before each run: $([ "$cold" = 1 ] && echo yes || echo no)"
  echo "   load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; dcpctl $("$dcpctl" --version | head -n 1)"
  rm -rf "$out_tt" "$out_map" "$out_nomap"

  if [ -f "$convert" ]; then
    timed "${tag}_torchtitan_convert_to_hf" "$tpy" "$root/bench/run_convert_to_hf.py" "$convert" "$ck" "$out_tt" \
      "$assets" "$flavor"
    rm -rf "$out_tt/sharded"   # its per-rank shards, kept beside the consolidated files
  else
    echo "${tag}_torchtitan_convert_to_hf   not run: no $convert (set CONVERT_TO_HF)"
  fi

  local maps
  maps=$("$dcpctl" maps 2> /dev/null || true)
  if grep -q "^$map " <<< "$maps"; then
    timed "${tag}_dcpctl_consolidate_map" "$dcpctl" consolidate "$ck" -o "$out_map/" --map "$map" \
      --config "$assets/config.json" --assets "$assets" -q
    if [ -d "$out_tt" ] && [ -d "$out_map" ]; then
      rc=0
      "$dcpctl" diff "$out_map" "$out_tt" > "$work/${tag}_diff.log" 2>&1 || rc=$?
      echo "   dcpctl diff (--map $map output) (torchtitan's output): exit $rc (0: every tensor identical)"
      if [ "$rc" != 0 ]; then head -n 20 "$work/${tag}_diff.log" | sed 's/^/     /'; fi
    fi
    rm -rf "$out_map"
  else
    echo "${tag}_dcpctl_consolidate_map   not run: this dcpctl has no map $map (\`dcpctl maps\`)"
  fi
  rm -rf "$out_tt"

  timed "${tag}_dcpctl_consolidate_nomap" "$dcpctl" consolidate "$ck" -o "$out_nomap/" --assets "$assets" -q
  rm -rf "$out_nomap"
}

if [ "$model" != deepseek ]; then bench_model llama bench3g torchtitan-llama3 "$work/titan-ckpt"; fi
if [ "$model" != llama ]; then bench_model deepseek bench_moe torchtitan-deepseek-v3 "$work/titan-moe-ckpt"; fi
