#!/usr/bin/env python3
"""dcpctl report, every figure checked against torch's dcp.load of each step (the project's venv).

    report_test.py DCPCTL FIXTURES_DIR [CASE ...]

Cases (run folders written by real trainers, tests/fixtures/layouts/<case>/run): run_torchtitan
(torchtitan 0.3.0, AdamW state, a last model-only bf16 step), run_ray (FSDP2 + Adam under Ray
Train), run_lightning (Lightning FSDP, Adam), run_megatron (megatron-core, model only),
run_megatron_fsdp (megatron-core FSDP, Adam), run_report (make_report_run.py: real torch, a layer
scaled by 8 at step 3 and a NaN injected at step 5). An unknown case fails; no case fails.

For each case `dcpctl report RUN --json` is compared with what torch computes from dcp.load of
each step (a state dict of empty tensors from the step's .metadata, filled by
torch.distributed.checkpoint.load, no process group), in float64:
  per tensor and step  l2 = vector_norm, rms = l2 / sqrt(numel)             rel 1e-9
                       abs_max = abs().max()                                 exact
                       nan, inf, zeros, numel                                exact
                       update_ratio = ||W_t - W_t-1|| / ||W_t-1||            rel 1e-9
                       norm_growth  = ||W_t|| / ||W_t-1||                    rel 1e-9
                       update_cosine = cos(W_t - W_t-1, W_t-1 - W_t-2)       abs 1e-9
  per layer / kind group  the same figures of the group's weights concatenated   same tolerances
  optimizer groups     exp_avg_rms, exp_avg_sq_rms, effective_step = rms(m) / sqrt(mean(v))  rel 1e-9
NaN must be NaN on both sides. Then on run_report: the anomalies name the scaled layer at step 3
(norm_growth 8 within 1%: the scale and that step's own update, update_ratio) and the NaN at step 5 in the injected tensor, before any
other NaN, the weight zeroed and the second moment collapsed at step 4 (all_zero,
second_moment_collapse); --fail-on nan / update-ratio>X / norm-growth>Y exit 3 naming tensor and step on stderr,
0 on a clean run; --steps-per-pass 3 (three passes, steps read twice where they overlap) gives the
same figures; --filter and --select narrow the tensors; --map torchtitan-llama3 names them as
Hugging Face does, with the same norms, and a step already in Hugging Face names (the HF export
of the step before) is kept as it is: every update ratio 0; --html writes one page with every plot
(tests/browser/report_page_test.py opens it in a browser); refusals (exit 2).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testlib import check, each_case, expect_rc, fail, run, summary  # noqa: E402
import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402

warnings.filterwarnings("ignore")

CASES = ["run_torchtitan", "run_ray", "run_lightning", "run_megatron", "run_megatron_fsdp", "run_report"]
REL, COS_ABS = 1e-9, 1e-9


def jf(v):
    return None if v is None else float(v)


def same(a, b, rel=REL, abs_=0.0) -> bool:
    """dcpctl's figure a (JSON) equal to torch's b (float or None)."""
    a = jf(a)
    if a is None or b is None:
        return a is None and b is None
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= max(abs_, rel * abs(b))


def load_step(path: str) -> dict:
    """{flat key: float64 tensor} of every floating tensor, through dcp.load."""
    md = dcp.FileSystemReader(path).read_metadata()
    sd = {}
    for k, m in md.state_dict_metadata.items():
        if isinstance(m, dcp.metadata.TensorStorageMetadata):
            sd[k] = torch.empty(m.size, dtype=m.properties.dtype)
    dcp.load(sd, checkpoint_id=path, no_dist=True)
    return {k: v.double() for k, v in sd.items() if v.is_floating_point()}


def figures(ts: list, prevs: list, prev2s: list) -> dict:
    """Torch's figures of tensors taken as one vector; prevs/prev2s: the same tensors one and two
    steps before (None where a tensor has none)."""
    x = torch.cat([t.flatten() for t in ts]) if ts else torch.zeros(0, dtype=torch.float64)
    l2 = torch.linalg.vector_norm(x).item()
    f = {"numel": x.numel(), "l2": l2, "rms": l2 / math.sqrt(x.numel()) if x.numel() else None,
         "abs_max": x.abs().max().item() if x.numel() else 0.0, "nan": int(x.isnan().sum()),
         "inf": int(x.isinf().sum()), "zeros": int((x == 0).sum())}
    up = [(t, p) for t, p in zip(ts, prevs) if p is not None]
    f["update_ratio"] = f["norm_growth"] = f["update_cosine"] = None
    if up:
        cur = torch.cat([t.flatten() for t, _ in up])
        prev = torch.cat([p.flatten() for _, p in up])
        pn = torch.linalg.vector_norm(prev).item()
        if pn != 0:
            f["update_ratio"] = torch.linalg.vector_norm(cur - prev).item() / pn
            f["norm_growth"] = torch.linalg.vector_norm(cur).item() / pn
    tri = [(t, p, q) for t, p, q in zip(ts, prevs, prev2s) if p is not None and q is not None]
    if tri:
        d1 = torch.cat([(t - p).flatten() for t, p, _ in tri])
        d0 = torch.cat([(p - q).flatten() for _, p, q in tri])
        n1, n0 = torch.linalg.vector_norm(d1).item(), torch.linalg.vector_norm(d0).item()
        if n1 != 0 and n0 != 0:
            f["update_cosine"] = torch.dot(d1, d0).item() / (n1 * n0)
    return f


def compare_series(what: str, series: dict, j: int, f: dict) -> None:
    for name in ("numel", "nan", "inf", "zeros"):
        check(series[name][j] == f[name], f"{what} step {j}: {name} {series[name][j]} != torch {f[name]}")
    check(same(series["abs_max"][j], f["abs_max"], rel=0), f"{what} step {j}: abs_max {series['abs_max'][j]} != {f['abs_max']}")
    for name in ("l2", "rms", "update_ratio", "norm_growth"):
        check(same(series[name][j], f[name]), f"{what} step {j}: {name} {series[name][j]} != torch {f[name]}")
    check(same(series["update_cosine"][j], f["update_cosine"], rel=0, abs_=COS_ABS),
          f"{what} step {j}: update_cosine {series['update_cosine'][j]} != torch {f['update_cosine']}")


def held(states: list, j: int, key: str, shape):
    """The tensor `key` at step j when it has `shape` there, else None."""
    if j < 0 or key not in states[j] or list(states[j][key].shape) != list(shape):
        return None
    return states[j][key]


def check_groups(rep: dict, states: list) -> None:
    tensors = {t["key"]: t for t in rep["tensors"]}
    for by in ("layer", "kind"):
        for g in rep["groups"][by]:
            keys = [t["key"] for t in rep["tensors"] if t["role"] == "weight" and t[by if by == "kind" else "group"] == g["name"]]
            check(len(keys) == g["tensors"], f"group {by} {g['name']}: {g['tensors']} tensors, torch's {len(keys)}")
            for j in range(len(states)):
                here = [k for k in keys if k in states[j]]
                if not here:
                    check(g["series"]["l2"][j] is None, f"group {g['name']} step {j}: absent but has figures")
                    continue
                ts = [states[j][k] for k in here]
                prevs = [held(states, j - 1, k, states[j][k].shape) for k in here]
                prev2s = [held(states, j - 2, k, states[j][k].shape) if p is not None else None for k, p in zip(here, prevs)]
                compare_series(f"group {by} {g['name']}", g["series"], j, figures(ts, prevs, prev2s))
    for by in ("layer", "kind"):
        for g in rep["optimizer"][by]:
            for j in range(len(states)):
                def vec(role):
                    xs = [states[j][t["key"]].flatten() for t in rep["tensors"] if t["role"] == role and t["key"] in states[j]
                          and (t["group"] if by == "layer" else t["kind"]) == g["name"]]
                    return torch.cat(xs) if xs else None
                m, v = vec("exp_avg"), vec("exp_avg_sq")
                m_rms = torch.sqrt((m * m).mean()).item() if m is not None else None
                v_rms = torch.sqrt((v * v).mean()).item() if v is not None else None
                eff = m_rms / math.sqrt(v.mean().item()) if m is not None and v is not None and v.mean().item() > 0 else None
                if m is not None and v is not None and math.isnan(v.mean().item()):
                    eff = None  # dcpctl: null where mean(v) is not a positive number
                what = f"optimizer {by} {g['name']} step {j}"
                check(same(g["exp_avg_rms"][j], m_rms), f"{what}: exp_avg_rms {g['exp_avg_rms'][j]} != {m_rms}")
                check(same(g["exp_avg_sq_rms"][j], v_rms), f"{what}: exp_avg_sq_rms {g['exp_avg_sq_rms'][j]} != {v_rms}")
                check(same(g["effective_step"][j], eff), f"{what}: effective_step {g['effective_step'][j]} != {eff}")
    check(len(tensors) == len(rep["tensors"]), "tensor keys are unique")


def check_case(dcpctl: str, run_dir: Path, extra=()) -> dict:
    r = run(dcpctl, "report", str(run_dir), "--json", *extra)
    if not expect_rc(r, 0, f"report {run_dir.parent.name}"):
        return {}
    rep = json.loads(r.stdout)
    check(rep["schema_version"] == 1, "schema_version 1")
    states = [load_step(s["path"]) for s in rep["steps"]]
    check(len(states) >= 2, f"{run_dir.parent.name}: {len(states)} steps")
    reported = {t["key"] for t in rep["tensors"]}
    every = set().union(*[s.keys() for s in states])
    check(reported == every, f"{run_dir.parent.name}: tensors reported {sorted(reported ^ every)[:5]} differ from torch's floating ones")
    for t in rep["tensors"]:
        for j in range(len(states)):
            if t["key"] not in states[j]:
                check(t["series"]["l2"][j] is None, f"{t['key']} step {j}: absent but has figures")
                continue
            cur = states[j][t["key"]]
            prev = held(states, j - 1, t["key"], cur.shape)
            prev2 = held(states, j - 2, t["key"], cur.shape) if prev is not None else None
            compare_series(t["key"], t["series"], j, figures([cur], [prev], [prev2]))
    check_groups(rep, states)
    return rep


def check_injected(dcpctl: str, fixtures: Path, rep: dict) -> None:
    case = fixtures / "layouts" / "run_report"
    exp = json.loads((case / "expected.json").read_text())
    an = rep["anomalies"]
    scaled = [a for a in an if a["key"] == exp["scaled"]["key"] and a["anomaly"] == "norm_growth"]
    check(len(scaled) == 1 and scaled[0]["step"] == exp["scaled"]["step"]
          and abs(float(scaled[0]["value"]) - exp["scaled"]["factor"]) < 1e-2 * exp["scaled"]["factor"],
          f"scaled layer: norm_growth anomaly {scaled}")
    check(any(a["key"] == exp["scaled"]["key"] and a["anomaly"] == "update_ratio" and a["step"] == 3 for a in an),
          "scaled layer: update_ratio anomaly at step 3")
    z, c = exp["zeroed"], exp["collapsed"]
    check(any(a["key"] == z["key"] and a["anomaly"] == "all_zero" and a["step"] == z["step"] for a in an),
          f"all_zero anomaly of {z['key']} at step {z['step']}")
    col = [a for a in an if a["anomaly"] == "second_moment_collapse"]
    check(len(col) == 1 and col[0]["key"] == c["key"] and col[0]["step"] == c["step"]
          and abs(float(col[0]["value"]) / c["factor"] - 1) < 0.5, f"second_moment_collapse: {col}")
    nans = [a for a in an if a["anomaly"] == "nan"]
    check(bool(nans) and nans[0]["key"] == exp["nan"]["key"] and nans[0]["step"] == exp["nan"]["step"]
          and float(nans[0]["value"]) == 1, f"first NaN: {nans[:1]}")
    check(all(a["step"] > exp["nan"]["step"] for a in nans[1:]), "no other NaN before the injected one's step")
    check(rep["top_movers"][0]["key"] == exp["scaled"]["key"], f"top mover {rep['top_movers'][:1]}")
    run_dir = case / "run"
    for cond, key, step in (("nan", exp["nan"]["key"], 5), ("update-ratio>2", exp["scaled"]["key"], 3),
                            ("norm-growth>4", exp["scaled"]["key"], 3)):
        r = run(dcpctl, "report", str(run_dir), "--fail-on", cond, "-q")
        if expect_rc(r, 3, f"--fail-on {cond}", key, f"step-{step}"):
            first = r.stderr.splitlines()[0]
            check(key in first and f"step-{step}" in first, f"--fail-on {cond}: first line names {key} at step-{step}: {first}")
    r = run(dcpctl, "report", str(run_dir), "--fail-on", "nan", "--json")
    if expect_rc(r, 3, "--fail-on nan --json"):
        g = json.loads(r.stdout)["gates"]
        check(not g["ok"] and g["failures"][0]["key"] == exp["nan"]["key"] and g["failures"][0]["step"] == 5, f"gates {g['failures'][:1]}")
    many = run(dcpctl, "report", str(run_dir), "--json", "--steps-per-pass", "3", "--threads", "3")
    if expect_rc(many, 0, "--steps-per-pass 3"):
        m = json.loads(many.stdout)
        check(m["read"]["passes"] == 2 and [s["reads"] for s in m["steps"]] == [1, 1, 2, 2, 1, 1] or
              m["read"]["passes"] == 4, f"passes {m['read']} reads {[s['reads'] for s in m['steps']]}")
        for a, b in zip(rep["tensors"], m["tensors"]):
            for name, xs in a["series"].items():
                ok = all(same(x, jf(y), rel=1e-12) if not isinstance(x, int) else x == y for x, y in zip(xs, b["series"][name]))
                check(ok, f"--steps-per-pass 3: {a['key']} {name} {xs} != {b['series'][name]}")


def check_options(dcpctl: str, fixtures: Path) -> None:
    run_dir = fixtures / "layouts" / "run_ray" / "run"
    r = run(dcpctl, "report", str(run_dir), "--fail-on", "nan", "--fail-on", "update-ratio>100", "-q")
    expect_rc(r, 0, "a clean run passes its gates")
    r = run(dcpctl, "report", str(run_dir), "--json", "--filter", "*fc1*")
    if expect_rc(r, 0, "--filter"):
        keys = [t["key"] for t in json.loads(r.stdout)["tensors"]]
        check(keys and all("fc1" in k for k in keys), f"--filter *fc1*: {keys}")
    r = run(dcpctl, "report", str(run_dir), "--json", "--select", "app.model")
    if expect_rc(r, 0, "--select"):
        keys = [t["key"] for t in json.loads(r.stdout)["tensors"]]
        check(keys and all(not k.startswith("app.") for k in keys) and "fc1.weight" in keys, f"--select app.model: {keys}")
    steps = sorted((fixtures / "layouts" / "run_report" / "run").iterdir(), key=lambda p: int(p.name.split("-")[1]))
    r = run(dcpctl, "report", *[str(s) for s in steps[:3]], "--json")
    if expect_rc(r, 0, "checkpoints named"):
        rep = json.loads(r.stdout)
        check([s["step"] for s in rep["steps"]] == [1, 2, 3] and rep["run"] is None, f"named steps {rep['steps']}")
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "r.html"
        r = run(dcpctl, "report", str(fixtures / "layouts" / "run_report" / "run"), "--html", str(page), "-q")
        if expect_rc(r, 0, "--html") and check(page.exists(), "--html wrote the page"):
            text = page.read_text()
            check(text.count("<svg class=\"plot") == 5 and "<script" not in text and "http" not in text.replace(
                "http-equiv", ""), "the page: 5 plots, no script, no URL")
        expect_rc(run(dcpctl, "report", str(fixtures / "layouts" / "run_report" / "run"), "--html", str(page)), 2,
                  "--html over an existing file without --force", "exists")
    titan = fixtures / "layouts" / "titan_llama3"
    plain = run(dcpctl, "report", str(titan / "run"), "--json")
    mapped = run(dcpctl, "report", str(titan / "run"), "--json", "--map", "torchtitan-llama3", "--config",
                 str(titan / "hf" / "config.json"))
    if expect_rc(plain, 0, "report titan_llama3") and expect_rc(mapped, 0, "report --map torchtitan-llama3"):
        # Renames and q/k row permutations leave every norm as it was: the same multiset of figures.
        a, b = (json.loads(r.stdout)["tensors"] for r in (plain, mapped))
        keys = [t["key"] for t in b]
        check(keys and all(k.startswith(("model.", "lm_head")) for k in keys), f"--map: Hugging Face names {keys[:3]}")
        la, lb = (sorted(float(t["series"]["l2"][0]) for t in x if t["role"] == "weight") for x in (a, b))
        check(len(la) == len(lb) > 0 and all(same(x, y, rel=1e-12) for x, y in zip(la, lb)),
              f"--map: the same norms under HF names ({len(la)} weights, {len(lb)} mapped)")
    # A step already in the map's target names (torchtitan's last_save_in_hf) is kept as it is: the
    # Hugging Face export of step-2 (float32) after step-2 itself has moved by exactly nothing.
    both = run(dcpctl, "report", str(titan / "run" / "step-2"), str(titan / "hf"), "--json", "--map", "torchtitan-llama3",
               "--config", str(titan / "hf" / "config.json"))
    if expect_rc(both, 0, "report --map of a step and its HF export"):
        ts = json.loads(both.stdout)["tensors"]
        ratios = [t["series"]["update_ratio"][1] for t in ts]
        check(ts and all(r is not None and float(r) == 0.0 for r in ratios), f"--map across names: update ratios {ratios[:4]}")
    expect_rc(run(dcpctl, "report", str(run_dir), "--fail-on", "bogus"), 2, "--fail-on bogus", "not a condition")
    expect_rc(run(dcpctl, "report", str(steps[0])), 2, "a checkpoint given as a run folder", "checkpoint")
    expect_rc(run(dcpctl, "report", str(run_dir), "--steps-per-pass", "2"), 2, "--steps-per-pass 2")


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2])
    names = sys.argv[3:] or CASES
    for n in names:
        if n not in CASES:
            fail(f"unknown case {n} (known: {', '.join(CASES)})")
    for name in each_case([n for n in names if n in CASES], 20, name=str):
        run_dir = fixtures / "layouts" / name / "run"
        if not run_dir.is_dir():
            fail(f"{name}: no fixture at {run_dir}")
            continue
        rep = check_case(dcpctl, run_dir)
        if name == "run_report" and rep:
            check_injected(dcpctl, fixtures, rep)
    if not sys.argv[3:] or "run_report" in names:
        check_options(dcpctl, fixtures)
    return summary("report", min_checks=200)


if __name__ == "__main__":
    sys.exit(main())
