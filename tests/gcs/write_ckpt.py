#!/usr/bin/env python3
"""DCP checkpoints written by real torch straight INTO a GCS emulator (tests/gcs/gcs_server.py),
through torch's FsspecWriter and gcsfs, read back through FsspecReader, with torch.save'd
references beside them for a test to compare with.

    write_ckpt.py ENDPOINT BUCKET PREFIX OUT_REF_DIR [--no-dist] [--block-size BYTES]

    ENDPOINT     the emulator, http://127.0.0.1:PORT (GcsServer.endpoint)
    BUCKET       created when missing
    PREFIX       the checkpoints go to gs://BUCKET/PREFIX/single and gs://BUCKET/PREFIX/dist2
    OUT_REF_DIR  gets single.pt and dist2.pt (torch.save of the reference state dicts: nested
                 dicts, plain full tensors, non-tensor values as Python objects) and
                 manifest.json: {"checkpoints": [{"name", "url", "ranks", "ref", "keys"}]},
                 keys the dotted names of every leaf ("app.model.emb.weight", ...)
    --no-dist    skip the 2-rank save
    --block-size gcsfs's block size (default 1 MiB, its minimum 256 KiB). Every file goes up by a
                 resumable upload (torch flushes the stream, which makes gcsfs open one): a file
                 larger than the block size in several chunks (308 answers; single's ~3.5 MB data
                 file: 4 chunks), a smaller one in one PUT. .metadata is written as .metadata.tmp
                 and renamed: moveTo (the emulator: 400), then rewriteTo + DELETE

single: dcp.save with no process group (no_dist=True) of
    {"app": {"model": <model state dict>, "optim": <Adam state dict>},
     "meta": {"step": 42, "name": "gcs-write", "nested": {"lr": 0.001, "betas": [0.9, 0.999]},
              "tag": b"\\x00bytes"}}
  the model (torch.manual_seed(0)): emb.weight [1000, 256] fp32, proj.weight [128, 256] and
  proj.bias [128] fp32, head.weight [64, 128] and head.bias [64] bf16, norm.weight/.bias [64]
  fp32, and a bf16 buffer scale [64]; the optimizer: Adam after one step, through
  torch.distributed.checkpoint.state_dict.get_state_dict (FQN keys: app.optim.state.emb.weight.
  exp_avg, ...; the param group's values as non-tensor entries app.optim.param_groups.0.lr, ...).
  46 leaves.
dist2: 2 processes (torch.multiprocessing, gloo on CPU, a 1-D DeviceMesh of 2), each saving its
  shards of DTensors through FsspecWriter: "w0" [6, 4] fp32 Shard(0), "w1" [5, 3] fp32 Shard(0)
  (uneven: 3 + 2 rows), "w2" [4, 6] bf16 Shard(1), "rep" [3] fp32 Replicate(), "plain" [2, 2]
  fp32 a plain tensor both ranks hold, "step": 7; the reference holds the full tensors.

Both are then loaded (single process, no_dist) through FsspecReader from the emulator into zeroed
plain tensors of the full shapes and compared with the references (exact, dtypes included): a
difference exits 1. gcsfs is given endpoint_url=ENDPOINT and token="anon" (no credentials are
looked up), and the process's environment gets STORAGE_EMULATOR_HOST, the GCE metadata host on a
closed port of 127.0.0.1 and GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false (see _gcs_env).

Needs torch, gcsfs (tools/requirements.txt). Exit 0: written and read back equal.
"""
import argparse
import json
import os
import sys
import urllib.error
import urllib.request

DIST_WORLD = 2


def _gcs_env(endpoint):
    """Before gcsfs is imported: GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false makes `gs://` gcsfs's plain
    GCSFileSystem (its default since 2026 is ExtendedGcsFileSystem, which asks the endpoint over
    gRPC for the bucket's storage layout before each open: the emulator speaks no gRPC, and each
    lookup waits out its RPC timeout, a minute or more)."""
    os.environ.update(STORAGE_EMULATOR_HOST=endpoint, GCE_METADATA_HOST="127.0.0.1:1",
                      GCE_METADATA_IP="127.0.0.1:1", NO_GCE_CHECK="true", GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false")
    os.environ.pop("GOOGLE_APPLICATION_CREDENTIALS", None)


def _quiet():
    """Drops the expected noise: gcsfs's traceback when the emulator refuses the moveTo API (400;
    gcsfs then renames .metadata.tmp by rewriteTo + DELETE), torch's warnings about fsync on
    fsspec streams and about no process group."""
    import logging
    import warnings
    logging.getLogger("gcsfs").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message="fsync not supported")
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")


def _fs_kwargs(endpoint, block_size):
    """FsspecWriter / FsspecReader's kwargs: fsspec's url_to_fs hands them to GCSFileSystem."""
    return {"endpoint_url": endpoint, "token": "anon", "block_size": block_size}


def ensure_bucket(endpoint, bucket):
    req = urllib.request.Request(f"{endpoint}/storage/v1/b?project=test", method="POST",
                                 data=json.dumps({"name": bucket}).encode(), headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=30).close()
    except urllib.error.HTTPError as e:
        if e.code != 409:  # 409: it exists
            raise


def flat(d):
    """{dotted key: leaf} of a state dict, as DCP names them (torch's own flattening: dicts, and
    lists holding tensors, dicts or such lists, are walked; "app.optim.param_groups.0.lr")."""
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    return flatten_state_dict(d)[0]


def zeroed(d):
    """A template for dcp.load: zeros of the same shapes and dtypes, the same dicts and lists,
    other leaves None (dcp.load puts the saved values there)."""
    import torch
    if isinstance(d, dict):
        return {k: zeroed(v) for k, v in d.items()}
    if isinstance(d, list):
        return [zeroed(v) for v in d]
    return torch.zeros_like(d) if isinstance(d, torch.Tensor) else None


def differences(got, want):
    import torch
    g, w = flat(got), flat(want)
    out = [f"{k}: missing" for k in w if k not in g] + [f"{k}: unexpected" for k in g if k not in w]
    for k in sorted(set(g) & set(w)):
        a, b = g[k], w[k]
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor) or a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
                out.append(f"{k}: {getattr(a, 'dtype', type(a))} {tuple(getattr(a, 'shape', ()))} != "
                           f"{b.dtype} {tuple(b.shape)} (or values)")
        elif a != b:
            out.append(f"{k}: {a!r} != {b!r}")
    return out


def make_model():
    import torch
    from torch import nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(1000, 256)
            self.proj = nn.Linear(256, 128)
            self.head = nn.Linear(128, 64).to(torch.bfloat16)
            self.norm = nn.LayerNorm(64)
            self.register_buffer("scale", torch.linspace(0.5, 1.5, 64, dtype=torch.bfloat16))

        def forward(self, ids):
            x = self.proj(self.emb(ids).mean(1))
            x = self.head(x.to(torch.bfloat16)).float()
            return self.norm(x) * self.scale.float()

    return M()


def single_state_dict():
    import torch
    from torch.distributed.checkpoint.state_dict import get_state_dict
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randint(0, 1000, (8, 5))).sum().backward()
    opt.step()
    msd, osd = get_state_dict(model, opt)
    return {"app": {"model": msd, "optim": osd},
            "meta": {"step": 42, "name": "gcs-write", "nested": {"lr": 0.001, "betas": [0.9, 0.999]},
                     "tag": b"\x00bytes"}}


def clone(d):
    """A deep copy, tensors detached (the reference: nothing dcp.save does can change it)."""
    import copy
    import torch
    return copy.deepcopy(d, {id(t): t.detach().clone() for t in _tensors(d)}) if isinstance(d, dict) else d


def _tensors(d):
    import torch
    if isinstance(d, dict):
        for v in d.values():
            yield from _tensors(v)
    elif isinstance(d, (list, tuple)):
        for v in d:
            yield from _tensors(v)
    elif isinstance(d, torch.Tensor):
        yield d


def save_single(url, fs_kw, ref_path):
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FsspecWriter
    sd = single_state_dict()
    ref = clone(sd)
    dcp.save(sd, storage_writer=FsspecWriter(url, **fs_kw), no_dist=True)
    torch.save(ref, ref_path)
    return ref


def dist_reference():
    """The full tensors of dist2 (the same on every rank: seeded)."""
    import torch
    g = torch.Generator().manual_seed(1234)
    return {"w0": torch.randn(6, 4, generator=g), "w1": torch.randn(5, 3, generator=g),
            "w2": torch.randn(4, 6, generator=g).to(torch.bfloat16), "rep": torch.randn(3, generator=g),
            "plain": torch.randn(2, 2, generator=g), "step": 7}


def _dist_worker(rank, world, init_file, url, fs_kw, endpoint):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FsspecWriter
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    _gcs_env(endpoint)
    _quiet()
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        full = dist_reference()
        sd = {"w0": distribute_tensor(full["w0"], mesh, [Shard(0)]),
              "w1": distribute_tensor(full["w1"], mesh, [Shard(0)]),
              "w2": distribute_tensor(full["w2"], mesh, [Shard(1)]),
              "rep": distribute_tensor(full["rep"], mesh, [Replicate()]),
              "plain": full["plain"].clone(), "step": full["step"]}
        dcp.save(sd, storage_writer=FsspecWriter(url, **fs_kw))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def save_dist(url, fs_kw, ref_path, endpoint, work):
    import torch
    import torch.multiprocessing as mp
    init_file = os.path.join(work, "dist2.init")
    if os.path.exists(init_file):
        os.remove(init_file)
    mp.start_processes(_dist_worker, args=(DIST_WORLD, init_file, url, fs_kw, endpoint), nprocs=DIST_WORLD,
                       join=True, start_method="spawn")
    ref = dist_reference()
    torch.save(ref, ref_path)
    return ref


def load_back(url, fs_kw, ref):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FsspecReader
    back = zeroed(ref)
    dcp.load(back, storage_reader=FsspecReader(url, **fs_kw), no_dist=True)
    return back


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("endpoint")
    ap.add_argument("bucket")
    ap.add_argument("prefix")
    ap.add_argument("out_ref_dir")
    ap.add_argument("--no-dist", action="store_true", help="skip the 2-rank save")
    ap.add_argument("--block-size", type=int, default=1 << 20)
    a = ap.parse_args(argv)
    endpoint = a.endpoint.rstrip("/")
    _gcs_env(endpoint)
    _quiet()
    import gcsfs  # noqa: F401  (fsspec's gs:// file system: FsspecWriter needs it)
    import torch  # noqa: F401
    os.makedirs(a.out_ref_dir, exist_ok=True)
    ensure_bucket(endpoint, a.bucket)
    fs_kw = _fs_kwargs(endpoint, a.block_size)
    base = f"gs://{a.bucket}/{a.prefix.strip('/')}" if a.prefix.strip("/") else f"gs://{a.bucket}"
    jobs = [("single", 1, lambda url, ref: save_single(url, fs_kw, ref))]
    if not a.no_dist:
        jobs.append(("dist2", DIST_WORLD, lambda url, ref: save_dist(url, fs_kw, ref, endpoint, a.out_ref_dir)))
    manifest, failed = [], 0
    for name, ranks, save in jobs:
        url = f"{base}/{name}"
        ref_path = os.path.join(a.out_ref_dir, f"{name}.pt")
        ref = save(url, ref_path)
        diff = differences(load_back(url, fs_kw, ref), ref)
        for d in diff:
            print(f"FAIL {name}: read back from {url}: {d}", file=sys.stderr)
        failed += bool(diff)
        keys = list(flat(ref))
        manifest.append({"name": name, "url": url, "ranks": ranks, "ref": f"{name}.pt", "keys": keys})
        print(f"{name}: {url} ({ranks} rank{'s' if ranks > 1 else ''}, {len(keys)} leaves) "
              f"{'read back equal' if not diff else 'DIFFERS'}; reference {ref_path}", flush=True)
    with open(os.path.join(a.out_ref_dir, "manifest.json"), "w") as f:
        json.dump({"checkpoints": manifest}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
