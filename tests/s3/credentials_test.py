#!/usr/bin/env python3
"""The AWS credential chain (src/objstore/aws_credentials.h) end to end: dcpctl consolidates an s3://
checkpoint from moto's server (signatures checked: tests/s3/s3_server.py) with keys from each
source and nothing else, compared byte for byte with a local consolidate; moto's recorder
(/moto-api/recorder/...) shows which access key signed each S3 request, so each case proves the
temporary key its source handed out is the one used.

  web-identity        only AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE; STS is moto's (see below)
  credential-process  only a config file whose credential_process prints moto-issued STS keys
  imds                only AWS_EC2_METADATA_SERVICE_ENDPOINT: an IMDSv2 server this test serves
                      on 127.0.0.1 (token PUT, role name, keys minted by moto's STS); a GET
                      without the token is refused by it, so no IMDSv1 fallback can pass
  container           AWS_CONTAINER_CREDENTIALS_FULL_URI + an authorization token file, served
                      by this test (a wrong or missing Authorization header gets 401)
  assume-role         role_arn + source_profile in a temporary config file: AssumeRole signed
                      with the source profile's keys, answered by moto's STS
  sso                 an sso-session profile, a token cache file, a GetRoleCredentials portal
                      served by this test (AWS_ENDPOINT_URL_SSO)
  refresh             IMDS keys that expire 4 s after they are served, with
                      DCPCTL_CREDENTIAL_REFRESH_MARGIN_S=3 and a proxy that slows each S3 request:
                      a second set is fetched during the run and signs the later requests; and an
                      S3 answer 400 ExpiredToken (from the proxy) makes dcpctl fetch new keys and
                      send the request again
  failures            a wrong web-identity token, an unreachable IMDS, a 403 from the SSO portal,
                      a failing credential_process, no source at all: each exit 4 naming the source

moto 5.2.5 answers an unsigned AssumeRoleWithWebIdentity with a 500 when signature checking is on
(its IAMRequest reads the missing Authorization header), and accepts any token. So the test puts
a small STS front before it (AWS_ENDPOINT_URL_STS): the front refuses a token other than the
file's with STS's 400 InvalidIdentityToken, and forwards dcpctl's request, as sent, to moto after
asking moto (/moto-api/reset-auth) to let exactly one request through unauthenticated. The keys
are moto's, and moto checks every S3 request they sign.

usage: credentials_test.py DCPCTL FIXTURES_DIR SCHEMAS_DIR
Needs boto3, jsonschema and moto[server] (tools/requirements.txt). Exit status: 0 pass, 1 failure,
77 skip (a prerequisite missing; a failure under CI, tests/skip.py).
"""
import datetime
import hashlib
import http.client
import http.server
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from skip import skip_or_fail  # noqa: E402

if len(sys.argv) != 4:
    print(__doc__.split("usage: ")[1].split("\n")[0], file=sys.stderr)
    sys.exit(2)
DCPCTL, FIXTURES, SCHEMAS = (os.path.abspath(a) for a in sys.argv[1:])

try:
    import boto3
    import jsonschema  # noqa: F401  (harness.schema_errors)
    from s3_server import REGION, MissingServer, make_server
    SERVER = make_server("moto")
except ImportError as e:
    skip_or_fail(f"boto3, jsonschema or moto are not installed ({e}); tools/dev.sh setup installs tools/requirements.txt")
except MissingServer as e:
    skip_or_fail(str(e))

from harness import schema_errors  # noqa: E402
from testlib import EXIT_IO, EXIT_OK, TALLY, expect_rc, free_port, run, summary  # noqa: E402

check = TALLY.check
BUCKET, PREFIX = "ckpts", "sample/ckpt"
URL = f"s3://{BUCKET}/{PREFIX}"
WORK = tempfile.mkdtemp(prefix="dcpctl-creds-")
os.environ["MOTO_RECORDER_FILEPATH"] = os.path.join(WORK, "moto_recording")  # read by the server at start


def dcpctl(args, env, timeout=120):
    return run(DCPCTL, *args, env=env, timeout=timeout)


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Handler(http.server.BaseHTTPRequestHandler):
    """Routes each request to the owning server's `answer(handler, method, body)` -> (status, headers, bytes)."""
    protocol_version = "HTTP/1.1"

    def _serve(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        status, headers, data = self.server.owner.answer(self, self.command, body)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = _serve

    def log_message(self, *a):
        pass


class Served:
    """A tiny HTTP server on 127.0.0.1 in a thread; subclasses define answer()."""

    def __enter__(self):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.httpd.owner = self
        self.httpd.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class Minter:
    """Temporary keys from moto's STS (AssumeRole of the test role with the admin keys)."""

    def __init__(self, s3, role_arn):
        self.sts = boto3.client("sts", endpoint_url=s3.endpoint, region_name=REGION, aws_access_key_id=s3.access_key,
                                aws_secret_access_key=s3.secret_key)
        self.role_arn = role_arn
        self.issued = []

    def __call__(self):
        c = self.sts.assume_role(RoleArn=self.role_arn, RoleSessionName=f"minted-{len(self.issued)}")["Credentials"]
        self.issued.append(c["AccessKeyId"])
        return c


class Imds(Served):
    """IMDSv2 only: PUT /latest/api/token, then GETs with X-aws-ec2-metadata-token."""

    def __init__(self, mint, lifetime=3600):
        self.mint, self.lifetime = mint, lifetime
        self.token = "imds-token-" + os.urandom(6).hex()
        self.served = 0          # keys handed out
        self.refused = 0         # GETs without the token

    def answer(self, h, method, body):
        if method == "PUT" and h.path == "/latest/api/token":
            if not h.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return 400, {}, b"missing ttl"
            return 200, {}, self.token.encode()
        if method != "GET" or h.headers.get("X-aws-ec2-metadata-token") != self.token:
            self.refused += 1
            return 401, {}, b""
        if h.path == "/latest/meta-data/iam/security-credentials/":
            return 200, {}, b"ckpt-node-role"
        if h.path == "/latest/meta-data/iam/security-credentials/ckpt-node-role":
            c = self.mint()
            self.served += 1
            return 200, {"Content-Type": "application/json"}, json.dumps({
                "Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": c["AccessKeyId"],
                "SecretAccessKey": c["SecretAccessKey"], "Token": c["SessionToken"],
                "Expiration": iso(time.time() + self.lifetime)}).encode()
        return 404, {}, b""


class Container(Served):
    """The container credentials endpoint: GET /creds with the right Authorization header."""

    def __init__(self, mint, auth):
        self.mint, self.auth, self.refused = mint, auth, 0

    def answer(self, h, method, body):
        if h.headers.get("Authorization") != self.auth:
            self.refused += 1
            return 401, {}, b'{"message": "unauthorized"}'
        c = self.mint()
        return 200, {}, json.dumps({"AccessKeyId": c["AccessKeyId"], "SecretAccessKey": c["SecretAccessKey"],
                                    "Token": c["SessionToken"], "Expiration": iso(time.time() + 3600)}).encode()


class Portal(Served):
    """SSO's GetRoleCredentials: GET /federation/credentials?account_id=&role_name= with the bearer token."""

    def __init__(self, mint, bearer):
        self.mint, self.bearer, self.status = mint, bearer, 200
        self.asked = []

    def answer(self, h, method, body):
        u = urllib.parse.urlparse(h.path)
        self.asked.append((u.path, dict(urllib.parse.parse_qsl(u.query)), h.headers.get("x-amz-sso_bearer_token")))
        if self.status != 200:
            return self.status, {}, b'{"message": "Session token not found or invalid"}'
        if h.headers.get("x-amz-sso_bearer_token") != self.bearer:
            return 401, {}, b'{"message": "Session token not found or invalid"}'
        c = self.mint()
        return 200, {}, json.dumps({"roleCredentials": {
            "accessKeyId": c["AccessKeyId"], "secretAccessKey": c["SecretAccessKey"], "sessionToken": c["SessionToken"],
            "expiration": int((time.time() + 3600) * 1000)}}).encode()


class StsFront(Served):
    """Before moto's STS for AssumeRoleWithWebIdentity (see the docstring): checks the token."""

    def __init__(self, moto_endpoint, token):
        self.moto, self.token, self.calls = moto_endpoint, token, 0
        self.lock = threading.Lock()

    def answer(self, h, method, body):
        self.calls += 1
        form = dict(urllib.parse.parse_qsl(body.decode()))
        if form.get("Action") != "AssumeRoleWithWebIdentity":
            return 400, {}, b"<ErrorResponse><Error><Code>InvalidAction</Code></Error></ErrorResponse>"
        if form.get("WebIdentityToken") != self.token:
            return 400, {}, (b"<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>"
                             b"<Message>The token is not valid</Message></Error></ErrorResponse>")
        with self.lock:
            # text/plain: a form body would be parsed away before moto reads it as the count
            urllib.request.urlopen(urllib.request.Request(self.moto + "/moto-api/reset-auth", data=b"1", method="POST",
                                                          headers={"Content-Type": "text/plain"}))
            req = urllib.request.Request(self.moto + "/", data=body, method="POST",
                                         headers={"Content-Type": h.headers.get("Content-Type", "")})
            try:
                with urllib.request.urlopen(req) as r:
                    return r.status, {}, r.read()
            except urllib.error.HTTPError as e:
                return e.code, {}, e.read()


class SlowProxy(Served):
    """Forwards to moto after `delay` seconds; answers 400 ExpiredToken to requests signed with a
    key in `expired`. Records the access key of every request it forwards."""

    def __init__(self, port, delay=0.0):
        self.port, self.delay, self.expired, self.keys, self.expired_answers = port, delay, set(), [], 0

    def answer(self, h, method, body):
        auth = h.headers.get("Authorization", "")
        key = auth.split("Credential=")[1].split("/")[0] if "Credential=" in auth else ""
        if key in self.expired:
            self.expired_answers += 1
            return 400, {}, (b"<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message>"
                             b"</Error>")
        time.sleep(self.delay)
        self.keys.append(key)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        headers = {k: v for k, v in h.headers.items()}
        c.request(method, h.path, body=body if body or method in ("PUT", "POST") else None, headers=headers)
        r = c.getresponse()
        data = r.read()
        out = {k: v for k, v in r.getheaders() if k.lower() in ("etag", "content-type", "content-range", "x-amz-request-id")}
        c.close()
        return r.status, out, data


def recorder(s3, action):
    urllib.request.urlopen(urllib.request.Request(f"{s3.endpoint}/moto-api/recorder/{action}", data=b"", method="POST"))


def s3_signers(s3):
    """The access keys that signed the S3 requests recorded since the last reset (moto's recorder)."""
    with urllib.request.urlopen(f"{s3.endpoint}/moto-api/recorder/download-recording") as r:
        text = r.read().decode()
    keys = []
    for line in text.splitlines():
        entry = json.loads(line)
        auth = {k.lower(): v for k, v in entry["headers"].items()}.get("authorization", "")
        if "/s3/aws4_request" in auth:
            keys.append(auth.split("Credential=")[1].split("/")[0])
    return keys


def consolidate_case(name, s3, env, expect_source, expect_keys, local_out):
    """consolidate s3:// with `env`; the same bytes as the local run; every S3 request signed with
    one of `expect_keys` (a callable, evaluated after the run); --json names the source."""
    out = os.path.join(WORK, f"{name}.safetensors")
    recorder(s3, "reset-recording")
    recorder(s3, "start-recording")
    r = dcpctl(["consolidate", URL, "-o", out, "--json"], env)
    recorder(s3, "stop-recording")
    if not expect_rc(r, EXIT_OK, f"{name}: consolidate {URL}"):
        return None
    with open(out, "rb") as a, open(local_out, "rb") as b:
        check(a.read() == b.read(), f"{name}: the output differs from the local consolidate's")
    doc = json.loads(r.stdout)
    got = doc.get("s3", {}).get("credential_source")
    check(got == expect_source, f"{name}: --json s3.credential_source {got!r}, expected {expect_source!r}")
    errs = schema_errors(SCHEMAS, "consolidate", doc)
    check(not errs, f"{name}: --json is not valid against its schema: {errs[:3]}")
    signers = s3_signers(s3)
    keys = set(expect_keys())
    check(signers and set(signers) <= keys,
          f"{name}: S3 requests signed with {sorted(set(signers))}, expected only {sorted(keys)}")
    check(s3.access_key not in signers, f"{name}: the admin key signed a request")
    for secret_word in ("SecretAccessKey", "secret"):
        check(secret_word not in json.dumps(doc.get("s3", {})), f"{name}: --json's s3 object mentions a secret")
    return signers


def main():
    with SERVER as s3:
        s3.create_bucket(BUCKET)
        s3.upload_dir(os.path.join(FIXTURES, PREFIX), BUCKET, PREFIX)
        kw = dict(endpoint_url=s3.endpoint, region_name=REGION, aws_access_key_id=s3.access_key,
                  aws_secret_access_key=s3.secret_key)
        iam = boto3.client("iam", **kw)
        role = iam.create_role(RoleName="ckpt-reader", AssumeRolePolicyDocument=(
            '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},'
            '"Action":["sts:AssumeRole","sts:AssumeRoleWithWebIdentity"]}]}'))["Role"]
        iam.put_role_policy(RoleName="ckpt-reader", PolicyName="all", PolicyDocument=(
            '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}'))
        mint = Minter(s3, role["Arn"])
        home = os.path.join(WORK, "home")
        os.makedirs(home)
        # Nothing but what each case adds: no keys, no files, no IMDS unless asked.
        base = s3.env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None, HOME=home, AWS_EC2_METADATA_DISABLED="true")
        local_out = os.path.join(WORK, "local.safetensors")
        expect_rc(dcpctl(["consolidate", os.path.join(FIXTURES, PREFIX), "-o", local_out], base), EXIT_OK,
                  "local consolidate")

        # --- web identity ---
        token = "eyJhbGciOiJSUzI1NiJ9.test-token." + os.urandom(8).hex()
        token_file = os.path.join(WORK, "web-identity-token")
        with open(token_file, "w") as f:
            f.write(token + "\n")
        with StsFront(s3.endpoint, token) as sts:
            env = dict(base, AWS_ROLE_ARN=role["Arn"], AWS_WEB_IDENTITY_TOKEN_FILE=token_file,
                       AWS_ROLE_SESSION_NAME="dcpctl-ci", AWS_ENDPOINT_URL_STS=sts.endpoint)
            signers = consolidate_case("web-identity", s3, env, "web-identity",
                                       lambda: [k for k in set(s3_signers(s3)) if k.startswith("ASIA")], local_out)
            check(sts.calls == 1, f"web-identity: {sts.calls} calls to STS, expected 1")
            if signers:
                check(all(k.startswith("ASIA") for k in signers) and len(set(signers)) == 1,
                      f"web-identity: signed with {sorted(set(signers))}: expected one temporary (ASIA...) key")
            # A wrong token: STS refuses it; exit 4 naming web identity and STS's code, no fall-back.
            bad = os.path.join(WORK, "bad-token")
            with open(bad, "w") as f:
                f.write("not-the-token")
            r = dcpctl(["inspect", URL], dict(env, AWS_WEB_IDENTITY_TOKEN_FILE=bad, AWS_EC2_METADATA_DISABLED="false",
                                               AWS_EC2_METADATA_SERVICE_ENDPOINT="http://127.0.0.1:9"))
            expect_rc(r, EXIT_IO, "a wrong web-identity token", "web identity", "InvalidIdentityToken", f"s3://{BUCKET}/")
            check("IMDS" not in r.stderr, f"a wrong web-identity token went on to IMDS: {r.stderr.strip()}")

        # --- credential_process ---
        c = mint()
        script = os.path.join(WORK, "get-keys.sh")
        calls = os.path.join(WORK, "get-keys.calls")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho call >> '%s'\ncat <<'EOF'\n%s\nEOF\n" % (calls, json.dumps({
                "Version": 1, "AccessKeyId": c["AccessKeyId"], "SecretAccessKey": c["SecretAccessKey"],
                "SessionToken": c["SessionToken"], "Expiration": iso(time.time() + 3600)})))
        os.chmod(script, 0o755)
        config = os.path.join(WORK, "config-process")
        with open(config, "w") as f:
            f.write(f"[profile ci]\ncredential_process = {script} --profile ci\n")
        env = dict(base, AWS_CONFIG_FILE=config, AWS_PROFILE="ci")
        consolidate_case("credential-process", s3, env, "credential-process", lambda: [c["AccessKeyId"]], local_out)
        with open(calls) as f:
            n = len(f.read().splitlines())
        check(n == 1, f"credential-process: the command ran {n} times, expected once")
        # A failing command: exit 4 naming it and its stderr.
        failing = os.path.join(WORK, "config-failing")
        with open(failing, "w") as f:
            f.write("[profile ci]\ncredential_process = sh -c 'echo token expired: log in again >&2; exit 3'\n")
        r = dcpctl(["inspect", URL], dict(base, AWS_CONFIG_FILE=failing, AWS_PROFILE="ci"))
        expect_rc(r, EXIT_IO, "a failing credential_process", "credential_process", "exited with 3",
                  "token expired: log in again")

        # --- IMDSv2 ---
        with Imds(mint) as imds:
            # The server refuses what IMDSv1 would send (a GET without the token).
            try:
                urllib.request.urlopen(f"{imds.endpoint}/latest/meta-data/iam/security-credentials/")
                v1 = 200
            except urllib.error.HTTPError as e:
                v1 = e.code
            check(v1 == 401, f"imds: a GET without the token got {v1}, expected 401")
            refused = imds.refused
            env = dict(base, AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.endpoint)
            env.pop("AWS_EC2_METADATA_DISABLED")
            consolidate_case("imds", s3, env, "imds", lambda: mint.issued[-imds.served:], local_out)
            check(imds.served == 1 and imds.refused == refused,
                  f"imds: served keys {imds.served} times (expected 1), {imds.refused - refused} GETs without the token")
        # Unreachable IMDS: exit 4 naming it, fast.
        port = free_port()
        t = time.monotonic()
        r = dcpctl(["inspect", URL], dict(base, AWS_EC2_METADATA_DISABLED="false",
                                           AWS_EC2_METADATA_SERVICE_ENDPOINT=f"http://127.0.0.1:{port}"))
        secs = time.monotonic() - t
        expect_rc(r, EXIT_IO, "an unreachable IMDS", "IMDS", f"127.0.0.1:{port}", "environment: AWS_ACCESS_KEY_ID not set",
                  "web identity:", "container:")
        # A refused connection fails in milliseconds; what this catches is a retry loop with back-off
        # or libcurl's default connect timeout (300 s), so the bound sits far above what a loaded
        # machine stretches a run of milliseconds to.
        check(secs < 60, f"an unreachable IMDS took {secs:.1f} s to fail")

        # --- container endpoint ---
        auth = "container-auth-" + os.urandom(6).hex()
        auth_file = os.path.join(WORK, "container-token")
        with open(auth_file, "w") as f:
            f.write(auth + "\n")
        with Container(mint, auth) as ctr:
            env = dict(base, AWS_CONTAINER_CREDENTIALS_FULL_URI=f"{ctr.endpoint}/creds",
                       AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=auth_file)
            consolidate_case("container", s3, env, "container", lambda: mint.issued[-1:], local_out)
            check(ctr.refused == 0, f"container: {ctr.refused} requests without the right Authorization header")
            env_wrong = dict(env, AWS_CONTAINER_AUTHORIZATION_TOKEN="wrong")
            del env_wrong["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"]
            r = dcpctl(["inspect", URL], env_wrong)
            expect_rc(r, EXIT_IO, "a wrong container authorization token", "container", "HTTP 401")

        # --- role_arn + source_profile ---
        creds_file = os.path.join(WORK, "credentials-role")
        with open(creds_file, "w") as f:
            f.write(f"[base]\naws_access_key_id = {s3.access_key}\naws_secret_access_key = {s3.secret_key}\n")
        config = os.path.join(WORK, "config-role")
        with open(config, "w") as f:
            f.write(f"[profile train]\nrole_arn = {role['Arn']}\nsource_profile = base\nrole_session_name = ci\n")
        env = dict(base, AWS_SHARED_CREDENTIALS_FILE=creds_file, AWS_CONFIG_FILE=config, AWS_PROFILE="train")
        # The source profile's keys sign only the AssumeRole (an sts request, not counted here).
        signers = consolidate_case("assume-role", s3, env, "assume-role",
                                   lambda: [k for k in set(s3_signers(s3)) if k != s3.access_key], local_out)
        if signers:
            check(len(set(signers)) == 1 and signers[0].startswith("ASIA"),
                  f"assume-role: S3 signed with {sorted(set(signers))}, expected one temporary key")

        # --- SSO ---
        bearer = "sso-bearer-" + os.urandom(6).hex()
        with Portal(mint, bearer) as portal:
            config = os.path.join(WORK, "config-sso")
            with open(config, "w") as f:
                f.write("[profile dev]\nsso_session = corp\nsso_account_id = 123456789012\nsso_role_name = Reader\n"
                        "[sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\nsso_region = eu-west-1\n")
            cache = os.path.join(home, ".aws", "sso", "cache")
            os.makedirs(cache)
            cache_file = os.path.join(cache, hashlib.sha1(b"corp").hexdigest() + ".json")
            with open(cache_file, "w") as f:
                json.dump({"startUrl": "https://corp.awsapps.com/start", "region": "eu-west-1", "accessToken": bearer,
                           "expiresAt": iso(time.time() + 3600)}, f)
            env = dict(base, AWS_CONFIG_FILE=config, AWS_PROFILE="dev", AWS_ENDPOINT_URL_SSO=portal.endpoint)
            consolidate_case("sso", s3, env, "sso", lambda: mint.issued[-1:], local_out)
            check(portal.asked and portal.asked[0][:2] == ("/federation/credentials",
                                                           {"account_id": "123456789012", "role_name": "Reader"}),
                  f"sso: the portal was asked {portal.asked[:1]}")
            portal.status = 403
            r = dcpctl(["inspect", URL], env)
            expect_rc(r, EXIT_IO, "a 403 from GetRoleCredentials", "sso (profile dev)", "GetRoleCredentials", "HTTP 403")
            portal.status = 200
            with open(cache_file, "w") as f:
                json.dump({"accessToken": bearer, "expiresAt": iso(time.time() - 60)}, f)
            r = dcpctl(["inspect", URL], env)
            expect_rc(r, EXIT_IO, "an expired SSO token", "sso", "expired", "aws sso login")

        # --- refresh: keys that expire during the run ---
        with Imds(mint, lifetime=4) as imds, SlowProxy(s3.port, delay=0.5) as proxy:
            env = dict(base, AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.endpoint, AWS_ENDPOINT_URL=proxy.endpoint,
                       DCPCTL_CREDENTIAL_REFRESH_MARGIN_S="3")
            env.pop("AWS_EC2_METADATA_DISABLED")
            out = os.path.join(WORK, "refresh.safetensors")
            r = dcpctl(["consolidate", URL, "-o", out, "--json"], env)
            if expect_rc(r, EXIT_OK, "refresh: consolidate with keys expiring during the run"):
                with open(out, "rb") as a, open(local_out, "rb") as b:
                    check(a.read() == b.read(), "refresh: the output differs from the local consolidate's")
            distinct = list(dict.fromkeys(proxy.keys))
            print(f"  refresh: {imds.served} key sets served, {len(proxy.keys)} S3 requests signed with "
                  f"{len(distinct)} keys", flush=True)
            check(imds.served >= 2 and len(distinct) >= 2 and set(distinct) <= set(mint.issued),
                  f"refresh: {imds.served} key sets served, {len(proxy.keys)} S3 requests signed with {len(distinct)} "
                  f"keys: expected a second set fetched and used during the run")
        # An S3 answer 400 ExpiredToken: new keys, the request sent again.
        with Imds(mint) as imds, SlowProxy(s3.port) as proxy:
            env = dict(base, AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.endpoint, AWS_ENDPOINT_URL=proxy.endpoint)
            env.pop("AWS_EC2_METADATA_DISABLED")
            orig = imds.mint

            def mint_and_expire():  # the first keys IMDS serves are refused by the "server" as expired
                c = orig()
                if not proxy.expired and imds.served == 0:
                    proxy.expired.add(c["AccessKeyId"])
                return c
            imds.mint = mint_and_expire
            out = os.path.join(WORK, "expired.safetensors")
            r = dcpctl(["consolidate", URL, "-o", out], env)
            expect_rc(r, EXIT_OK, "ExpiredToken: consolidate after the server refused the first keys as expired")
            check(imds.served == 2 and proxy.expired_answers >= 1,
                  f"ExpiredToken: {imds.served} key sets served (expected 2), {proxy.expired_answers} ExpiredToken answers")

        # --- nothing at all ---
        r = dcpctl(["inspect", URL], base)
        expect_rc(r, EXIT_IO, "no credentials anywhere", "no credentials: environment: AWS_ACCESS_KEY_ID not set",
                  "assume-role:", "web identity:", "sso:", "credential_process:", "container:",
                  "IMDS: AWS_EC2_METADATA_DISABLED=true")


try:
    main()
finally:
    shutil.rmtree(WORK, ignore_errors=True)
sys.exit(summary("credentials_test", min_checks=20))
