#!/usr/bin/env python3
"""`dcpctl reshard` and `dcpctl cast` checked by real torch (run with the project's venv python).

    reshard_test.py MODE DCPCTL FIXTURES_DIR [CASE ...]

The oracle is real PyTorch: the source checkpoint as torch reads it
(``format_utils.dcp_to_torch_save`` of the SOURCE), torch's own distributed ``dcp.load`` into
DTensors, and what DTensor/DCP itself records when it saves the same shapes over M ranks.

MODE is one of:
  load      every fixture (or the CASEs given) resharded with --world-size M for M in 1..4, then:
            - `dcpctl verify --deep` passes on the output;
            - dcp_to_torch_save(output) == dcp_to_torch_save(source): nesting, key order, types,
              dtypes, shapes, every byte (NaN == NaN), non-tensor values;
            - layout: exactly `.metadata` + `__{r}_0.distcp` for r < M; dim-0 chunks with
              torch.chunk semantics (ceil(N/M) rows, last smaller, one empty shard at offset N when
              a rank has no rows); every chunk of rank r's row range stored in `__r_0.distcp`; 0-d
              tensors and tensors with no rows written once; every file exactly the concatenation
              of its items (no gaps, no overlap, no stray bytes); non-tensor items byte-identical to
              the source's (transforms kept) in rank 0's file; planner_data equal to the source's;
              storage_meta.checkpoint_id a plain str;
            - torch's own layout: in a process group of M ranks, real torch saves DTensor Shard(0)
              tensors of the same shapes/dtypes (0-d as plain tensors) and its chunk lists (offsets,
              sizes) must equal dcpctl's, and so must the rank that stores each non-empty chunk;
              for the fixtures FSDP2 (fully_shard) wrote over 2 ranks, -w 2 must give back FSDP2's
              own chunk lists and files for every sharded tensor;
            - real distributed loading: for W in 1..4, W processes (torch.multiprocessing, forked,
              gloo, CPU) `dcp.load` EVERY output (all M, so written for 3 and loaded by 2, ...) into
              the source's nested state dict (rebuilt from the source's planner_data) whose tensors
              are DTensors with Shard(0) on a 1-D CPU mesh (0-d tensors plain, non-tensor values a
              sentinel); every rank's local shard must equal its torch.chunk slice of the oracle,
              the gathered full tensor (full_tensor(), or all_gather_object of the raw bytes for the
              dtypes gloo cannot gather) must equal the oracle bit for bit, and every non-tensor
              value must equal the oracle's.
  filters   --select app.model (strict load_state_dict into the rebuilt model; equal to
            model_full.pt), --exclude 'app.optim.*' / 'optimizer.*' (optimizer state dropped,
            loads with dcp.load), --include globs; planner_data of the output rebuilds the nesting.
  cast      `dcpctl cast --dtype X` for every X in bf16, fp16, fp32, fp64, fp8_e4m3, fp8_e5m2 on
            every fixture: dcp_to_torch_save of the output holds X for every castable floating
            tensor, bit-identical to torch's own `.to(X)` of the source, everything else
            (integers, bool, complex, other float8s, non-tensor values) untouched; .metadata dtypes
            updated; the chunk lists and the rank (file) of every chunk identical to the source's;
            a checkpoint of special values and every narrow bit pattern (dcp.save by torch) cast
            to every X; `reshard --layout keep --dtype` equals `cast`; `reshard -w 3 --dtype bf16`.
  metadata  the written .metadata only uses what shared/docs/dcp-format.md §6 allows for torch
            2.4+: protocol 4 (PROTO 4 first), no NEWOBJ_EX/persistent ids/EXT/INST/OBJ, globals
            only from the §1.2 list (checkpoint.metadata classes, filesystem._StorageInfo,
            torch.Size, torch dtypes, torch.serialization._get_layout), no pathlib; dataclass
            __dict__ keys exactly the documented fields in the documented order; TensorProperties
            as the 5-tuple with encoding 0; _StorageInfo with 3 keys (4 only with transforms);
            StorageMeta with str ids and modules=[]; version "1.0.0". Every older torch that
            DCPCTL_OLD_TORCH_PYTHON names (a colon-separated list; tools/dev.sh: 2.14.1, 2.6.0)
            also loads every output (dcp_to_torch_save) to the pinned torch's values.
  refusals  a non-empty OUTDIR without --force: exit 2, untouched; --force replaces it with a
            correct output; an incomplete source (a chunk and its storage entry dropped from a
            copy's .metadata with torch's pickle): exit 3, key named, no OUTDIR (also for cast and
            --dry-run); --dry-run writes nothing and prints the plan per rank; --json; sha256 of
            every input file unchanged; no temporary left.
  signals   SLOW. A ~300 MB checkpoint written by real torch (dcp.save, 2 ranks); reshard / cast
            runs killed with SIGTERM and SIGINT while writing: the process dies of the signal, no
            output directory, no temporary (but, once a rank file is finished, the staging folder
            --resume takes over: its journal and only finished files), input unchanged; the same
            over an existing OUTDIR with --force: the old OUTDIR intact.
  memory    parallel target ranks under the buffer budget: a zstd-compressed single-chunk 768 MiB
            tensor resharded to 2 ranks with the default budget, 8 -> 2 ranks with a cast and a
            tight --max-memory, 8 -> 3 without a cast: each must finish within 90 s (no deadlock),
            peak RSS within the budget + 256 MiB, values equal to torch's.

Exit status: 0 pass, 1 failure, 77 skip (torch missing; a failure instead under CI, tests/skip.py).
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import pickletools
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import skip  # noqa: E402
from skip import skip_or_fail  # noqa: E402

try:
    import torch
except ImportError as e:  # pragma: no cover
    skip_or_fail(f"the virtualenv lacks a module: {e}")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixtures"))
import dcp_oracle  # noqa: E402
import torch_casts  # noqa: E402
from testlib import check, each_case, fail, free_port, old_torch_pythons, problems, run, same_tensor, summary, tree_digest  # noqa: E402

warnings.simplefilter("ignore")

NOTES: list[str] = []
DCPCTL = ""

TARGETS = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "fp64": torch.float64,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
CASTABLE = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2}
# dtypes gloo can all-gather (DTensor.full_tensor()); the others go through all_gather_object.
GATHER_OK = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64,
             torch.uint8, torch.bool, torch.complex64, torch.complex128}
WORLD_SIZES = (1, 2, 3, 4)
# fixtures written by FSDP2 (fully_shard) itself, and over how many ranks
FSDP2_CASES = {"fsdp2_app_state": 2, "torchtitan_style": 2, "async_save": 2, "sample": 2}


def note(msg: str) -> None:
    if msg not in NOTES:
        NOTES.append(msg)
        print("NOTE: " + msg, file=sys.stderr)


def dcpctl(*args: str, timeout: int = 600) -> tuple[int, str, str]:
    p = run(DCPCTL, *args, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def dcpctl_json(what: str, *args: str) -> dict | None:
    rc, out, err = dcpctl(*args, "--json")
    if not check(rc == 0, f"{what}: dcpctl {' '.join(args)} exited {rc}: {err.strip()[:600]}"):
        return None
    try:
        return json.loads(out)
    except json.JSONDecodeError as e:
        fail(f"{what}: --json output is not JSON ({e}): {out[:300]}")
        return None


def chunk_rows(n: int, world: int, rank: int) -> tuple[int, int]:
    """[start, end) of rank's dim-0 rows under torch.chunk / DTensor Shard(0) semantics."""
    cs = -(-n // world)
    start = min(rank * cs, n)
    return start, min(start + cs, n)


def expected_chunks(shape: tuple, world: int) -> list[tuple[tuple, tuple, int | None]]:
    """(offsets, sizes, rank) of the chunks DCP records for a Shard(0) tensor over `world` ranks;
    rank None for the single deduplicated empty shard (any rank whose range is empty)."""
    if len(shape) == 0 or shape[0] == 0:
        return [(tuple(0 for _ in shape), tuple(shape), None)]
    out, empty = [], False
    for r in range(world):
        s, e = chunk_rows(shape[0], world, r)
        if e > s:
            out.append(((s,) + (0,) * (len(shape) - 1), (e - s,) + tuple(shape[1:]), r))
        elif not empty:
            empty = True
            out.append(((shape[0],) + (0,) * (len(shape) - 1), (0,) + tuple(shape[1:]), None))
    return out


def compare_tree(got, exp, where: str) -> list[str]:
    """Exact comparison: types, dict key order, tensors bitwise (dtype, shape), NaN == NaN."""
    if isinstance(exp, torch.Tensor):
        d = same_tensor(got, exp)
        return [f"{where}: {d}"] if d else []
    if type(got) is not type(exp):
        return [f"{where}: type {type(got).__name__} != {type(exp).__name__}"]
    if isinstance(exp, dict):
        if list(got.keys()) != list(exp.keys()):
            if set(got) != set(exp):
                return [f"{where}: keys differ: only got {sorted(map(str, set(got) - set(exp)))[:5]}, "
                        f"only expected {sorted(map(str, set(exp) - set(got)))[:5]}"]
            return [f"{where}: key order differs: {list(got)[:6]} vs {list(exp)[:6]}"]
        msgs = []
        for k in exp:
            msgs += compare_tree(got[k], exp[k], f"{where}.{k}")
        return msgs
    if isinstance(exp, (list, tuple)):
        if len(got) != len(exp):
            return [f"{where}: length {len(got)} != {len(exp)}"]
        msgs = []
        for i, (g, e) in enumerate(zip(got, exp)):
            msgs += compare_tree(g, e, f"{where}[{i}]")
        return msgs
    if not dcp_oracle.values_equal(got, exp):
        return [f"{where}: {dcp_oracle.stable_repr(got)[:80]} != {dcp_oracle.stable_repr(exp)[:80]}"]
    return []


def dcp_to_pt(ckpt: Path, out: Path):
    """torch's own converter, then torch.load of its output (the nested state dict)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(str(ckpt), str(out))
    sd = torch.load(out, weights_only=False)
    out.unlink()
    return sd


def get_path(root, path):
    for p in path:
        root = root[p]
    return root


# The committed fixtures with a ckpt/.metadata (tests/fixtures/*/ckpt).
MIN_FIXTURES = 14


def fixtures_in(root: Path, only: list[str]) -> list[Path]:
    """The fixtures named on the command line (CMake's reshard-load groups), or all of them; a name
    that is not a fixture with ckpt/.metadata under root stops the test (exit 2), and so do fewer
    fixtures than are committed (exit 1): a group must not shrink in silence when a fixture is
    renamed or lost."""
    cases = sorted(p for p in root.iterdir() if (p / "ckpt" / ".metadata").is_file())
    if not cases:
        print(f"reshard_test: no fixture with ckpt/.metadata under {root}", file=sys.stderr)
        sys.exit(2)
    unknown = sorted(set(only) - {p.name for p in cases})
    if unknown:
        print(f"reshard_test: no fixture {unknown} under {root} (the fixtures: {[p.name for p in cases]})",
              file=sys.stderr)
        sys.exit(2)
    if not only and len(cases) < MIN_FIXTURES:
        print(f"reshard_test: {len(cases)} fixtures under {root}, fewer than the {MIN_FIXTURES} committed",
              file=sys.stderr)
        sys.exit(1)
    return [p for p in cases if p.name in only] if only else cases


def read_raw(path: Path, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


# ------------------------------------------------------------------------------------------------
# workers of torch.multiprocessing, forked from this process (FORK below)


def _template(source_md, oracle_flat: dict, mesh):
    """The source's nested state dict (nesting from the SOURCE's planner_data, written by torch):
    DTensor Shard(0) for every tensor with a dimension (filled with 0xA5 bytes), plain 0-d tensors
    (filled likewise), a sentinel for non-tensor values."""
    from torch.distributed.checkpoint._traverse import set_element
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    import torch.distributed.tensor as dtt
    from torch.distributed.tensor import Shard

    root: dict = {}
    pd = source_md.planner_data or {}
    for key, m in source_md.state_dict_metadata.items():
        path = tuple(pd.get(key, (key,)))
        if isinstance(m, TensorStorageMetadata):
            ref = oracle_flat[key]
            if len(m.size) == 0:
                v = torch.empty((), dtype=ref.dtype)
                v.reshape(1).view(torch.uint8).fill_(0xA5)
            else:
                v = dtt.empty(tuple(m.size), dtype=ref.dtype, device_mesh=mesh, placements=[Shard(0)])
                loc = v.to_local()
                if loc.numel():
                    loc.reshape(-1).view(torch.uint8).fill_(0xA5)
        else:
            v = "<sentinel: not loaded>"
        set_element(root, path, v)
    return root


def _gather_bytes(local: torch.Tensor) -> list[bytes]:
    import torch.distributed as dist

    objs = [None] * dist.get_world_size()
    dist.all_gather_object(objs, dcp_oracle.tensor_bytes(local))
    return objs


def _worker(rank: int, world: int, port: int, jobs_path: str, result_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    import torch.distributed.tensor as dtt

    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    jobs = json.loads(Path(jobs_path).read_text())
    fails: list[str] = []
    loads = compared = 0
    t0 = time.time()
    for job in jobs:
        source_md = dcp_oracle.read_metadata(job["src"])
        oracle_flat = torch.load(job["oracle"], weights_only=False)
        # torch's own layout: the same shapes/dtypes saved as DTensor Shard(0) over `world` ranks
        ref_sd = {}
        for key, ref in oracle_flat.items():
            if not isinstance(ref, torch.Tensor):
                continue
            if ref.dim() == 0:
                ref_sd[key] = ref.clone()
            else:
                ref_sd[key] = dtt.empty(tuple(ref.shape), dtype=ref.dtype, device_mesh=mesh, placements=[Shard(0)])
        if "ref" in job:
            dcp.save(ref_sd, checkpoint_id=job["ref"])
        for out in job["outputs"]:
            what = f"{job['case']} written for {out['M']} ranks, loaded by {world}, rank {rank}"
            sd = _template(source_md, oracle_flat, mesh)
            try:
                dcp.load(sd, checkpoint_id=out["path"])
            except Exception as e:  # noqa: BLE001
                fails.append(f"{what}: dcp.load raised {type(e).__name__}: {str(e)[:400]}")
                continue
            loads += 1
            pd = source_md.planner_data or {}
            for key in source_md.state_dict_metadata:
                compared += 1
                exp = oracle_flat[key]
                try:
                    got = get_path(sd, tuple(pd.get(key, (key,))))
                except (KeyError, IndexError, TypeError) as e:
                    fails.append(f"{what}: {key}: not in the loaded state dict ({e!r})")
                    continue
                if not isinstance(exp, torch.Tensor):
                    if not dcp_oracle.values_equal(got, exp):
                        fails.append(f"{what}: {key}: value {dcp_oracle.stable_repr(got)[:80]} != "
                                     f"{dcp_oracle.stable_repr(exp)[:80]}")
                    continue
                if exp.dim() == 0:
                    d = same_tensor(got, exp)
                    if d:
                        fails.append(f"{what}: {key} (0-d): {d}")
                    continue
                if not isinstance(got, DTensor):
                    fails.append(f"{what}: {key}: {type(got).__name__}, not a DTensor")
                    continue
                s, e = chunk_rows(exp.shape[0], world, rank)
                d = same_tensor(got.to_local(), exp[s:e])
                if d:
                    fails.append(f"{what}: {key}: local shard (rows {s}:{e}): {d}")
                if got.dtype in GATHER_OK:
                    d = same_tensor(got.full_tensor(), exp)
                    if d:
                        fails.append(f"{what}: {key}: full_tensor(): {d}")
                else:
                    parts = _gather_bytes(got.to_local())
                    if b"".join(parts) != dcp_oracle.tensor_bytes(exp):
                        fails.append(f"{what}: {key}: gathered bytes (all_gather_object) differ from the oracle")
    dist.barrier()
    dist.destroy_process_group()
    Path(result_dir, f"rank{rank}.json").write_text(json.dumps(
        {"fails": fails, "loads": loads, "compared": compared, "seconds": time.time() - t0}))


# The workers are forked, not spawned: a spawned worker starts a Python and imports torch and this
# file again (~2 s of CPU each, 10 workers per reshard-load test, most of the load phase's time);
# a forked one has them. Each sets one intra-op thread before any torch op (the parent's OpenMP
# pool does not survive a fork) and starts its own gloo group; nothing else is shared.
FORK = "fork"


def spawn_loads(world: int, jobs: list[dict], tmp: Path) -> None:
    import torch.multiprocessing as mp

    jp = tmp / f"jobs_w{world}.json"
    jp.write_text(json.dumps(jobs))
    rd = tmp / f"results_w{world}"
    rd.mkdir()
    t = time.time()
    try:
        mp.start_processes(_worker, args=(world, free_port(), str(jp), str(rd)), nprocs=world, join=True,
                           start_method=FORK)
    except Exception as e:  # noqa: BLE001
        fail(f"load by {world} process(es): a worker failed: {type(e).__name__}: {str(e)[-1500:]}")
    loads = 0
    # what each rank must have done: load every output of every job, and compare every key of each
    want_loads = sum(len(j["outputs"]) for j in jobs)
    want_keys = sum(len(j["outputs"]) * len(dcp_oracle.read_metadata(j["src"]).state_dict_metadata) for j in jobs)
    check(want_loads > 0, f"load by {world}: no output to load")
    for r in range(world):
        p = rd / f"rank{r}.json"
        if not check(p.exists(), f"load by {world}: rank {r} wrote no result"):
            continue
        res = json.loads(p.read_text())
        loads += res["loads"]
        check(res["loads"] == want_loads, f"load by {world}, rank {r}: {res['loads']} of {want_loads} outputs loaded")
        check(res["compared"] == want_keys, f"load by {world}, rank {r}: {res['compared']} of {want_keys} keys compared")
        problems(res["fails"][:30])
        check(len(res["fails"]) <= 30, f"load by {world}, rank {r}: {len(res['fails']) - 30} more failure(s)")
    print(f"load by {world} process(es): {loads} dcp.load calls in {time.time() - t:.1f} s (start included)")


# ------------------------------------------------------------------------------------------------
# load


def check_layout(case: str, src: Path, out: Path, world: int, src_md, oracle_flat: dict) -> None:
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex, TensorStorageMetadata

    what = f"{case} -w {world}"
    md = dcp_oracle.read_metadata(out)
    files = sorted(os.listdir(out))
    want_files = sorted([".metadata", "dcpctl-manifest.json"] + [f"__{r}_0.distcp" for r in range(world)])  # the manifest: e2e-manifest
    check(files == want_files, f"{what}: files {files} != {want_files}")
    check(list(md.state_dict_metadata) == list(src_md.state_dict_metadata),
          f"{what}: keys/order differ from the source: {list(md.state_dict_metadata)[:6]}")
    check(dict(md.planner_data or {}) == dict(src_md.planner_data or {}),
          f"{what}: planner_data differs from the source's")
    sm = md.storage_meta
    check(not (sm is None or type(sm.checkpoint_id) is not str or sm.modules != [] or not sm.save_id),
          f"{what}: storage_meta {sm!r}")
    check(md.version == "1.0.0", f"{what}: version {md.version!r}")
    # which (file, offset, length) each storage entry points at
    by_file: dict[str, list[tuple[int, int, str]]] = {}
    for idx, si in md.storage_data.items():
        by_file.setdefault(si.relative_path, []).append((si.offset, si.length, idx.fqn))
    for f, items in by_file.items():
        items.sort()
        pos = 0
        for off, ln, fqn in items:
            check(off == pos, f"{what}: {f}: item {fqn} at {off}, expected {pos} (gap or overlap)")
            pos = off + ln
        size = (out / f).stat().st_size
        check(pos == size, f"{what}: {f}: items end at {pos}, file has {size} bytes")
    for key, m in md.state_dict_metadata.items():
        sm_ = src_md.state_dict_metadata[key]
        if isinstance(sm_, BytesStorageMetadata):
            if not check(isinstance(m, BytesStorageMetadata), f"{what}: {key}: bytes item became {type(m).__name__}"):
                continue
            si = md.storage_data[MetadataIndex(key)]
            ss = src_md.storage_data[MetadataIndex(key)]
            check(si.relative_path == "__0_0.distcp",
                  f"{what}: {key}: non-tensor item in {si.relative_path}, not rank 0's file")
            check(read_raw(out / si.relative_path, si.offset, si.length) == read_raw(src / ss.relative_path, ss.offset, ss.length),
                  f"{what}: {key}: non-tensor item bytes differ from the source's")
            check(getattr(si, "transform_descriptors", None) == getattr(ss, "transform_descriptors", None),
                  f"{what}: {key}: transforms {getattr(si, 'transform_descriptors', None)} != "
                     f"{getattr(ss, 'transform_descriptors', None)}")
            continue
        if not check(isinstance(m, TensorStorageMetadata), f"{what}: {key}: {type(m).__name__}"):
            continue
        check((m.properties.dtype, tuple(m.size), m.properties.requires_grad) == (sm_.properties.dtype, tuple(sm_.size), sm_.properties.requires_grad),
              f"{what}: {key}: dtype/size/requires_grad {m.properties.dtype} {tuple(m.size)} "
                 f"{m.properties.requires_grad} != source's")
        got = [(tuple(c.offsets), tuple(c.sizes)) for c in m.chunks]
        exp = expected_chunks(tuple(m.size), world)
        if not check(got == [(o, s) for o, s, _ in exp],
                     f"{what}: {key} {tuple(m.size)}: chunks {got} != torch.chunk layout {[(o, s) for o, s, _ in exp]}"):
            continue
        n_entries = sum(1 for i in md.storage_data if i.fqn == key)
        check(n_entries == len(got), f"{what}: {key}: {n_entries} storage entries for {len(got)} chunks")
        for i, (o, s, r) in enumerate(exp):
            si = md.storage_data.get(MetadataIndex(key, torch.Size(o)))
            if not check(si is not None, f"{what}: {key}: chunk {o} has no storage entry"):
                continue
            if r is not None:  # (a 0-d tensor has no rank and no rows)
                check(si.relative_path == f"__{r}_0.distcp",
                      f"{what}: {key}: rows {o[0]}..{o[0] + s[0]} (rank {r}) stored in {si.relative_path}")
            if r is None and len(m.size) > 0 and m.size[0] > 0:
                fr = int(si.relative_path.split("_")[2])
                check(chunk_rows(m.size[0], world, fr)[1] <= chunk_rows(m.size[0], world, fr)[0],
                      f"{what}: {key}: the empty shard is stored by rank {fr}, which has rows")
            check(not getattr(si, "transform_descriptors", None),
                  f"{what}: {key}: tensor item with transforms {si.transform_descriptors}")
        # FSDP2 itself wrote the source over this many ranks: its dim-0 sharded tensors must come
        # out with the very same chunks, in the same ranks' files
        if case in FSDP2_CASES and world == FSDP2_CASES[case] and len(sm_.chunks) > 1:
            sc = [(tuple(c.offsets), tuple(c.sizes)) for c in sm_.chunks]
            if not check(sorted(sc) == sorted(got), f"{what}: {key}: chunks {got} != FSDP2's own {sc}"):
                continue
            for o, s in sc:
                if math.prod(s):
                    sf = src_md.storage_data[MetadataIndex(key, torch.Size(o))].relative_path
                    df = md.storage_data[MetadataIndex(key, torch.Size(o))].relative_path
                    check(sf.split("_")[2] == df.split("_")[2],
                          f"{what}: {key} chunk {o}: FSDP2 stored it in {sf}, dcpctl in {df}")


def compare_with_torch_layout(case: str, out: Path, ref: Path, world: int) -> None:
    """dcpctl's chunk lists and chunk owners vs what real DTensor/DCP recorded for the same shapes."""
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata

    md, rm = dcp_oracle.read_metadata(out), dcp_oracle.read_metadata(ref)
    n = 0
    for key, m in rm.state_dict_metadata.items():
        if not isinstance(m, TensorStorageMetadata):
            continue
        mine = md.state_dict_metadata.get(key)
        if not check(mine is not None, f"{case} -w {world}: {key} missing"):
            continue
        tc = [(tuple(c.offsets), tuple(c.sizes)) for c in m.chunks]
        dc = [(tuple(c.offsets), tuple(c.sizes)) for c in mine.chunks]
        n += 1
        if not check(sorted(tc) == sorted(dc),
                     f"{case} -w {world}: {key} {tuple(m.size)}: dcpctl chunks {dc} != torch's DTensor save {tc}"):
            continue
        if tc != dc:
            note(f"chunk ORDER differs from torch's (same set), e.g. {case} -w {world} {key}: {dc} vs {tc}")
        for o, s in tc:
            if math.prod(s) == 0:
                continue  # torch keeps the deduplicated empty shard on any rank
            tf = rm.storage_data[MetadataIndex(key, torch.Size(o))].relative_path
            df = md.storage_data[MetadataIndex(key, torch.Size(o))].relative_path
            check(not (len(m.size) > 0 and tf != df),
                  f"{case} -w {world}: {key} chunk {o}: torch stores it in {tf}, dcpctl in {df}")
    return n


def mode_load(fixtures: list[Path], tmp: Path) -> None:
    jobs_by_w: dict[int, list[dict]] = {w: [] for w in WORLD_SIZES}
    outs: list[tuple[str, int, Path, Path]] = []
    t = time.time()
    for case_dir in each_case(fixtures, 10 * len(WORLD_SIZES)):
        case, src = case_dir.name, case_dir / "ckpt"
        before = tree_digest(src)
        src_md = dcp_oracle.read_metadata(src)
        oracle_nested = dcp_to_pt(src, tmp / f"{case}_src.pt")
        pd = src_md.planner_data or {}
        oracle_flat = {k: get_path(oracle_nested, tuple(pd.get(k, (k,)))) for k in src_md.state_dict_metadata}
        oracle_path = tmp / f"oracle_{case}.pt"
        torch.save(oracle_flat, oracle_path)
        case_outs = []
        for w in WORLD_SIZES:
            out = tmp / f"{case}_w{w}"
            s = dcpctl_json(f"{case} -w {w}", "reshard", str(src), "-o", str(out), "-w", str(w))
            if s is None:
                continue
            ntensors = sum(1 for v in oracle_flat.values() if isinstance(v, torch.Tensor))
            check(not (s["world_size"] != w or s["tensors"] != ntensors or len(s["ranks"]) != w or \
                    s["non_tensor_items"] != len(oracle_flat) - ntensors), f"{case} -w {w}: summary {json.dumps(s)[:300]}")
            rc, vo, ve = dcpctl("verify", "--deep", str(out))
            check(rc == 0, f"{case} -w {w}: dcpctl verify --deep exited {rc}: {(vo + ve).strip()[:400]}")
            problems([f"dcp_to_torch_save(output) != dcp_to_torch_save(source): {m}"
                      for m in compare_tree(dcp_to_pt(out, tmp / f"{case}_w{w}.pt"), oracle_nested, f"{case} -w {w}")[:10]])
            check_layout(case, src, out, w, src_md, oracle_flat)
            case_outs.append({"path": str(out), "M": w})
            outs.append((case, w, out, tmp / f"ref_{case}_w{w}"))
        check(tree_digest(src) == before, f"{case}: the source checkpoint changed")
        for w in WORLD_SIZES:
            jobs_by_w[w].append({"case": case, "src": str(src), "oracle": str(oracle_path),
                                 "ref": str(tmp / f"ref_{case}_w{w}"), "outputs": case_outs})
    print(f"resharded {len(fixtures)} fixtures x {len(WORLD_SIZES)} world sizes, verified, compared with "
          f"dcp_to_torch_save and checked the layout in {time.time() - t:.1f} s")
    for w in WORLD_SIZES:
        spawn_loads(w, jobs_by_w[w], tmp)
    n = 0
    for case, w, out, ref in outs:
        if not check((ref / ".metadata").exists(), f"{case} -w {w}: torch's reference save is missing"):
            continue
        n += compare_with_torch_layout(case, out, ref, w) or 0
    print(f"chunk lists of {n} tensors compared with torch's own DTensor Shard(0) saves")


# ------------------------------------------------------------------------------------------------
# filters


def mode_filters(fixtures_root: Path, tmp: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from fixture_models import FsdpMLP

    case = fixtures_root / "fsdp2_app_state"
    src = case / "ckpt"
    full = torch.load(case / "model_full.pt", weights_only=True)
    oracle = dcp_to_pt(src, tmp / "src.pt")

    # --select app.model: a model-only checkpoint whose keys are the model's state_dict keys
    for w in (1, 2, 3):
        out = tmp / f"sel_w{w}"
        if dcpctl_json(f"--select app.model -w {w}", "reshard", str(src), "-o", str(out), "-w", str(w),
                       "--select", "app.model") is None:
            continue
        md = dcp_oracle.read_metadata(out)
        check(sorted(md.state_dict_metadata) == sorted(full),
              f"--select app.model -w {w}: keys {sorted(md.state_dict_metadata)} != {sorted(full)}")
        check(md.planner_data == {k: (k,) for k in md.state_dict_metadata},
              f"--select app.model -w {w}: planner_data {md.planner_data}")
        problems(compare_tree(dcp_to_pt(out, tmp / "o.pt"), oracle["app"]["model"], f"--select -w {w}"))
        # a user's load: the model's own state_dict as template (plain tensors), strict
        model = FsdpMLP()
        sd = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
        dcp.load(sd, checkpoint_id=str(out))
        model.load_state_dict(sd, strict=True)
        for k, v in model.state_dict().items():
            d = same_tensor(v, full[k])
            check(not d, f"--select app.model -w {w}: {k} after strict load: {d}")
        rc, vo, ve = dcpctl("verify", "--deep", str(out))
        check(rc == 0, f"--select -w {w}: verify --deep exited {rc}: {(vo + ve)[:300]}")

    # --exclude the optimizer state: what is left loads and equals the source minus the optimizer
    for case_name, pattern, sub in (("fsdp2_app_state", "app.optim.*", ("app", "optim")),
                                    ("torchtitan_style", "optimizer.*", ("optimizer",)),
                                    ("sample", "app.optim.*", ("app", "optim"))):
        s2 = fixtures_root / case_name / "ckpt"
        orc = dcp_to_pt(s2, tmp / "src2.pt")
        out = tmp / f"noopt_{case_name}"
        if dcpctl_json(f"{case_name} --exclude {pattern}", "reshard", str(s2), "-o", str(out), "-w", "2",
                       "--exclude", pattern) is None:
            continue
        md = dcp_oracle.read_metadata(out)
        left = [k for k in md.state_dict_metadata if k.startswith(".".join(sub) + ".")]
        check(not left, f"{case_name} --exclude {pattern}: still has {left[:3]}")
        exp = orc
        node = exp
        for p in sub[:-1]:
            node = node[p]
        del node[sub[-1]]
        problems(compare_tree(dcp_to_pt(out, tmp / "o.pt"), exp, f"{case_name} --exclude {pattern}")[:10])
        src_md = dcp_oracle.read_metadata(s2)
        want_pd = {k: v for k, v in src_md.planner_data.items() if k in md.state_dict_metadata}
        check(md.planner_data == want_pd,
              f"{case_name} --exclude: planner_data is not the source's minus the excluded keys")

    # --include globs: exactly the fnmatch selection
    import fnmatch
    for pats in (["app.model.fc1.*"], ["app.model.*", "app.epoch"], ["*.exp_avg"]):
        out = tmp / "inc"
        shutil.rmtree(out, ignore_errors=True)
        args = [a for p in pats for a in ("--include", p)]
        if dcpctl_json(f"--include {pats}", "reshard", str(src), "-o", str(out), "-w", "2", *args) is None:
            continue
        src_md = dcp_oracle.read_metadata(src)
        want = [k for k in src_md.state_dict_metadata if any(fnmatch.fnmatchcase(k, p) for p in pats)]
        got = list(dcp_oracle.read_metadata(out).state_dict_metadata)
        check(got == want, f"--include {pats}: keys {got} != fnmatch's {want}")
        flat = dcp_oracle.flat_state_from_dcp(out)
        src_flat = dcp_oracle.flat_state_from_dcp(src)
        for k in want:
            check(dcp_oracle.values_equal(flat[k], src_flat[k]), f"--include {pats}: {k} differs")


# ------------------------------------------------------------------------------------------------
# cast


def cast_compare(got, src: torch.Tensor, dst: torch.dtype, what: str) -> None:
    """got must be bit-identical to torch's src.to(dst), NaNs included (tests/interop/torch_casts.py)."""
    problems([f"{what}: {m}" for m in torch_casts.compare(got, src, dst)])


def check_cast_output(what: str, src: Path, out: Path, dst: torch.dtype, oracle_flat: dict,
                      same_layout: bool = True, summary: dict | None = None) -> None:
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata

    md, smd = dcp_oracle.read_metadata(out), dcp_oracle.read_metadata(src)
    nested = dcp_to_pt(out, out.with_suffix(".pt"))
    pd = md.planner_data or {}
    check(dict(pd) == dict(smd.planner_data or {}), f"{what}: planner_data differs from the source's")
    ncast = 0
    for key, exp in oracle_flat.items():
        try:
            got = get_path(nested, tuple(pd.get(key, (key,))))
        except (KeyError, IndexError, TypeError):
            fail(f"{what}: {key} missing")
            continue
        if not isinstance(exp, torch.Tensor):
            check(dcp_oracle.values_equal(got, exp), f"{what}: {key}: non-tensor value changed")
            continue
        m = md.state_dict_metadata[key]
        if exp.dtype in CASTABLE:
            ncast += exp.dtype != dst
            cast_compare(got, exp, dst, f"{what}: {key}")
            check(m.properties.dtype == dst, f"{what}: {key}: .metadata dtype {m.properties.dtype}, want {dst}")
        else:
            d = same_tensor(got, exp)
            check(not d, f"{what}: {key} ({exp.dtype}, must stay untouched): {d}")
            check(m.properties.dtype == exp.dtype, f"{what}: {key}: .metadata dtype changed to {m.properties.dtype}")
        if same_layout:
            sm = smd.state_dict_metadata[key]
            sc = [(tuple(c.offsets), tuple(c.sizes)) for c in sm.chunks]
            dc = [(tuple(c.offsets), tuple(c.sizes)) for c in m.chunks]
            if not check(sc == dc, f"{what}: {key}: chunks {dc} != source's {sc}"):
                continue
            for o, _ in sc:
                sf = smd.storage_data[MetadataIndex(key, torch.Size(o))].relative_path
                df = md.storage_data[MetadataIndex(key, torch.Size(o))].relative_path
                check(sf.split("_")[2] == df.split("_")[2],
                      f"{what}: {key} chunk {o}: source rank file {sf}, output {df}")
    if summary is not None:
        check(summary["cast"]["tensors"] == ncast, f"{what}: summary says {summary['cast']['tensors']} tensors cast, "
                                                   f"expected {ncast}")
    rc, vo, ve = dcpctl("verify", "--deep", str(out))
    check(rc == 0, f"{what}: verify --deep exited {rc}: {(vo + ve)[:300]}")


def mode_cast(fixtures: list[Path], tmp: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from consolidate_test import special_tensors  # the same special values consolidate is checked with

    t = time.time()
    for case_dir in each_case(fixtures, 5):
        case, src = case_dir.name, case_dir / "ckpt"
        smd = dcp_oracle.read_metadata(src)
        nested = dcp_to_pt(src, tmp / "src.pt")
        pd = smd.planner_data or {}
        oracle_flat = {k: get_path(nested, tuple(pd.get(k, (k,)))) for k in smd.state_dict_metadata}
        src_files = {r for r in os.listdir(src) if r.endswith(".distcp")}
        ranks = {f.split("_")[2] for f in src_files}
        for name, dst in TARGETS.items():
            out = tmp / f"cast_{case}_{name}"
            s = dcpctl_json(f"cast {case} --dtype {name}", "cast", str(src), "-o", str(out), "--dtype", name)
            if s is None:
                continue
            got_files = {f for f in os.listdir(out) if f.endswith(".distcp")}
            check(got_files == {f"__{r}_0.distcp" for r in ranks},
                  f"cast {case}: files {sorted(got_files)} for source ranks {sorted(ranks)}")
            check_cast_output(f"cast {case} --dtype {name}", src, out, dst, oracle_flat, summary=s)
            if name == "bf16":
                # reshard --layout keep --dtype is the same as cast (tensor bytes identical)
                o2 = tmp / f"keep_{case}"
                if dcpctl_json("keep", "reshard", str(src), "-o", str(o2), "--layout", "keep", "--dtype", name):
                    a, b = dcp_oracle.flat_state_from_dcp(o2), dcp_oracle.flat_state_from_dcp(out)
                    check(not (a.keys() != b.keys() or not all(dcp_oracle.values_equal(a[k], b[k]) for k in a)),
                          f"reshard --layout keep --dtype bf16 != cast --dtype bf16 on {case}")
                    check_cast_output(f"reshard {case} --layout keep --dtype bf16", src, o2, dst, oracle_flat)
                    shutil.rmtree(o2)
                # reshard to another world size and cast at once
                o3 = tmp / f"w3_{case}"
                if dcpctl_json("w3 bf16", "reshard", str(src), "-o", str(o3), "-w", "3", "--dtype", name):
                    check_cast_output(f"reshard {case} -w 3 --dtype bf16", src, o3, dst, oracle_flat,
                                      same_layout=False)
                    md3 = dcp_oracle.read_metadata(o3)
                    for k, m in md3.state_dict_metadata.items():
                        if hasattr(m, "chunks"):
                            got = [(tuple(c.offsets), tuple(c.sizes)) for c in m.chunks]
                            check(got == [(o, s) for o, s, _ in expected_chunks(tuple(m.size), 3)],
                                  f"reshard {case} -w 3 --dtype bf16: {k}: chunks {got}")
                    shutil.rmtree(o3)
            shutil.rmtree(out)
    print(f"cast: {len(fixtures)} fixtures x {len(TARGETS)} targets in {time.time() - t:.1f} s")

    # special values and every narrow bit pattern, in a checkpoint written by torch
    sd = special_tensors()
    ck = tmp / "special"
    dcp.save(sd, checkpoint_id=str(ck))
    oracle = dcp_to_pt(ck, tmp / "special.pt")
    for k, v in sd.items():
        check(not same_tensor(oracle[k], v), f"torch's own round trip changed {k}")
    for name, dst in TARGETS.items():
        out = tmp / f"special_{name}"
        s = dcpctl_json(f"special --dtype {name}", "cast", str(ck), "-o", str(out), "--dtype", name)
        if s is not None:
            check_cast_output(f"special --dtype {name}", ck, out, dst, oracle, summary=s)
            shutil.rmtree(out)


# ------------------------------------------------------------------------------------------------
# metadata


ALLOWED_GLOBALS = {
    ("torch.distributed.checkpoint.metadata", n) for n in
    ("Metadata", "TensorStorageMetadata", "ChunkStorageMetadata", "BytesStorageMetadata", "MetadataIndex",
     "TensorProperties", "_MEM_FORMAT_ENCODING", "StorageMeta")
} | {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
     ("torch.serialization", "_get_layout")}
FIELDS = {
    "Metadata": ["state_dict_metadata", "planner_data", "storage_data", "storage_meta", "version"],
    "TensorStorageMetadata": ["properties", "size", "chunks"],
    "ChunkStorageMetadata": ["offsets", "sizes"],
    "StorageMeta": ["checkpoint_id", "save_id", "load_id", "modules"],
    "_StorageInfo": ["relative_path", "offset", "length"],
}
FORBIDDEN_OPS = {"NEWOBJ_EX", "PERSID", "BINPERSID", "EXT1", "EXT2", "EXT4", "INST", "OBJ", "GLOBAL",
                 "BYTEARRAY8", "NEXT_BUFFER", "READONLY_BUFFER", "FRAME_X"}


class _RecordingUnpickler(pickle.Unpickler):
    def __init__(self, f):
        super().__init__(f)
        self.globals: set = set()
        self.builds: list = []

    def find_class(self, module, name):
        self.globals.add((module, name))
        cls = super().find_class(module, name)
        if name == "TensorProperties":
            # The state as pickled: torch >= 2.15's __getstate__ returns 6 values (strides, None
            # after a 5-tuple), so the object read back cannot tell what the file holds.
            class Recording(cls):
                def __setstate__(self, state):
                    self.pickled_state = state
                    super().__setstate__(state)
            return Recording
        return cls


def check_metadata_pickle(what: str, path: Path) -> None:
    data = (path / ".metadata").read_bytes()
    ops = list(pickletools.genops(data))
    check(not (ops[0][0].name != "PROTO" or ops[0][1] != 4),
          f"{what}: first opcode {ops[0][0].name} {ops[0][1]}, want PROTO 4")
    used = {op.name for op, _, _ in ops}
    bad = used & FORBIDDEN_OPS
    check(not bad, f"{what}: forbidden opcodes {sorted(bad)}")
    up = _RecordingUnpickler(io.BytesIO(data))
    md = up.load()
    dtypes = {(m, n) for m, n in up.globals if m == "torch" and isinstance(getattr(torch, n, None), torch.dtype)}
    other = up.globals - ALLOWED_GLOBALS - dtypes
    check(not other, f"{what}: globals outside dcp-format.md §1.2/§6: {sorted(other)}")
    check(not any("pathlib" in m for m, _ in up.globals), f"{what}: pathlib in .metadata")

    def fields(obj, cls):
        keys = list(vars(obj).keys())
        want = FIELDS[cls]
        if cls == "_StorageInfo" and "transform_descriptors" in keys:
            want = want + ["transform_descriptors"]
            check(obj.transform_descriptors, f"{what}: _StorageInfo with an empty transform_descriptors")
        check(keys == want, f"{what}: {cls} __dict__ keys {keys}, want {want}")

    fields(md, "Metadata")
    fields(md.storage_meta, "StorageMeta")
    check(not (not isinstance(md.storage_meta.checkpoint_id, str) or not isinstance(md.storage_meta.save_id, str) \
            or md.storage_meta.load_id is not None or md.storage_meta.modules != []), f"{what}: storage_meta {md.storage_meta!r}")
    check(md.version == "1.0.0", f"{what}: version {md.version!r}")
    check(not (not isinstance(md.planner_data, dict) or not all(
            isinstance(k, str) and isinstance(v, tuple) and all(isinstance(x, (str, int)) for x in v)
            for k, v in md.planner_data.items())), f"{what}: planner_data is not {{str: tuple of str/int}}")
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, _MEM_FORMAT_ENCODING
    for k, m in md.state_dict_metadata.items():
        if isinstance(m, BytesStorageMetadata):
            check(not vars(m), f"{what}: BytesStorageMetadata {k} has fields {vars(m)}")
            continue
        fields(m, "TensorStorageMetadata")
        check(type(m.size) is torch.Size, f"{what}: {k}: size is {type(m.size).__name__}")
        st = m.properties.pickled_state
        check(not (len(st) != 5 or st[1] != torch.strided or st[3] != _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT or st[4] is not False),
              f"{what}: {k}: TensorProperties state {st}")
        for c in m.chunks:
            fields(c, "ChunkStorageMetadata")
            check(not (type(c.offsets) is not torch.Size or type(c.sizes) is not torch.Size),
                  f"{what}: {k}: chunk offsets/sizes not torch.Size")
    for idx, si in md.storage_data.items():
        fields(si, "_StorageInfo")
        want = ["fqn", "index", "offset"] if idx.offset is not None else ["fqn", "index"]
        check(list(vars(idx)) == want, f"{what}: MetadataIndex __dict__ {list(vars(idx))}, want {want}")


OLD_TORCH_SCRIPT = r"""
# Runs under an OLDER torch: dcp_to_torch_save of every directory, then a distributed dcp.load by
# 2 processes into DTensor Shard(0) (torch.distributed._tensor, the 2.4 spelling) whose local
# shards are saved per rank for the pinned torch to compare.
import json, os, sys, traceback, warnings
warnings.simplefilter("ignore")
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

def one(d, out):
    try:
        dcp_to_torch_save(d, out)
        return "ok"
    except BaseException as e:
        return f"{type(e).__name__}: " + " ".join(str(e).split())[-300:]

def worker(rank, world, store, jobs, res):
    warnings.simplefilter("ignore")
    import datetime
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed._tensor import Shard, empty
    # A FileStore, not a TCP port picked in advance: under a parallel CTest run another test can
    # take a port between its pick and its use, and the ranks then wait for each other forever.
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    mesh = init_device_mesh("cpu", (world,))
    out = {}
    for d in jobs:
        try:
            md = FileSystemReader(d).read_metadata()
            sd = {}
            for k, m in md.state_dict_metadata.items():
                if isinstance(m, TensorStorageMetadata):
                    sd[k] = torch.empty((), dtype=m.properties.dtype) if len(m.size) == 0 else \
                        empty(tuple(m.size), dtype=m.properties.dtype, device_mesh=mesh, placements=[Shard(0)])
                else:
                    sd[k] = None
            dcp.load(sd, checkpoint_id=d)
            local = {}
            for k, v in sd.items():
                if isinstance(v, torch.Tensor):
                    t = v.to_local() if hasattr(v, "to_local") else v
                    local[k] = t.contiguous().reshape(-1).view(torch.uint8).clone() if t.numel() else torch.empty(0, dtype=torch.uint8)
                else:
                    local["bytes:" + k] = v
            path = os.path.join(res, f"{abs(hash(d))}_r{rank}.pt")
            torch.save(local, path)
            out[d] = path
        except BaseException as e:
            out[d] = "ERR " + f"{type(e).__name__}: " + " ".join(str(e).split())[-300:]
    with open(os.path.join(res, f"rank{rank}.json"), "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()

if __name__ == "__main__":
    job = json.load(open(sys.argv[1]))
    result = {"torch": torch.__version__, "convert": {}, "dist": {}}
    for d, out in job["convert"]:
        result["convert"][d] = one(d, out)
    if job["dist"]:
        import torch.multiprocessing as mp
        store = os.path.join(job["res"], "filestore")
        mp.spawn(worker, args=(2, store, job["dist"], job["res"]), nprocs=2, join=True)
        for r in range(2):
            for d, v in json.load(open(os.path.join(job["res"], f"rank{r}.json"))).items():
                result["dist"].setdefault(d, []).append(v)
    json.dump(result, open(job["result"], "w"))
"""


def old_torch_check(old: str, pairs: list[tuple[Path, Path]], tmp: Path) -> None:
    """pairs: (source checkpoint, dcpctl output). Every output must load in the older torch when its
    source does (a failure the torch-written source shares is the old torch's limit, noted)."""
    script = tmp / "old_torch.py"
    script.write_text(OLD_TORCH_SCRIPT)
    res = tmp / "old_res"
    res.mkdir()
    dirs = sorted({str(s) for s, _ in pairs}) + [str(o) for _, o in pairs]
    job = {"convert": [[d, str(res / f"conv_{i}.pt")] for i, d in enumerate(dirs)],
           "dist": [str(o) for _, o in pairs if o.name.endswith("_w3")],
           "res": str(res), "result": str(tmp / "old_result.json")}
    (tmp / "old_job.json").write_text(json.dumps(job))
    t = time.time()
    p = run(old, script, tmp / "old_job.json", timeout=900, cwd=tmp)  # a timeout is a failure there
    if not check(not (p.returncode != 0 or not (tmp / "old_result.json").exists()),
                 f"older torch ({old}) exited {p.returncode}: {p.stderr[-1500:]}"):
        return
    r = json.loads((tmp / "old_result.json").read_text())
    conv = r["convert"]
    ok = bad = inherent = 0
    for src, out in pairs:
        so, oo = conv[str(src)], conv[str(out)]
        if oo == "ok":
            ok += 1
            got = torch.load(dict(job["convert"])[str(out)], weights_only=False)
            exp = dcp_to_pt(out, tmp / "new.pt")
            problems(compare_tree(got, exp, f"torch {r['torch']} dcp_to_torch_save({out.name})")[:5])
        elif so != "ok":
            inherent += 1
            note(f"torch {r['torch']} cannot read {src.parent.name} (torch-written source) either: "
                 f"source: {so[:160]} | output {out.name}: {oo[:160]}")
        else:
            bad += 1
            fail(f"torch {r['torch']} reads the source {src} but not dcpctl's {out.name}: {oo}")
    print(f"torch {r['torch']}: dcp_to_torch_save read {ok} outputs (equal to the pinned torch's reading), "
          f"{inherent} not readable like their torch-written source, {bad} regressions")
    # distributed load by 2 processes of the outputs written for 3 ranks
    nd = 0
    for d, per_rank in r["dist"].items():
        if any(isinstance(v, str) and v.startswith("ERR") for v in per_rank):
            src = next(s for s, o in pairs if str(o) == d)
            if conv[str(src)] != "ok":
                note(f"torch {r['torch']} dcp.load (2 ranks) of {Path(d).name}: {per_rank[0][:200]} (source unreadable too)")
            else:
                fail(f"torch {r['torch']} dcp.load (2 ranks) of {Path(d).name}: {[v for v in per_rank if v.startswith('ERR')][0]}")
            continue
        md = dcp_oracle.read_metadata(d)
        flat = dcp_oracle.flat_state_from_dcp(d)
        for rank, path in enumerate(per_rank):
            loc = torch.load(path, weights_only=False)
            for k, exp in flat.items():
                if isinstance(exp, torch.Tensor):
                    if exp.dim() == 0:
                        want = dcp_oracle.tensor_bytes(exp)
                    else:
                        s, e = chunk_rows(exp.shape[0], 2, rank)
                        want = dcp_oracle.tensor_bytes(exp[s:e])
                    check(bytes(loc[k].numpy().tobytes()) == want,
                          f"torch {r['torch']} dcp.load (2 ranks) of {Path(d).name}: rank {rank} {k} differs")
                elif not dcp_oracle.values_equal(loc["bytes:" + k], exp):
                    fail(f"torch {r['torch']} dcp.load (2 ranks) of {Path(d).name}: rank {rank} {k} value differs")
        nd += 1
        del md
    print(f"torch {r['torch']}: 2-process dcp.load into DTensor Shard(0) checked for {nd} outputs written for 3 ranks "
          f"({time.time() - t:.0f} s)")


def mode_metadata(fixtures: list[Path], tmp: Path) -> None:
    pairs = []
    for case_dir in each_case(fixtures, 3):
        src = case_dir / "ckpt"
        for args, tag in ((["reshard", "-w", "3"], "w3"), (["reshard", "-w", "1"], "w1"),
                          (["cast", "--dtype", "bf16"], "cast")):
            out = tmp / f"{case_dir.name}_{tag}"
            rc, _, err = dcpctl(*args[:1], str(src), "-o", str(out), *args[1:], "-q")
            if not check(rc == 0, f"{case_dir.name} {tag}: exit {rc}: {err[:300]}"):
                continue
            check_metadata_pickle(f"{case_dir.name} {tag}", out)
            pairs.append((src, out))
    print(f"checked {len(pairs)} .metadata pickles")
    olds = old_torch_pythons()
    if not olds:
        print("(DCPCTL_OLD_TORCH_PYTHON not set: no older torch to load the outputs with)")
    for i, old in enumerate(olds):  # each in a folder of its own
        (tmp / f"old_{i}").mkdir()
        old_torch_check(old, pairs, tmp / f"old_{i}")


# ------------------------------------------------------------------------------------------------
# refusals


def mode_refusals(fixtures_root: Path, tmp: Path) -> None:
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    src = fixtures_root / "dtensor_shard0_uneven" / "ckpt"
    before = tree_digest(src)
    work = tmp / "w"
    work.mkdir()
    out = work / "out"

    # non-empty OUTDIR without --force: exit 2, untouched
    out.mkdir()
    (out / "keep.txt").write_text("user data")
    for args in (["reshard", "-w", "2"], ["cast", "--dtype", "bf16"], ["reshard", "-w", "2", "--dry-run"],
                 ["cast", "--dtype", "bf16", "--dry-run", "--json"]):
        rc, so, err = dcpctl(args[0], str(src), "-o", str(out), *args[1:])
        # the dry run makes the real run's output checks: it must not say OK where the run exits 2
        check(not (rc != 2 or str(out) not in err or "--force" not in err),
              f"{args} over a non-empty OUTDIR without --force: exit {rc} (want 2, naming the output and "
                 f"--force): {err[:300]}")
        check(not (sorted(os.listdir(out)) != ["keep.txt"] or (out / "keep.txt").read_text() != "user data"),
              f"{args}: the existing OUTDIR was changed: {os.listdir(out)}")
        check(sorted(os.listdir(work)) == ["out"], f"{args}: left {sorted(os.listdir(work))}")
    # an empty existing OUTDIR
    empty = work / "empty"
    empty.mkdir()
    rc, _, err = dcpctl("reshard", str(src), "-o", str(empty), "-w", "2")
    check(not (rc != 2 or str(empty) not in err or "--force" not in err),
          f"existing empty OUTDIR without --force: exit {rc} (want 2, naming it and --force): {err[:300]}")
    shutil.rmtree(empty, ignore_errors=True)
    # --force replaces it with a correct output
    s = dcpctl_json("--force", "reshard", str(src), "-o", str(out), "-w", "2", "--force")
    if s is not None:
        check(sorted(os.listdir(out)) == [".metadata", "__0_0.distcp", "__1_0.distcp", "dcpctl-manifest.json"],
              f"--force: OUTDIR holds {sorted(os.listdir(out))}")
        problems(compare_tree(dcp_to_pt(out, tmp / "f.pt"), dcp_to_pt(src, tmp / "s.pt"), "--force")[:5])
    check(sorted(os.listdir(work)) == ["out"], f"--force: left {sorted(os.listdir(work))}")
    # OUTDIR is a file
    f = work / "afile"
    f.write_text("x")
    rc, _, err = dcpctl("reshard", str(src), "-o", str(f), "-w", "2")
    check(not (rc != 2 or str(f) not in err or f.read_text() != "x"),
          f"OUTDIR is a file: exit {rc}, want 2 naming it and the file untouched: {err[:300]}")
    f.unlink()
    # inside the checkpoint / the checkpoint itself
    for o, says in ((src / "sub", "inside the checkpoint"), (src, "is the checkpoint")):
        for dry in ([], ["--dry-run"]):
            rc, _, err = dcpctl("reshard", str(src), "-o", str(o), "-w", "2", "--force", *dry)
            check(not (rc != 2 or says not in err),
                  f"output {o} (the source or inside it) {dry}: exit {rc}, want 2 and '{says}': {err[:300]}")
    check(tree_digest(src) == before, "the source changed after the refusals")

    # --dry-run writes nothing; plan per rank
    rc, so, err = dcpctl("reshard", str(src), "-o", str(work / "dry"), "-w", "3", "--dry-run")
    check(not (rc != 0 or (work / "dry").exists()), f"--dry-run: exit {rc}, output exists: {(work / 'dry').exists()}")
    for r in range(3):
        check(f"__{r}_0.distcp" in so, f"--dry-run plan does not list rank {r}: {so[:300]}")
    print("dry-run plan:\n" + so.rstrip())
    s = dcpctl_json("--dry-run --json", "reshard", str(src), "-o", str(work / "dry"), "-w", "3", "--dry-run")
    if s is not None:
        md = dcp_oracle.read_metadata(src)
        tb = 0
        for k, m in md.state_dict_metadata.items():
            if isinstance(m, TensorStorageMetadata):
                tb += math.prod(m.size) * torch.empty(0, dtype=m.properties.dtype).element_size()
        per_rank = [0, 0, 0]
        chunks = [0, 0, 0]
        for k, m in md.state_dict_metadata.items():
            if isinstance(m, TensorStorageMetadata):
                es = torch.empty(0, dtype=m.properties.dtype).element_size()
                for o, sz, r in expected_chunks(tuple(m.size), 3):
                    if r is not None:
                        per_rank[r] += math.prod(sz) * es
                        chunks[r] += 1
        check(not (not s.get("dry_run") or s["tensor_bytes"] != tb or len(s["ranks"]) != 3),
              f"--dry-run --json: {json.dumps(s)[:300]} (tensor bytes {tb})")
        got = [x["tensor_bytes"] for x in s["ranks"]]
        # 0-d tensors and empty shards can sit on any rank: compare the dim-0 part only
        check(not (any(g < p for g, p in zip(got, per_rank)) or sum(got) != tb),
              f"--dry-run --json: per-rank bytes {got}, dim-0 chunks alone give {per_rank}")
        check(not (work / "dry").exists(), "--dry-run --json wrote the output")
        # the plan matches what a real run writes
        real = dcpctl_json("real", "reshard", str(src), "-o", str(work / "real"), "-w", "3")
        if real is not None:
            check([x["tensor_bytes"] for x in real["ranks"]] == got,
                  f"--dry-run plan {got} != real run {[x['tensor_bytes'] for x in real['ranks']]}")
        shutil.rmtree(work / "real", ignore_errors=True)

    # an incomplete source: a chunk and its storage entry dropped (torch's own pickle)
    for case in ("dtensor_shard0_uneven", "fsdp2_app_state"):
        ck = work / f"inc_{case}"
        shutil.copytree(fixtures_root / case / "ckpt", ck)
        with open(ck / ".metadata", "rb") as fh:
            md = pickle.load(fh)  # trusted: torch's own classes
        key = next(k for k, v in md.state_dict_metadata.items()
                   if isinstance(v, TensorStorageMetadata) and sum(1 for c in v.chunks if math.prod(c.sizes)) >= 2)
        ch = md.state_dict_metadata[key].chunks.pop(0)
        for i in [i for i in md.storage_data if i.fqn == key and tuple(i.offset) == tuple(ch.offsets)]:
            del md.storage_data[i]
        with open(ck / ".metadata", "wb") as fh:
            pickle.dump(md, fh)
        inc_before = tree_digest(ck)
        for args in (["reshard", "-w", "2"], ["reshard", "-w", "1"], ["cast", "--dtype", "bf16"],
                     ["reshard", "-w", "2", "--dry-run"]):
            o = work / "inc_out"
            rc, _, err = dcpctl(args[0], str(ck), "-o", str(o), *args[1:])
            check(rc == 3, f"incomplete {case} {args}: exit {rc}, want 3: {err[:300]}")
            check(key in err, f"incomplete {case} {args}: the key {key} is not named: {err[:300]}")
            check(not o.exists(), f"incomplete {case} {args}: OUTDIR exists")
            tmps = [x for x in os.listdir(work) if "dcpctl-tmp" in x]
            check(not tmps, f"incomplete {case} {args}: temporaries left {tmps}")
        print(f"incomplete {case}: {err.strip()[:300]}")
        # a storage entry missing alone
        rc, _, err = dcpctl("reshard", str(ck), "-o", str(work / "inc_out"), "-w", "2", "--exclude", key)
        check(rc == 0, f"incomplete {case}: --exclude {key} should work: exit {rc}: {err[:300]}")
        shutil.rmtree(work / "inc_out", ignore_errors=True)
        check(tree_digest(ck) == inc_before, f"incomplete {case}: the source copy changed")
    # a chunk whose storage entry alone is gone
    ck = work / "nostorage"
    shutil.copytree(fixtures_root / "dtensor_2d_mesh" / "ckpt", ck)
    with open(ck / ".metadata", "rb") as fh:
        md = pickle.load(fh)
    key = next(k for k, v in md.state_dict_metadata.items() if isinstance(v, TensorStorageMetadata))
    ch = md.state_dict_metadata[key].chunks[0]
    for i in [i for i in md.storage_data if i.fqn == key and tuple(i.offset) == tuple(ch.offsets)]:
        del md.storage_data[i]
    with open(ck / ".metadata", "wb") as fh:
        pickle.dump(md, fh)
    rc, _, err = dcpctl("reshard", str(ck), "-o", str(work / "ns_out"), "-w", "2")
    check(not (rc != 3 or key not in err or (work / "ns_out").exists()),
          f"chunk without storage entry: exit {rc} (want 3 naming {key}), output exists: "
             f"{(work / 'ns_out').exists()}: {err[:300]}")
    check(tree_digest(src) == before, "the source changed")


# ------------------------------------------------------------------------------------------------
# signals


def _big_worker(rank: int, world: int, port: int, out: str, mb: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    g = torch.Generator().manual_seed(rank)
    sd = {}
    rows, cols = 1027, 2048  # 8.4 MB per fp32 tensor
    n = max(1, (mb << 20) // (rows * cols * 4))
    for i in range(n):
        s, e = chunk_rows(rows, world, rank)
        local = torch.randn(e - s, cols, generator=g)
        sd[f"layers.{i}.weight"] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                                      shape=torch.Size((rows, cols)), stride=(cols, 1))
    sd["step"] = 7
    dcp.save(sd, checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def resumable(folder: Path) -> bool:
    """A stopped run's staging folder: its journal records finished files, and it holds only them."""
    try:
        files = json.loads((folder / ".dcpctl-resume.json").read_text())["files"]
    except (OSError, ValueError, KeyError):
        return False
    held = sorted(x for x in os.listdir(folder) if x != ".dcpctl-resume.json")
    return bool(files) and set(files) <= set(held) and all(not x.startswith(".") for x in held)


def mode_signals(tmp: Path) -> None:
    import torch.multiprocessing as mp

    work = tmp / "w"
    work.mkdir()
    ck = work / "big"
    t0 = time.time()
    mp.start_processes(_big_worker, args=(2, free_port(), str(ck), 300), nprocs=2, join=True, start_method=FORK)
    size = sum(p.stat().st_size for p in ck.iterdir())
    print(f"made a {size / 1e6:.0f} MB checkpoint (2 ranks, real torch) in {time.time() - t0:.1f} s")
    before = tree_digest(ck)
    runs = [("reshard -w 3", ["reshard", "-w", "3", "--threads", "1"]),
            ("reshard -w 1", ["reshard", "-w", "1"]),
            ("cast bf16", ["cast", "--dtype", "bf16", "--threads", "1"])]
    for label, args in runs:
        t = time.time()
        rc, _, err = dcpctl(args[0], str(ck), "-o", str(work / "out"), *args[1:], "-q")
        print(f"uninterrupted {label}: exit {rc} in {time.time() - t:.2f} s")
        check(rc == 0, f"uninterrupted {label}: exit {rc}: {err[:300]}")
        shutil.rmtree(work / "out", ignore_errors=True)
    for sig in (signal.SIGTERM, signal.SIGINT):
        for label, args in runs:
            for existing in (False, True):
                target = work / "out"
                if existing:
                    target.mkdir()
                    (target / "mine.txt").write_text("old output")
                what = f"{sig.name} {label}{' over an existing OUTDIR (--force)' if existing else ''}"
                hit = False
                for attempt in range(6):
                    listing = sorted(os.listdir(work))
                    cmd = [DCPCTL, args[0], str(ck), "-o", str(target), *args[1:], "-q"] + (["--force"] if existing else [])
                    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                    deadline = time.time() + 30
                    while time.time() < deadline and p.poll() is None:
                        if any("dcpctl-tmp" in x for x in os.listdir(work)):
                            break
                        time.sleep(0.001)
                    time.sleep(0.03 * attempt)
                    if p.poll() is not None:
                        p.wait()
                        print(f"  {what}: finished before the signal (attempt {attempt})")
                        shutil.rmtree(target, ignore_errors=True)
                        if existing:
                            target.mkdir()
                            (target / "mine.txt").write_text("old output")
                        continue
                    p.send_signal(sig)
                    _, err = p.communicate(timeout=120)
                    hit = True
                    check(p.returncode == -sig,
                          f"{what}: exit status {p.returncode}, want death by {sig.name}: {err.decode()[:200]}")
                    after = sorted(os.listdir(work))
                    # A rank file finished before the signal: the run's staging folder is kept for
                    # --resume (write/resume.h), with its journal and only the finished files.
                    kept = [x for x in after if x not in listing and resumable(work / x)]
                    check(sorted(set(after) - set(kept)) == listing, f"{what}: directory listing {listing} -> {after}")
                    for x in kept:
                        print(f"  {what}: kept {x} for --resume ({sorted(os.listdir(work / x))})")
                        shutil.rmtree(work / x)
                    if existing:
                        check(not (not target.is_dir() or sorted(os.listdir(target)) != ["mine.txt"] or \
                                (target / "mine.txt").read_text() != "old output"), f"{what}: the old OUTDIR was changed")
                    elif target.exists():
                        fail(f"{what}: OUTDIR exists after the signal")
                    break
                check(hit, f"{what}: could not signal a run while it was writing (6 attempts)")
                shutil.rmtree(target, ignore_errors=True)
    check(tree_digest(ck) == before, "signals: the input checkpoint changed")


# ------------------------------------------------------------------------------------------------
# memory


def mode_memory(tmp: Path) -> None:
    """Buffer budget with parallel target ranks: must finish (no deadlock), stay near the budget and
    write the right values. Each run gets 90 s; a hang is reported as a failure."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter

    def timed(what: str, *args: str) -> dict | None:
        # peak RSS measured by GNU time (wait4 of a small parent): dcpctl's own peak_rss_bytes is
        # getrusage(RUSAGE_SELF) and keeps the RSS of the process that exec'd it (this python)
        gtime = ["/usr/bin/time", "-f", "%M"] if os.access("/usr/bin/time", os.X_OK) else []
        p = run(*gtime, DCPCTL, *args, "--json", timeout=900)  # a hang is a failure there (far above a loaded run)
        if p.timed_out:
            return None
        if not check(p.returncode == 0, f"{what}: exit {p.returncode}: {p.stderr[:300]}"):
            return None
        s = json.loads(p.stdout)
        if gtime:
            rss = int(p.stderr.strip().splitlines()[-1]) * 1024
            print(f"{what}: {s['seconds']:.2f} s, peak RSS {rss >> 20} MiB, budget {s['max_memory'] >> 20} MiB")
            check(rss <= s["max_memory"] + (256 << 20),
                  f"{what}: peak RSS {rss >> 20} MiB > budget {s['max_memory'] >> 20} MiB + 256 MiB")
        return s

    # 1. a zstd-compressed single-chunk 768 MiB tensor (torch, one process), -w 2, defaults: both
    #    target ranks hold their 384 MiB buffer while each needs the whole decoded source chunk
    try:
        from torch.distributed.checkpoint._extension import ZStandard
        z = tmp / "zstd_big"
        t = torch.arange(12288, dtype=torch.float32).reshape(-1, 1).expand(12288, 16384).contiguous()
        dcp.save({"w": t}, storage_writer=FileSystemWriter(str(z), _extensions=[ZStandard()]))
        s = timed("zstd 768 MiB -w 2", "reshard", str(z), "-o", str(tmp / "zout"), "-w", "2")
        if s is not None:
            got = dcp_oracle.flat_state_from_dcp(tmp / "zout")["w"]
            check(not same_tensor(got, t), f"zstd 768 MiB -w 2: values differ: {same_tensor(got, t)}")
            shutil.rmtree(tmp / "zout")
        del t
        shutil.rmtree(z)
    except ImportError as e:
        # the pinned torch has it: without it the virtualenv is broken, which CI must not pass
        (fail if skip.strict() else note)(f"no zstd extension in this torch: {e}")

    # 2. 8 source shards -> 2 target ranks with a cast and a tight --max-memory (raw + conv + source
    #    chunk fit; two raws fit; two raws + a conv do not)
    src = tmp / "two"
    g = torch.Generator().manual_seed(3)
    sd = {"t": torch.randn(64, 262144, generator=g), "u": torch.randn(64, 262144, generator=g)}
    dcp.save(sd, checkpoint_id=str(src))
    rc, _, err = dcpctl("reshard", str(src), "-o", str(tmp / "src8"), "-w", "8", "-q")
    if not check(rc == 0, f"reshard -w 8: exit {rc}: {err[:300]}"):
        return
    for threads in ("2", "4"):
        out = tmp / f"o{threads}"
        s = timed(f"8 -> 2 ranks --dtype fp16 --max-memory 64MiB --threads {threads}", "reshard", str(tmp / "src8"),
                  "-o", str(out), "-w", "2", "--dtype", "fp16", "--max-memory", "64MiB", "--threads", threads)
        if s is not None:
            flat = dcp_oracle.flat_state_from_dcp(out)
            for k, v in sd.items():
                d = same_tensor(flat[k], v.to(torch.float16))
                check(not d, f"8 -> 2 --dtype fp16: {k}: {d}")
            shutil.rmtree(out)
    # 3. the same without a cast, from a source whose chunks are not row runs of the target
    s = timed("8 -> 3 ranks --max-memory 40MiB", "reshard", str(tmp / "src8"), "-o", str(tmp / "o3"), "-w", "3",
              "--max-memory", "40MiB", "--threads", "3")
    if s is not None:
        flat = dcp_oracle.flat_state_from_dcp(tmp / "o3")
        for k, v in sd.items():
            check(not same_tensor(flat[k], v), f"8 -> 3: {k} differs")


# ------------------------------------------------------------------------------------------------


# What a full run of each mode always makes, a little under what one made (2026-11-29: filters 88,
# cast 13676, metadata 11580, refusals 71; signals and memory: the checks their code always makes),
# so that a fixture or a comparison lost fails (docs/testing.md#no-test-passes-on-nothing). load: per
# fixture resharded and loaded, under the fewest a group made per fixture (reshard-load-a 8844 for 4,
# -b 4862 for 5, -c 12312 for 5: 972 a fixture at the least), each_case holding every fixture to 10
# checks per world size besides.
MIN_CHECKS = {"filters": 84, "cast": 13000, "metadata": 11000, "refusals": 68, "signals": 46, "memory": 5}
MIN_CHECKS_LOAD_PER_FIXTURE = 850

def main() -> int:
    global DCPCTL
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    mode, DCPCTL, root = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    fixtures = fixtures_in(root, sys.argv[4:])
    t = time.time()
    with tempfile.TemporaryDirectory(prefix="dcpctl-reshard-") as d:
        tmp = Path(d)
        if mode == "load":
            mode_load(fixtures, tmp)
        elif mode == "filters":
            mode_filters(root, tmp)
        elif mode == "cast":
            mode_cast(fixtures, tmp)
        elif mode == "metadata":
            mode_metadata(fixtures, tmp)
        elif mode == "refusals":
            mode_refusals(root, tmp)
        elif mode == "signals":
            mode_signals(tmp)
        elif mode == "memory":
            mode_memory(tmp)
        else:
            print(f"unknown mode {mode}", file=sys.stderr)
            return 2
    print(f"{mode}: {len(NOTES)} note(s), {time.time() - t:.1f} s")
    least = MIN_CHECKS_LOAD_PER_FIXTURE * len(fixtures) if mode == "load" else MIN_CHECKS[mode]
    return summary(f"reshard_test {mode}", min_checks=least)


if __name__ == "__main__":
    sys.exit(main())
