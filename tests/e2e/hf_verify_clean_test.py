#!/usr/bin/env python3
"""No false alarms: `verify` of every Hugging Face folder and `.safetensors` file real writers
put into tests/fixtures passes, with the HF checks of check/hf_checks.h on.

    hf_verify_clean_test.py DCPCTL FIXTURES_DIR

Every folder under tests/fixtures/layouts that holds `.safetensors` files (transformers'
save_pretrained: hf_fp8_*, hf_transformers*/start, titan_*/hf, megatron_*/hf, peft_*/base and
expected_merged; torch's HuggingFaceStorageWriter: hf_single, hf_sharded, hf_consolidated,
run_torchtitan_hf's step-4, hf_transformers*/ckpt), and every `.safetensors` file on its own
(torch's reference outputs, PEFT's adapters, dcpctl's expected exports): exit 0, no problem, and
for a folder with a config.json, the config checks its tensors allow ran (`hf.config_checks`).
The MTP warning is expected where transformers dropped the MTP layers (titan_deepseek_v3*/hf,
hf_fp8_deepseek), and nowhere else. The model schema (check/hf_schema.h) compares at least 15 of
them; hf_fp8_block, a few tensors of a DeepSeek-V3 layer, is the one folder it refuses
(schema-key-missing only). Standard-library Python only. Exit 0 pass, 1 failure.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testlib import check, run, summary  # noqa: E402

# A folder of a few tensors of one model (make_fp8.py: one DeepSeek-V3 layer's MLP, its embedding
# and norm, under a deepseek_v3 config): the model schema finds what that model lacks, and nothing
# else.
PARTIAL = {"layouts/hf_fp8_block"}
# Folders whose config counts MTP layers that transformers' save_pretrained leaves out.
MTP_DROPPED = {"layouts/titan_deepseek_v3/hf", "layouts/titan_deepseek_v3_mtp/hf", "layouts/hf_fp8_deepseek/ckpt"}


def verify(dcpctl: str, path: Path) -> tuple[int, dict]:
    r = run(dcpctl, "verify", "--json", str(path))
    try:
        return r.returncode, json.loads(r.stdout)
    except json.JSONDecodeError:
        check(False, f"verify --json {path}: not JSON (exit {r.returncode}): {r.stderr[-300:]}")
        return r.returncode, {}


def main() -> int:
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2])
    # A model's folder holds only a writer's names; a fixture case's folder beside them holds
    # unrelated files (expected_*.safetensors, logits.safetensors), each checked on its own below.
    def model_file(name: str) -> bool:
        return re.fullmatch(r"model(-\d+-of-\d+)?\.safetensors|shard-\d+-model-\d+-of-\d+\.safetensors|adapter_model\.safetensors", name) is not None

    folders = sorted({p.parent for p in (fixtures / "layouts").rglob("*.safetensors")
                      if all(model_file(q.name) for q in p.parent.glob("*.safetensors"))})
    files = sorted((fixtures / "layouts").rglob("*.safetensors"))
    check(len(folders) >= 25 and len(files) >= 50, f"found {len(folders)} folders and {len(files)} files")
    configs = schema_checked = 0
    for folder in folders:
        rel = str(folder.relative_to(fixtures))
        rc, j = verify(dcpctl, folder)
        if not j:
            continue
        if j.get("layout") not in ("hf-safetensors", "hf-dcp-shards"):
            continue  # a DCP checkpoint with safetensors items, read as DCP
        if rel in PARTIAL:
            got = {p["code"] for p in j.get("problems", [])}
            check(rc == 3 and got == {"schema-key-missing"}, f"{rel}: a partial model: exit {rc}, problems {got}")
        else:
            check(rc == 0 and j["ok"], f"{rel}: exit {rc}, problems {[(p['code'], p['key'], p['message']) for p in j.get('problems', [])][:5]}")
        check("hf" in j, f"{rel}: the report has its hf section")
        warn = [w["code"] for w in j.get("warnings", [])]
        check(("mtp-layers-absent" in warn) == (rel in MTP_DROPPED), f"{rel}: warnings {warn}")
        if (folder / "config.json").exists():
            configs += 1
            checks = j["hf"]["config_checks"]
            check("num_hidden_layers" in checks and "dtype" in checks, f"{rel}: config checks ran: {checks}")
            schema = j["hf"].get("schema") or {}
            schema_checked += schema.get("checked") is True
    check(schema_checked >= 15, f"{schema_checked} folders compared with the model schema")
    check(configs >= 15, f"{configs} folders with a config.json checked")
    for f in files:
        if re.fullmatch(r"model-\d+-of-(?!0*1\.)\d+\.safetensors|shard-.*", f.name):
            continue  # one part of a set is not the model: verify reports the others missing
        rc, j = verify(dcpctl, f)
        if j:
            check(rc == 0 and j["ok"], f"{f.relative_to(fixtures)}: exit {rc}, problems {[(p['code'], p['message']) for p in j.get('problems', [])][:5]}")
    return summary("hf_verify_clean")


if __name__ == "__main__":
    sys.exit(main())
