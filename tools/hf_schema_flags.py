#!/usr/bin/env python3
"""The model schema's keys required under a flag, against transformers: for every type and every
condition under which src/check/hf_schema.json requires keys (a boolean field set, an optional
integer null), a tiny model of the type (tools/hf_schema.py's tiny_config) with that field set, saved
by transformers' save_pretrained, must `dcpctl verify` clean (exit 0) where transformers reloads it
clean. Not in CI (it builds a model per pair: ~250 pairs, ~5 minutes with 2 workers); run it after
regenerating the schema:

    .venv/bin/python tools/hf_schema_flags.py . build/cmd/dcpctl src/check/hf_schema.json [-j N] [TYPE...]

Prints each pair that is not "ok" (not built tiny with the flag, not reloaded by transformers, or
verify's exit status and output), then the counts; exits 1 when verify refused any pair."""
import contextlib, io, json, logging, multiprocessing, os, subprocess, sys, tempfile, warnings

REPO, DCPCTL, SCHEMA = sys.argv[1:4]
rest = sys.argv[4:]
jobs = 2
if rest[:1] == ["-j"]:
    jobs, rest = int(rest[1]), rest[2:]
sys.path.insert(0, os.path.join(REPO, "tools"))
os.environ["OMP_NUM_THREADS"] = "1"


def one(args):
    t, cond = args
    logging.disable(logging.WARNING); warnings.filterwarnings("ignore")
    import torch, transformers, hf_schema
    torch.set_num_threads(1)
    field, val = cond.rsplit("=", 1)
    v = {"true": True, "false": False, "null": None}.get(val, "skip")
    if v == "skip":
        return t, cond, "skip", ""
    try:
        cfg = hf_schema.tiny_config(t)
        c = cfg
        parts = field.split(".")
        for p in parts[:-1]:
            c = getattr(c, p)
        setattr(c, parts[-1], v)
        cls = getattr(transformers, hf_schema.primary_class(t))
        with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            torch.manual_seed(0)
            cls._from_config(cfg, dtype=torch.float32).save_pretrained(d)
            _, info = cls.from_pretrained(d, output_loading_info=True)
            if info["missing_keys"] or info["unexpected_keys"]:
                return t, cond, "not reloaded", str({k: sorted(v)[:3] for k, v in info.items() if v})[:200]
            r = subprocess.run([DCPCTL, "verify", d], capture_output=True, text=True)
            if r.returncode != 0:
                return t, cond, f"verify rc={r.returncode}", (r.stdout + r.stderr)[-600:]
            return t, cond, "ok", ""
    except Exception as e:
        return t, cond, "not built", f"{type(e).__name__}: {str(e)[:150]}"


if __name__ == "__main__":
    types = json.load(open(SCHEMA))["types"]
    todo = []
    for t, s in sorted(types.items()):
        if rest and t not in rest:
            continue
        for cond in sorted({k[3] for k in s["keys"] if k[3] and len(k) > 4 and k[4]}):
            todo.append((t, cond))
    print(f"{len(todo)} (type, condition) pairs", flush=True)
    counts = {}
    with multiprocessing.get_context("spawn").Pool(jobs, maxtasksperchild=10) as pool:
        for t, cond, res, why in pool.imap_unordered(one, todo):
            counts[res.split(" ")[0]] = counts.get(res.split(" ")[0], 0) + 1
            if res != "ok":
                print(f"{t} [{cond}] {res}: {why}", flush=True)
    print(counts)
    sys.exit(1 if counts.get("verify") else 0)
