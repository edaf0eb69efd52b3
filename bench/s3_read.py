"""bench/s3_read.sh's driver: dcpctl consolidate straight from s3:// against downloading the
checkpoint with `aws s3 cp --recursive` and consolidating the local copy, for the whole checkpoint
and for --select app.model, side by side in one run against a local S3 server, moto's or
SeaweedFS's (tests/s3/s3_server.py's make_server).

usage: s3_read.py DCPCTL AWS WORKDIR SIZE_MB THREADS [moto|seaweedfs]
"""
import filecmp
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "s3"))
from s3_server import make_server  # noqa: E402

DCPCTL, AWS, WORK, SIZE_MB, THREADS = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
SERVER = sys.argv[6] if len(sys.argv) > 6 else "moto"


def make_checkpoint(path, size_mb):
    """A model of about size_mb/3 MB and its Adam state (dcp.save by real torch, one process)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    width = 1024
    layers = max(1, int(size_mb * 1e6 / 3 / (width * width * 4)))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, width)).sum().backward()
    opt.step()
    msd, osd = get_state_dict(model, opt)
    # Eight data files, as eight ranks (or thread_count=8) write them.
    dcp.save({"app": {"model": msd, "optim": osd}}, storage_writer=dcp.FileSystemWriter(path, thread_count=8))


def timed(cmd, env):
    t = time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return time.monotonic() - t, r.stdout


def tree_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def main():
    os.makedirs(WORK, exist_ok=True)
    ckpt = os.path.join(WORK, f"ckpt-{SIZE_MB}mb-8files")
    if not os.path.exists(os.path.join(ckpt, ".metadata")):
        print(f"writing a ~{SIZE_MB} MB checkpoint with torch (model + Adam) to {ckpt}", flush=True)
        make_checkpoint(ckpt, SIZE_MB)
    total = tree_bytes(ckpt)
    with make_server(SERVER) as s3:
        s3.create_bucket("bench")
        t = time.monotonic()
        s3.upload_dir(ckpt, "bench", "ckpt")
        print(f"uploaded {total / 1e6:.1f} MB to {s3.endpoint} in {time.monotonic() - t:.1f} s", flush=True)
        env = s3.env()
        url = "s3://bench/ckpt"
        out = {k: os.path.join(WORK, k) for k in ("a.safetensors", "b.safetensors", "c.safetensors", "d.safetensors")}
        dl = os.path.join(WORK, "download")
        rows = []

        def dcpctl_s3(name, extra, label):
            sec, stdout = timed([DCPCTL, "consolidate", url, "-o", out[name], "--json", "--force", "--threads", THREADS] + extra,
                                env)
            s = json.loads(stdout)["s3"]
            rows.append((label, sec, s["bytes_fetched"], s["requests"]))

        def aws_then_local(name, extra, label):
            shutil.rmtree(dl, ignore_errors=True)
            sec_cp, _ = timed([AWS, "--endpoint-url", s3.endpoint, "s3", "cp", "--recursive", "--only-show-errors", url, dl],
                              env)
            sec_c, _ = timed([DCPCTL, "consolidate", dl, "-o", out[name], "--force", "-q", "--threads", THREADS] + extra, env)
            rows.append((label + f"  (cp {sec_cp:.2f} s + consolidate {sec_c:.2f} s)", sec_cp + sec_c, tree_bytes(dl), None))

        dcpctl_s3("a.safetensors", [], "dcpctl consolidate s3://")
        aws_then_local("b.safetensors", [], "aws s3 cp --recursive + consolidate")
        dcpctl_s3("c.safetensors", ["--select", "app.model"], "dcpctl consolidate s3:// --select app.model")
        aws_then_local("d.safetensors", ["--select", "app.model"], "aws s3 cp --recursive + consolidate --select app.model")
        shutil.rmtree(dl, ignore_errors=True)
        same = filecmp.cmp(out["a.safetensors"], out["b.safetensors"], shallow=False) and \
            filecmp.cmp(out["c.safetensors"], out["d.safetensors"], shallow=False)
    print(f"\ncheckpoint: {total / 1e6:.1f} MB ({ckpt}), --threads {THREADS}, server: {SERVER} on 127.0.0.1\n")
    print(f"{'run':<78} {'seconds':>8} {'MB moved':>9} {'requests':>9}")
    for label, sec, moved, req in rows:
        print(f"{label:<78} {sec:8.2f} {moved / 1e6:9.1f} {req if req is not None else '-':>9}")
    print(f"\noutputs byte-identical (s3:// vs downloaded copy): {same}")
    for p in out.values():
        if os.path.exists(p):
            os.remove(p)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
