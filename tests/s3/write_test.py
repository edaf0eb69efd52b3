#!/usr/bin/env python3
"""dcpctl writing to object storage (`-o s3://...`), against a real S3 server on 127.0.0.1 (moto's
or SeaweedFS's, tests/s3/s3_server.py, one per run of this script), checked by real torch and
safetensors.

    write_test.py CASE DCPCTL FIXTURES_DIR [--server moto|seaweedfs]
        CASE: outputs | faults | all (both, on one server)

Where it runs: CTest s3-write-outputs and s3-write-faults on moto (the default), s3-write-seaweedfs
(all) on SeaweedFS, every check below on both: nothing here depends on moto (a SeaweedFS run is
about 40 s on two busy cores).

The checkpoint: torch's dcp.save (one process) of a model of 40 tensors, about 40 MB (so that the
outputs take several parts of the 8 MiB part size and the safetensors lanes write parts at offsets
in parallel), with a bf16 tensor and non-tensor values; and the small fixtures in FIXTURES_DIR.

outputs:
  - consolidate -o s3://.../model.safetensors, s3://.../hf/ (--max-shard-size, with --assets, so
    several shards, the config and the index), s3://.../model.pt, and reshard --world-size 3 /
    cast --dtype bf16 -o s3://.../ckpt/: each object downloaded is byte-identical to the local
    output of the same command (a DCP's .metadata aside: it holds a fresh save id), and real torch
    reads it: safetensors.torch.load_file, torch.load(weights_only=True), dcp_to_torch_save of
    the resharded checkpoint, each compared with torch's own view of the checkpoint;
  - --threads 1..8 and a --max-memory that leaves the fewest part buffers (3): the same bytes;
  - under torchrun (2 processes): reshard and consolidate to s3://, the same bytes; a rank killed
    at the write leaves nothing under the prefix;
  - the order objects appear in: an HF folder's index after its shards and config, a DCP's
    .metadata after its rank files (S3's LastModified is per second: checked as not-earlier);
  - --json `s3`: bytes_uploaded at least the bytes written, requests, the part plan;
  - dcpctl's manifest (docs/integrity.md): an object output has its `dcpctl-manifest.json` (beside
    a file: FILE.dcpctl-manifest.json), written after every other object of the run, hashed as the
    bytes were uploaded (--json manifest_bytes.read_back 0: nothing downloaded back); its file
    digests are hashlib's of the objects, its tensor digests those of the same local output;
    `verify s3://...` checks it (exit 0, --checksum compares every tensor), and one shard
    replaced by a changed copy is manifest-mismatch and, with --checksum, the changed tensor;
  - consolidate s3:// -o s3:// (the read side and the write side together): the same bytes; an
    output inside the input prefix, equal to it or holding it: exit 2, the input untouched;
  - refusals with the local exit code and message: an existing object or prefix without --force
    (exit 2, nothing changed); --force replaces an object, and a folder whose old extra objects are
    gone; a bucket that does not exist (exit 4, named); a --max-memory too small for one part
    (exit 2); --parallel-write (exit 5); no incomplete multipart upload left by any of this.
faults:
  - a burst of four 503 SlowDown answers to UploadPart (tests/s3/fault_proxy.py in front of the
    server): retried,
    --json counts the retries, the object is the same;
  - one rank file of a reshard refused by the server (503 past the retries) after the others were
    completed: exit 4 naming it, the completed objects deleted, no upload left open; the same run
    again without --force succeeds (an emptied folder SeaweedFS still lists is no existing output);
  - a wrong secret: exit 4 naming the URL and HTTP 403, nothing written;
  - SIGTERM while the first part is in flight (DCPCTL_FAILPOINT=s3-upload-part:stop): the process
    dies of SIGTERM; no object under the prefix; ListMultipartUploads empty;
  - SIGTERM once the rank files of a resharded checkpoint are complete and .metadata is not
    (s3-commit/.metadata:stop): the completed rank files are deleted, nothing left;
  - the server stopped mid-upload: exit 4 naming the s3:// URL, within the retries;
  - SIGKILL at the first part (no handler runs) of a consolidate to a file and a reshard to a
    prefix: the open upload and the run's record stay; a run beside the stopped process
    names it and leaves it; after its death a --dry-run says what it would abort, and the next run
    aborts the upload, deletes the record, says so, and writes its output; hand-made records: a
    record of another host is named and nothing is aborted, a dead one alone gets the open upload
    of its output aborted, never one of an object that only shares the prefix.

Exit status: 0 pass, 1 failure, 77 skip (torch, safetensors, boto3, moto[server] or SeaweedFS's
weed missing; a failure under CI, tests/skip.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from skip import skip_or_fail, skip_or_fail_code  # noqa: E402

try:
    import jsonschema  # noqa: F401  (harness.schema_errors)
    import torch
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from s3_server import MissingServer, S3Server, SeaweedServer, make_server  # boto3
except ImportError as e:
    skip_or_fail(f"torch, safetensors, jsonschema and boto3 are needed ({e}); tools/requirements.txt pins them")

from fault_proxy import FaultProxy, upload_part  # noqa: E402
from harness import schema_errors, section  # noqa: E402
from testlib import TALLY, summary  # noqa: E402
from testlib import run as run_argv  # noqa: E402

DCPCTL = ""
FIXTURES = Path()
SCHEMAS = Path()
check = TALLY.check
BUCKET = "dcpctl-out"
SERVER: S3Server | SeaweedServer | None = None
ENV: dict[str, str] = {}  # SERVER.env() with AWS_MAX_ATTEMPTS=3


def dcpctl(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    """dcpctl ARGS against the server (ENV); a crash is a failure (testlib.run)."""
    return run_argv(DCPCTL, *args, timeout=timeout, env=env or ENV)


def url(key: str) -> str:
    return f"s3://{BUCKET}/{key}"


# ---- the checkpoint ----

def make_checkpoint(work: Path) -> tuple[Path, dict]:
    g = torch.Generator().manual_seed(25)
    sd = {}
    for i in range(40):  # 40 tensors of 256 KB .. 1.8 MB: ~42 MB in all
        rows = 64 + (i * 37) % 400
        sd[f"layers.{i}.w"] = torch.randn(rows, 1024, generator=g)
    sd["emb.bf16"] = torch.randn(300, 256, generator=g).to(torch.bfloat16)
    sd["step"] = 1234
    sd["ids"] = torch.arange(1000, dtype=torch.int64)
    ckpt = work / "ckpt"
    dcp.save({"model": sd}, checkpoint_id=str(ckpt), no_dist=True)
    return ckpt, {"model." + k: v for k, v in sd.items()}


def same_file(a: Path, b: bytes, what: str) -> bool:
    return check(a.read_bytes() == b, f"{what}: the s3:// object differs from the local output {a}")


MANIFEST = "dcpctl-manifest.json"


def check_object_manifest(prefix: str, manifest_key: str, local_manifest: Path, result: subprocess.CompletedProcess,
                          what: str) -> None:
    """The manifest object of an output at `prefix` (a folder `x/`, or a file's key): last, Python's
    digests of the objects (zlib's CRC-32, or hashlib's SHA-256), the local output's tensor digests, nothing read back; verify checks it."""
    import hashlib
    objs = SERVER.keys(BUCKET, prefix)
    if not check(manifest_key in objs, f"{what}: no {manifest_key} among {sorted(objs)}"):
        return
    m = json.loads(SERVER.get(BUCKET, manifest_key))
    local = json.loads(local_manifest.read_text())
    folder = prefix.endswith("/")
    listed = {(prefix + n if folder else prefix[:prefix.rfind("/") + 1] + n): d for n, d in m["files"].items()}
    want = sorted(k for k in objs if k != manifest_key) if folder else [prefix]
    check(sorted(listed) == want, f"{what}: the manifest lists {sorted(listed)}, the prefix holds {want}")
    import zlib
    alg = m.get("algorithm")  # crc32 by default (version 2), sha256 where asked (meta/manifest.h)
    for k, d in listed.items():
        if k in objs:
            data = SERVER.get(BUCKET, k)
            got = f"{zlib.crc32(data):08x}" if alg == "crc32" else hashlib.sha256(data).hexdigest()
            check(got == d, f"{what}: {k}: the manifest's {alg} is not Python's")
    check(isinstance(m.get("tensors"), dict) and m["tensors"] == local.get("tensors"),
          f"{what}: tensor digests differ from the local output's")
    check(all(o["LastModified"] <= objs[manifest_key]["LastModified"] for o in objs.values()), f"{what}: an object newer than the manifest")
    j = json.loads(result.stdout)
    check(j.get("manifest_bytes", {}).get("read_back") == 0 and j.get("manifest") == url(manifest_key),
          f"{what}: --json manifest {j.get('manifest')} manifest_bytes {j.get('manifest_bytes')} (nothing read back expected)")
    target = url(prefix)
    if not (folder or prefix.endswith(".safetensors")):
        return  # verify reads DCP checkpoints, HF folders and .safetensors files
    v = dcpctl("verify", target, "--checksum", "--json")
    doc = json.loads(v.stdout) if v.stdout.strip().startswith("{") else {}
    check(v.returncode == 0 and (doc.get("manifest") or {}).get("tensors_compared") == len(m["tensors"]),
          f"{what}: verify --checksum {target}: exit {v.returncode} {doc.get('problems')} {doc.get('manifest')} {v.stderr[-300:]}")


def tamper_object(prefix: str, key: str, what: str) -> None:
    """A copy of the output at `prefix` (an HF folder) with one tensor's bytes of shard `key` changed:
    verify says manifest-mismatch, and with --checksum names that tensor alone."""
    import struct
    copy = "tampered-" + prefix
    for k in SERVER.keys(BUCKET, prefix):
        SERVER.client.copy_object(Bucket=BUCKET, Key=copy + k[len(prefix):], CopySource={"Bucket": BUCKET, "Key": k})
    body = bytearray(SERVER.get(BUCKET, key))
    n = struct.unpack("<Q", body[:8])[0]
    header = json.loads(body[8:8 + n])
    name, info = next((k, v) for k, v in sorted(header.items()) if k != "__metadata__" and v["data_offsets"][1] > v["data_offsets"][0])
    body[8 + n + (info["data_offsets"][0] + info["data_offsets"][1]) // 2] ^= 0x5A
    SERVER.client.put_object(Bucket=BUCKET, Key=copy + key[len(prefix):], Body=bytes(body))
    v = dcpctl("verify", url(copy), "--json")
    doc = json.loads(v.stdout) if v.stdout.strip().startswith("{") else {}
    check(v.returncode == 3 and "manifest-mismatch" in {p["code"] for p in doc.get("problems", [])},
          f"{what}: a shard changed after its manifest: exit {v.returncode} {doc.get('problems')}")
    v = dcpctl("verify", url(copy), "--checksum", "--json")
    doc = json.loads(v.stdout) if v.stdout.strip().startswith("{") else {}
    named = sorted(p.get("key") for p in doc.get("problems", []) if p["code"] == "manifest-tensor-mismatch")
    check(v.returncode == 3 and named == [name], f"{what}: --checksum names {named}, {name} expected")


# ---- outputs ----

def case_outputs(work: Path) -> None:
    ckpt, sd = make_checkpoint(work)
    tensors = {k: v for k, v in sd.items() if isinstance(v, torch.Tensor)}
    local = work / "local"
    local.mkdir()

    # one safetensors file, several lanes, and one lane
    for threads in (4, 1, 8):
        key = f"st{threads}/model.safetensors"
        r = dcpctl("consolidate", ckpt, "-o", url(key), "--threads", threads, "--json")
        if not check(r.returncode == 0, f"consolidate -o s3 --threads {threads}: exit {r.returncode}: {r.stderr}"):
            continue
        lf = local / f"model{threads}.safetensors"
        l = dcpctl("consolidate", ckpt, "-o", lf, "--threads", threads)
        check(l.returncode == 0, f"local consolidate: {l.stderr}")
        body = SERVER.get(BUCKET, key)
        same_file(lf, body, f"safetensors --threads {threads}")
        j = json.loads(r.stdout)
        check(not schema_errors(SCHEMAS, "consolidate", j), f"consolidate --json: {schema_errors(SCHEMAS, 'consolidate', j)}")
        s3 = j.get("s3", {})
        check(s3.get("bytes_uploaded", 0) >= len(body), f"--json s3.bytes_uploaded {s3.get('bytes_uploaded')} < {len(body)}")
        check(s3.get("requests", 0) >= 2 + len(body) // s3.get("part_size", 1), f"--json s3.requests {s3}")
        check(s3.get("part_size") == 8 << 20, f"part size {s3.get('part_size')}")
        if threads == 4:
            check_object_manifest(key, f"{key}.{MANIFEST}", Path(f"{lf}.{MANIFEST}"), r, "model.safetensors")
            got = load_file(str(SERVER.download(BUCKET, "st4/", work / "dl-st4") / "model.safetensors"))
            check(set(got) == set(tensors) and all(torch.equal(got[k], tensors[k]) for k in tensors),
                  "safetensors.torch.load_file of the downloaded object differs from the checkpoint")

    # --max-memory leaving room for the fewest part buffers (3: one task at a time) beside the
    # largest buffer: the same bytes
    r = dcpctl("consolidate", ckpt, "-o", url("tight/model.safetensors"), "--max-memory", "28MiB", "--json")
    if check(r.returncode == 0, f"consolidate --max-memory 28MiB: {r.stderr}"):
        check(json.loads(r.stdout)["s3"]["part_buffers"] == 3, f"three part buffers expected: {r.stdout[-400:]}")
        same_file(local / "model4.safetensors", SERVER.get(BUCKET, "tight/model.safetensors"), "--max-memory 28MiB")
    r = dcpctl("consolidate", ckpt, "-o", url("tiny/model.safetensors"), "--max-memory", "4MiB")
    check(r.returncode == 2 and "raise --max-memory" in r.stderr and not SERVER.keys(BUCKET, "tiny/"),
          f"--max-memory below one part: exit {r.returncode} (2 expected), {r.stderr}")

    # HF folder: shards, config, index
    assets = work / "assets"
    assets.mkdir()
    (assets / "config.json").write_text(json.dumps({"model_type": "test", "tie_word_embeddings": False}))
    r = dcpctl("consolidate", ckpt, "-o", url("hf/"), "--max-shard-size", "16MB", "--assets", assets, "--json")
    l = dcpctl("consolidate", ckpt, "-o", local / "hf", "--max-shard-size", "16MB", "--assets", assets)
    if check(r.returncode == 0 and l.returncode == 0, f"consolidate hf: {r.stderr} {l.stderr}"):
        objs = SERVER.keys(BUCKET, "hf/")
        names = sorted(k[3:] for k in objs)
        check(names == sorted(p.name for p in (local / "hf").iterdir()), f"hf/ holds {names}")
        for n in names:
            same_file(local / "hf" / n, SERVER.get(BUCKET, "hf/" + n), f"hf/{n}")  # the manifest too
        check_object_manifest("hf/", f"hf/{MANIFEST}", local / "hf" / MANIFEST, r, "hf/")
        shards = [k for k in objs if k.endswith(".safetensors")]
        check(len(shards) >= 3, f"several shards expected: {shards}")
        index = objs.get("hf/model.safetensors.index.json")
        if check(index is not None, "hf/: no index"):
            check(all(objs[k]["LastModified"] <= index["LastModified"] for k in objs if not k.endswith(MANIFEST)),
                  "hf/: an object newer than the index")
            check(objs["hf/config.json"]["LastModified"] >= max(objs[k]["LastModified"] for k in shards),
                  "hf/: config.json older than a shard")
        tamper_object("hf/", sorted(shards)[0], "hf/")
        got = {}
        dl = SERVER.download(BUCKET, "hf/", work / "dl-hf")
        for s in shards:
            got.update(load_file(str(dl / s[3:])))
        check(set(got) == set(tensors) and all(torch.equal(got[k], tensors[k]) for k in tensors), "hf/ shards differ from the checkpoint")

    # .pt
    r = dcpctl("consolidate", ckpt, "-o", url("pt/model.pt"), "--json")
    l = dcpctl("consolidate", ckpt, "-o", local / "model.pt")
    d = dcpctl("consolidate", ckpt, "-o", url("pt/dry.pt"), "--json", "--dry-run")
    if check(d.returncode == 0, f"--dry-run: {d.stderr}"):
        dj = json.loads(d.stdout)
        check(not schema_errors(SCHEMAS, "consolidate", dj) and dj["s3"]["part_buffers"] == 2 and not SERVER.keys(BUCKET, "pt/dry"),
              f"--dry-run to s3: {schema_errors(SCHEMAS, 'consolidate', dj)} {dj.get('s3')}")
    if check(r.returncode == 0 and l.returncode == 0, f"consolidate .pt: {r.stderr} {l.stderr}"):
        same_file(local / "model.pt", SERVER.get(BUCKET, "pt/model.pt"), ".pt")
        check_object_manifest("pt/model.pt", f"pt/model.pt.{MANIFEST}", Path(f"{local / 'model.pt'}.{MANIFEST}"), r, "model.pt")
        got = torch.load(SERVER.download(BUCKET, "pt/", work / "dl-pt") / "model.pt", weights_only=True)
        check(got["model"]["step"] == 1234 and all(torch.equal(got["model"][k[6:]], v) for k, v in tensors.items()),
              ".pt: torch.load(weights_only=True) differs from the checkpoint")

    # reshard and cast: a DCP checkpoint, .metadata last
    for cmd, args, name in (("reshard", ["--world-size", "3"], "re3"), ("cast", ["--dtype", "bf16"], "castbf16")):
        r = dcpctl(cmd, ckpt, "-o", url(name + "/"), *args, "--json")
        l = dcpctl(cmd, ckpt, "-o", local / name, *args)
        if not check(r.returncode == 0 and l.returncode == 0, f"{cmd} -o s3: {r.stderr} {l.stderr}"):
            continue
        check(not schema_errors(SCHEMAS, cmd, json.loads(r.stdout)), f"{cmd} --json: {schema_errors(SCHEMAS, cmd, json.loads(r.stdout))}")
        objs = SERVER.keys(BUCKET, name + "/")
        names = sorted(k[len(name) + 1:] for k in objs)
        check(names == sorted(p.name for p in (local / name).iterdir()), f"{name}/ holds {names}")
        check_object_manifest(name + "/", f"{name}/{MANIFEST}", local / name / MANIFEST, r, name + "/")
        for n in names:
            if n not in (".metadata", MANIFEST):  # .metadata holds a fresh save id, and the manifest its digest
                same_file(local / name / n, SERVER.get(BUCKET, f"{name}/{n}"), f"{name}/{n}")
        meta = objs.get(f"{name}/.metadata")
        if check(meta is not None, f"{name}/: no .metadata"):
            check(all(o["LastModified"] <= meta["LastModified"] for k, o in objs.items() if not k.endswith(MANIFEST)),
                  f"{name}/: an object newer than .metadata")
        dl = SERVER.download(BUCKET, name + "/", work / ("dl-" + name))
        dcp_to_torch_save(str(dl), str(work / f"{name}.pt"))
        got = torch.load(work / f"{name}.pt", weights_only=True)["model"]
        for k, v in tensors.items():
            want = v.to(torch.bfloat16) if cmd == "cast" and v.is_floating_point() else v
            if not check(torch.equal(got[k[6:]], want), f"{name}: {k} differs after dcp_to_torch_save"):
                break
        check(got["step"] == 1234, f"{name}: step {got.get('step')}")

    # the small fixtures: every one consolidated to s3 equals the local file
    for case in ("multi_file", "dtensor_shard0_uneven", "all_dtypes_sharded"):
        src = FIXTURES / case / "ckpt"
        r = dcpctl("consolidate", src, "-o", url(f"fx/{case}.pt"))
        l = dcpctl("consolidate", src, "-o", local / f"{case}.pt")
        if check(r.returncode == 0 and l.returncode == 0, f"{case}: {r.stderr} {l.stderr}"):
            same_file(local / f"{case}.pt", SERVER.get(BUCKET, f"fx/{case}.pt"), f"fixture {case}")

    # under torchrun (2 processes): reshard (each rank completes its rank files, rank 0 .metadata
    # last) and consolidate (rank 0 writes from the chunks both ranks read): the same bytes; a rank
    # killed at the write leaves nothing
    def launch(*args, env=None):  # torchrun (exits 1 when a worker fails; each worker's code is in its report)
        return run_argv(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--no-python",
                        DCPCTL, *args, "--timeout", "300", env=env or ENV)
    r = launch("reshard", ckpt, "-o", url("tr-re3/"), "--world-size", "3")
    if check(r.returncode == 0, f"torchrun reshard -o s3: {r.stderr[-2000:]}"):
        for n in ("__0_0.distcp", "__1_0.distcp", "__2_0.distcp"):
            same_file(local / "re3" / n, SERVER.get(BUCKET, "tr-re3/" + n), f"torchrun reshard {n}")
        check(".metadata" in [k[7:] for k in SERVER.keys(BUCKET, "tr-re3/")], "torchrun reshard: no .metadata")
    r = launch("consolidate", ckpt, "-o", url("tr-st/model.safetensors"))
    if check(r.returncode == 0, f"torchrun consolidate -o s3: {r.stderr[-2000:]}"):
        same_file(local / "model4.safetensors", SERVER.get(BUCKET, "tr-st/model.safetensors"), "torchrun consolidate")
    r = launch("reshard", ckpt, "-o", url("tr-kill/"), "--world-size", "4",
               env=dict(ENV, DCPCTL_FAILPOINT="reshard-write:1"))
    check(r.returncode == 1 and "SIGKILL" in r.stdout + r.stderr and not SERVER.keys(BUCKET, "tr-kill/"),
          f"torchrun reshard, rank 1 killed: exit {r.returncode} (torchrun's 1, naming the SIGKILL), left "
          f"{list(SERVER.keys(BUCKET, 'tr-kill/'))}: {r.stderr[-1500:]}")

    # s3:// to s3://: the checkpoint read in place, the output uploaded; outputs inside the input
    # prefix (or holding it) refused as locally
    for f in ckpt.iterdir():
        SERVER.client.upload_file(str(f), BUCKET, f"runs/a/ckpt/{f.name}")
    src = url("runs/a/ckpt")
    r = dcpctl("consolidate", src, "-o", url("from-s3/model.safetensors"))
    if check(r.returncode == 0, f"consolidate s3:// -o s3://: {r.stderr}"):
        same_file(local / "model4.safetensors", SERVER.get(BUCKET, "from-s3/model.safetensors"), "s3:// to s3://")
    for out, why in ((url("runs/a/ckpt/out.safetensors"), "inside the checkpoint"), (url("runs/a/ckpt/"), "is the checkpoint"),
                     (url("runs/"), "contains the checkpoint")):
        cmd = ["consolidate", src, "-o", out] if out.endswith(".safetensors") else ["reshard", src, "-o", out, "-w", "2", "--force"]
        r = dcpctl(*cmd)
        check(r.returncode == 2 and why in r.stderr, f"output {out} over input {src}: exit {r.returncode}, {r.stderr}")
    check(sorted(SERVER.keys(BUCKET, "runs/")) == sorted(f"runs/a/ckpt/{f.name}" for f in ckpt.iterdir()), "a refused run changed the input")

    # refusals, as locally
    before = SERVER.get(BUCKET, "st4/model.safetensors")
    r = dcpctl("consolidate", ckpt, "-o", url("st4/model.safetensors"))
    lr = dcpctl("consolidate", ckpt, "-o", local / "model4.safetensors")
    check(r.returncode == 2 == lr.returncode and "output exists; pass --force" in r.stderr and url("st4/model.safetensors") in r.stderr,
          f"existing object: exit {r.returncode} ({lr.returncode} locally): {r.stderr}")
    check(SERVER.get(BUCKET, "st4/model.safetensors") == before, "the refused run changed the object")
    r = dcpctl("reshard", ckpt, "-o", url("re3"), "--world-size", "2")
    check(r.returncode == 2 and "output exists" in r.stderr, f"existing prefix: exit {r.returncode}: {r.stderr}")
    r = dcpctl("reshard", ckpt, "-o", url("re3"), "--world-size", "2", "--force")
    if check(r.returncode == 0, f"reshard --force over a prefix: {r.stderr}"):
        names = sorted(k[4:] for k in SERVER.keys(BUCKET, "re3/"))
        check(names == [".metadata", "__0_0.distcp", "__1_0.distcp", MANIFEST], f"--force left old objects: {names}")
    r = dcpctl("consolidate", ckpt, "-o", url("st4/model.safetensors"), "--force", "--include", "model.layers.1.*")
    if check(r.returncode == 0, f"--force over an object: {r.stderr}"):
        check(SERVER.get(BUCKET, "st4/model.safetensors") != before, "--force did not replace the object")
    r = dcpctl("consolidate", ckpt, "-o", "s3://no-such-bucket-dcpctl/x.safetensors")
    check(r.returncode == 4 and "s3://no-such-bucket-dcpctl" in r.stderr and "404" in r.stderr,
          f"missing bucket: exit {r.returncode} (4 expected), {r.stderr}")
    # --parallel-write: one process has no ranks to share the shards with (2, before any s3 check);
    # under torchrun each rank refuses the s3:// output (5: the shards need a shared folder)
    r = dcpctl("consolidate", ckpt, "-o", url("pw/"), "--parallel-write", "--single-process")
    check(r.returncode == 2 and "several processes" in r.stderr, f"--parallel-write, one process: exit {r.returncode}: {r.stderr}")
    r = launch("consolidate", ckpt, "-o", url("pw/"), "--parallel-write")
    text = r.stdout + r.stderr
    check(r.returncode == 1 and "shared folder" in text and "exitcode: 5" in text and "exitcode  : 5" in text
          and not SERVER.keys(BUCKET, "pw/"),
          f"--parallel-write to s3 under torchrun: exit {r.returncode}, the ranks must exit 5 naming the shared folder: "
          f"{text[-2000:]}")
    check(SERVER.uploads(BUCKET) == [], f"incomplete multipart uploads left: {SERVER.uploads(BUCKET)}")


# ---- faults ----

def wait_stopped(pid: int, timeout=300) -> bool:
    """Whether `pid` stopped itself (a failpoint) within `timeout` s: a hang guard far above what a
    loaded machine stretches a run of seconds to."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state == "T":
            return True
        time.sleep(0.05)
    return False


def sigterm_at(failpoint: str, args: list, prefix: str) -> None:
    env = dict(ENV, DCPCTL_FAILPOINT=failpoint + ":stop")
    p = subprocess.Popen([DCPCTL, *map(str, args)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not check(wait_stopped(p.pid), f"{failpoint}: dcpctl never stopped there"):
        p.kill()
        p.communicate()
        return
    os.kill(p.pid, signal.SIGTERM)
    os.kill(p.pid, signal.SIGCONT)
    _, err = p.communicate(timeout=120)
    check(p.returncode == -signal.SIGTERM, f"{failpoint}: ended with {p.returncode}, not SIGTERM: {err}")
    left = list(SERVER.keys(BUCKET, prefix))
    check(left == [], f"{failpoint}: objects left under {prefix}: {left}; dcpctl said: {err.strip()[-600:]}")
    check(SERVER.uploads(BUCKET) == [], f"{failpoint}: incomplete multipart uploads left: {SERVER.uploads(BUCKET)}")


def journals(prefix: str) -> list:
    """The records of runs writing uploads (write/leftovers.h) under `prefix`."""
    return [k for k in SERVER.keys(BUCKET, prefix) if ".dcpctl-tmp-" in k]


def killed_then_rerun(what: str, args: list, parent: str, out_prefix: str) -> str:
    """SIGKILL mid-upload leaves open multipart uploads and the run's record; a run beside the
    stopped (live) process names it and aborts nothing; after its death a --dry-run says what it
    would abort, and the next run aborts the uploads, removes the record, says so, and writes its
    output. Returns the host part of the record's name."""
    env = dict(ENV, DCPCTL_FAILPOINT="s3-upload-part:stop")
    p = subprocess.Popen([DCPCTL, *map(str, args)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not check(wait_stopped(p.pid), f"{what}: dcpctl never stopped at its first part"):
        p.kill()
        p.communicate()
        return ""
    left = journals(parent)
    check(len(left) == 1 and f"-tmp-{p.pid}-" in left[0], f"{what}: the stopped run's record: {left}")
    live = dcpctl(*args, "--dry-run")
    check(live.returncode == 0 and "still running" in live.stderr and journals(parent) == left and SERVER.uploads(BUCKET),
          f"{what}: beside the live run: exit {live.returncode}, {live.stderr[-400:]}, records {journals(parent)}")
    os.kill(p.pid, signal.SIGKILL)
    p.communicate()
    open_uploads = SERVER.uploads(BUCKET)
    check(open_uploads and journals(parent) == left, f"{what}: after SIGKILL: uploads {open_uploads}, records {journals(parent)}")
    dry = dcpctl(*args, "--dry-run")
    check(dry.returncode == 0 and f"would abort {len(open_uploads)} upload(s)" in dry.stderr and SERVER.uploads(BUCKET) == open_uploads,
          f"{what}: --dry-run: exit {dry.returncode}: {dry.stderr[-400:]}; uploads {SERVER.uploads(BUCKET)}")
    r = dcpctl(*args)
    check(r.returncode == 0 and f"aborted {len(open_uploads)} upload(s) left open" in r.stderr,
          f"{what}: the next run: exit {r.returncode}, did not say it aborted {len(open_uploads)}: {r.stderr[-600:]}")
    check(SERVER.uploads(BUCKET) == [] and journals(parent) == [],
          f"{what}: after the next run: uploads {SERVER.uploads(BUCKET)}, records {journals(parent)}")
    check(SERVER.keys(BUCKET, out_prefix), f"{what}: the next run wrote nothing under {out_prefix}")
    return left[0].rsplit("@", 1)[-1] if left else ""


def records_decide(host: str) -> None:
    """Hand-made records beside an open upload: another host's is named and nothing is aborted; a
    dead process's of this host (PID 4194304, above Linux's pid_max) alone gets the upload aborted;
    an upload of another object that only shares the prefix ("model.safetensors.bak") is never
    touched."""
    ours = SERVER.client.create_multipart_upload(Bucket=BUCKET, Key="k3/model.safetensors")["UploadId"]
    other = SERVER.client.create_multipart_upload(Bucket=BUCKET, Key="k3/model.safetensors.bak")["UploadId"]
    foreign, dead = "k3/.model.safetensors.dcpctl-tmp-77-1@elsewhere", f"k3/.model.safetensors.dcpctl-tmp-4194304-1@{host}"
    for k in (foreign, dead):
        SERVER.client.put_object(Bucket=BUCKET, Key=k, Body=b"{}")
    r = dcpctl("consolidate", FIXTURES / "sample/ckpt", "-o", url("k3/model.safetensors"), "--dry-run")
    check(r.returncode == 0 and "another host" in r.stderr and "not aborted" in r.stderr
          and sorted(SERVER.uploads(BUCKET)) == ["k3/model.safetensors", "k3/model.safetensors.bak"],
          f"records: another host's: exit {r.returncode}, {r.stderr[-600:]}, uploads {SERVER.uploads(BUCKET)}")
    SERVER.client.delete_object(Bucket=BUCKET, Key=foreign)
    r = dcpctl("consolidate", FIXTURES / "sample/ckpt", "-o", url("k3/model.safetensors"), "--select", "app.model")
    check(r.returncode == 0 and "aborted 1 upload(s)" in r.stderr and SERVER.uploads(BUCKET) == ["k3/model.safetensors.bak"]
          and journals("k3/") == [],
          f"records: a dead one alone: exit {r.returncode}, {r.stderr[-600:]}, uploads {SERVER.uploads(BUCKET)}, "
          f"records {journals('k3/')}")
    SERVER.client.abort_multipart_upload(Bucket=BUCKET, Key="k3/model.safetensors.bak", UploadId=other)
    del ours


def case_faults(work: Path) -> None:
    ckpt, _ = make_checkpoint(work)
    # kill -9 (no handler runs): what is left open is aborted by the next run (issue 72 item 3)
    killed_then_rerun("killed consolidate", ["consolidate", ckpt, "-o", url("k1/model.safetensors")], "k1/", "k1/model")
    host = killed_then_rerun("killed reshard", ["reshard", ckpt, "-o", url("k2/out/"), "--world-size", "2"], "k2/", "k2/out/")
    if check(host, "no record's host to make records with"):
        records_decide(host)
    sigterm_at("s3-upload-part", ["consolidate", ckpt, "-o", url("sig1/model.safetensors")], "sig1/")
    sigterm_at("s3-upload-part", ["reshard", ckpt, "-o", url("sig2/"), "--world-size", "2"], "sig2/")
    sigterm_at("s3-commit/.metadata", ["reshard", ckpt, "-o", url("sig3/"), "--world-size", "2"], "sig3/")
    sigterm_at("s3-commit/model.safetensors.index.json",
               ["consolidate", ckpt, "-o", url("sig4/"), "--max-shard-size", "16MB"], "sig4/")

    # a burst of 503 SlowDown on the parts: retried, the object the same as without it
    with FaultProxy(SERVER.port, 4, fail_if=upload_part) as proxy:
        env = dict(ENV, AWS_ENDPOINT_URL=proxy.endpoint, AWS_MAX_ATTEMPTS="5")
        r = dcpctl("consolidate", ckpt, "-o", url("burst/model.safetensors"), "--json", env=env)
    if check(r.returncode == 0, f"503 burst: exit {r.returncode}: {r.stderr}"):
        check(json.loads(r.stdout)["s3"]["retries"] >= 4 and proxy.failed == 4,
              f"503 burst: {proxy.failed} 503 answers, retries {r.stdout[-300:]}")
        ok = dcpctl("consolidate", ckpt, "-o", url("burst/ref.safetensors"))
        check(ok.returncode == 0 and SERVER.get(BUCKET, "burst/model.safetensors") == SERVER.get(BUCKET, "burst/ref.safetensors"),
              "503 burst: the object differs from one written without it")

    # one rank file that cannot be uploaded (503 to every request for it, past the retries), the
    # others completed before it (--threads 1 writes them in order): exit 4, and the objects the
    # run completed are deleted, the uploads aborted
    with FaultProxy(SERVER.port, float("inf"), fail_if=lambda method, path: method == "PUT" and "__3_0.distcp" in path) as proxy:
        r = dcpctl("reshard", ckpt, "-o", url("partial/"), "--world-size", "4", "--threads", "1",
                env=dict(ENV, AWS_ENDPOINT_URL=proxy.endpoint, AWS_MAX_ATTEMPTS="2"))
    check(r.returncode == 4 and "__3_0.distcp" in r.stderr, f"a rank file refused: exit {r.returncode} (4 expected): {r.stderr}")
    completed = [p for m, p in proxy.seen if m == "POST" and "__0_0.distcp?uploadId=" in p]
    deleted = [p for m, p in proxy.seen if m == "DELETE" and p.endswith("/partial/__0_0.distcp")]
    check(completed and deleted, f"a rank file refused: __0_0.distcp was not completed then deleted: {proxy.seen[-12:]}")
    check(not SERVER.keys(BUCKET, "partial/") and SERVER.uploads(BUCKET) == [],
          f"a rank file refused: left {list(SERVER.keys(BUCKET, 'partial/'))}, uploads {SERVER.uploads(BUCKET)}")
    # the same run again, without --force: the failed run left nothing that makes an output exist
    # (SeaweedFS keeps listing the emptied folder for minutes; only objects count)
    r = dcpctl("reshard", ckpt, "-o", url("partial/"), "--world-size", "4")
    names = sorted(k[len("partial/"):] for k in SERVER.keys(BUCKET, "partial/"))
    check(r.returncode == 0 and names == [".metadata"] + [f"__{i}_0.distcp" for i in range(4)] + [MANIFEST],
          f"the run again after it failed, without --force: exit {r.returncode}: {r.stderr} {names}")

    # a wrong secret: refused by the server, exit 4 naming the URL and the status
    r = dcpctl("consolidate", ckpt, "-o", url("wrong/model.safetensors"), env=dict(ENV, AWS_SECRET_ACCESS_KEY="wrong"))
    check(r.returncode == 4 and url("wrong/") in r.stderr and "403" in r.stderr,
          f"wrong secret: exit {r.returncode} (4 expected, naming the URL and 403): {r.stderr}")
    check(not SERVER.keys(BUCKET, "wrong/"), "wrong secret: something was written")

    # the server stops while a part is in flight
    env = dict(ENV, DCPCTL_FAILPOINT="s3-upload-part:stop", AWS_MAX_ATTEMPTS="2")
    p = subprocess.Popen([DCPCTL, "consolidate", ckpt, "-o", url("gone/model.safetensors")], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check(wait_stopped(p.pid), "server stop: dcpctl never stopped at the first part"):
        SERVER.stop()
        os.kill(p.pid, signal.SIGCONT)
        _, err = p.communicate(timeout=180)
        check(p.returncode == 4 and url("gone/model.safetensors") in err,
              f"server stopped mid-upload: exit {p.returncode} (4 expected, naming the URL): {err}")
    else:
        p.kill()


def main() -> int:
    global DCPCTL, FIXTURES, SCHEMAS, SERVER, ENV
    import argparse
    ap = argparse.ArgumentParser(description="dcpctl writing to s3:// against a local S3 server (see the docstring)")
    ap.add_argument("case", choices=("outputs", "faults", "all"), help="all: outputs then faults, on one server")
    ap.add_argument("dcpctl")
    ap.add_argument("fixtures")
    ap.add_argument("--server", choices=("moto", "seaweedfs"), default="moto")
    opts = ap.parse_args()
    DCPCTL, FIXTURES = opts.dcpctl, Path(opts.fixtures)
    SCHEMAS = FIXTURES.parent.parent / "docs" / "schemas"
    try:
        SERVER = make_server(opts.server)
    except MissingServer as e:
        return skip_or_fail_code(str(e))
    cases = ["outputs", "faults"] if opts.case == "all" else [opts.case]
    with tempfile.TemporaryDirectory(prefix="dcpctl-s3w-") as tmp:
        try:
            with section(f"{SERVER.kind} started"):
                SERVER.start()
            SERVER.create_bucket(BUCKET)
            ENV = SERVER.env(AWS_MAX_ATTEMPTS="3")
            for case in cases:  # faults last: it ends by stopping the server
                work = Path(tmp, case)
                work.mkdir()
                with section(case):
                    {"outputs": case_outputs, "faults": case_faults}[case](work)
        finally:
            SERVER.stop()
    return summary(f"write_test {opts.case} ({SERVER.kind})")


if __name__ == "__main__":
    sys.exit(main())
