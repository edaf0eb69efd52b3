"""A real S3-compatible server for the tests: moto's server (moto[server], tools/requirements.txt)
on 127.0.0.1, in a process of its own, with signature checking on.

    from s3_server import S3Server
    with S3Server() as s3:                      # starts it, waits for it; stops it on exit
        s3.upload_dir("tests/fixtures/sample/ckpt", "ckpts", "sample/ckpt")
        env = s3.env()                          # AWS_ENDPOINT_URL, keys, region for dcpctl
        subprocess.run([dcpctl, "inspect", "s3://ckpts/sample/ckpt"], env=env)
        s3.client                               # a boto3 client with the same keys

API (kept small; the write-side tests use it too):
  S3Server(port=0)          port 0: a free one
  .endpoint                 "http://127.0.0.1:PORT"
  .access_key, .secret_key  an IAM user's keys that may do everything
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
                            again on the same port (its objects are gone: moto keeps them in memory)

Signatures are checked (moto's INITIAL_NO_AUTH_ACTION_COUNT): the three set-up calls that create
the IAM user, its policy and its keys run unauthenticated, every later request must be signed with
those keys, so a wrong secret gets 403 SignatureDoesNotMatch as from AWS.
"""
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
from botocore.config import Config

REGION = "us-east-1"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class S3Server:
    def __init__(self, port=0):
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.access_key = self.secret_key = None
        self.client = None

    def start(self):
        env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="3", MOTO_PORT=str(self.port))
        for k in [k for k in env if k.startswith("AWS_")]:
            del env[k]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {self.proc.returncode} before listening on {self.port}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if time.time() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto server did not listen on {self.port} within 30 s")
                time.sleep(0.1)
        cfg = Config(retries={"max_attempts": 1})
        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id="setup",
                           aws_secret_access_key="setup", config=cfg)
        iam.create_user(UserName="dcpctl-test")
        iam.put_user_policy(UserName="dcpctl-test", PolicyName="all", PolicyDocument=(
            '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}'))
        key = iam.create_access_key(UserName="dcpctl-test")["AccessKey"]
        self.access_key, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=self.access_key,
                                   aws_secret_access_key=self.secret_key, config=cfg)
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
