#!/usr/bin/env python3
"""Runs torchtitan's own scripts/checkpoint_conversion/convert_to_hf.py, unmodified, with the
"bench3g" flavor registered (bench/titan_flavor.py): the script builds `model_registry(flavor)`,
which only knows torchtitan's own flavors.

    run_convert_to_hf.py CONVERT_TO_HF.py INPUT_DCP OUTPUT_DIR HF_ASSETS_DIR
"""
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import titan_flavor  # noqa: E402

script, inp, out, assets = sys.argv[1:5]
sys.argv = [script, inp, out, "--hf_assets_path", assets, "--model_name", "llama3", "--model_flavor",
            titan_flavor.FLAVOR, "--export_dtype", "float32"]
runpy.run_path(script, run_name="__main__")
