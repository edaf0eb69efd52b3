#!/usr/bin/env bash
# Benchmark: `dcpctl consolidate --lora merge` (a PEFT LoRA adapter in a DCP checkpoint folded into
# its base weights, streamed one weight at a time) beside what users do today, PEFT's own
# merge_and_unload, on a 2.69 GB float32 Llama (bench/lora_ckpt.py make: 672.2 M parameters,
# TinyLlama's shapes with 12 layers, seeded random init; LoRA r=16 alpha=32 on q/k/v/o/gate/up/down,
# 84 Linears, every lora_B seeded non-zero; dcp.save of get_model_state_dict(peft_model) in ONE
# process, no FSDP; made on first use and kept in the work dir). Side by side, in one run:
#   dcpctl_lora_merge      dcpctl consolidate CKPT --lora merge -o OUT/ --assets BASE -q
#   peft_merge_and_unload  python bench/lora_ckpt.py peft-merge BASE ADAPTER OUT2, i.e.
#                          base = AutoModelForCausalLM.from_pretrained(BASE)
#                          pm = PeftModel.from_pretrained(base, ADAPTER)   (PEFT's save_pretrained
#                          m = pm.merge_and_unload(); m.save_pretrained(OUT2)  of the same adapter)
#   dcpctl_no_merge        dcpctl consolidate CKPT -o OUT3/ --assets BASE -q  (--lora keep, the
#                          default: the same 2.72 GB written as saved, no arithmetic; the I/O floor of
#                          the merge; NO_MERGE_ROW=0 leaves it out)
# each under /usr/bin/time -v (wall clock, max RSS), page cache dropped before each run when
# possible (bench/common.sh), REPEAT rounds (default 2) with the order shuffled each round; then a
# table (median wall, worst RSS), how long a `sync` right after each PEFT run took (dcpctl fsyncs
# its output before it exits; save_pretrained returns with ~2.7 GB of dirty page cache), and the
# agreement check of the last round's two merged outputs: `dcpctl diff OUT/ OUT2/ --json`
# (counts) and bench/lora_ckpt.py check (every tensor bit for bit, else the max abs diff; and how
# many tensors the merge changed against the base).
#
#   bench/lora.sh [WORKDIR]    (default /tmp/dcpctl-bench-lora; ~14 GB free there: base 2.7 GB,
#                               checkpoint 2.7 GB, up to three outputs of 2.7 GB; the inputs are kept)
#
# Environment: DCPCTL (default build/cmd/dcpctl; needs a build with `consolidate --lora`), PYTHON
# (default .venv/bin/python: torch 2.15.0, transformers 5.23.0, peft 0.21.0), REPEAT (rounds,
# default 2), KEEP=1 to keep the merged outputs. Memory: PEFT's side holds the whole model (~3 GB
# RSS, plus what from_pretrained and save_pretrained add); the generator about as much.
set -euo pipefail
# MOE=1: the MoE row (bench/lora_ckpt.py make-moe: a 2.38 GB float32 Qwen3-MoE, 32 experts, PEFT 0.21
# target_parameters on the fused experts plus q/k/v/o, saved by FSDP2 on 2 gloo ranks; work dir
# /tmp/dcpctl-bench-lora-moe). dcpctl's merge is written per expert (its default), as PEFT's
# save_pretrained writes the merged model, so the agreement check compares the same names.
make_cmd=make
if [ "${MOE:-0}" = 1 ]; then make_cmd=make-moe; fi
default_work=/tmp/dcpctl-bench-lora; [ "$make_cmd" = make-moe ] && default_work=/tmp/dcpctl-bench-lora-moe
set -- "${1:-$default_work}"   # common.sh's work dir ($1)
own_ckpt=1
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

# (the help read whole first: grep -q closing the pipe early would fail it under pipefail)
if ! grep -q -- '--lora ' <<< "$("$dcpctl" consolidate --help 2>/dev/null)"; then
  echo "$dcpctl has no consolidate --lora (set DCPCTL to a build that has it)" >&2
  exit 2
fi

base=$work/base
adapter=$work/adapter
ck=$work/ckpt
out_dcpctl=$work/out-dcpctl
out_peft=$work/out-peft
out_nomerge=$work/out-nomerge

echo "== the checkpoint: $work (bench/lora_ckpt.py $make_cmd; kept between runs)"
"$py" "$root/bench/lora_ckpt.py" "$make_cmd" "$work"
echo "   ckpt/ $(du -sh --apparent-size "$ck" | cut -f1) ($(find "$ck" -type f | wc -l) files);" \
     "base/ $(du -sh --apparent-size "$base" | cut -f1); adapter/ $(du -sh --apparent-size "$adapter" | cut -f1)"
echo "   $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB; dcpctl $("$dcpctl" --version | head -n 1) ($dcpctl)"

names=(dcpctl_lora_merge peft_merge_and_unload)
# (the MoE row has none: --lora keep of a PEFT model's keys is no HF folder, which the writer refuses)
no_merge_default=1; [ "$make_cmd" = make-moe ] && no_merge_default=0
if [ "${NO_MERGE_ROW:-$no_merge_default}" = 1 ]; then names+=(dcpctl_no_merge); fi
cmd_for() {
  case $1 in
    dcpctl_lora_merge)
      echo "'$dcpctl' consolidate '$ck' --lora merge -o '$out_dcpctl/' --assets '$base' -q" ;;
    peft_merge_and_unload)
      echo "'$py' '$root/bench/lora_ckpt.py' peft-merge '$base' '$adapter' '$out_peft' 2>> '$work/peft_phases.log'" ;;
    dcpctl_no_merge)
      echo "'$dcpctl' consolidate '$ck' -o '$out_nomerge/' --assets '$base' -q" ;;
  esac
}
before_run() {
  case $1 in
    dcpctl_lora_merge) rm -rf "$out_dcpctl" ;;
    peft_merge_and_unload) rm -rf "$out_peft" ;;
    dcpctl_no_merge) rm -rf "$out_nomerge" ;;
  esac
}
# after_run NAME ROUND: the no-merge output is not kept (disk); after PEFT's run, time a sync.
after_run() {
  case $1 in
    dcpctl_no_merge) rm -rf "$out_nomerge" ;;
    peft_merge_and_unload)
      /usr/bin/time -f "round $2: sync after peft_merge_and_unload took %e s" -a -o "$work/peft_sync.log" sync ;;
  esac
}
rm -f "$work/peft_phases.log" "$work/peft_sync.log"
warm_up
repeat=${REPEAT:-2}
run_rounds lora

echo "== PEFT's phases, per round (bench/lora_ckpt.py peft-merge's stderr):"
grep '^peft-merge phases' "$work/peft_phases.log" | sed 's/^/   /' || cat "$work/peft_phases.log"
sed 's/^/   /' "$work/peft_sync.log"

"$py" - "$work" "$repeat" "$root/bench" "${names[@]}" <<'EOF'
import json, os, sys
work, repeat, names = sys.argv[1], int(sys.argv[2]), sys.argv[4:]
sys.path.insert(0, sys.argv[3])
from timing import print_paired, report, table
info = json.load(open(os.path.join(work, "lora_info.json")))
print("\nper run (in round order):")
rows = {n: report(work, "lora", n, repeat, 22) for n in names}
print(f"\nmodel: {info['parameters']:,} parameters ({info['base_bytes'] / 1e9:.2f} GB float32); "
      f"checkpoint {info['ckpt_bytes'] / 1e9:.2f} GB ({info['ckpt_model_keys']} keys, {info['lora_modules']} LoRA modules)")
table(rows, repeat, 22)
print_paired(work, "lora", "peft_merge_and_unload", "dcpctl_lora_merge", repeat)
if "dcpctl_no_merge" in names:
    print_paired(work, "lora", "dcpctl_lora_merge", "dcpctl_no_merge", repeat)
EOF

echo
echo "== agreement: dcpctl diff $out_dcpctl/ $out_peft/ --json"
rc=0
"$dcpctl" diff "$out_dcpctl/" "$out_peft/" --json > "$work/diff.json" 2> "$work/diff.err" || rc=$?
"$py" - "$work/diff.json" "$rc" <<'EOF'
import json, sys
rc = sys.argv[2]
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:  # noqa: BLE001
    print(f"   exit {rc}; no JSON ({e})")
    sys.exit(0)
c = d.get("counts", {})
worst = max((k for k in d.get("keys", []) if k.get("max_abs_diff") is not None), key=lambda k: k["max_abs_diff"], default=None)
print(f"   exit {rc} (0: every tensor identical); counts {json.dumps(c)}"
      + (f"; largest max_abs_diff {worst['max_abs_diff']:.3g} ({worst['key']})" if worst and worst["max_abs_diff"] else ""))
EOF
echo "== agreement: bench/lora_ckpt.py check (safetensors, tensor by tensor; and against the base)"
"$py" "$root/bench/lora_ckpt.py" check "$out_dcpctl" "$out_peft" "$base" | sed 's/^/   /' || true

if [ "${KEEP:-0}" != 1 ]; then rm -rf "$out_dcpctl" "$out_peft" "$out_nomerge"; fi
