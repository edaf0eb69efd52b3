"""A tiny HTTP proxy between dcpctl and the S3 server that injects faults (standard library only).

    with S3Server() as s3, FaultProxy(s3.port, fail_first=3) as proxy:
        env = s3.env(AWS_ENDPOINT_URL=proxy.endpoint)   # dcpctl talks to the proxy
        ...                                             # the first 3 requests get 503 SlowDown

Requests are forwarded as they came (method, path, headers with Host, body), so SigV4 signatures
made for the proxy's address still verify at the server. Faults:
  fail_first=N     the first N requests are answered 503 with S3's SlowDown error body (N may be
                   float("inf"): all of them)
  fail_if=PRED     only requests for which PRED(method, path) is true count towards fail_first and
                   get the 503; the others are forwarded (default: every request), e.g.
                   FaultProxy(port, 4, fail_if=upload_part): the first four UploadPart requests
  die_after=K      after K requests were forwarded the proxy is gone, as a stopped server is: the
                   listening socket closes and every later request on an open connection is
                   dropped without an answer
Counters: .requests (all seen), .failed (answered 503), .forwarded, .dropped; .seen: the
(method, path) of every request, in the order they came.
"""
import http.client
import http.server
import threading

SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
             b'<Message>Please reduce your request rate.</Message></Error>')


def upload_part(method, path):
    """A fail_if for S3's UploadPart: PUT /bucket/key?partNumber=N&uploadId=..."""
    return method == "PUT" and "partNumber=" in path


class FaultProxy:
    def __init__(self, upstream_port, fail_first=0, die_after=None, fail_if=None):
        self.upstream_port = upstream_port
        self.fail_first = fail_first
        self.fail_if = fail_if
        self.die_after = die_after
        self.requests = self.failed = self.forwarded = self.dropped = 0
        self.seen = []
        self.dead = False
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def handle_any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                with proxy.lock:
                    proxy.requests += 1
                    proxy.seen.append((self.command, self.path))
                    if proxy.dead:
                        proxy.dropped += 1
                        action = "drop"
                    elif proxy.failed < proxy.fail_first and (proxy.fail_if is None or
                                                              proxy.fail_if(self.command, self.path)):
                        proxy.failed += 1
                        action = "fail"
                    else:
                        proxy.forwarded += 1
                        action = "forward"
                        if proxy.die_after is not None and proxy.forwarded >= proxy.die_after:
                            proxy.dead = True
                            threading.Thread(target=proxy._close_listener, daemon=True).start()
                if action == "drop":
                    self.close_connection = True
                    return
                if action == "fail":
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(SLOW_DOWN)))
                    self.end_headers()
                    self.wfile.write(SLOW_DOWN)
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for k, v in self.headers.items():
                    conn.putheader(k, v)
                conn.endheaders(body)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response_only(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = handle_any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.thread = None

    def _close_listener(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        if not self.dead:
            self.server.shutdown()
            self.server.server_close()


if __name__ == "__main__":  # a manual check: python fault_proxy.py UPSTREAM_PORT [FAIL_FIRST]
    import sys
    import time
    with FaultProxy(int(sys.argv[1]), fail_first=int(sys.argv[2]) if len(sys.argv) > 2 else 0) as p:
        print(p.endpoint, flush=True)
        while True:
            time.sleep(1)
