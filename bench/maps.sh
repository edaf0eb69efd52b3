#!/usr/bin/env bash
# Benchmark: what --map costs. A multi-GB torchtitan Llama 3 checkpoint (bench/make_titan_ckpt.py:
# torchtitan 0.3.0's own model, 889 M parameters, 3.56 GB float32, dcp.save on one process) exported
# to a Hugging Face folder three ways, side by side in one run:
#   dcpctl consolidate --map torchtitan-llama3     (renames + the q/k RoPE row permutation, streamed)
#   dcpctl consolidate                             (the same bytes without a map: the baseline)
#   torchtitan's scripts/checkpoint_conversion/convert_to_hf.py (model in RAM, dcp.load, to_hf,
#     HuggingFaceStorageWriter with consolidation), run unmodified by bench/run_convert_to_hf.py
# Wall time and peak RSS (GNU time), page cache dropped before each run when possible; the mapped
# export is then compared with torchtitan's, tensor for tensor (dcpctl diff, exit 0 = identical).
#
#   bench/maps.sh [WORKDIR]            (default /tmp/dcpctl-bench-maps; needs ~15 GB free there)
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
ck=$work/titan-ckpt
assets=$work/hf-assets

[ -x "$tpy" ] || { echo "no torchtitan venv python at $tpy (set TITAN_PYTHON)" >&2; exit 2; }
"$tpy" "$root/bench/make_titan_ckpt.py" "$ck"
mkdir -p "$assets"
"$tpy" -c "import json, sys; sys.path.insert(0, '$root/bench'); import titan_flavor as f; \
json.dump(f.HF_CONFIG, open('$assets/config.json', 'w'), indent=2)"

# timed NAME COMMAND...: one line: exit status, wall seconds, peak RSS (MiB).
timed() {
  local name=$1 rc=0
  shift
  drop_cache
  /usr/bin/time -v -o "$work/$name.time" "$@" > "$work/$name.log" 2>&1 || rc=$?
  local wall rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$work/$name.time")
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/$name.time")
  printf '%-34s exit %3d  wall %10s  peak RSS %7d MiB\n' "$name" "$rc" "$wall" $((${rss:-0} / 1024))
  return 0
}

echo "== $ck ($(du -sh "$ck" | cut -f1), $(find "$ck" -type f | wc -l) files); page cache dropped before each run: $([ "$cold" = 1 ] && echo yes || echo no)"
echo "   load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; dcpctl $("$dcpctl" --version | head -n 1)"
rm -rf "$work/out-torchtitan" "$work/out-map" "$work/out-nomap"

if [ -f "$convert" ]; then
  timed torchtitan_convert_to_hf "$tpy" "$root/bench/run_convert_to_hf.py" "$convert" "$ck" "$work/out-torchtitan" "$assets"
  rm -rf "$work/out-torchtitan/sharded"   # its per-rank shards, kept beside the consolidated files
else
  echo "torchtitan_convert_to_hf           not run: no $convert (set CONVERT_TO_HF)"
fi

if "$dcpctl" maps > /dev/null 2>&1; then
  timed dcpctl_consolidate_map "$dcpctl" consolidate "$ck" -o "$work/out-map/" --map torchtitan-llama3 \
    --config "$assets/config.json" --assets "$assets" -q
  if [ -d "$work/out-torchtitan" ] && [ -d "$work/out-map" ]; then
    rc=0
    "$dcpctl" diff "$work/out-map" "$work/out-torchtitan" --quiet || rc=$?
    echo "   dcpctl diff (--map output) (torchtitan's output): exit $rc (0: every tensor identical)"
  fi
  rm -rf "$work/out-map"
else
  echo "dcpctl_consolidate_map             not run: this dcpctl has no key maps (\`dcpctl maps\` fails)"
fi
rm -rf "$work/out-torchtitan"

timed dcpctl_consolidate_nomap "$dcpctl" consolidate "$ck" -o "$work/out-nomap/" --assets "$assets" -q
rm -rf "$work/out-nomap"
