#!/usr/bin/env python3
"""dcpctl report --html opened in a real headless browser (Debian's chromium, driven by its
chromium-driver over the W3C WebDriver protocol; standard library only).

    report_page_test.py DCPCTL FIXTURES_DIR OUT_DIR

For run_report (a NaN and a scaled layer, tests/fixtures/layouts/make_report_run.py) and run_ray
(FSDP2 + Adam), `dcpctl report RUN --json --html PAGE` is run once; then the page is loaded from
file:// and checked:
  - the browser logged no console message of level SEVERE or WARNING (no CSP violation, no
    failed load), and the performance log saw no request but the page's own file:// URL;
  - every plot renders: as many <svg class="plot"> as the page should have (2 heatmaps, the
    update-ratio curves, and the optimizer's two curves where there is Adam state), each laid
    out with a non-zero size, with as many `.series` elements as its data-series says and as the
    JSON has (layer groups per heatmap row, kinds per curve set), each curve a path of non-zero
    length; axes labelled (a "step" axis on each plot), a legend on each;
  - the tables: top movers and anomalies, one row per entry (anomalies up to 500);
  - a screenshot of the whole page is saved to OUT_DIR/report-<case>.png (a test artifact).
Skips (77) only where chromium or chromium-driver is absent; under CI=true or
DCPCTL_REQUIRE_VENV=1 that fails instead (tools/dev.sh setup installs both).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testlib import check, each_case, expect_rc, fail, run, skip_or_fail, summary  # noqa: E402

CASES = ["run_report", "run_ray"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Driver:
    """A chromedriver process and one headless chromium session."""

    def __init__(self, chromium: str, driver: str, profile: str):
        self.port = free_port()
        self.proc = subprocess.Popen([driver, f"--port={self.port}"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        for _ in range(100):
            try:
                self.call("GET", "/status")
                break
            except OSError:
                time.sleep(0.1)
        caps = {"browserName": "chrome",
                "goog:chromeOptions": {"binary": chromium,
                                       "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                                                "--disable-dev-shm-usage", f"--user-data-dir={profile}",
                                                "--window-size=1400,1000", "--no-first-run",
                                                "--disable-background-networking"]},
                "goog:loggingPrefs": {"browser": "ALL", "performance": "ALL"}}
        r = self.call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})
        self.session = f"/session/{r['value']['sessionId']}"

    def call(self, method: str, path: str, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())

    def do(self, method: str, path: str, body=None):
        return self.call(method, self.session + path, body)["value"]

    def script(self, code: str):
        return self.do("POST", "/execute/sync", {"script": code, "args": []})

    def log(self, kind: str) -> list:
        return self.do("POST", "/se/log", {"type": kind})

    def close(self):
        try:
            self.call("DELETE", self.session)
        except Exception:  # noqa: BLE001 (the driver may already be gone)
            pass
        self.proc.terminate()
        self.proc.wait(timeout=10)


PLOTS_JS = """
return Array.from(document.querySelectorAll('svg.plot')).map(s => {
  const r = s.getBoundingClientRect();
  const series = Array.from(s.querySelectorAll('.series'));
  return {id: s.previousElementSibling ? s.previousElementSibling.id : '', kind: s.classList.contains('heatmap') ? 'heatmap' : 'curves',
          declared: Number(s.dataset.series), series: series.length, width: r.width, height: r.height,
          drawn: series.filter(g => { const p = g.querySelector('path'); return p ? p.getTotalLength() > 0
                                       : g.querySelectorAll('rect').length > 0; }).length,
          text: s.textContent};
});
"""


def expected_plots(rep: dict) -> dict:
    """Plot id -> the series it must draw, from the report's JSON."""
    layers, kinds = len(rep["groups"]["layer"]), len(rep["groups"]["kind"])
    out = {"norms": layers, "updates": layers, "kinds": kinds}
    if rep["optimizer"]["kind"]:
        out["adam-step"] = out["adam-v"] = len(rep["optimizer"]["kind"])
    return out


def check_page(d: Driver, page: Path, rep: dict, shot: Path, name: str) -> None:
    d.log("browser"), d.log("performance")  # what the browser's own start page did, before the page
    d.do("POST", "/url", {"url": page.as_uri()})
    check(d.script("return document.readyState") == "complete", f"{name}: page loaded")
    plots = d.script(PLOTS_JS)
    want = expected_plots(rep)
    check({p["id"]: p["series"] for p in plots} == want, f"{name}: plots and their series {[(p['id'], p['series']) for p in plots]} != {want}")
    for p in plots:
        what = f"{name}: plot {p['id']}"
        check(p["width"] > 100 and p["height"] > 50, f"{what}: laid out {p['width']}x{p['height']}")
        check(p["declared"] == p["series"], f"{what}: data-series {p['declared']} != {p['series']} drawn")
        if p["kind"] == "curves":
            check(p["drawn"] >= 1, f"{what}: {p['drawn']} of {p['series']} curves have a visible path")
        else:
            check(p["drawn"] == p["series"], f"{what}: {p['drawn']} of {p['series']} rows have cells")
        check("step" in p["text"], f"{what}: a step axis")
        check(("log scale" in p["text"]) or ("colour" in p["text"]), f"{what}: the y axis or the colour legend says its unit")
    rows = d.script("return [document.querySelectorAll('table.movers tr').length, "
                    "document.querySelectorAll('table.anomalies tr').length]")
    check(rows == [len(rep["top_movers"]) + 1, min(len(rep["anomalies"]), 500) + 1], f"{name}: table rows {rows}")
    console = [e for e in d.log("browser") if e.get("level") in ("SEVERE", "WARNING")]
    check(not console, f"{name}: console messages {console[:3]}")
    urls = set()
    for e in d.log("performance"):
        msg = json.loads(e["message"])["message"]
        if msg.get("method") != "Network.requestWillBeSent":
            continue
        url, doc = msg["params"]["request"]["url"], msg["params"].get("documentURL", "")
        # The page's requests, and any request to the network from anywhere in the browser.
        if doc == page.as_uri() or url.split(":")[0] in ("http", "https", "ws", "wss", "ftp"):
            urls.add(url)
    check(page.as_uri() in urls, f"{name}: the performance log saw the page load")
    check(urls <= {page.as_uri()}, f"{name}: requests beyond the page: {sorted(urls - {page.as_uri()})[:5]}")
    height = d.script("return document.documentElement.scrollHeight")
    d.do("POST", "/window/rect", {"width": 1400, "height": min(max(1000, int(height) + 50), 8000)})
    png = base64.b64decode(d.do("GET", "/screenshot"))
    shot.write_bytes(png)
    check(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000, f"{name}: screenshot {shot} ({len(png)} bytes)")


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    dcpctl, fixtures, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        skip_or_fail("chromium and chromium-driver (Debian packages) are needed to open the page in a browser")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        d = Driver(chromium, driver, os.path.join(tmp, "profile"))
        try:
            for name in each_case(CASES, 10, name=str):
                page = Path(tmp) / f"report-{name}.html"
                r = run(dcpctl, "report", str(fixtures / "layouts" / name / "run"), "--json", "--html", str(page))
                if not expect_rc(r, 0, f"report --html {name}"):
                    fail(f"{name}: no page")
                    continue
                check_page(d, page, json.loads(r.stdout), out / f"report-{name}.png", name)
        finally:
            d.close()
    return summary("report-page", min_checks=30)


if __name__ == "__main__":
    sys.exit(main())
