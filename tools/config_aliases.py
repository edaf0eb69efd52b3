#!/usr/bin/env python3
"""Writes src/view/maps/config_aliases.json: the other names transformers gives config.json parameters.

A transformers config class may declare `attribute_map` {ALIAS: NAME}: reading `config.ALIAS`
reads `config.NAME`, and `save_pretrained` writes NAME only. Qwen3MoeConfig maps `num_experts` to
`num_local_experts`, so transformers 5.23 writes Qwen3-MoE's expert count as `num_local_experts`,
where the releases' own config.json files (written by older transformers) say `num_experts`.
dcpctl's key maps (view/maps/keymap.h, Params) read a parameter through these tables both ways: asked
for ALIAS, a config that has NAME answers; asked for NAME, one that has ALIAS does.

The table is per `model_type` (the config class's), the `attribute_map` of every config class in
transformers' CONFIG_MAPPING_NAMES that declares one. Written with the project's virtualenv, which
pins transformers==5.23.0 (tools/requirements.txt):

    .venv/bin/python tools/config_aliases.py > src/view/maps/config_aliases.json
"""
import json
import sys

import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES


def main() -> None:
    table, missing = {}, []
    for model_type, cls_name in sorted(CONFIG_MAPPING_NAMES.items()):
        try:
            cls = getattr(transformers, cls_name)
        except Exception:  # an optional dependency missing: say so, keep going
            missing.append(model_type)
            continue
        amap = dict(getattr(cls, "attribute_map", {}) or {})
        if amap:
            table[model_type] = dict(sorted(amap.items()))
    for m in missing:
        print(f"not imported: {m}", file=sys.stderr)
    json.dump({"transformers": transformers.__version__, "not_imported": missing, "attribute_map": table}, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
