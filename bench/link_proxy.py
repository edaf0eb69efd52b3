"""An HTTP/1.1 proxy that holds the first byte of each response until DELAY_MS after its request
arrived, as S3's and GCS's time to first byte (20-50 ms) does; bench/link.sh runs it inside the
network namespace, in front of the object store, so the delay adds to what the shaped link costs.

    python bench/link_proxy.py --listen 10.77.0.2:9000 --upstream 127.0.0.1:PORT --delay-ms 30 \
        [--listen ...:4443 --upstream ...] [--stats FILE] [--dev IFACE --rate-bps N]

Per connection it follows the HTTP framing both ways (Content-Length, chunked, 1xx interim
answers, HEAD), so keep-alive connections carrying many requests are handled: a request has
arrived when its last byte (header block, or body for a PUT/POST) has come in; the first byte of
its final answer leaves no earlier than DELAY_MS after that (the store's own time counts inside the
delay). Interim `100 Continue` answers pass at once. Bodies are forwarded as they come, never
copied into the parser; bytes are not held otherwise, so the proxy adds no cap of its own (measure
it with --selftest).

Statistics: SIGUSR1 appends one JSON line to --stats with what happened since the previous SIGUSR1
(then resets): requests by method, request and answer body bytes, the mean and largest number of
requests in flight (time-weighted: a request is in flight from its first byte in to its answer's last
byte handed to the socket), the time with none in flight, the store's own time to first byte, the
time held, the proxy's CPU seconds, and with --dev the link's use sampled every 50 ms (the share of
samples at >= 90 % and < 50 % of --rate-bps, counting the busier direction).
"""
import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import time

HIGH_WATER = 1 << 20
LOW_WATER = 256 << 10
READ_BUF = 4 << 20  # SO_RCVBUF / SO_SNDBUF hints


class Stats:
    def __init__(self):
        self.reset(time.monotonic())

    def reset(self, now):
        self.t0 = now
        self.cpu0 = sum(os.times()[:2])
        self.last = now
        self.inflight = getattr(self, "inflight", 0)
        self.integral = 0.0
        self.idle = 0.0
        self.max_inflight = self.inflight
        self.methods = {}
        self.req_body = 0
        self.resp_body = 0
        self.continues = 0
        self.server_ttfb = 0.0
        self.held = 0.0
        self.answered = 0
        self.conns = 0
        self.samples = []
        self.done = []  # (start, bulk_start or None, end) of each request answered

    def change(self, now, d):
        dt = now - self.last
        self.integral += self.inflight * dt
        if self.inflight == 0:
            self.idle += dt
        self.last = now
        self.inflight += d
        self.max_inflight = max(self.max_inflight, self.inflight)

    def dump(self, now, rate_bps):
        self.change(now, 0)
        span = max(now - self.t0, 1e-9)
        out = {"seconds": round(span, 3), "requests": dict(self.methods), "conns": self.conns,
               "req_body_bytes": self.req_body, "resp_body_bytes": self.resp_body, "continues": self.continues,
               "inflight_mean": round(self.integral / span, 3), "inflight_max": self.max_inflight,
               "none_in_flight_s": round(self.idle, 3),
               "store_ttfb_ms": round(1000 * self.server_ttfb / self.answered, 2) if self.answered else None,
               "held_ms_mean": round(1000 * self.held / self.answered, 2) if self.answered else None,
               "proxy_cpu_s": round(sum(os.times()[:2]) - self.cpu0, 3)}
        if self.samples and rate_bps:
            cap = rate_bps / 8 * 0.05
            busy = [s for s in self.samples]
            out["link_samples"] = len(busy)
            out["link_ge90"] = round(sum(1 for b in busy if b >= 0.9 * cap) / len(busy), 3)
            out["link_lt50"] = round(sum(1 for b in busy if b < 0.5 * cap) / len(busy), 3)
        if self.done:
            # the phases: first request, first bulk byte (a body of >= 1 MiB flowing), last answer;
            # seconds spent at each number of requests in flight between the first request and the last
            first = min(d[0] for d in self.done)
            last = max(d[2] for d in self.done)
            bulk = [d[1] for d in self.done if d[1] is not None]
            out["first_request_s"] = round(first - self.t0, 3)
            out["first_bulk_s"] = round(min(bulk) - self.t0, 3) if bulk else None
            out["last_end_s"] = round(last - self.t0, 3)
            out["small_requests"] = sum(1 for d in self.done if d[1] is None)
            ev = sorted([(d[0], 1) for d in self.done] + [(d[2], -1) for d in self.done])
            at, n, prev = {}, 0, first
            for t, dn in ev:
                at[n] = at.get(n, 0.0) + (t - prev)
                n, prev = n + dn, t
            out["seconds_at_inflight"] = {k: round(v, 3) for k, v in sorted(at.items()) if v > 0.0005}
            # after the first bulk byte: time with at most one request in flight
            if bulk:
                b0 = min(bulk)
                n = sum(1 for d in self.done if d[0] <= b0 < d[2])
                ev2 = sorted([(d[0], 1) for d in self.done if d[0] > b0] + [(d[2], -1) for d in self.done if d[2] > b0])
                prev, le1 = b0, 0.0
                for t, dn in ev2:
                    if n <= 1:
                        le1 += t - prev
                    n, prev = n + dn, t
                out["le1_after_bulk_s"] = round(le1, 3)
        return out


STATS = Stats()


class Framer:
    """Splits one direction's byte stream into HTTP messages (header parse only; bodies counted).
    feed(data, now) returns [(offset, event, info)] with event 'start' (a message's first byte),
    'head' (its header block parsed: info = (first_line, headers)), 'end' (its last byte: offset
    past it)."""

    def __init__(self, is_response, conn):
        self.is_response = is_response
        self.conn = conn
        self.state = "idle"  # idle | head | length | chunk_size | chunk_data | chunk_crlf | trailer | close
        self.buf = b""
        self.left = 0

    def _body_mode(self, first, headers):
        te = headers.get(b"transfer-encoding", b"").lower()
        if self.is_response:
            parts = first.split(b" ", 2)
            code = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 200
            if 100 <= code < 200 or code in (204, 304) or self.conn.head_method():
                return "none", code
            if b"chunked" in te:
                return "chunk_size", code
            if b"content-length" in headers:
                return "length", code
            return "close", code
        if b"chunked" in te:
            return "chunk_size", None
        if b"content-length" in headers:
            return "length", None
        return "none", None

    def feed(self, data, now):
        ev = []
        i, n = 0, len(data)
        while i < n:
            st = self.state
            if st == "idle":
                ev.append((i, "start", None))
                self.state = "head"
                self.buf = b""
                continue
            if st == "head":
                if self.buf:
                    joined = self.buf + data[i:]
                    k = joined.find(b"\r\n\r\n")
                    if k < 0:
                        self.buf = joined[-65536:]
                        return ev
                    block = joined[:k]
                    i += k + 4 - len(self.buf)
                else:
                    j = data.find(b"\r\n\r\n", i)
                    if j < 0:
                        self.buf = data[i:]
                        return ev
                    block = data[i:j]
                    i = j + 4
                self.buf = b""
                lines = block.split(b"\r\n")
                first = lines[0]
                headers = {}
                for ln in lines[1:]:
                    name, _, value = ln.partition(b":")
                    headers[name.strip().lower()] = value.strip()
                mode, code = self._body_mode(first, headers)
                ev.append((i, "head", (first, headers, code)))
                if mode == "length":
                    self.left = int(headers[b"content-length"])
                    self.state = "length" if self.left else "idle"
                    if not self.left:
                        ev.append((i, "end", None))
                elif mode == "none":
                    self.state = "idle"
                    ev.append((i, "end", None))
                else:
                    self.state = mode
                continue
            if st == "length":
                take = min(self.left, n - i)
                self.conn.body(self.is_response, take)
                self.left -= take
                i += take
                if not self.left:
                    self.state = "idle"
                    ev.append((i, "end", None))
                continue
            if st == "close":
                self.conn.body(self.is_response, n - i)
                return ev
            if st in ("chunk_size", "trailer"):
                j = data.find(b"\r\n", i)
                if j < 0:
                    self.buf += data[i:]
                    return ev
                line = self.buf + data[i:j]
                self.buf = b""
                i = j + 2
                if st == "trailer":
                    if not line:
                        self.state = "idle"
                        ev.append((i, "end", None))
                    continue
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.state = "trailer"
                else:
                    self.left = size
                    self.state = "chunk_data"
                continue
            if st == "chunk_data":
                take = min(self.left, n - i)
                self.conn.body(self.is_response, take)
                self.left -= take
                i += take
                if not self.left:
                    self.state = "chunk_crlf"
                    self.left = 2
                continue
            if st == "chunk_crlf":
                take = min(self.left, n - i)
                self.left -= take
                i += take
                if not self.left:
                    self.state = "chunk_size"
                continue
        return ev


TRACE = None  # a file: one line per request answered (--trace)


class Request:
    __slots__ = ("method", "start", "arrived", "first_server_byte", "conn", "req_bytes", "resp_bytes", "released",
                 "target")

    def __init__(self, start, conn):
        self.method = b"?"
        self.start = start
        self.arrived = None
        self.first_server_byte = None
        self.released = None
        self.conn = conn
        self.req_bytes = 0
        self.resp_bytes = 0
        self.target = "-"

    def bulk_start(self):
        """When a body of >= 1 MiB began to flow: the upload's start, or the answer's release."""
        if self.req_bytes >= 1 << 20:
            return self.start
        if self.resp_bytes >= 1 << 20:
            return self.released
        return None

    def trace(self, end):
        if TRACE is not None:
            TRACE.write(f"{self.conn} {self.method.decode()} {self.start:.6f} {self.arrived or 0:.6f} "
                        f"{self.first_server_byte or 0:.6f} {self.released or 0:.6f} {end:.6f} "
                        f"{self.req_bytes} {self.resp_bytes} {self.target}\n")


class Conn:
    """One client connection and its upstream connection."""
    count = 0

    def __init__(self, loop, upstream, delay):
        self.loop = loop
        self.upstream = upstream
        self.delay = delay
        self.client = None  # transports
        self.server = None
        self.reqs = []  # requests not yet answered, in order
        self.req_framer = Framer(False, self)
        self.resp_framer = Framer(True, self)
        self.queue = []  # [(ready_time, bytes, [events to run once written])]
        self.timer = None
        self.server_paused_by_us = False
        self.client_writable = True
        self.resp_final = False  # the answer being forwarded is a final one (not 1xx)
        self.closed = False
        Conn.count += 1
        self.id = Conn.count

    def head_method(self):
        return bool(self.reqs) and self.reqs[0].method == b"HEAD"

    def body(self, is_response, n):
        if is_response:
            STATS.resp_body += n
            if self.reqs:
                self.reqs[0].resp_bytes += n
        else:
            STATS.req_body += n
            if self.reqs:
                self.reqs[-1].req_bytes += n

    # client -> server
    def from_client(self, data):
        now = time.monotonic()
        for off, ev, info in self.req_framer.feed(data, now):
            if ev == "start":
                self.reqs.append(Request(now, self.id))
                STATS.change(now, +1)
            elif ev == "head":
                r = self.reqs[-1]
                r.method = info[0].split(b" ", 1)[0]
                if TRACE is not None:
                    path = info[0].split(b" ")[1].split(b"?")[0].decode(errors="replace")
                    rng = info[1].get(b"range", b"").decode(errors="replace").replace(" ", "")
                    r.target = path + ("@" + rng if rng else "")
                STATS.methods[r.method.decode()] = STATS.methods.get(r.method.decode(), 0) + 1
            elif ev == "end":
                self.reqs[-1].arrived = now
        if self.server is not None:
            self.server.write(data)

    # server -> client
    def from_server(self, data):
        now = time.monotonic()
        pos = 0
        pending_events = []
        for off, ev, info in self.resp_framer.feed(data, now):
            if ev == "start":
                if off > pos:
                    self.queue.append((0.0, data[pos:off], pending_events))
                    pending_events = []
                    pos = off
                ready = 0.0
                # the answer's status is known only at 'head'; 1xx is rare: decide on the first line
                r = self.reqs[0] if self.reqs else None
                first_line_code = _peek_code(data, off)
                if r is not None and not (first_line_code is not None and 100 <= first_line_code < 200):
                    if r.first_server_byte is None:
                        r.first_server_byte = now
                        base = r.arrived if r.arrived is not None else now
                        ready = base + self.delay
                        r.released = max(ready, now)
                        STATS.server_ttfb += max(0.0, now - base)
                        STATS.held += max(0.0, ready - now)
                        STATS.answered += 1
                self.queue.append((ready, b"", []))
            elif ev == "head":
                code = info[2]
                if code is not None and 100 <= code < 200:
                    STATS.continues += 1
                    self.resp_final = False
                else:
                    self.resp_final = True
            elif ev == "end":
                if off > pos:
                    self.queue.append((0.0, data[pos:off], pending_events))
                    pending_events = []
                    pos = off
                if self.resp_final and self.reqs:
                    pending_events.append(self.reqs.pop(0))
                self.resp_final = False
        if pos < len(data) or pending_events:
            self.queue.append((0.0, data[pos:], pending_events))
        self.pump()

    def pump(self):
        self.timer = None
        while self.queue:
            ready, chunk, done = self.queue[0]
            now = time.monotonic()
            if ready > now:
                if not self.server_paused_by_us and self.server is not None:
                    self.server.pause_reading()
                    self.server_paused_by_us = True
                self.timer = self.loop.call_at(self.loop.time() + (ready - now), self.pump)
                return
            self.queue.pop(0)
            if chunk and self.client is not None and not self.closed:
                self.client.write(chunk)
            for r in done:
                STATS.change(now, -1)
                STATS.done.append((r.start, r.bulk_start(), now))
                r.trace(now)
        if self.server_paused_by_us:
            self.server_paused_by_us = False
            if self.client_writable and self.server is not None:
                self.server.resume_reading()

    def close(self):
        if self.closed:
            return
        self.closed = True
        now = time.monotonic()
        for _ in self.reqs:
            STATS.change(now, -1)
        self.reqs = []
        if self.timer:
            self.timer.cancel()
        for t in (self.client, self.server):
            if t is not None:
                t.close()


def _peek_code(data, off):
    head = data[off:off + 16]
    parts = head.split(b" ", 2)
    if len(parts) > 1 and parts[1][:3].isdigit():
        return int(parts[1][:3])
    return None


def _tune(transport):
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
    transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)


class ServerSide(asyncio.Protocol):
    def __init__(self, conn):
        self.conn = conn

    def connection_made(self, transport):
        _tune(transport)
        self.conn.server = transport

    def data_received(self, data):
        self.conn.from_server(data)

    def pause_writing(self):  # upstream socket full: stop reading the client
        if self.conn.client is not None:
            self.conn.client.pause_reading()

    def resume_writing(self):
        if self.conn.client is not None:
            self.conn.client.resume_reading()

    def connection_lost(self, exc):
        # flush what is queued, then close the client once it is written
        c = self.conn

        def finish():
            if c.queue:
                c.loop.call_later(0.01, finish)
                return
            c.close()
        finish()


class ClientSide(asyncio.Protocol):
    def __init__(self, loop, upstream, delay):
        self.conn = Conn(loop, upstream, delay)

    def connection_made(self, transport):
        STATS.conns += 1
        _tune(transport)
        self.conn.client = transport
        transport.pause_reading()
        loop = self.conn.loop
        host, port = self.conn.upstream

        async def connect():
            try:
                await loop.create_connection(lambda: ServerSide(self.conn), host, port)
            except OSError:
                self.conn.close()
                return
            transport.resume_reading()
        loop.create_task(connect())

    def data_received(self, data):
        self.conn.from_client(data)

    def pause_writing(self):  # client socket full: stop reading the store
        self.conn.client_writable = False
        if self.conn.server is not None and not self.conn.server_paused_by_us:
            self.conn.server.pause_reading()

    def resume_writing(self):
        self.conn.client_writable = True
        if self.conn.server is not None and not self.conn.server_paused_by_us:
            self.conn.server.resume_reading()

    def connection_lost(self, exc):
        self.conn.close()


def open_trace(path):
    global TRACE
    TRACE = open(path, "a", buffering=1 << 16)


def hostport(s):
    h, _, p = s.rpartition(":")
    return h, int(p)


async def serve(pairs, delay, stats_path, dev, rate_bps, ready_file=None):
    loop = asyncio.get_running_loop()
    servers = []
    for listen, upstream in pairs:
        h, p = hostport(listen)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((h, p))
        servers.append(await loop.create_server(lambda u=hostport(upstream): ClientSide(loop, u, delay),
                                                sock=sock, backlog=256))

    def dump():
        if TRACE is not None:
            TRACE.write(f"mark {time.monotonic():.6f}\n")
            TRACE.flush()
        now = time.monotonic()
        line = STATS.dump(now, rate_bps)
        if stats_path:
            with open(stats_path, "a") as f:
                f.write(json.dumps(line) + "\n")
        STATS.reset(now)

    loop.add_signal_handler(signal.SIGUSR1, dump)
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, lambda: stop.done() or stop.set_result(None))
    loop.add_signal_handler(signal.SIGINT, lambda: stop.done() or stop.set_result(None))

    if dev:
        paths = [f"/sys/class/net/{dev}/statistics/{k}_bytes" for k in ("tx", "rx")]

        def read():
            v = []
            for p in paths:
                with open(p) as f:
                    v.append(int(f.read()))
            return v
        prev = [read()]

        def sample():
            cur = read()
            STATS.samples.append(max(c - p for c, p in zip(cur, prev[0])))
            prev[0] = cur
            loop.call_later(0.05, sample)
        loop.call_later(0.05, sample)

    if ready_file:
        with open(ready_file, "w") as f:
            f.write(str(os.getpid()))
    await stop
    for s in servers:
        s.close()


def selftest(delay):
    """Throughput through the proxy on loopback: a sink server, N GETs of 64 MiB answered with
    Content-Length, over one keep-alive connection; prints MB/s and the proxy's CPU share."""
    import threading
    size = 64 << 20
    blob = b"x" * (1 << 20)

    def upstream_server(sock):
        while True:
            c, _ = sock.accept()
            threading.Thread(target=handle, args=(c,), daemon=True).start()

    def handle(c):
        f = c.makefile("rb")
        while True:
            line = f.readline()
            if not line:
                return
            while f.readline() not in (b"\r\n", b""):
                pass
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
            for _ in range(size // len(blob)):
                c.sendall(blob)

    up = socket.socket()
    up.bind(("127.0.0.1", 0))
    up.listen()
    threading.Thread(target=upstream_server, args=(up,), daemon=True).start()
    lp = socket.socket()
    lp.bind(("127.0.0.1", 0))
    port = lp.getsockname()[1]
    lp.close()
    pid = os.fork()
    if pid == 0:
        asyncio.run(serve([(f"127.0.0.1:{port}", f"127.0.0.1:{up.getsockname()[1]}")], delay, None, None, 0))
        os._exit(0)
    time.sleep(0.5)
    c = socket.create_connection(("127.0.0.1", port))
    buf = bytearray(4 << 20)
    n = 16
    t0 = time.monotonic()
    cpu0 = _proc_cpu(pid)
    for _ in range(n):
        c.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        got = 0
        head = b""
        while b"\r\n\r\n" not in head:
            head += c.recv(65536)
        got = len(head) - head.index(b"\r\n\r\n") - 4
        while got < size:
            got += c.recv_into(buf)
    dt = time.monotonic() - t0
    cpu = _proc_cpu(pid) - cpu0
    os.kill(pid, signal.SIGTERM)
    os.waitpid(pid, 0)
    print(f"proxy self-test: {n} x 64 MiB through the proxy on loopback (delay {delay * 1000:.0f} ms each): "
          f"{n * size / dt / 1e6:.0f} MB/s ({n * size * 8 / dt / 1e9:.2f} Gbit/s), proxy CPU {cpu:.2f} s "
          f"of {dt:.2f} s wall ({cpu / dt * 100:.0f} % of a core)")


def _proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", action="append", default=[])
    ap.add_argument("--upstream", action="append", default=[])
    ap.add_argument("--delay-ms", type=float, default=30)
    ap.add_argument("--stats")
    ap.add_argument("--dev")
    ap.add_argument("--rate-bps", type=float, default=0)
    ap.add_argument("--ready-file")
    ap.add_argument("--trace", help="append one line per request: conn method start arrived "
                    "store_first_byte released end req_bytes resp_bytes path@range (monotonic seconds)")
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args()
    if a.selftest:
        selftest(a.delay_ms / 1000)
        return 0
    if len(a.listen) != len(a.upstream) or not a.listen:
        ap.error("give --listen and --upstream in pairs")
    if a.trace:
        open_trace(a.trace)
    asyncio.run(serve(list(zip(a.listen, a.upstream)), a.delay_ms / 1000, a.stats, a.dev, a.rate_bps, a.ready_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
