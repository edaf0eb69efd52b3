"""bench/link.sh's table: reads what its rounds left in WORKDIR (GNU time files link_NAME_R.txt,
and meta_NAME_R.txt: veth and store-CPU counters around the run, the proxy's statistics line, the
steps' own times, the command's JSON) and prints, per row, the round with the median seconds.

usage: link_report.py WORK REPEAT RATE RATE_BPS DELAY_MS CKPT MODEL_FILE THREADS SELFTEST VERSIONS GS_STATE NAME...
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import parse_time  # noqa: E402

LABELS = {
    "curl_one": "curl GET of one data object, one stream (the link's ceiling)",
    "dcpctl_s3": "dcpctl consolidate s3:// --select app.model",
    "aws_local": "aws s3 cp --recursive + dcpctl consolidate --select app.model",
    "torch_s3": "torch dcp.load(S3StorageReader), model only + torch.save",
    "local": "dcpctl consolidate LOCAL --select app.model (no network)",
    "dcpctl_up": "dcpctl consolidate LOCAL --select app.model -o s3://",
    "aws_up": "aws s3 cp model.safetensors s3:// (file made beforehand)",
    "store_dcpctl_s3": "  dcpctl consolidate s3:// --select app.model, store direct",
    "store_up_dcpctl": "  dcpctl consolidate LOCAL --select app.model -o s3://, store direct",
    "store_up_aws": "  aws s3 cp model.safetensors s3://, store direct",
    "gcs_read": "dcpctl consolidate gs:// --select app.model (fake-gcs-server)",
    "gcs_up": "dcpctl consolidate LOCAL --select app.model -o gs://",
}


def label(n):
    if n.startswith("dcpctl_s3_t"):
        return f"dcpctl consolidate s3:// --select app.model --threads {n[11:]}"
    if n.startswith("dcpctl_up_t"):
        return f"dcpctl consolidate LOCAL --select app.model -o s3:// --threads {n[11:]}"
    return LABELS.get(n, n)


def read_meta(path):
    m = {"steps": {}}
    if not os.path.exists(path):
        return m
    tick = os.sysconf("SC_CLK_TCK")
    for line in open(path):
        kind, _, rest = line.rstrip("\n").partition(" ")
        if kind == "ctr":
            v = [int(x) for x in rest.split()]
            m["down"], m["up"], m["store_cpu"] = v[3] - v[0], v[4] - v[1], (v[5] - v[2]) / tick
        elif kind == "proxy":
            m["proxy"] = json.loads(rest)
        elif kind == "step":
            name, *vals = rest.split()
            if len(vals) == 4:
                m["steps"][name[5:]] = {"secs": float(vals[0]), "rss": int(vals[1]) * 1024,
                                        "cpu": float(vals[2]) + float(vals[3])}
        elif kind == "json":
            try:
                m["json"] = json.loads(rest)
            except ValueError:
                pass
        elif kind == "same":
            m["same"] = rest
    return m


def main():
    work, repeat, rate, rate_bps, delay_ms, ckpt, model_file, threads, selftest, versions, gs_state = sys.argv[1:12]
    names = sys.argv[12:]
    repeat, rate_bps = int(repeat), float(rate_bps)
    info = json.load(open(ckpt.rstrip("/") + ".json"))
    model_bytes = info["model_bytes"]
    out_bytes = os.path.getsize(model_file)
    first_obj = sorted(f for f in os.listdir(ckpt) if f.endswith(".distcp"))[0]
    obj_bytes = os.path.getsize(os.path.join(ckpt, first_obj))

    print(f"\n== {rate} ({rate_bps / 1e6:.0f} Mbit/s each way), first-byte delay {delay_ms} ms; checkpoint "
          f"{info['total_bytes'] / 1e6:.0f} MB ({ckpt}: {len(info['files']) - 1} data files, model "
          f"{model_bytes / 1e6:.0f} MB in {info['tensors']} tensors of up to {info['largest_item'] / 1e6:.0f} MB, "
          f"the rest Adam state); dcpctl {threads}; median of {repeat}, rounds interleaved, page cache dropped before "
          "each run")
    print("   % of link: the bytes needed (model for reads, output for uploads) x 8 / seconds / rate; TCP over "
          "1500-byte frames carries at most 1448/1514 = 95.6 % of it")
    hdr = (f"{'row':<66} {'s':>6} {'MB/s':>5} {'down MB':>8} {'up MB':>7} {'need MB':>7} {'% link':>6} {'RSS MiB':>7} "
           f"{'CPU s':>6} {'reqs':>5} {'inflight':>9} {'bulk@s':>6} {'≤1 s':>5} {'≥90%':>5} {'store CPU':>9} {'proxy CPU':>9}")
    print(hdr)
    notes = []
    for n in names:
        rounds = []
        for r in range(1, repeat + 1):
            p = os.path.join(work, f"link_{n}_{r}.txt")
            if os.path.exists(p):
                t = parse_time(p)
                t.update(read_meta(os.path.join(work, f"meta_{n}_{r}.txt")))
                rounds.append(t)
        if not rounds:
            why = gs_state if n.startswith("gcs_") and gs_state else "not run"
            print(f"{label(n):<66} {why}")
            continue
        rounds.sort(key=lambda x: x["secs"])
        m = rounds[(len(rounds) - 1) // 2]
        secs = m["secs"]
        need = {"curl_one": obj_bytes, "local": model_bytes}.get(n, out_bytes if "up" in n else model_bytes)
        direct = n == "local" or n.startswith("store_")
        pct = "-" if direct else f"{need * 8 / secs / rate_bps * 100:.0f}"
        px = m.get("proxy", {})
        if not px.get("requests"):  # nothing went through the proxy (local, store direct)
            px = {"proxy_cpu_s": px.get("proxy_cpu_s", 0)}
        reqs = sum(px.get("requests", {}).values()) if px else 0
        infl = f"{px['inflight_mean']:.1f}/{px['inflight_max']}" if "inflight_mean" in px else "-"
        ge90 = f"{px['link_ge90'] * 100:.0f}%" if "link_ge90" in px else "-"
        bulk = f"{px['first_bulk_s']:.2f}" if px.get("first_bulk_s") is not None else "-"
        le1 = f"{px['le1_after_bulk_s']:.2f}" if px.get("le1_after_bulk_s") is not None else "-"
        rss = m["rss"]
        if m["steps"]:
            rss = max(s["rss"] for s in m["steps"].values())
        rc = "" if m["rc"] == 0 else f"  EXIT {m['rc']}"
        print(f"{label(n):<66} {secs:6.2f} {need / secs / 1e6:5.0f} {m.get('down', 0) / 1e6:8.1f} {m.get('up', 0) / 1e6:7.1f} "
              f"{need / 1e6:7.1f} {pct:>6} {rss / 2**20:7.0f} {m['user'] + m['sys']:6.2f} {reqs:5d} {infl:>9} "
              f"{bulk:>6} {le1:>5} {ge90:>5} {m.get('store_cpu', 0):9.2f} {px.get('proxy_cpu_s', 0):9.2f}{rc}")
        all_s = ", ".join(f"{x['secs']:.2f}" for x in sorted(rounds, key=lambda x: x["secs"]))
        extra = [f"runs {all_s} s"]
        if px.get("requests"):
            extra.append(f"store's own time to first byte {px.get('store_ttfb_ms')} ms, held {px.get('held_ms_mean')} ms "
                         f"a request; requests {px.get('requests')}, {px.get('conns')} connections"
                         + (f", {px['continues']} x 100-continue" if px.get("continues") else ""))
            if px.get("seconds_at_inflight"):
                extra.append(f"first request at {px['first_request_s']} s, first bulk byte at {px['first_bulk_s']} s, "
                             f"last answer at {px['last_end_s']} s; {px['small_requests']} requests with bodies under "
                             f"1 MiB; seconds at each number in flight {px['seconds_at_inflight']}")
            if "link_lt50" in px and px.get("requests"):
                extra.append(f"link samples (50 ms): {px['link_ge90'] * 100:.0f}% at >= 90% of rate, "
                             f"{px['link_lt50'] * 100:.0f}% under 50%")
        for k, s in m["steps"].items():
            extra.append(f"{k}: {s['secs']:.2f} s, RSS {s['rss'] / 2**20:.0f} MiB, CPU {s['cpu']:.2f} s")
        j = m.get("json")
        if j and "s3" in j:
            s3 = j["s3"]
            extra.append("dcpctl --json s3: " + ", ".join(f"{k} {v}" for k, v in s3.items() if k != "credential_source"))
        elif j and "load_s" in j:
            extra.append(f"torch: import {j['import_s']} s, dcp.load {j['load_s']} s, torch.save {j['save_s']} s")
        if "same" in m:
            extra.append(f"output equals the local consolidate's{' (read back unshaped)' if 'up' in n else ''}: {m['same']}")
        notes.append((label(n), extra))
    print("\ncolumns: seconds (median); MB/s of the bytes needed; MB the veth carried down (store -> host) and up; "
          "MB needed; % of link; peak RSS of the largest process (each step's for aws_local); its CPU (user + sys); "
          "requests the proxy saw; requests in flight at the proxy (time-weighted mean / max); when the first body "
          "of >= 1 MiB began to flow (s after the start); seconds with at most one request in flight after that; "
          "share of 50 ms samples with the link at >= 90 % of rate; the store's and the proxy's CPU seconds. "
          "'store direct' rows run inside the namespace against the store's own port (no link, no proxy)")
    for lab, extra in notes:
        print(f"  {lab}:")
        for e in extra:
            print(f"      {e}")
    print(f"proxy, unshaped: {selftest}")
    print("versions:\n  " + versions.replace("\n", "\n  "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
