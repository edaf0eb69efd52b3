#!/usr/bin/env python3
"""torch_checkpointing ("DCPv2") checkpoints, written by the real torch-checkpointing 0.1.1
(tests/fixtures/layouts/make_torch_checkpointing.py), read by dcpctl:

    torch_checkpointing_test.py DCPCTL FIXTURES_DIR

Oracles: expected.safetensors is what the library's own CheckpointManager.load gave back into a
fresh FSDP2 model and optimizer (recorded by the generator: the venv has no torch-checkpointing);
dcpctl's consolidate of the checkpoint must equal it tensor for tensor (dtype, shape, bytes), and
must be byte-identical to dcpctl's consolidate of the dcp.save twin of the same payload (tc_sync_2r/
dcp_twin, read by torch's own dcp.load too): every tensor's dtype, shape and bytes (the key order of
the two files is each writer's). Every reading command runs on each default-layout case
(inspect, verify, verify --deep, consolidate to .safetensors/.pt/an HF-less folder, reshard to DCP
loaded by dcp.load, diff against the twin, stats); damage (a missing rank file, a cut file, an item metadata.pkl names without files)
is exit 3.

JSON and raw-bytes items (tc_custom_2r: config_{rank}.json, extra/blob_{rank}.bin, which metadata.pkl
does not record) are non-tensor items: inspect lists them, `inspect --value` and consolidate .pt
give what the library's load gave rank 0 (expected.json's non_tensor_items: the JSON value; the
bytes, whose last byte is the rank, so another rank's file is caught), reshard keeps them as DCP
bytes items that torch's dcp_to_torch_save reads back; a JSON file that does not parse is exit 3,
one holding NaN (Python's json reads it) verifies and is refused (5) where its value is needed.

_StridedShard in the default layout (tc_strided_4r's optimizer item: Adam's state DTensors pickled
with (_StridedShard(0, split_factor=2), Shard(0)) on a 2x2 mesh): consolidate equals the library's
load and the dcp.save twin of the same payload (tc_strided_4r/dcp_twin).

The safetensors layout (each rank's local shard under flattened keys, placed by metadata.pkl:
tc_safetensors_2r, tc_safetensors_async_2r, tc_safetensors_1r, and tc_strided_4r, FSDP2 over
tensor parallel on a 2x2 mesh, proj's rows placed (_StridedShard(0, split_factor=2), Shard(0))):
the same commands, consolidate equal to the library's load AND to the library's own
consolidate_hf_safetensors_checkpoint (hf_consolidated/, keys without the item prefix); the same
shards placed as plain Shard (metadata.pkl edited) must give different rows, so the comparison
catches a wrong slice. Without metadata.pkl (tc_safetensors_nometa_2r) exit 5 naming
torch_checkpointing, the layout and the missing metadata.pkl.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testlib import check, expect_rc, run, summary  # noqa: E402
import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

DEFAULT_CASES = ["tc_sync_2r", "tc_async_2r", "tc_sync_1r", "tc_nometa_2r"]
SAFETENSORS_CASES = ["tc_safetensors_2r", "tc_safetensors_async_2r", "tc_safetensors_1r", "tc_strided_4r"]
# The model item at a custom path with sub-folders (rank_{rank}/model.pt), beside a JSON item
# (config_{rank}.json) and a raw-bytes item (extra/blob_{rank}.bin) that metadata.pkl does not record.
CUSTOM_CASES = ["tc_custom_2r"]


def same(label, got: dict, want: dict) -> None:
    check(sorted(got) == sorted(want), f"{label}: keys {sorted(set(got) ^ set(want))} differ")
    for k in sorted(set(got) & set(want)):
        a, b = got[k], want[k]
        ok = a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))
        check(ok, f"{label}: {k}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")


def edit_meta(d, change):
    md = pickle.loads((d / "metadata.pkl").read_bytes())
    change(md["metadata"])
    (d / "metadata.pkl").write_bytes(pickle.dumps(md))


def data(m, item, path):
    return m[item]["nested_path_to_metadata"][path][0]["sharding_metadata"]["data"]


def main() -> int:
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2]) / "layouts"
    tmp = Path(tempfile.mkdtemp(prefix="dcpctl-tc-"))
    try:
        twin_out = tmp / "twin.safetensors"
        r = run(dcpctl, "consolidate", fixtures / "tc_sync_2r/dcp_twin", "-o", twin_out)
        expect_rc(r, 0, "consolidate the dcp.save twin")
        twin = load_file(twin_out) if twin_out.exists() else {}
        for case in DEFAULT_CASES + SAFETENSORS_CASES + CUSTOM_CASES:
            ck = fixtures / case / "ckpt"
            r = run(dcpctl, "inspect", ck)
            expect_rc(r, 0, f"{case}: inspect", "torch-checkpointing")
            r = run(dcpctl, "verify", ck)
            expect_rc(r, 0, f"{case}: verify")
            r = run(dcpctl, "verify", "--deep", ck)
            expect_rc(r, 0, f"{case}: verify --deep")
            out = tmp / f"{case}.safetensors"
            r = run(dcpctl, "consolidate", ck, "-o", out)
            if not expect_rc(r, 0, f"{case}: consolidate .safetensors"):
                continue
            got = load_file(out)
            exp = fixtures / case / "expected.safetensors"
            if exp.exists():  # the library's own load
                same(f"{case} vs CheckpointManager.load", got, load_file(exp))
            hf = fixtures / case / "hf_consolidated"
            if hf.exists():  # the library's own consolidate_hf_safetensors_checkpoint of the model item
                lib = {}
                for f in sorted(hf.glob("*.safetensors")):
                    lib.update({"model." + k: v for k, v in load_file(f).items()})
                same(f"{case} vs consolidate_hf_safetensors_checkpoint", {k: v for k, v in got.items() if k.startswith("model.")}, lib)
                d = tmp / f"{case}-hf"
                r = run(dcpctl, "consolidate", ck, "-o", str(d) + "/", "--include", "model.*")
                if expect_rc(r, 0, f"{case}: consolidate to an HF folder"):
                    out_hf = {}
                    for f in sorted(d.glob("*.safetensors")):
                        out_hf.update(load_file(f))
                    same(f"{case} HF folder vs consolidate_hf_safetensors_checkpoint", {"model." + k: v for k, v in out_hf.items()}
                         if not any(k.startswith("model.") for k in out_hf) else out_hf, lib)
            if case in ("tc_sync_2r", "tc_async_2r"):  # the same payload saved by dcp.save
                # Every tensor's bytes, dtype and shape equal; the files' key order is each
                # writer's (dcp.save's planner moves the replicated step tensors last).
                same(f"{case} vs dcp twin", got, twin)
            if (fixtures / case / "dcp_twin").exists() and case != "tc_sync_2r":  # tc_strided_4r's own twin
                own = tmp / f"{case}-twin.safetensors"
                r = run(dcpctl, "consolidate", fixtures / case / "dcp_twin", "-o", own)
                if expect_rc(r, 0, f"{case}: consolidate its dcp.save twin"):
                    same(f"{case} vs its dcp twin", got, load_file(own))
            pt = tmp / f"{case}.pt"
            r = run(dcpctl, "consolidate", ck, "-o", pt)
            if expect_rc(r, 0, f"{case}: consolidate .pt"):
                sd = torch.load(pt, weights_only=True)
                same(f"{case} .pt", {k: v for k, v in sd.items() if isinstance(v, torch.Tensor)}, got)
                if case in CUSTOM_CASES:  # the JSON and raw items, as the library's load gave rank 0
                    nt = json.loads((fixtures / case / "expected.json").read_text())["non_tensor_items"]
                    check(sd.get("config") == nt["config"], f"{case} .pt: config {sd.get('config')!r} vs the library's {nt['config']!r}")
                    blob = sd.get("blob")
                    check(isinstance(blob, bytes) and hashlib.sha256(blob).hexdigest() == nt["blob_rank0_sha256"]
                          and len(blob) == nt["blob_rank0_bytes"], f"{case} .pt: blob is rank 0's bytes ({type(blob).__name__})")
            rs = tmp / f"{case}-reshard"
            r = run(dcpctl, "reshard", ck, "-w", "3", "-o", rs)
            if expect_rc(r, 0, f"{case}: reshard -w 3"):
                sd = {k: torch.empty_like(v) for k, v in got.items()}
                dcp.load(sd, checkpoint_id=str(rs), no_dist=True)
                same(f"{case} reshard via dcp.load", sd, got)
                if case in CUSTOM_CASES:  # the JSON and raw items as DCP bytes items, read back by torch
                    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
                    dcp_to_torch_save(str(rs), str(tmp / f"{case}-reshard.pt"))
                    back = torch.load(tmp / f"{case}-reshard.pt", weights_only=True)
                    nt = json.loads((fixtures / case / "expected.json").read_text())["non_tensor_items"]
                    check(back.get("config") == nt["config"] and isinstance(back.get("blob"), bytes)
                          and hashlib.sha256(back["blob"]).hexdigest() == nt["blob_rank0_sha256"],
                          f"{case} reshard: config and blob through dcp_to_torch_save: {back.get('config')!r}")
            r = run(dcpctl, "stats", ck)
            expect_rc(r, 0, f"{case}: stats")
        # Tensors only: the twin's non-tensor items (step, param_groups) are values, not items, here.
        r = run(dcpctl, "diff", fixtures / "tc_sync_2r/ckpt", fixtures / "tc_sync_2r/dcp_twin", "--include", "model.*",
                "--include", "optimizer.state.*")
        expect_rc(r, 0, "diff against the dcp.save twin")
        r = run(dcpctl, "diff", fixtures / "tc_sync_2r/ckpt", fixtures / "tc_nometa_2r/ckpt")
        expect_rc(r, 0, "diff of two saves of the same state (with and without metadata.pkl)")
        # The twin through torch itself: dcp.load equals the library's load.
        want = load_file(fixtures / "tc_sync_2r/expected.safetensors")
        sd = {k: torch.empty_like(v) for k, v in want.items()}
        dcp.load(sd, checkpoint_id=str(fixtures / "tc_sync_2r/dcp_twin"), no_dist=True)
        same("dcp twin via dcp.load vs CheckpointManager.load", sd, want)
        # The same seeded training saved in the default layout and in the safetensors layout (two
        # runs: gloo's reductions differ by a few ULP, so within 1e-5; a misplaced row is far off).
        r = run(dcpctl, "diff", fixtures / "tc_sync_2r/ckpt", fixtures / "tc_safetensors_2r/ckpt", "--rtol", "1e-5", "--atol", "1e-8")
        expect_rc(r, 0, "diff of the default and the safetensors layout of one training")
        # A wrong slice is caught: tc_strided_4r's shards placed as plain Shard (metadata.pkl's
        # StridedShard edited to Shard; the local shapes still fit) give other rows than the library's load.
        d = tmp / "strided-as-shard"
        shutil.copytree(fixtures / "tc_strided_4r/ckpt", d)
        md = pickle.loads((d / "metadata.pkl").read_bytes())
        for groups in md["metadata"]["model"]["nested_path_to_metadata"].values():
            for g in groups:
                for p in g["sharding_metadata"]["data"]["placements"]:
                    if p["type"] == "StridedShard":
                        p["type"] = "Shard"
                        del p["split_factor"]
        (d / "metadata.pkl").write_bytes(pickle.dumps(md))
        r = run(dcpctl, "consolidate", d, "-o", tmp / "strided-as-shard.safetensors")
        if expect_rc(r, 0, "strided shards placed as plain Shard: consolidate"):
            wrong = load_file(tmp / "strided-as-shard.safetensors")
            want = load_file(fixtures / "tc_strided_4r/expected.safetensors")
            check(not torch.equal(wrong["model.proj.weight"], want["model.proj.weight"]),
                  "placed as plain Shard, proj.weight must differ from the library's load (else the oracle cannot see a wrong slice)")
            check(torch.equal(wrong["model.emb.weight"], want["model.emb.weight"]), "emb.weight (plain Shard) is unchanged")
        # Safetensors-layout damage: a rank's file missing or cut, a local shard metadata.pkl
        # places with another shape.
        for name, change, names in (
                ("rank", lambda d: (d / "model_1.safetensors").unlink(), ["missing-rank", "model_1.safetensors"]),
                ("cut", lambda d: (d / "model_1.safetensors").write_bytes((d / "model_1.safetensors").read_bytes()[:200]),
                 ["model_1.safetensors"]),
                ("shape", lambda d: edit_meta(d, lambda m: data(m, "model", '["proj.weight"]').__setitem__("global_shape", [35, 8])),
                 ["metadata-mismatch", "model.proj.weight", "[35, 8]"])):
            d = tmp / f"st-broken-{name}"
            shutil.copytree(fixtures / "tc_safetensors_2r/ckpt", d)
            change(d)
            expect_rc(run(dcpctl, "verify", d), 3, f"safetensors layout broken ({name}): verify", *names)
            expect_rc(run(dcpctl, "consolidate", d, "-o", tmp / f"stb-{name}.safetensors"), 3, f"safetensors layout broken ({name}): consolidate")
        # Custom paths: the JSON and raw files are non-tensor items, never tensors (the same
        # tensors as the library's load), and a rank's file missing at its custom path is exit 3 naming it.
        nt = json.loads((fixtures / "tc_custom_2r/expected.json").read_text())["non_tensor_items"]
        r = run(dcpctl, "inspect", "--json", fixtures / "tc_custom_2r/ckpt")
        if expect_rc(r, 0, "custom paths: inspect --json"):
            items = json.loads(r.stdout)["items"]
            nb = {i["key"]: i for i in items if i["kind"] == "bytes"}
            check(sorted(nb) == ["blob", "config"] and nb["config"]["file"] == "config_0.json"
                  and nb["blob"]["file"] == "extra/blob_0.bin" and nb["blob"]["length"] == nt["blob_rank0_bytes"],
                  f"custom paths: inspect lists config and blob as non-tensor items: {nb}")
            check(sorted(i["key"] for i in items if i["kind"] == "tensor") == sorted(load_file(fixtures / "tc_custom_2r/expected.safetensors")),
                  "custom paths: inspect lists the library's tensors")
        r = run(dcpctl, "inspect", "--json", "--value", "config", fixtures / "tc_custom_2r/ckpt")
        check(r.returncode == 0 and json.loads(r.stdout or "{}").get("value") == nt["config"], f"inspect --value config: exit {r.returncode}")
        r = run(dcpctl, "diff", fixtures / "tc_sync_2r/ckpt", fixtures / "tc_custom_2r/ckpt", "--rtol", "1e-5", "--atol", "1e-8",
                "--include", "model.*", "--include", "optimizer.*")
        expect_rc(r, 0, "diff of the default layout and custom paths of one training")
        # A JSON item that does not parse is damage (exit 3 naming the file); one holding NaN and
        # -Infinity is valid (Python's json reads them, the library loads it): read as those floats.
        d = tmp / "custom-bad-json"
        shutil.copytree(fixtures / "tc_custom_2r/ckpt", d)
        (d / "config_1.json").write_text('{"lr": 0.01,')
        expect_rc(run(dcpctl, "verify", d), 3, "a JSON item that does not parse: verify", "item-invalid", "config_1.json")
        expect_rc(run(dcpctl, "consolidate", d, "-o", tmp / "bad-json.pt"), 3, "a JSON item that does not parse: consolidate", "config_1.json")
        d = tmp / "custom-nan-json"
        shutil.copytree(fixtures / "tc_custom_2r/ckpt", d)
        (d / "config_0.json").write_text(json.dumps({"lr": float("nan"), "floor": float("-inf"), "name": "NaN"}, indent=4))
        expect_rc(run(dcpctl, "verify", d), 0, "a JSON item holding NaN: verify")
        r = run(dcpctl, "consolidate", d, "-o", tmp / "nan-json.pt")
        if expect_rc(r, 0, "a JSON item holding NaN: consolidate .pt"):
            c = torch.load(tmp / "nan-json.pt", weights_only=True).get("config", {})
            check(sorted(c) == ["floor", "lr", "name"] and math.isnan(c["lr"]) and c["floor"] == float("-inf") and c["name"] == "NaN",
                  f"a JSON item holding NaN: {c!r}")
        d = tmp / "custom-missing"
        shutil.copytree(fixtures / "tc_custom_2r/ckpt", d)
        (d / "rank_1/model.pt").unlink()
        expect_rc(run(dcpctl, "verify", d), 3, "custom path missing: verify", "missing-rank", "rank_1/model.pt")
        expect_rc(run(dcpctl, "consolidate", d, "-o", tmp / "cm.safetensors"), 3, "custom path missing: consolidate")
        # A JSON item metadata.pkl does record (its layout entry added by hand: 0.1.1 records only
        # items with sharding metadata) is the same non-tensor item, never read as tensors.
        d = tmp / "custom-json-recorded"
        shutil.copytree(fixtures / "tc_custom_2r/ckpt", d)
        edit_meta(d, lambda m: m.__setitem__("config", {"nested_path_to_metadata": {}, "rank_to_layout_info": {
            r: {"file_path": f"config_{r}.json", "serialization_format": {"type": "JsonSerialization", "cls": None}} for r in (0, 1)}}))
        expect_rc(run(dcpctl, "verify", d), 0, "a JSON item recorded in metadata.pkl: verify")
        r = run(dcpctl, "inspect", "--json", "--value", "config", d)
        check(r.returncode == 0 and json.loads(r.stdout or "{}").get("value") == nt["config"], f"recorded JSON item: inspect --value: exit {r.returncode}")
        (d / "config_1.json").unlink()
        expect_rc(run(dcpctl, "verify", d), 3, "a recorded JSON item's rank file missing: verify", "missing-rank", "config_1.json")
        # A raw item metadata.pkl records is read where it says; a JSON item recorded at a name
        # that is not .json is refused (dcpctl tells JSON from raw by the name), exit 5.
        for fmt, rc in (("RawSerialization", 0), ("JsonSerialization", 5)):
            d = tmp / f"custom-blob-{fmt}"
            shutil.copytree(fixtures / "tc_custom_2r/ckpt", d)
            edit_meta(d, lambda m: m.__setitem__("blob", {"nested_path_to_metadata": {}, "rank_to_layout_info": {
                r: {"file_path": f"extra/blob_{r}.bin", "serialization_format": {"type": fmt}} for r in (0, 1)}}))
            r = run(dcpctl, "consolidate", d, "-o", tmp / f"blob-{fmt}.pt")
            if expect_rc(r, rc, f"blob recorded as {fmt}: consolidate .pt", *([] if rc == 0 else ["blob", fmt, ".json"])) and rc == 0:
                blob = torch.load(tmp / f"blob-{fmt}.pt", weights_only=True).get("blob")
                check(isinstance(blob, bytes) and hashlib.sha256(blob).hexdigest() == nt["blob_rank0_sha256"],
                      f"blob recorded as {fmt}: rank 0's bytes")
        # What is not read: the safetensors layout without metadata.pkl, exit 5 naming the format,
        # the layout and what is missing.
        for cmd in ("inspect", "verify", "consolidate"):
            argv = [dcpctl, cmd, fixtures / "tc_safetensors_nometa_2r/refused"] + (["-o", tmp / "st.safetensors"] if cmd == "consolidate" else [])
            expect_rc(run(*argv), 5, f"safetensors layout without metadata.pkl: {cmd}", "torch_checkpointing", "SafetensorsSerialization",
                      "not a Hugging Face model", "local shard", "metadata.pkl, which this folder lacks")
        # The same local shards alone (no metadata.pkl, no .pt items: what a later save of a manager
        # leaves, or the model files copied out) look like a Hugging Face folder: inspect says why
        # they are not a model and exits 5 as verify does, instead of showing each rank's shard
        # shape as the tensor's.
        alone = tmp / "local-shards"
        alone.mkdir()
        for r in (0, 1):
            shutil.copy(fixtures / "tc_safetensors_nometa_2r/refused" / f"model_{r}.safetensors", alone)
        for cmd in ("inspect", "verify", "consolidate"):
            argv = [dcpctl, cmd, alone] + (["-o", tmp / "alone.safetensors"] if cmd == "consolidate" else [])
            expect_rc(run(*argv), 5, f"local shards without metadata.pkl: {cmd}", "not a Hugging Face model",
                      "model_0.safetensors .. model_1.safetensors", "local shard", "which is not here")
        r = run(dcpctl, "inspect", "--json", alone)
        check(r.returncode == 5 and '"unsupported"' in r.stdout, f"local shards: inspect --json: exit {r.returncode} {r.stdout[:300]}")
        # A key one rank's file lacks (rank 1's proj.bias removed: the files no longer hold the same
        # keys) is still local shards repeating keys, not a model: exit 5 as verify exits non-zero.
        part = tmp / "local-shards-part"
        part.mkdir()
        shutil.copy(alone / "model_0.safetensors", part)
        from safetensors.torch import save_file
        r1 = load_file(alone / "model_1.safetensors")
        del r1["proj.bias"]
        save_file(r1, part / "model_1.safetensors")
        expect_rc(run(dcpctl, "inspect", part), 5, "local shards, one key in rank 0's file only: inspect", "not a Hugging Face model",
                  "repeat 2 of their 3 keys")
        check(run(dcpctl, "verify", part).returncode != 0, "local shards, one key in rank 0's file only: verify exits non-zero")
        # One shard alone, or shards holding different keys, stay a Hugging Face folder.
        (alone / "model_1.safetensors").unlink()
        expect_rc(run(dcpctl, "inspect", alone), 0, "one local shard alone: inspect", "hf-safetensors")
        # Damage: a missing rank's file, a missing item, a cut file.
        for name, change in (("rank", lambda d: (d / "model_1.pt").unlink()),
                             ("item", lambda d: [(d / f"optimizer_{r}.pt").unlink() for r in (0, 1)]),
                             ("cut", lambda d: (d / "optimizer_1.pt").write_bytes((d / "optimizer_1.pt").read_bytes()[:300]))):
            d = tmp / f"broken-{name}"
            shutil.copytree(fixtures / "tc_sync_2r/ckpt", d)
            change(d)
            expect_rc(run(dcpctl, "verify", d), 3, f"broken ({name}): verify")
            expect_rc(run(dcpctl, "consolidate", d, "-o", tmp / f"b-{name}.safetensors"), 3, f"broken ({name}): consolidate")
        # metadata.pkl against the DTensors: a global shape or dtype it gets wrong, a tensor it
        # names that no file holds (each made by editing the real metadata.pkl, plain dicts).

        for name, change, names in (
                ("shape", lambda m: data(m, "model", '["proj.weight"]').__setitem__("global_shape", [34, 8]),
                 ["metadata-mismatch", "model.proj.weight", "[34, 8]", "[33, 8]"]),
                ("dtype", lambda m: data(m, "optimizer", '["state","emb.weight","exp_avg"]').__setitem__("dtype", "torch.bfloat16"),
                 ["metadata-mismatch", "optimizer.state.emb.weight.exp_avg", "bfloat16"]),
                ("key", lambda m: m["model"]["nested_path_to_metadata"].__setitem__(
                    '["ghost.weight"]', m["model"]["nested_path_to_metadata"]['["proj.weight"]']),
                 ["missing-key", "model.ghost.weight"])):
            d = tmp / f"meta-{name}"
            shutil.copytree(fixtures / "tc_sync_2r/ckpt", d)
            edit_meta(d, change)
            expect_rc(run(dcpctl, "verify", d), 3, f"metadata.pkl ({name}): verify", *names)
            expect_rc(run(dcpctl, "consolidate", d, "-o", tmp / f"m-{name}.safetensors"), 3, f"metadata.pkl ({name}): consolidate")
        d = tmp / "meta-same"
        shutil.copytree(fixtures / "tc_sync_2r/ckpt", d)
        edit_meta(d, lambda m: None)
        expect_rc(run(dcpctl, "verify", d), 0, "metadata.pkl re-pickled unchanged: verify")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("torch-checkpointing", min_checks=80)


if __name__ == "__main__":
    sys.exit(main())
