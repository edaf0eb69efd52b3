#!/usr/bin/env python3
"""dcpctl ls / latest / prune on run folders built from checkpoints written by real torch.

Run folders are the real ones under tests/fixtures/layouts (torchtitan, Ray Train V1/V2) and
temporary ones assembled from copies of real checkpoints, then damaged the ways a trainer or a
crash damages them. prune is the one command that deletes user data: every case checks what
is left on disk. Needs only the Python standard library; tests/fixtures is never modified.
usage: runs_test.py DCPCTL FIXTURES_DIR    (exit 0 only when every check passed)
"""
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testlib  # noqa: E402

DCPCTL = FIX = None
RESULTS = {"n/a": 0}
LAYOUTS = {"dcp", "dcp-safetensors-items", "dcp-rank-local", "hf-dcp", "hf-safetensors", "torch-checkpointing"}
EXPECTED_LAYOUT = {"dcp": "dcp", "hf_safetensors_consolidated": "hf-safetensors"}


def expect(name, ok, detail=""):
    """One check named first (testlib.check): prints PASS/FAIL NAME."""
    if ok:
        print("PASS " + name, flush=True)
    return testlib.check(ok, name + ("" if not detail else ": " + detail))


def not_applicable(name, reason):
    RESULTS["n/a"] += 1
    print(f"N/A  {name}: {reason}", flush=True)


def dc(name, args, rc=0, err=(), out=()):
    """Runs dcpctl; one check: exit code `rc`, no crash, stderr naming each of `err`, stdout each of `out`."""
    p = testlib.run(DCPCTL, *args, timeout=300)  # a crash is a failure there, and fails this check too
    if testlib.crash_of(p):
        expect(name, False, f"dcpctl {' '.join(args)}: {testlib.crash_of(p)}")
        return p
    missing = [s for s in err if s not in p.stderr] + [s for s in out if s not in p.stdout]
    expect(name, p.returncode == rc and not missing,
          f"dcpctl {' '.join(args)}: exit {p.returncode} (wanted {rc})"
          + (f", output lacks {missing}" if missing else "") + f"\nstderr: {p.stderr.strip()[:600]}")
    return p


def parse_json(name, p):
    try:
        return json.loads(p.stdout)
    except ValueError as e:
        expect(name + ": stdout is JSON", False, f"{e}: {p.stdout[:300]!r}")
        return None


# --- files --------------------------------------------------------------------------------


def tree_state(root):
    """Everything about a tree but access times: names, types, modes, link targets, contents."""
    out = {}
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", st.st_mode)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", st.st_mode, st.st_size, st.st_mtime_ns, hashlib.sha256(f.read()).hexdigest())
    return out


def file_bytes(root):
    return sum(os.lstat(os.path.join(dp, f)).st_size for dp, _, fns in os.walk(root) for f in fns
               if stat.S_ISREG(os.lstat(os.path.join(dp, f)).st_mode))


def sample():
    return os.path.join(FIX, "sample", "ckpt")


def layout(*parts):
    return os.path.join(FIX, "layouts", *parts)


def put(run, name, src):
    dst = os.path.join(run, name)
    shutil.copytree(src, dst, symlinks=True)
    return dst


def write(path, data=b"x" * 1000):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def steps(run, *names):
    for n in names:
        put(run, n, sample())


def not_checkpoints(run):
    """A logs folder whose name ends in a number, an empty step folder, a file named like a step."""
    write(os.path.join(run, "logs-2024", "train.txt"), b"loss 1.0\n")
    os.makedirs(os.path.join(run, "step-30"))
    write(os.path.join(run, "step-40"), b"not a checkpoint\n")


def hidden_leftovers(run):
    return [n for n in os.listdir(run) if n.startswith(".dcpctl-prune-")]


# --- ls / latest ----------------------------------------------------------------------------

ENTRY_TYPES = {"name": str, "path": str, "model_path": str, "trainer": (str, type(None)), "step": (int, type(None)), "layout": (str, type(None)), "complete": bool,
               "problems": int, "why_incomplete": (str, type(None)), "bytes": int, "tensors": int, "dtypes": dict,
               "optimizer": bool, "mtime": int, "symlink": bool, "timing": dict}
TIMING_TYPES = {"judged": bool, "metadata_bytes": int, "open_seconds": (int, float), "check_seconds": (int, float)}
FOLDER_TIMING_TYPES = {"seconds": (int, float), "judged": int, "metadata_bytes": int}


def timing_problems(what, t, types):
    if not isinstance(t, dict) or set(t) != set(types):
        return [f"{what}: timing keys {sorted(t) if isinstance(t, dict) else t!r}"]
    return [f"{what}: timing {k}={t[k]!r}" for k, ty in types.items()
            if not isinstance(t[k], ty) or (ty is int and isinstance(t[k], bool)) or (t[k] is not True and t[k] is not False and t[k] < 0)]


def schema_problems(doc, run):
    bad = []
    if doc.get("schema_version") != 1 or doc.get("run_folder") != run:
        bad.append(f"schema_version/run_folder: {doc.get('schema_version')!r} {doc.get('run_folder')!r}")
    for e in doc.get("checkpoints", []):
        for k, t in ENTRY_TYPES.items():
            v = e.get(k, KeyError)
            if v is KeyError or not isinstance(v, t) or (t is int and isinstance(v, bool)):
                bad.append(f"{e.get('name')}: {k}={v!r}")
        if set(e) != set(ENTRY_TYPES):
            bad.append(f"{e.get('name')}: keys {sorted(set(e) ^ set(ENTRY_TYPES))}")
        if e.get("path") != os.path.join(run, str(e.get("name"))):
            bad.append(f"{e.get('name')}: path {e.get('path')}")
        if e.get("layout") not in LAYOUTS | {None}:
            bad.append(f"{e.get('name')}: layout {e.get('layout')}")
        if (e.get("why_incomplete") is None) != bool(e.get("complete")) or (e.get("complete") and e.get("problems") != 0):
            bad.append(f"{e.get('name')}: complete={e.get('complete')} why={e.get('why_incomplete')!r} problems={e.get('problems')}")
        bad += timing_problems(e.get("name"), e.get("timing"), TIMING_TYPES)
        # ls judges every checkpoint: each one's metadata was read (a symlink's too).
        if isinstance(e.get("timing"), dict) and e["timing"].get("judged") is not True:
            bad.append(f"{e.get('name')}: not judged by ls")
        if sum(e.get("dtypes", {}).values()) != e.get("tensors"):
            bad.append(f"{e.get('name')}: dtypes {e.get('dtypes')} do not add up to {e.get('tensors')} tensors")
    bad += timing_problems("folder", doc.get("timing"), FOLDER_TIMING_TYPES)
    entries = doc.get("checkpoints", [])
    if isinstance(doc.get("timing"), dict) and doc["timing"].get("judged") != len(entries):
        bad.append(f"folder timing judged {doc['timing'].get('judged')} of {len(entries)}")
    if isinstance(doc.get("timing"), dict) and all(isinstance(e.get("timing"), dict) for e in entries) and \
            doc["timing"].get("metadata_bytes") != sum(e["timing"].get("metadata_bytes", 0) for e in entries):
        bad.append("folder timing metadata_bytes is not the sum of the entries'")
    newest = [e["path"] for e in doc.get("checkpoints", []) if e.get("complete")]
    if doc.get("newest_complete") != (newest[-1] if newest else None):
        bad.append(f"newest_complete {doc.get('newest_complete')!r}")
    return bad


def ls_json(name, run, rc=0):
    p = dc(f"{name}: ls --json exits {rc}", ["ls", "--json", run], rc)
    doc = parse_json(name, p) if p.returncode == 0 else None
    if doc is not None:
        bad = schema_problems(doc, run)
        expect(f"{name}: ls --json schema", not bad, "; ".join(bad[:6]))
    return doc


def latest_is(name, run, want):
    p = dc(f"{name}: latest exits 0", ["latest", run])
    expect(f"{name}: latest prints exactly {os.path.basename(want)}", p.stdout == want + "\n", repr(p.stdout))
    p = dc(f"{name}: latest --json exits 0", ["latest", "--json", run])
    doc = parse_json(name + " latest", p) or {}
    expect(f"{name}: latest --json", doc.get("schema_version") == 1 and doc.get("run_folder") == run
          and doc.get("path") == want and doc.get("model_path") == want and isinstance(doc.get("step"), (int, type(None)))
          and doc.get("layout") in LAYOUTS
          and set(doc) == {"schema_version", "run_folder", "path", "model_path", "trainer", "step", "layout", "timing"}
          and not timing_problems("latest", doc.get("timing"), FOLDER_TIMING_TYPES), repr(doc))
    # latest reads only what its answer needs: the checkpoints from the newest down to the answer.
    listed = [e["path"] for e in (ls_json(name + " (for latest)", run) or {"checkpoints": []})["checkpoints"]]
    if want in listed and isinstance(doc.get("timing"), dict):
        expect(f"{name}: latest judged only the checkpoints from the newest down to {os.path.basename(want)}",
              doc["timing"].get("judged") == len(listed) - listed.index(want), repr(doc["timing"]))


def real_run(name, run, exp_names, exp_layouts):
    doc = ls_json(name, run) or {"checkpoints": []}
    got = [e["name"] for e in doc["checkpoints"]]
    expect(f"{name}: lists {len(exp_names)} checkpoints in order", got == exp_names, f"{got} != {exp_names}")
    expect(f"{name}: all complete with torch's layouts",
          [(e["complete"], e["layout"]) for e in doc["checkpoints"]] == [(True, la) for la in exp_layouts],
          repr([(e["name"], e["complete"], e["layout"], e["why_incomplete"]) for e in doc["checkpoints"]]))
    expect(f"{name}: bytes are the files' sizes",
          all(e["bytes"] == file_bytes(e["path"]) for e in doc["checkpoints"]), "")
    if not exp_names:
        return
    newest = os.path.join(run, exp_names[-1])
    latest_is(name, run, newest)
    dc(f"{name}: inspect on the latest path", ["inspect", newest])
    dc(f"{name}: verify on the latest path", ["verify", newest])
    p = dc(f"{name}: ls (text) exits 0", ["ls", run])
    expect(f"{name}: ls text names every checkpoint and the newest",
          all(n in p.stdout for n in exp_names) and f"newest complete: {newest}" in p.stdout, p.stdout[-300:])


def real_run_folders(tmp):
    tt = json.load(open(layout("run_torchtitan", "expected.json")))
    real_run("torchtitan", layout("run_torchtitan", "run"), tt["present_steps"],
             [EXPECTED_LAYOUT[tt["steps"][s]["layout"]] for s in tt["present_steps"]])
    hf = json.load(open(layout("run_torchtitan_hf", "expected.json")))
    real_run("torchtitan-hf", layout("run_torchtitan_hf", "run"), hf["present_steps"],
             [EXPECTED_LAYOUT[hf["steps"][s]["layout"]] for s in hf["present_steps"]])
    for case in ("run_ray", "run_ray_v1"):
        exp = json.load(open(layout(case, "expected.json")))
        cks = sorted(((v["epoch"], k) for k, v in exp["checkpoints"].items() if v["layout"] == "dcp"))
        parent = os.path.dirname(cks[0][1])
        run = os.path.join(layout(case, "run"), parent) if parent else layout(case, "run")
        names = [os.path.basename(k) for _, k in cks]
        real_run(case, run, names, ["dcp"] * len(names))
        if case == "run_ray":  # V2: timestamps, so no single step number
            doc = ls_json(case + " steps", run) or {"checkpoints": []}
            expect("run_ray: timestamp names have step null", all(e["step"] is None for e in doc["checkpoints"]), "")
        else:  # the trial folder's parent holds no checkpoint itself; checkpoint_000003 holds a .pt only
            dc("run_ray_v1: ls on the experiment folder (no checkpoint subfolder) exits 2",
               ["ls", layout(case, "run")], 2, [layout(case, "run"), "no checkpoint"])
    run = layout("run_torchtitan", "run")
    newest = os.path.join(run, "step-6")
    for cmd in (["inspect", run], ["verify", run], ["consolidate", run, "-o", os.path.join(tmp, "x.safetensors")],
                ["reshard", run, "-w", "1", "-o", os.path.join(tmp, "resharded")]):
        dc(f"{cmd[0]} on a run folder exits 2 naming its checkpoints and the newest",
           cmd, 2, [run, "step-2", "step-4", "step-6", newest])
    expect("refused commands wrote nothing", not os.path.exists(os.path.join(tmp, "x.safetensors"))
          and not os.path.exists(os.path.join(tmp, "resharded")), str(os.listdir(tmp)))


def refusals(tmp):
    dc("ls on a checkpoint dir exits 2", ["ls", sample()], 2, [sample(), "is a checkpoint"])
    dc("latest on a checkpoint dir exits 2", ["latest", sample()], 2, [sample(), "is a checkpoint"])
    dc("prune on a checkpoint dir exits 2", ["prune", "--keep", "1", sample()], 2, [sample(), "is a checkpoint"])
    missing = os.path.join(tmp, "no-such-run")
    dc("ls on a missing path exits 4", ["ls", missing], 4, [missing])
    dc("latest on a missing path exits 4", ["latest", missing], 4, [missing])
    empty = os.path.join(tmp, "empty-run")
    not_checkpoints(empty)
    before = tree_state(empty)
    dc("ls on a folder with only non-checkpoints exits 2", ["ls", empty], 2, [empty, "no checkpoint"])
    dc("prune on a folder with only non-checkpoints exits 2", ["prune", "--keep", "1", empty], 2, [empty])
    expect("that folder is untouched", tree_state(empty) == before)


def naming_and_order(tmp):
    run = os.path.join(tmp, "names")
    steps(run, "step-10", "step-9", "step-100",  # and complete copies named as saves in flight:
          "step-101.tmp", "step-102-tmp", "step-103.partial", "step-104.incomplete")
    not_checkpoints(run)
    doc = ls_json("names", run) or {"checkpoints": []}
    got = [(e["name"], e["step"]) for e in doc["checkpoints"]]
    want = [("step-9", 9), ("step-10", 10), ("step-100", 100), ("step-101.tmp", 101), ("step-102-tmp", 102),
            ("step-103.partial", 103), ("step-104.incomplete", 104)]
    expect("names: ordered by number (step-9 before step-10), non-checkpoints never listed", got == want, repr(got))
    flight = [e for e in doc["checkpoints"] if e["step"] and e["step"] > 100]
    expect("names: in-flight names are incomplete, why says so",
          len(flight) == 4 and all(not e["complete"] and "in flight" in (e["why_incomplete"] or "") for e in flight),
          repr([(e["name"], e["why_incomplete"]) for e in flight]))
    latest_is("names (a complete step-N.tmp is not latest)", run, os.path.join(run, "step-100"))
    p = dc("names: ls text", ["ls", run])
    expect("names: ls text marks in-flight ones INCOMPLETE with why",
          p.stdout.count("INCOMPLETE") == 4 and p.stdout.count("why: its name marks a save in flight") == 4
          and "logs-2024" not in p.stdout and "step-30" not in p.stdout and "step-40" not in p.stdout, p.stdout)


def remove(fname):
    def damage(d):
        os.remove(os.path.join(d, fname))
        return fname
    return damage


def damage_truncated(d):
    p = os.path.join(d, "__0_0.distcp")
    os.truncate(p, os.path.getsize(p) - 100)
    return "__0_0.distcp"


def damage_hf_index(d):
    p = os.path.join(d, "model.safetensors.index.json")
    idx = json.load(open(p))
    idx["weight_map"]["model.not_saved.weight"] = next(iter(idx["weight_map"].values()))
    json.dump(idx, open(p, "w"))
    return "model.not_saved.weight"


def incomplete_cases(tmp):
    hf_src = layout("run_torchtitan_hf", "run", "step-4")
    cases = [("missing .distcp", sample(), remove("__1_0.distcp"), "dcp"),
             ("truncated .distcp", sample(), damage_truncated, "dcp"),
             ("missing .metadata", sample(), remove(".metadata"), None),
             ("HF index names a key no file holds", hf_src, damage_hf_index, "hf-safetensors"),
             ("rank-local without __1.metadata", layout("rank_local", "ckpt"), remove("__1.metadata"), "dcp-rank-local")]
    good = [sample(), layout("hf_sharded", "ckpt"), layout("rank_local", "ckpt"), hf_src]
    for i, (what, src, damage, want_layout) in enumerate(cases):
        run = os.path.join(tmp, f"incomplete-{i}")
        put(run, "step-1", good[i % len(good)])
        bad = put(run, "step-2", src)
        named = damage(bad)
        doc = ls_json(what, run) or {"checkpoints": [{}, {}]}
        e1, e2 = (doc["checkpoints"] + [{}, {}])[:2]
        expect(f"{what}: step-1 complete, step-2 incomplete naming {named}",
              e1.get("complete") is True and e2.get("complete") is False and named in (e2.get("why_incomplete") or "")
              and e2.get("layout") == want_layout, repr(e2.get("why_incomplete")) + f" layout {e2.get('layout')}")
        # verify's report is data (stdout); ls's why is its first problem
        dc(f"{what}: verify agrees (exit 3, same problem)", ["verify", bad], 3, out=[named, e2.get("why_incomplete") or "?"])
        latest_is(what, run, os.path.join(run, "step-1"))
    # Nothing complete at all.
    run = os.path.join(tmp, "none-complete")
    remove(".metadata")(put(run, "step-1", sample()))
    remove("__1_0.distcp")(put(run, "step-2", sample()))
    before = tree_state(run)
    dc("nothing complete: latest exits 3 naming each step", ["latest", run], 3, [run, "step-1", "step-2", "no complete"])
    dc("nothing complete: prune exits 3", ["prune", "--keep", "1", "--incomplete", run], 3, [run, "complete"])
    expect("nothing complete: prune removed nothing", tree_state(run) == before)


# --- prune ----------------------------------------------------------------------------------


def prune_rules(tmp):
    run, outside = os.path.join(tmp, "prune", "run"), os.path.join(tmp, "prune", "elsewhere")
    remove(".metadata")(put(run, "step-1", sample()))  # old and incomplete
    steps(run, "step-2", "step-3", "step-4", "step-5", "step-6")
    remove(".metadata")(put(run, "step-7", sample()))  # newer than the newest complete: in flight
    put(outside, "linked-ckpt", sample())
    os.symlink(os.path.join(outside, "linked-ckpt"), os.path.join(run, "step-0"))  # an old checkpoint, linked
    not_checkpoints(run)
    state, out_state = tree_state(run), tree_state(outside)
    listed = {e["name"]: e for e in (ls_json("prune run", run) or {"checkpoints": []})["checkpoints"]}
    expect("prune run: the linked step-0 is listed as a symlink", listed.get("step-0", {}).get("symlink") is True, repr(listed.get("step-0")))

    dc("prune --keep 0 exits 2", ["prune", "--keep", "0", run], 2, ["--keep"])
    dc("prune --keep -3 exits 2", ["prune", "--keep", "-3", run], 2, ["--keep"])
    p = dc("prune --dry-run exits 0", ["prune", "--keep", "2", "--incomplete", "--dry-run", run])
    expect("prune --dry-run lists what would go", all(f"remove  {os.path.join(run, n)}" in p.stdout
                                                     for n in ("step-1", "step-2", "step-3", "step-4")), p.stdout)
    p = dc("prune --dry-run --json exits 0", ["prune", "--keep", "2", "--dry-run", "--json", run])
    doc = parse_json("dry-run", p) or {}
    expect("prune --dry-run --json: removed step-2..4, kept the rest",
          [r["name"] for r in doc.get("removed", [])] == ["step-2", "step-3", "step-4"] and doc.get("dry_run") is True
          and sorted(k["name"] for k in doc.get("kept", [])) == ["step-0", "step-1", "step-5", "step-6", "step-7"]
          and doc.get("bytes_freed") == sum(listed[n]["bytes"] for n in ("step-2", "step-3", "step-4"))
          and doc.get("keep") == 2 and doc.get("incomplete") is False and doc.get("schema_version") == 1, repr(doc)[:800])
    expect("prune --dry-run / --keep 0: the run folder is byte-identical", tree_state(run) == state)

    p = dc("prune --keep 2 --json exits 0", ["prune", "--keep", "2", "--json", run])
    doc = parse_json("prune", p) or {}
    expect("prune --keep 2: report names step-2..4 removed", doc.get("dry_run") is False
          and [r["name"] for r in doc.get("removed", [])] == ["step-2", "step-3", "step-4"], repr(doc)[:600])
    left = sorted(os.listdir(run))
    expect("prune --keep 2: exactly step-2..4 gone, no hidden leftovers",
          left == sorted(["step-0", "step-1", "step-5", "step-6", "step-7", "logs-2024", "step-30", "step-40"]), repr(left))
    kept_same = {k: v for k, v in state.items() if not k.split(os.sep)[0] in ("step-2", "step-3", "step-4")}
    expect("prune --keep 2: everything else byte-identical", tree_state(run) == kept_same)
    expect("prune --keep 2: the symlinked checkpoint's target intact", tree_state(outside) == out_state)

    p = dc("prune --keep 1 --incomplete exits 0", ["prune", "--keep", "1", "--incomplete", run])
    left = sorted(os.listdir(run))
    expect("prune --keep 1 --incomplete: old incomplete step-1 and step-5 gone; newest, in-flight step-7, link, "
          "non-checkpoints stay", left == sorted(["step-0", "step-6", "step-7", "logs-2024", "step-30", "step-40"]), repr(left))
    expect("... and what stays is byte-identical", tree_state(run) == {k: v for k, v in kept_same.items()
                                                                     if k.split(os.sep)[0] not in ("step-1", "step-5")})
    expect("... and the link target intact", tree_state(outside) == out_state)
    latest_is("after prune", run, os.path.join(run, "step-6"))


def symlinks_inside(tmp):
    run, outside = os.path.join(tmp, "links", "run"), os.path.join(tmp, "links", "outside")
    for rel in ("file.bin", "dir/a.bin", "dir/sub/b.bin"):
        write(os.path.join(outside, rel), os.urandom(4096))
    shutil.copy(os.path.join(sample(), "__0_0.distcp"), os.path.join(outside, "shared.distcp"))
    victim = put(run, "step-1", sample())
    os.remove(os.path.join(victim, "__0_0.distcp"))  # a data file that is a link to a file elsewhere
    os.symlink(os.path.join(outside, "shared.distcp"), os.path.join(victim, "__0_0.distcp"))
    os.symlink(os.path.join(outside, "file.bin"), os.path.join(victim, "extra.bin"))
    os.symlink(os.path.join(outside, "dir"), os.path.join(victim, "extra_dir"))
    os.symlink(outside, os.path.join(victim, "up"))
    put(run, "step-2", sample())
    doc = ls_json("links", run) or {"checkpoints": []}
    expect("links: step-1 (data file linked from outside) is complete", [e["complete"] for e in doc["checkpoints"]] == [True, True])
    before = tree_state(outside)
    p = dc("links: prune --keep 1 exits 0", ["prune", "--keep", "1", run])
    expect("links: prune says what it removed", f"removed {victim}" in p.stdout, p.stdout)
    expect("links: step-1 gone, step-2 kept", sorted(os.listdir(run)) == ["step-2"], repr(os.listdir(run)))
    expect("links: every link target outside the run folder survives intact", tree_state(outside) == before)


def symlinked_checkpoint(tmp):
    run, outside = os.path.join(tmp, "linked", "run"), os.path.join(tmp, "linked", "outside")
    put(outside, "ckpt", sample())
    os.makedirs(run)
    os.symlink(os.path.join(outside, "ckpt"), os.path.join(run, "step-1"))
    steps(run, "step-2", "step-3")
    before = tree_state(outside)
    p = dc("linked: prune --keep 1 --incomplete --json exits 0", ["prune", "--keep", "1", "--incomplete", "--json", run])
    doc = parse_json("linked", p) or {}
    expect("linked: the symlinked step-1 is kept (reason says link)",
          any(k["name"] == "step-1" and "link" in k["reason"] for k in doc.get("kept", [])), repr(doc.get("kept")))
    expect("linked: the link stays and step-2 is gone", sorted(os.listdir(run)) == ["step-1", "step-3"]
          and os.path.islink(os.path.join(run, "step-1")), repr(os.listdir(run)))
    expect("linked: the link's target intact", tree_state(outside) == before)


def newest_survives(name, run, *prune_args):
    """prune never takes data the newest complete checkpoint needs: the path latest printed before
    is printed after, and verify still passes on it."""
    latest = lambda: subprocess.run([DCPCTL, "latest", run], capture_output=True, text=True, timeout=300)
    before = latest().stdout
    dc(f"{name}: prune exits 0", ["prune", *prune_args, run])
    after, ver = latest(), subprocess.run([DCPCTL, "verify", before.strip()], capture_output=True, text=True, timeout=300)
    expect(f"{name}: the newest complete survives prune", after.returncode == 0 and after.stdout == before
          and ver.returncode == 0, f"latest was {before.strip()}; now exit {after.returncode} {after.stdout.strip()!r}"
          f" {after.stderr.strip()!r}; verify on it exits {ver.returncode}: {(ver.stderr or ver.stdout).strip()[:300]}")


def links_between_checkpoints(tmp):
    run = os.path.join(tmp, "alias")  # a checkpoint name that is a link to a sibling: the newest complete
    steps(run, "step-1", "step-2", "step-3")
    os.symlink("step-2", os.path.join(run, "step-99"))
    newest_survives("link to a sibling as newest (step-99 -> step-2)", run, "--keep", "1")
    run = os.path.join(tmp, "dedup")  # the newest shares an unchanged data file with an older one by a link
    steps(run, "step-1", "step-2", "step-3")
    os.remove(os.path.join(run, "step-3", "__0_0.distcp"))
    os.symlink(os.path.join("..", "step-2", "__0_0.distcp"), os.path.join(run, "step-3", "__0_0.distcp"))
    newest_survives("newest links a file of an older step (step-3/__0_0.distcp -> ../step-2/)", run, "--keep", "1")


def unremovable(tmp):
    name = "prune of a checkpoint that cannot be removed"
    run = os.path.join(tmp, "perm", "run")
    victim = put(run, "step-1", sample())
    pinned_dir = os.path.join(victim, "extra")
    pinned = os.path.join(pinned_dir, "pinned.bin")
    write(pinned)
    steps(run, "step-2", "step-3")
    if os.geteuid() != 0:
        os.chmod(pinned_dir, 0o555)
        undo = lambda: os.chmod(pinned_dir, 0o755)
        how = "chmod 0555"
    else:  # root ignores permissions: an immutable file cannot be unlinked even by root
        chattr = shutil.which("chattr")
        r = subprocess.run([chattr, "+i", pinned], capture_output=True, text=True) if chattr else None
        if r is None or r.returncode != 0:
            not_applicable(name, "running as root and chattr +i is unavailable here: "
                           + (r.stderr.strip() if r else "no chattr"))
            return
        undo = lambda: subprocess.run([chattr, "-i", pinned], check=True)
        how = "chattr +i (running as root)"
    try:
        others = {n: tree_state(os.path.join(run, n)) for n in ("step-2", "step-3")}
        dc(f"{name} ({how}): exit 4 naming it", ["prune", "--keep", "2", run], 4, [victim])
        expect(f"{name}: the remains keep the original name, no hidden leftovers",
              os.path.isdir(victim) and os.path.exists(pinned) and not hidden_leftovers(run), repr(os.listdir(run)))
        expect(f"{name}: the other checkpoints are untouched",
              all(tree_state(os.path.join(run, n)) == s for n, s in others.items()))
    finally:
        undo()


def wait_state(pid, timeout=300):
    """The process state letter from /proc/<pid>/stat once it is stopped (T) or gone (None). The
    timeout is a hang guard far above what load stretches a stop (milliseconds away) to."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return None
        if st in ("T", "Z"):
            return st
        time.sleep(0.02)
    return "timeout"


def mid_run_changes(tmp):
    run = os.path.join(tmp, "midrun")
    steps(run, "step-1", "step-2", "step-3")
    hidden = os.path.join(run, ".dcpctl-prune-step-1")
    proc = subprocess.Popen([DCPCTL, "prune", "--keep", "2", run], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, DCPCTL_FAILPOINT="prune-renamed:stop"))
    try:
        mid_run_steps(run, hidden, proc)
    finally:  # never leave a stopped dcpctl behind
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def mid_run_steps(run, hidden, proc):
    st = wait_state(proc.pid)
    stopped = expect("mid-run: prune stops itself after renaming the victim", st == "T" and os.path.isdir(hidden)
                    and not os.path.exists(os.path.join(run, "step-1")), f"state {st}, {os.listdir(run)}")
    new_state = None
    if stopped:
        for rel in ("late.bin", "late_dir/late2.bin"):
            write(os.path.join(hidden, rel), b"written meanwhile")
        steps(run, "step-4")
        new_state = tree_state(os.path.join(run, "step-4"))
    while proc.poll() is None:  # continue it at every stop (one per victim)
        os.kill(proc.pid, signal.SIGCONT)
        if wait_state(proc.pid) in ("timeout", "Z"):
            break
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    expect("mid-run: prune finishes with exit 0", proc.returncode == 0, f"exit {proc.returncode}: {err}")
    expect("mid-run: the victim fully gone, no hidden dir left",
          not os.path.exists(hidden) and not hidden_leftovers(run) and not os.path.exists(os.path.join(run, "step-1")),
          repr(os.listdir(run)))
    if stopped:
        expect("mid-run: the step written meanwhile is untouched",
              tree_state(os.path.join(run, "step-4")) == new_state and os.path.isdir(os.path.join(run, "step-2")))
        latest_is("mid-run", run, os.path.join(run, "step-4"))


def interrupted_prune(tmp):
    """A prune killed right after renaming its victim leaves .dcpctl-prune-<name>: never listed as a
    checkpoint (it would look complete), and the next prune finishes removing it."""
    run = os.path.join(tmp, "interrupted")
    steps(run, "step-1", "step-2", "step-3")
    hidden = os.path.join(run, ".dcpctl-prune-step-1")
    proc = subprocess.Popen([DCPCTL, "prune", "--keep", "2", run], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, DCPCTL_FAILPOINT="prune-renamed:stop"))
    st = wait_state(proc.pid)
    proc.kill()
    proc.communicate()
    if not expect("interrupted: prune stopped after the rename, then killed", st == "T" and os.path.isdir(hidden), f"state {st}"):
        return
    doc = ls_json("interrupted: ls --json", run)
    if doc is not None:
        expect("interrupted: the remains are no checkpoint, and are named as remains",
              [c["name"] for c in doc["checkpoints"]] == ["step-2", "step-3"] and doc["prune_leftovers"] == [hidden],
              json.dumps(doc)[:400])
    dc("interrupted: ls names the remains", ["ls", run], out=(".dcpctl-prune-step-1",))
    latest_is("interrupted", run, os.path.join(run, "step-3"))
    dc("interrupted: the next prune finishes the removal", ["prune", "--keep", "2", run], out=(hidden,))
    expect("interrupted: nothing left but step-2 and step-3", sorted(os.listdir(run)) == ["step-2", "step-3"], repr(os.listdir(run)))


def save_in_flight(tmp):
    run = os.path.join(tmp, "inflight")
    steps(run, "step-1", "step-2")
    remove(".metadata")(put(run, "step-3", sample()))  # rank files written, .metadata not yet
    put(run, "step-4.tmp", sample())
    keep = {n: tree_state(os.path.join(run, n)) for n in ("step-2", "step-3", "step-4.tmp")}
    p = dc("in flight: prune -q --keep 1 --incomplete exits 0", ["prune", "-q", "--keep", "1", "--incomplete", run])
    expect("in flight: prune -q prints nothing", p.stdout == "", repr(p.stdout))
    expect("in flight: step-1 removed; step-2 and the newer incomplete step-3, step-4.tmp survive intact",
          sorted(os.listdir(run)) == sorted(keep) and all(tree_state(os.path.join(run, n)) == s for n, s in keep.items()),
          repr(os.listdir(run)))


def torch_checkpointing_run(tmp):
    """torch-checkpointing 0.1.1's CheckpointManager (tests/fixtures/layouts/tc_run): step-10/20/30
    saved, then a save killed before its commit (the rename of tmp_step-40/ onto step-40/): every
    file is in tmp_step-40/, so only its name says the save did not finish."""
    exp = json.load(open(layout("tc_run", "expected.json")))
    run = layout("tc_run", "run")
    names = exp["complete"] + exp["in_flight"]
    expect("tc_run: tmp_step-40 holds every file a finished step holds",
          exp["files"]["tmp_step-40"] == [n for n in exp["files"]["step-30"] if n != "metadata.pkl"], repr(exp["files"]))
    doc = ls_json("tc_run", run) or {"checkpoints": []}
    got = [(e["name"], e["complete"], e["layout"]) for e in doc["checkpoints"]]
    want = [(n, True, "torch-checkpointing") for n in exp["complete"]] + [("tmp_step-40", False, "torch-checkpointing")]
    expect("tc_run: ls lists step-10, step-20, step-30 complete and tmp_step-40 in flight, in order", got == want,
          f"{got} != {want}")
    tmp40 = [e for e in doc["checkpoints"] if e["name"] == "tmp_step-40"]
    expect("tc_run: tmp_step-40 is incomplete because its name marks a save in flight",
          tmp40 and "in flight" in (tmp40[0]["why_incomplete"] or "")
          and "renames it to step-40/" in tmp40[0]["why_incomplete"], repr(tmp40))
    expect("tc_run: steps are the names' numbers", [e["step"] for e in doc["checkpoints"]] == [10, 20, 30, 40], "")
    newest = os.path.join(run, "step-30")
    latest_is("tc_run", run, newest)
    p = dc("tc_run: ls (text) exits 0", ["ls", run])
    expect("tc_run: ls text names every step and the newest complete",
          all(n in p.stdout for n in names) and f"newest complete: {newest}" in p.stdout, p.stdout[-400:])
    dc("tc_run: inspect on the run folder exits 2 naming the newest complete", ["inspect", run], 2, [run, newest])
    # A copy: prune keeps the newest complete and the newer save in flight, and removes an older
    # left-over tmp_ only with --incomplete.
    copy = os.path.join(tmp, "run")
    shutil.copytree(run, copy)
    shutil.copytree(os.path.join(run, "tmp_step-40"), os.path.join(copy, "tmp_step-15"))
    keep = {n: tree_state(os.path.join(copy, n)) for n in ("step-30", "tmp_step-40", "tmp_step-15")}
    dc("tc_run: prune --keep 1 exits 0", ["prune", "-q", "--keep", "1", copy])
    expect("tc_run: prune --keep 1 removed step-10 and step-20; step-30, tmp_step-40 and tmp_step-15 intact",
          sorted(os.listdir(copy)) == sorted(keep) and all(tree_state(os.path.join(copy, n)) == s for n, s in keep.items()),
          repr(sorted(os.listdir(copy))))
    dc("tc_run: prune --keep 1 --incomplete exits 0", ["prune", "-q", "--keep", "1", "--incomplete", copy])
    expect("tc_run: --incomplete removed the older tmp_step-15, never the newer tmp_step-40",
          sorted(os.listdir(copy)) == ["step-30", "tmp_step-40"]
          and tree_state(os.path.join(copy, "tmp_step-40")) == keep["tmp_step-40"], repr(sorted(os.listdir(copy))))
    # A finished-looking step missing one rank's file is incomplete: latest falls back past it.
    os.remove(os.path.join(copy, "step-30", "model_1.pt"))
    shutil.copytree(os.path.join(run, "step-20"), os.path.join(copy, "step-20"))
    latest_is("tc_run (step-30 without model_1.pt)", copy, os.path.join(copy, "step-20"))


def main():
    global DCPCTL, FIX
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    DCPCTL, FIX = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    fixtures_before = tree_state(FIX)
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="dcpctl-runs-") as tmp:
        for scenario in (real_run_folders, refusals, naming_and_order, incomplete_cases, prune_rules,
                         symlinks_inside, symlinked_checkpoint, links_between_checkpoints, unremovable, mid_run_changes,
                         interrupted_prune, save_in_flight, torch_checkpointing_run):
            work = os.path.join(tmp, scenario.__name__)
            os.makedirs(work)
            try:
                scenario(work)
            except Exception as e:  # a scenario that cannot go on is one failure, not the end of the run
                expect(f"{scenario.__name__}: ran to the end", False, f"{type(e).__name__}: {e}")
    expect("tests/fixtures unmodified", tree_state(FIX) == fixtures_before)
    if RESULTS["n/a"]:
        print(f"({RESULTS['n/a']} expect(s) not applicable here, see N/A above)")
    print(f"({time.time() - start:.1f} s)")
    return testlib.summary("runs_test")


if __name__ == "__main__":
    sys.exit(main())
