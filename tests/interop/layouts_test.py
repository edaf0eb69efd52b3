#!/usr/bin/env python3
"""Every layout a trainer leaves, read by dcpctl and checked by real torch (the project's venv).

    layouts_test.py MODE DCPCTL FIXTURES_DIR

Fixtures: tests/fixtures/layouts/<case>/ckpt, written by the real writers (torch 2.14.1's
HuggingFaceStorageWriter in every mode, dcp.save(use_collectives=False), FileSystemWriter with
SerializationFormat.SAFETENSORS, torch 2.6.0, torchtitan 0.3.0, Ray Train 2.60); each
expected.json holds torch's own view of the values (see tests/fixtures/layouts/README.md).

MODE is one of:
  cases  for every checkpoint case: `inspect --json` (layout, keys, dtypes, shapes), `verify --deep
         --checksum` (the SHA-256 of every full tensor equals torch's), `consolidate` to
         .safetensors (the `safetensors` package loads it), to an HF directory (index + shards) and
         to a flat .pt (`torch.load(weights_only=True)`), and `reshard -w 2` read back by torch's
         own dcp_to_torch_save: every key, dtype, shape and byte equal to expected.json, non-tensor
         values included. Every older torch in DCPCTL_OLD_TORCH_PYTHON (tools/dev.sh: 2.14.1 and
         2.6.0) must load the .pt and the resharded checkpoint to the same values.
  runs   the run folders (torchtitan step-N with keep_latest_k and a model-only bf16 last save,
         torchtitan last_save_in_hf, Ray Train V1 checkpoint_00000N and V2 timestamped folders):
         `latest` names the newest complete step; every step's tensors checksum equal to torch's;
         the HF step's sharded/ shards read as HF-mode DCP; a command given the run folder exits 2.
  broken incomplete inputs of each new layout (a rank's __R.metadata removed, a shard file
         removed, a key dropped from an HF index, a safetensors blob header damaged; verl's
         per-rank files: a rank's file removed, a key dropped from one rank's file, a replicated
         tensor whose copies differ, files of two world sizes): verify exits 3 naming what is
         missing, consolidate and reshard exit 3 and write nothing.
  tied   verl 0.9.1's FSDP2 save of a tied model (verl_fsdp2_tied): the tied keys are one stored
         record, a shared-record note of verify (exit 0), inspect's `shared` (what torch.load
         shares), complete for ls and latest; the outputs as in `cases`, diff exit 0; a byte
         flipped in the shared record is one crc-mismatch.

Exit status: 0 pass, 1 failure.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import dcp_oracle  # noqa: E402
from testlib import check, expect_rc, old_torch_pythons, run, summary, torch_version_of  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

CASES = {  # case -> the layout dcpctl must report
    "hf_sharded": "hf-dcp",
    "hf_single": "hf-dcp",
    "hf_consolidated": "hf-safetensors",
    "rank_local": "dcp-rank-local",
    "rank_local_3": "dcp-rank-local",
    "safetensors_items": "dcp-safetensors-items",
    "safetensors_items_threads": "dcp-safetensors-items",
    "old_torch_2_6_plain": "dcp",
    "old_torch_2_6_dtensor": "dcp",
    "old_torch_2_6_fsdp2": "dcp",
    "lightning_trainer": "dcp",
    "lightning_fabric": "dcp",
    "megatron_gpt_tp2": "dcp",
    "verl_fsdp2": "torch-save-ranks",
    "verl_fsdp1": "torch-save-ranks",
    "verl_hsdp": "torch-save-ranks",
    "old_torch_2_6_rank_files": "torch-save-ranks",
}

def tensor_keys(expected: dict) -> dict:
    return {k: v for k, v in expected["keys"].items() if v["kind"] == "tensor"}


def compare(label: str, actual: dict, expected: dict, tensors_only: bool = False) -> None:
    exp = {"keys": tensor_keys(expected)} if tensors_only else expected
    msgs = dcp_oracle.compare_flat(actual, exp)
    check(not msgs, f"{label}: {len(msgs)} mismatch(es) with torch's view: {msgs[:6]}")


# What the older torches read (DCPCTL_OLD_TORCH_PYTHON), queued by check_checkpoint and read at the
# end of the mode in one process of each (one start of each torch, not two per case):
# (label, "pt" or "dcp", path, expected.json-style document to compare with).
OLD_READS: list[tuple[str, str, Path, dict]] = []

OLD_TORCH_READER = """
import json, sys, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, sys.argv[1])
import torch, dcp_oracle
out = []
for kind, path in json.loads(sys.stdin.read()):
    try:
        flat = torch.load(path, weights_only=True) if kind == "pt" else dcp_oracle.flat_state_from_dcp(path)
        out.append({"flat": {k: dcp_oracle.describe_value(v) for k, v in flat.items()}})
    except Exception as e:  # one unreadable output fails its own check, not the others'
        out.append({"error": f"{type(e).__name__}: {e}"[-1500:]})
print(json.dumps(out))
"""


def check_old_torch_reads() -> None:
    """The flat state each older torch reads from each queued output of dcpctl, as expected.json
    entries, compared with torch's view of the source (expected.json)."""
    if not OLD_READS:
        return
    oracle_dir = str(Path(__file__).resolve().parent)
    reads = json.dumps([[kind, str(path)] for _, kind, path, _ in OLD_READS])
    for old in old_torch_pythons():
        who = f"torch {torch_version_of(old)}"
        r = run(old, "-c", OLD_TORCH_READER, oracle_dir, input=reads, timeout=600 + 60 * len(OLD_READS))
        check(r.returncode == 0, f"{who} reads {len(OLD_READS)} outputs: {r.stderr[-1500:]}")
        got = json.loads(r.stdout) if r.returncode == 0 else [{"error": "the reader failed"}] * len(OLD_READS)
        for (label, _, path, expected), res in zip(OLD_READS, got):
            check("error" not in res, f"{who} reads {path}: {res.get('error')}")
            compare(f"{label} ({who})", res.get("flat", {}), expected)
        print(f"{who}: read {len(OLD_READS)} outputs of dcpctl in one process", flush=True)
    OLD_READS.clear()


def check_checkpoint(dcpctl: str, label: str, ckpt: Path, expected: dict, layout: str, tmp: Path, deep_outputs: bool) -> None:
    r = run(dcpctl, "inspect", "--json", str(ckpt))
    if expect_rc(r, 0, f"{label}: inspect"):
        rep = json.loads(r.stdout)
        check(rep["layout"] == layout, f"{label}: layout {rep['layout']} != {layout}")
        check(rep["summary"]["complete"], f"{label}: inspect says incomplete: {rep['problems']}")
        got = {i["key"]: i for i in rep["items"]}
        for key, e in expected["keys"].items():
            i = got.get(key)
            check(i is not None, f"{label}: inspect lacks key {key}")
            if i is not None and e["kind"] == "tensor":
                check(i["dtype"] == e["dtype"] and i["shape"] == e["shape"],
                      f"{label}: {key}: inspect says {i['dtype']} {i['shape']}, torch {e['dtype']} {e['shape']}")
        check(set(got) == set(expected["keys"]), f"{label}: inspect keys differ: {sorted(set(got) ^ set(expected['keys']))[:6]}")

    r = run(dcpctl, "verify", "--deep", "--checksum", "--json", str(ckpt))
    if expect_rc(r, 0, f"{label}: verify --deep --checksum"):
        sums = json.loads(r.stdout)["checksums"]
        for key, e in tensor_keys(expected).items():
            check(sums.get(key) == e["sha256"], f"{label}: {key}: sha256 {sums.get(key)} != torch's {e['sha256']}")
    if not deep_outputs:
        return

    out = tmp / label.replace("/", "_")
    out.mkdir(parents=True)
    st = out / "model.safetensors"
    if expect_rc(run(dcpctl, "consolidate", str(ckpt), "-o", str(st), "-q"), 0, f"{label}: consolidate .safetensors"):
        compare(f"{label}: .safetensors", load_file(str(st)), expected, tensors_only=True)
    hf = out / "hf"
    # --include '*': every key, as torch's view has them (without a selection an HF folder takes the
    # model beside an optimizer alone, and leaves a tied head out: hf_export_test.py)
    # verl's recipe registers model.loss_scale, no tensor of the LlamaForCausalLM its config names:
    # the model schema refuses it in an HF folder (hf_export_test.py), so it is left out here.
    extra = ["--exclude", "model.loss_scale"] if "model.loss_scale" in expected["keys"] else []
    r = run(dcpctl, "consolidate", str(ckpt), "-o", f"{hf}/", "--max-shard-size", "300", "-q", "--include", "*", "--json", *extra)
    if expect_rc(r, 0, f"{label}: consolidate HF dir"):
        index = hf / "model.safetensors.index.json"  # absent when everything fits one shard
        files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
        flat = {}
        for f in files:
            flat.update(load_file(str(hf / f)))
        tie = json.loads(r.stdout).get("tie_word_embeddings") or {}
        want = expected
        if extra:
            want = {**expected, "keys": {k: v for k, v in expected["keys"].items() if k != "model.loss_scale"}}
        if tie.get("left_out"):  # equal to the embedding (checked here against torch's view)
            head, emb = tie["left_out"]["key"], tie["left_out"]["equal_to"]
            check(expected["keys"][head].get("sha256") == expected["keys"][emb].get("sha256"),
                  f"{label}: HF dir left out {head}, which torch's view says differs from {emb}")
            want = {**want, "keys": {k: v for k, v in want["keys"].items() if k != head}}
        compare(f"{label}: HF dir", flat, want, tensors_only=True)
    pt = out / "model.pt"
    # A .pt leaves out (and names on stderr) values torch.load(weights_only=True) refuses: BytesIO.
    safe = {"keys": {k: v for k, v in expected["keys"].items() if v.get("python_type") != "BytesIO"}}
    r = run(dcpctl, "consolidate", str(ckpt), "-o", str(pt), "--flat")
    if expect_rc(r, 0, f"{label}: consolidate .pt --flat"):
        compare(f"{label}: .pt --flat", torch.load(str(pt), weights_only=True), safe)
        for k in set(expected["keys"]) - set(safe["keys"]):
            check(k in r.stderr, f"{label}: .pt left out {k} without saying so: {r.stderr}")
    rs = out / "w2"
    if expect_rc(run(dcpctl, "reshard", str(ckpt), "-o", str(rs), "-w", "2", "-q"), 0, f"{label}: reshard -w 2"):
        compare(f"{label}: reshard -w 2 read by torch", dcp_oracle.flat_state_from_dcp(str(rs)), expected)
    if old_torch_pythons() and pt.exists() and rs.exists():
        OLD_READS.append((f"{label}: .pt read by older torch", "pt", pt, safe))
        OLD_READS.append((f"{label}: reshard -w 2 read by older torch", "dcp", rs, expected))


def mode_cases(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    if not old_torch_pythons():
        print("(DCPCTL_OLD_TORCH_PYTHON not set: outputs are checked with the pinned torch only)")
    for case, layout in CASES.items():
        d = fixtures / "layouts" / case
        expected = json.loads((d / "expected.json").read_text())
        check_checkpoint(dcpctl, case, d / "ckpt", expected, layout, tmp, deep_outputs=True)
        print(f"{case}: checked", flush=True)
    # The consolidated HF case also left torch's per-rank shards in sharded/: HF-mode DCP.
    d = fixtures / "layouts" / "hf_consolidated"
    expected = json.loads((d / "expected.json").read_text())
    check_checkpoint(dcpctl, "hf_consolidated/sharded", d / "ckpt" / "sharded", {"keys": expected["sharded_keys"]},
                     "hf-dcp", tmp, deep_outputs=True)


def mode_runs(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    runs = {  # run folder -> (expected.json, its map of checkpoints, newest complete)
        "run_torchtitan/run": ("run_torchtitan", "steps", "step-6"),
        "run_torchtitan_hf/run": ("run_torchtitan_hf", "steps", "step-4"),
        "run_ray/run": ("run_ray", "checkpoints", None),
    }
    ray_v1 = next((fixtures / "layouts" / "run_ray_v1" / "run").glob("TorchTrainer_*"))
    runs[str(ray_v1.relative_to(fixtures / "layouts"))] = ("run_ray_v1", "checkpoints", "checkpoint_000002")
    layouts = {"dcp": "dcp", "hf_safetensors_consolidated": "hf-safetensors"}
    for rel, (case, field, newest) in runs.items():
        folder = fixtures / "layouts" / rel
        expected = json.loads((fixtures / "layouts" / case / "expected.json").read_text())
        entries = {Path(k).name: v for k, v in expected[field].items() if v.get("metadata") is not None or v.get("index_json")}
        if newest is None:  # Ray V2: the newest by the timestamp in the name
            newest = sorted(n for n in entries if n.startswith("checkpoint_"))[-1]
        r = run(dcpctl, "latest", str(folder))
        if expect_rc(r, 0, f"{rel}: latest"):
            check(r.stdout == f"{folder / newest}\n", f"{rel}: latest printed {r.stdout!r}, wanted {folder / newest}")
        expect_rc(run(dcpctl, "inspect", str(folder)), 2, f"{rel}: inspect of the run folder", "is a run folder")
        for name, e in entries.items():
            layout = layouts.get(e["layout"], e["layout"])
            check_checkpoint(dcpctl, f"{case}/{name}", folder / name, e, layout, tmp, deep_outputs=name == newest)
            if (folder / name / "sharded").is_dir() and e.get("sharded_keys"):
                check_checkpoint(dcpctl, f"{case}/{name}/sharded", folder / name / "sharded", {"keys": e["sharded_keys"]},
                                 "hf-dcp", tmp, deep_outputs=False)
        print(f"{rel}: checked {len(entries)} checkpoint(s)", flush=True)


def broken_copy(src: Path, tmp: Path, name: str) -> Path:
    dst = tmp / "broken" / name
    shutil.copytree(src, dst)
    return dst


def expect_refusals(dcpctl: str, label: str, ckpt: Path, names: str, tmp: Path) -> None:
    r = run(dcpctl, "verify", str(ckpt))
    expect_rc(r, 3, f"{label}: verify")
    check(names in r.stdout, f"{label}: verify does not name {names!r}: {r.stdout[-800:]}")
    for args in (["consolidate", str(ckpt), "-o", str(tmp / "x.safetensors")], ["reshard", str(ckpt), "-o", str(tmp / "x"), "-w", "2"]):
        r = run(dcpctl, *args)
        expect_rc(r, 3, f"{label}: {args[0]}", names)
        check(not (tmp / "x.safetensors").exists() and not (tmp / "x").exists(), f"{label}: {args[0]} left an output")


def mode_broken(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    L = fixtures / "layouts"
    d = broken_copy(L / "rank_local_3" / "ckpt", tmp, "rank_local_missing")
    (d / "__1.metadata").unlink()
    expect_refusals(dcpctl, "rank-local without __1.metadata", d, "__1.metadata", tmp)

    d = broken_copy(L / "rank_local" / "ckpt", tmp, "rank_local_disagree")
    import pickle
    with open(d / "__1.metadata", "rb") as f:
        md = pickle.load(f)  # written by real torch: trusted here
    key = "model.w_7x3"
    md.state_dict_metadata[key].size = torch.Size([8, 3])  # rank 1 claims another global shape
    with open(d / "__1.metadata", "wb") as f:
        pickle.dump(md, f)
    for args in (["inspect", str(d)], ["verify", str(d)]):
        r = run(dcpctl, *args)
        expect_rc(r, 3, f"ranks disagreeing on a shape: {args[0]}")
        check(all(s in r.stdout + r.stderr for s in (key, "__0.metadata", "__1.metadata", "[8, 3]", "[7, 3]")),
              f"ranks disagreeing on a shape: {args[0]} names neither both files nor both shapes: {(r.stdout + r.stderr)[-600:]}")

    d = broken_copy(L / "hf_sharded" / "ckpt", tmp, "hf_missing_shard")
    (d / "shard-00001-model-00001-of-00002.safetensors").unlink()
    # Rank 0's rows are in no file left: the tiling check names the tensors with holes.
    expect_refusals(dcpctl, "HF-mode DCP without a rank's shard", d, "model.embed_tokens.weight", tmp)
    d = broken_copy(L / "hf_sharded" / "ckpt", tmp, "hf_missing_rank")
    for f in d.glob("shard-00001-*.safetensors"):  # every file of rank 0, while rank 1's are there
        f.unlink()
    expect_refusals(dcpctl, "HF-mode DCP without rank 0's files", d, "shard 1", tmp)

    d = broken_copy(L / "hf_single" / "ckpt", tmp, "hf_index_ghost")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    first = sorted(index["weight_map"])[0]
    other = [f for f in sorted(set(index["weight_map"].values())) if f != index["weight_map"][first]][0]
    index["weight_map"][first] = other  # the index names the key in a file that does not hold it
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    expect_refusals(dcpctl, "HF index naming a key its file lacks", d, first, tmp)

    d = broken_copy(L / "safetensors_items" / "ckpt", tmp, "st_items_damaged")
    md = dcp_oracle.read_metadata(str(d))
    infos = [v for k, v in md.storage_data.items() if k.fqn in md.state_dict_metadata and
             type(md.state_dict_metadata[k.fqn]).__name__ == "TensorStorageMetadata" and v.relative_path == "__0_0.distcp"]
    blob = min(i.offset for i in infos)
    with open(d / "__0_0.distcp", "r+b") as f:  # a header length far past the file's end
        f.seek(blob)
        f.write((1 << 40).to_bytes(8, "little"))
    r = run(dcpctl, "verify", "--deep", str(d))
    expect_rc(r, 3, "safetensors items with a damaged blob header: verify --deep")
    check("__0_0.distcp" in r.stdout, f"damaged blob header: verify names no file: {r.stdout[-600:]}")
    r = run(dcpctl, "consolidate", str(d), "-o", str(tmp / "y.safetensors"))
    expect_rc(r, 3, "safetensors items with a damaged blob header: consolidate", "__0_0.distcp")
    check(not (tmp / "y.safetensors").exists(), "damaged blob header: consolidate left an output")


def resave(path: Path, change) -> None:
    """Rewrites one rank's torch.save file through torch itself (the file was written by real
    verl: trusted here, so weights_only=False), after change(state_dict)."""
    sd = torch.load(path, weights_only=False)
    change(sd)
    torch.save(sd, path)


def mode_broken_verl(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    L = fixtures / "layouts"
    exp = json.loads((L / "verl_fsdp2" / "expected.json").read_text())
    ws = exp["world_size"]
    plain = sorted(k for k, v in exp["placements"].items() if v == "plain")
    sharded = sorted(k for k, v in exp["placements"].items() if "Shard" in v)
    check(plain and sharded, f"verl_fsdp2 has no plain tensor or no sharded one: {exp['placements']}")
    if not (plain and sharded):
        return
    d = broken_copy(L / "verl_fsdp2" / "ckpt", tmp, "verl_missing_rank")
    (d / f"model_world_size_{ws}_rank_1.pt").unlink()
    expect_refusals(dcpctl, "verl without rank 1's file", d, f"model_world_size_{ws}_rank_1.pt", tmp)

    d = broken_copy(L / "verl_fsdp2" / "ckpt", tmp, "verl_missing_key")
    resave(d / f"model_world_size_{ws}_rank_{ws - 1}.pt", lambda sd: sd.pop(sharded[0]))
    expect_refusals(dcpctl, "verl rank file lacking a key", d, sharded[0], tmp)

    # The copies of a tensor every rank holds whole must agree (verl #7610's buffer).
    d = broken_copy(L / "verl_fsdp2" / "ckpt", tmp, "verl_replica_mismatch")
    resave(d / f"model_world_size_{ws}_rank_1.pt", lambda sd: sd[plain[0]].add_(1))
    expect_refusals(dcpctl, "verl replicated tensor whose copies differ", d, plain[0], tmp)
    r = run(dcpctl, "inspect", "--json", str(d))  # inspect reports; verify judges
    if expect_rc(r, 0, "verl replicated tensor whose copies differ: inspect --json"):
        rep = json.loads(r.stdout)
        check(rep["summary"]["complete"] is False, "inspect calls a checkpoint with differing copies complete")
        check(any(p["code"] == "replica-mismatch" and p["key"] == plain[0] for p in rep["problems"]),
              f"inspect names no replica-mismatch of {plain[0]}: {rep['problems']}")

    # FSDP2 saves a short shard as a view into its padded storage: a bit flipped in the padding,
    # outside the tensor, still breaks the record's CRC-32, which verify --deep must check.
    d = broken_copy(L / "verl_fsdp2" / "ckpt", tmp, "verl_padding_flip")
    last = d / f"model_world_size_{ws}_rank_{ws - 1}.pt"
    import zipfile
    with zipfile.ZipFile(last) as z:
        rec = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
        with open(last, "rb") as f:
            f.seek(rec.header_offset + 26)
            n, m = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
        start = rec.header_offset + 30 + n + m
    short = [k for k, shapes in exp["local_shapes"].items() if shapes[-1] and shapes[-1] != shapes[0] and shapes[-1][0] > 0]
    check(bool(short), "verl_fsdp2 has no short last shard")
    with open(last, "r+b") as f:
        pos = start + rec.file_size - 1  # the padding's last byte
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ 0x10]))
    r = run(dcpctl, "verify", "--deep", "--json", str(d))
    if expect_rc(r, 3, "verl bit flipped in a padded storage: verify --deep"):
        probs = json.loads(r.stdout)["problems"]
        check(any(p["code"] == "crc-mismatch" and p["file"] == str(last) for p in probs),
              f"verl padding flip: verify --deep reports no crc-mismatch in {last.name}: {probs}")
    r = run(dcpctl, "consolidate", str(d), "-o", str(tmp / "pad.safetensors"))
    expect_rc(r, 3, "verl bit flipped in a padded storage: consolidate", "CRC-32")
    check(not (tmp / "pad.safetensors").exists(), "verl padding flip: consolidate left an output")

    d = broken_copy(L / "verl_fsdp2" / "ckpt", tmp, "verl_two_worlds")
    shutil.copy(d / f"model_world_size_{ws}_rank_0.pt", d / f"model_world_size_{ws + 1}_rank_0.pt")
    r = run(dcpctl, "verify", str(d))
    expect_rc(r, 3, "verl files of two world sizes: verify", "two saves share this folder")


def zip_records(path: Path) -> dict:
    """{data offset: (name, size)} of every record of a torch.save zip, by Python's zipfile."""
    import struct
    import zipfile

    out = {}
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for info in z.infolist():
            f.seek(info.header_offset)
            head = f.read(30)
            name_len, extra_len = struct.unpack("<HH", head[26:30])
            out[info.header_offset + 30 + name_len + extra_len] = (info.filename, info.file_size)
    return out


def mode_tied(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    """verl 0.9.1's FSDP2 save of a tied model (verl_fsdp2_tied, issue 49 item 5): lm_head.weight IS
    model.embed_tokens.weight, one storage record per rank file. verify exits 0 with the keys as a
    shared-record note (not window-overlap), inspect names the same keys torch.load shares, ls calls
    the step complete and latest finds it, every output equals torch's view, a flipped byte of the
    shared record is one crc-mismatch."""
    case = "verl_fsdp2_tied"
    d = fixtures / "layouts" / case
    ckpt = d / "ckpt"
    exp = json.loads((d / "expected.json").read_text())
    ws = exp["world_size"]
    tied = ["lm_head.weight", "model.embed_tokens.weight"]
    check(exp["shared_storage"] == [tied], f"{case}: torch.load shares {exp['shared_storage']}, not the tie")

    r = run(dcpctl, "verify", str(ckpt))
    expect_rc(r, 0, f"{case}: verify", "[shared-record]", *tied)
    check("window-overlap" not in r.stdout, f"{case}: verify reports an overlap: {r.stdout[-800:]}")
    r = run(dcpctl, "verify", "--json", str(ckpt))
    if expect_rc(r, 0, f"{case}: verify --json"):
        doc = json.loads(r.stdout)
        notes = [n for n in doc["notes"] if n["code"] == "shared-record"]
        check(len(notes) == 1 and all(f"'{k}'" in notes[0]["message"] for k in tied),
              f"{case}: verify --json notes {doc['notes']}")
        check(doc["problems"] == [], f"{case}: verify --json problems {doc['problems']}")
    r = run(dcpctl, "inspect", "--json", str(ckpt))
    if expect_rc(r, 0, f"{case}: inspect --json"):
        doc = json.loads(r.stdout)
        check(sorted(s["keys"] for s in doc["shared"]) == exp["shared_storage"], f"{case}: inspect shared {doc['shared']}")
        check(doc["summary"]["complete"], f"{case}: inspect says incomplete: {doc['problems']}")
        for s in doc["shared"]:
            check(s["same_bytes"] and len(s["records"]) == ws, f"{case}: inspect shared {s}")
            for rec in s["records"]:  # each is a real zip record of that file, whole
                recs = zip_records(ckpt / rec["file"])
                name, size = recs.get(rec["offset"], ("", -1))
                check(name.split("/")[-2:-1] == ["data"] and size == rec["length"],
                      f"{case}: inspect's shared record {rec} is not a record of the zip ({name!r}, {size})")
        shared_records = {(rec["file"], rec["offset"], rec["length"]) for s in doc["shared"] for rec in s["records"]}
    else:
        shared_records = set()
    r = run(dcpctl, "verify", "--deep", "--checksum", "--json", str(ckpt))
    if expect_rc(r, 0, f"{case}: verify --deep --checksum"):
        doc = json.loads(r.stdout)
        sums = doc["checksums"]
        check(sums.get(tied[0]) == sums.get(tied[1]) == exp["keys"][tied[0]]["sha256"],
              f"{case}: the tied keys' digests {[sums.get(k) for k in tied]}, torch's {exp['keys'][tied[0]]['sha256']}")
        once = sum(v["nbytes"] for v in tensor_keys(exp).values()) - exp["keys"][tied[0]]["nbytes"]
        check(doc["checked"]["bytes_read"] == once, f"{case}: verify --deep read {doc['checked']['bytes_read']} bytes, "
              f"not {once} (the tie's bytes once)")

    # A run folder as RayPPOTrainer leaves it: ls calls the step complete, latest finds it.
    run_dir = tmp / "run"
    shutil.copytree(ckpt, run_dir / "global_step_2" / "actor")
    (run_dir / "latest_checkpointed_iteration.txt").write_text("2")
    r = run(dcpctl, "ls", "--json", str(run_dir))
    if expect_rc(r, 0, f"{case}: ls --json of a run folder"):
        cps = json.loads(r.stdout)["checkpoints"]
        check(len(cps) == 1 and cps[0]["complete"] is True, f"{case}: ls says {cps}")
    r = run(dcpctl, "latest", str(run_dir))
    if expect_rc(r, 0, f"{case}: latest"):
        check(r.stdout == f"{run_dir / 'global_step_2'}\n", f"{case}: latest printed {r.stdout!r}")

    # Outputs: .safetensors, HF folder, .pt, reshard, each equal to torch's view (expected.json).
    check_checkpoint(dcpctl, case, ckpt, exp, "torch-save-ranks", tmp, deep_outputs=True)
    st = tmp / case / "model.safetensors"
    if st.exists():
        r = run(dcpctl, "diff", str(ckpt), str(st))
        expect_rc(r, 0, f"{case}: diff of the checkpoint and its consolidated .safetensors")

    # One byte flipped in the shared record of rank 0's file: one record, one crc-mismatch.
    rank0 = f"model_world_size_{ws}_rank_0.pt"
    recs = sorted((off, n) for f, off, n in shared_records if f == rank0)
    check(len(recs) == 1, f"{case}: {rank0} has shared records {recs}")
    if len(recs) == 1:
        dmg = broken_copy(ckpt, tmp, "tied_flip")
        with open(dmg / rank0, "r+b") as f:
            f.seek(recs[0][0] + recs[0][1] // 2)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x10]))
        r = run(dcpctl, "verify", "--deep", "--json", str(dmg))
        if expect_rc(r, 3, f"{case}: verify --deep of a flipped shared record"):
            crc = [p for p in json.loads(r.stdout)["problems"] if p["code"] == "crc-mismatch"]
            check(len(crc) == 1 and crc[0]["file"].endswith(rank0), f"{case}: flipped shared record: {crc}")
        r = run(dcpctl, "consolidate", str(dmg), "-o", str(tmp / "x.safetensors"))
        expect_rc(r, 3, f"{case}: consolidate of a flipped shared record", "CRC-32")
        check(not (tmp / "x.safetensors").exists(), f"{case}: consolidate of a flipped shared record left an output")


def main() -> int:
    mode, dcpctl, fixtures = sys.argv[1], os.path.abspath(sys.argv[2]), Path(sys.argv[3]).resolve()
    with tempfile.TemporaryDirectory(prefix="dcpctl-layouts-") as t:
        {"cases": mode_cases, "runs": mode_runs, "broken": mode_broken, "broken-verl": mode_broken_verl,
         "tied": mode_tied}[mode](dcpctl, fixtures, Path(t))
        check_old_torch_reads()  # before the outputs in the temporary directory go
    return summary(f"layouts_test {mode}")


if __name__ == "__main__":
    sys.exit(main())
