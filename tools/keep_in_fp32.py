#!/usr/bin/env python3
"""Writes src/plan/keep_in_fp32.json: which tensors each transformers model keeps in float32.

transformers declares, on its model classes, the parameters it loads in float32 whatever dtype the
model is loaded in (modeling_utils.py, PreTrainedModel._get_dtype_plan):

  _keep_in_fp32_modules_strict  kept in float32 when loading in float16 or bfloat16 (MoE router
                                biases such as e_score_correction_bias, attention sinks, gates);
  _keep_in_fp32_modules         kept in float32 only when loading in float16 (weights whose values
                                overflow float16's range, such as T5's `wo`).

A composite model unions its children's lists (PreTrainedModel.post_init), so the table is per
model_type: every class that subclasses PreTrainedModel in every `transformers.models.*.modeling_*`
module, grouped by its `config_class.model_type`, the union of its lists (an inherited list counts:
DeepseekV3ForCausalLM keeps what DeepseekV3PreTrainedModel declares). Each pattern is matched as
transformers matches it (core_model_loading.py, build_glob_alternation and the dtype plan): `*`
becomes `.*`, and the regex is *searched* in the parameter's name, so "norm" keeps every key that
contains "norm". dcpctl implements only the regex syntax the table uses; this script refuses a
pattern outside it (letters, digits, `_`, `.` = any character, `*` = any run of characters).

The committed table was written on 2026-11-29 with the project's virtualenv, which pins
transformers==5.24.0 (tools/requirements.txt; torch==2.15.0, tokenizers==0.23.3; before it,
5.23.0 on 2026-11-26):

    .venv/bin/python tools/keep_in_fp32.py > src/plan/keep_in_fp32.json

For another transformers version, a throwaway virtualenv reusing the project's torch (not run here):

    python3.11 -m venv /tmp/v-tf
    echo "$PWD/.venv/lib/python3.11/site-packages" > /tmp/v-tf/lib/python3.11/site-packages/_main_venv_torch.pth
    /tmp/v-tf/bin/pip install transformers==X.Y.Z
    /tmp/v-tf/bin/python tools/keep_in_fp32.py > src/plan/keep_in_fp32.json

It imports every modeling module (13 minutes on a busy 2-core machine, 34 s of CPU; with 5.24.0,
43 s wall and 13 s of CPU, the modules compiled); a module that cannot be imported (an optional
dependency missing) is named on stderr and in the table's "not_imported", so a gap is visible.
"""
import importlib
import inspect
import json
import pkgutil
import re
import sys

import transformers
from transformers import PreTrainedModel

SUPPORTED = re.compile(r"^[A-Za-z0-9_.*]+$")


def patterns(value):
    if isinstance(value, (list, tuple, set, frozenset)):
        out = [p for p in value if isinstance(p, str)]
        return out
    return []


def main():
    strict, fp16, not_imported = {}, {}, []
    for info in sorted(pkgutil.iter_modules(transformers.models.__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        pkg = "transformers.models." + info.name
        path = [p + "/" + info.name for p in transformers.models.__path__]
        for sub in sorted(pkgutil.iter_modules(path), key=lambda i: i.name):
            if not sub.name.startswith("modeling_"):
                continue
            name = pkg + "." + sub.name
            try:
                mod = importlib.import_module(name)
            except Exception as e:  # an optional dependency: recorded, not hidden
                not_imported.append(name)
                print(f"keep_in_fp32: {name}: not imported: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            for _, cls in inspect.getmembers(mod, inspect.isclass):
                if cls.__module__ != name or not issubclass(cls, PreTrainedModel):
                    continue
                cfg = getattr(cls, "config_class", None)
                model_type = getattr(cfg, "model_type", "") if cfg is not None else ""
                if not model_type:
                    continue
                for table, attr in ((strict, "_keep_in_fp32_modules_strict"), (fp16, "_keep_in_fp32_modules")):
                    for p in patterns(getattr(cls, attr, None)):
                        if not SUPPORTED.match(p):
                            sys.exit(f"keep_in_fp32: {cls.__name__}.{attr}: pattern {p!r} uses regex syntax dcpctl does not implement")
                        table.setdefault(model_type, set()).add(p)
    out = {
        "schema": "dcpctl-keep-in-fp32/1",
        "transformers": transformers.__version__,
        "source": "tools/keep_in_fp32.py: every PreTrainedModel subclass of transformers.models.*.modeling_*, by config_class.model_type",
        "strict": {k: sorted(v) for k, v in sorted(strict.items())},
        "fp16": {k: sorted(v) for k, v in sorted(fp16.items())},
        "not_imported": sorted(not_imported),
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
