#!/usr/bin/env python3
"""Runs torchtitan's own scripts/checkpoint_conversion/convert_to_hf.py, unmodified, with the
flavors of bench/titan_flavor.py registered: the script builds `model_registry(flavor)` of
torchtitan.models.<model_name>, which only knows torchtitan's own flavors.

    run_convert_to_hf.py CONVERT_TO_HF.py INPUT_DCP OUTPUT_DIR HF_ASSETS_DIR [FLAVOR]

FLAVOR: bench3g (llama3, the default) or bench_moe (deepseek_v3); exported as float32.
"""
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import titan_flavor  # noqa: E402

if len(sys.argv) not in (5, 6) or (len(sys.argv) == 6 and sys.argv[5] not in titan_flavor.FLAVORS):
    sys.exit(f"usage: {sys.argv[0]} CONVERT_TO_HF.py INPUT_DCP OUTPUT_DIR HF_ASSETS_DIR "
             f"[{'|'.join(titan_flavor.FLAVORS)}]")
script, inp, out, assets = sys.argv[1:5]
name = sys.argv[5] if len(sys.argv) == 6 else titan_flavor.FLAVOR
sys.argv = [script, inp, out, "--hf_assets_path", assets, "--model_name", titan_flavor.FLAVORS[name].model,
            "--model_flavor", name, "--export_dtype", "float32"]
runpy.run_path(script, run_name="__main__")
