"""bench/link.sh's object store, run inside the network namespace (`ip netns exec`): SeaweedFS's
S3 gateway (tests/s3/s3_server.py's SeaweedServer, on the namespace's own 127.0.0.1, data under
$TMPDIR: link.sh puts it on /dev/shm so the store's disk is never what limits), the checkpoint
uploaded into it over that loopback (not through the shaped link), then bench/link_proxy.py's
first-byte-delay proxy on LISTEN in front of it: the only way in from outside the namespace.
With --gcs-listen, also tests/gcs/gcs_server.py's GCS emulator (fake-gcs-server) with the checkpoint,
behind a second proxy on that address.

    python bench/link_store.py --ckpt DIR --bucket B --prefix P --listen 10.77.0.2:9000 \
        --gcs-listen 10.77.0.2:4443 --delay-ms 30 --info FILE --stats FILE --dev IFACE --rate-bps N

Writes FILE (JSON: endpoint, keys, the GCS endpoint or why there is none) once the proxy listens;
runs until SIGTERM, then stops the servers (their data goes with them).
"""
import argparse
import asyncio
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "s3"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from s3_server import SeaweedServer  # noqa: E402
import link_proxy  # noqa: E402


class LinkSeaweed(SeaweedServer):
    """tests/s3/s3_server.py's SeaweedServer with room for the benchmark's outputs (-volume.max:
    its default of 8 volumes of 256 MB is full once the checkpoint is in) and its master's port
    known (link.sh vacuums after deleting each uploaded output, so /dev/shm does not fill)."""
    master_port = None

    def _launch(self):
        import subprocess
        real = subprocess.Popen

        def popen(args, **kw):
            self.master_port = int(next(a for a in args if a.startswith("-master.port=")).split("=")[1])
            return real(args + ["-volume.max=64"], **kw)
        subprocess.Popen = popen
        try:
            return super()._launch()
        finally:
            subprocess.Popen = real


def start_gcs(ckpt, bucket, prefix, public):
    """tests/gcs/gcs_server.py's GcsServer (fake-gcs-server) on the namespace's 127.0.0.1, told that
    its public address is `public` (the proxy's: its XML API answers only requests whose Host
    header names it), the checkpoint uploaded into it. Returns (server, 'host:port', None), or
    (None, None, why not)."""
    path = os.path.join(ROOT, "tests", "gcs", "gcs_server.py")
    if not os.path.exists(path):
        return None, None, "pending: no tests/gcs/gcs_server.py"
    sys.path.insert(0, os.path.dirname(path))
    try:
        import subprocess
        from gcs_server import GcsServer

        class LinkGcs(GcsServer):
            def _launch(self):
                real = subprocess.Popen

                def popen(args, **kw):
                    args = list(args)
                    args[args.index("-public-host") + 1] = public
                    args[args.index("-external-url") + 1] = "http://" + public
                    return real(args, **kw)
                subprocess.Popen = popen
                try:
                    return super()._launch()
                finally:
                    subprocess.Popen = real

        srv = LinkGcs().start()
        try:
            srv.create_bucket(bucket)
            srv.upload_dir(ckpt, bucket, prefix)
        except BaseException:
            srv.stop()
            raise
        return srv, f"127.0.0.1:{srv.port}", None
    except Exception as e:  # noqa: BLE001 - another helper's file: say why, run the S3 rows
        return None, None, f"pending: tests/gcs/gcs_server.py did not start ({type(e).__name__}: {e})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--bucket", default="bench")
    ap.add_argument("--prefix", default="ckpt")
    ap.add_argument("--listen", required=True)
    ap.add_argument("--gcs-listen")
    ap.add_argument("--delay-ms", type=float, default=30)
    ap.add_argument("--info", required=True)
    ap.add_argument("--stats")
    ap.add_argument("--dev")
    ap.add_argument("--rate-bps", type=float, default=0)
    ap.add_argument("--trace", help="bench/link_proxy.py --trace")
    a = ap.parse_args()
    if a.trace:
        link_proxy.open_trace(a.trace)

    s3 = LinkSeaweed()
    s3.start()
    gcs = None
    try:
        s3.create_bucket(a.bucket)
        t = time.monotonic()
        n = s3.upload_dir(a.ckpt, a.bucket, a.prefix)
        up = time.monotonic() - t
        pairs = [(a.listen, f"127.0.0.1:{s3.port}")]
        gcs_endpoint = None
        gcs, gcs_up, why = (None, None, "pending: dcpctl refuses gs:// (no --gcs-listen)") if not a.gcs_listen else \
            start_gcs(a.ckpt, a.bucket, a.prefix, a.gcs_listen)
        if gcs_up:
            pairs.append((a.gcs_listen, gcs_up))
            gcs_endpoint = "http://" + a.gcs_listen
        info = {"endpoint": "http://" + a.listen, "store": f"127.0.0.1:{s3.port}", "master": f"127.0.0.1:{s3.master_port}",
                "access_key": s3.access_key, "secret_key": s3.secret_key, "region": "us-east-1",
                "objects": n, "upload_s": round(up, 1), "weed": s3.weed, "weed_pid": s3.proc.pid,
                "proxy_pid": os.getpid(), "gcs_endpoint": gcs_endpoint, "gcs_why": why,
                "gcs_store": gcs_up}
        tmp = a.info + ".tmp"
        with open(tmp, "w") as f:
            json.dump(info, f)

        async def run():
            # the info file appears once the proxy listens
            task = asyncio.create_task(link_proxy.serve(pairs, a.delay_ms / 1000, a.stats, a.dev, a.rate_bps,
                                                        ready_file=a.info + ".ready"))
            while not os.path.exists(a.info + ".ready") and not task.done():
                await asyncio.sleep(0.05)
            os.replace(tmp, a.info)
            await task
        asyncio.run(run())
    finally:
        if gcs is not None and hasattr(gcs, "stop"):
            gcs.stop()
        s3.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
