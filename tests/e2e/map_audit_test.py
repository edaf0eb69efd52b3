#!/usr/bin/env python3
"""Every built-in key map on every fixture it matches: a map never drops a model weight without
saying so in the exit code (issue 49, item 1).

    map_audit_test.py DCPCTL FIXTURES_DIR

For each checkpoint under FIXTURES_DIR (a folder with a .metadata, a Hugging Face folder with
*.safetensors) and each built-in map (src/maps/*.json, read here as the files they are, not
through dcpctl), the keys are sorted out independently of dcpctl's engine: the input's tensor keys
(`dcpctl inspect --json`, which e2e-fixtures checks against torch's view), the side the map reads
them from (tests/interop/map_reference.py's `direction`, the Python reference implementation of
the maps' semantics), the map's "model" namespaces of that side, and every pattern of that side
(map_reference's `Pattern`). A map that matches none of a fixture's keys, or as many on each side,
does not apply to it (dcpctl: exit 2 saying so). Otherwise `consolidate FIX -o x.safetensors --map
M --dry-run --json` must either
  * exit 0 with no model key in `map.left_out` (the model keys no pattern matches are none), or
  * exit 5 naming the map and exactly the model keys no pattern matches (its "no rule covers (N):"
    list), and write nothing;
  * with no such key, exit 5 when the checkpoint is another framework's (issue 50: more keys of
    neither side than the map matched, `foreign` below), naming the map, the direction and the
    count, and write nothing.
A map that needs config.json's numbers gets the fixture's own (its folder's or a parent's
config.json, as a user would pass --config). The table printed at the end is the audit: which
fixture each map maps, and which it refuses naming which keys (docs/maps.md quotes it).

    map_audit_test.py DCPCTL FIXTURES_DIR --sanitized

With --sanitized (the sanitizer tree, CI's second pass, after the first ran the whole audit with the
plain build: about 1,900 dcpctl runs, 118 s instrumented against 18 s) the same checks on a subset
of the (fixture, map) pairs: every fixture's keys as before (`inspect` or the dequantized plan),
then every pair whose model keys the map all covers (mapped, or refused for a lost input or a
missing config.json: the map engine's whole work), and of the refusals (model keys no rule
covers; another framework's keys) the first pair of each map and of each fixture with that
outcome, and of "the map does not apply" (key matching alone, before anything is read) the first
pair of each map, so that every map takes every path it takes on any fixture, and every fixture's
keys go through every refusal that reads them, in the instrumented dcpctl. The pairs left out are
counted in the output.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "interop"))

from testlib import EXIT_OK, EXIT_UNSUPPORTED, EXIT_USAGE, check, fail, run, summary  # noqa: E402
import map_reference as mr  # noqa: E402

MAPS = HERE.parent.parent / "src" / "maps"


def inputs(fixtures: Path) -> list[Path]:
    """Every checkpoint a map could be given: a DCP folder, a Hugging Face folder (model*.safetensors,
    an index), and the exports the real converters wrote beside their fixtures (expected_hf)."""
    found = set()
    for p in fixtures.rglob("*"):
        if p.name == ".metadata" or p.name.endswith(".safetensors.index.json") or \
                (p.name.startswith("model") and p.suffix == ".safetensors" and p.parent.name != "sharded"):
            found.add(p.parent)
        elif p.name == "expected_hf.safetensors":
            found.add(p)
    return sorted(found)


def quantized(ckpt: Path) -> bool:
    return "hf_fp8" in str(ckpt)


def tensor_keys(dcpctl: str, ckpt: Path) -> list[str] | None:
    """The tensor keys a map is given: the checkpoint's (inspect), or for a quantized release the
    view --dtype makes of it (scales folded into their weights), as a dry run plans it."""
    if quantized(ckpt):
        with tempfile.TemporaryDirectory() as tmp:
            r = run(dcpctl, "consolidate", ckpt, "-o", Path(tmp) / "x.safetensors", "--dtype", "bf16", "--dry-run", "--json")
        if r.returncode != 0:
            return None
        keys = []
        for rec in json.loads(r.stdout)["plan"]:
            if rec["key"] not in keys:
                keys.append(rec["key"])
        return keys
    r = run(dcpctl, "inspect", ckpt, "--json")
    if r.returncode != 0:
        return None
    return [e["key"] for e in json.loads(r.stdout)["items"] if e.get("kind") == "tensor"]


def config_for(ckpt: Path, fixtures: Path) -> Path | None:
    for d in [ckpt, *ckpt.parents]:
        if (d / "config.json").is_file():
            return d / "config.json"
        if d == fixtures:
            break
    return None


def matcher(m: dict, side: str, config: dict | None):
    """Whether a key matches a pattern of `side` (an offset pattern whose parameter is unknown
    counts as matching, as it does for dcpctl's direction)."""
    params = mr.Params(m, config)
    pats = [mr._pattern(p) for r in m["rules"] for p in mr._patterns(r, side)]

    def matches(k: str) -> bool:
        for p in pats:
            try:
                if p.match(k, params) is not None:
                    return True
            except mr.MapError:
                return True
        return False

    return matches


def uncovered(m: dict, side: str, keys: list[str], config: dict | None) -> list[str]:
    """The model keys of `side` that no pattern of that side matches."""
    matches = matcher(m, side, config)
    return [k for k in keys if any(k.startswith(x) for x in m["model"][side]) and not matches(k)]


def foreign(m: dict, side: str, keys: list[str], config: dict | None) -> tuple[list[str], int]:
    """Issue 50 item 2: the keys of neither side (no pattern of either side matches them, they lie
    under neither side's model namespaces, and no run of their dot-separated parts is a key of the
    input side: one its patterns match or under its model namespaces), and how many keys the
    input side's patterns match. More foreign keys than matched ones: another framework's
    checkpoint, which dcpctl refuses (exit 5) once no model key is uncovered."""
    other = [s for s in m["sides"] if s != side][0]
    mine, theirs = matcher(m, side, config), matcher(m, other, config)
    prefixes = m["model"][side] + m["model"][other]
    matched = {k for k in keys if mine(k)}
    taken = matched | {k for k in keys if any(k.startswith(x) for x in m["model"][side])}
    # and each taken key's tail from one of the side's model namespaces on: a wrapper's key (Megatron-FSDP's
    # model.module.decoder.layers.0.x) is held by its optimizer's under another wrapper (...module.module.decoder...)
    taken |= {".".join(k.split(".")[i:]) for k in set(taken) for i in range(1, k.count(".") + 1)
              if any(".".join(k.split(".")[i:]).startswith(x) for x in m["model"][side])}

    def holds_taken(k: str) -> bool:
        parts = k.split(".")
        return any(".".join(parts[a:b]) in taken for a in range(len(parts)) for b in range(a + 1, len(parts) + 1))

    out = [k for k in keys if k not in matched and not theirs(k) and not any(k.startswith(x) for x in prefixes)
           and not holds_taken(k)]
    return out, len(matched)


def named_keys(stderr: str, head: str = "no rule covers") -> list[str]:
    """The keys dcpctl's refusal lists under `head` ("  no rule covers (N):" then one per line)."""
    lines, out, inside = stderr.splitlines(), [], False
    for ln in lines:
        if ln.startswith(f"  {head} ("):
            inside = True
            continue
        if inside and ln.startswith("    "):
            out.append(ln.strip())
        elif inside:
            break
    return out


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--sanitized"]
    sanitized = "--sanitized" in sys.argv[1:]
    if len(args) != 2:
        sys.exit(__doc__)
    dcpctl, fixtures = args[0], Path(args[1]).resolve()
    # every built-in name: a flat map's file, a family (dcpctl-map/2) and each of its aliases
    family = {n: mr.load_map(n) for n in mr.builtin_names()}
    table = []
    seen: set[tuple[str, str]] = set()  # --sanitized: the (map or fixture, outcome) pairs run
    left = 0

    def wanted(rel: Path, name: str, outcome: str) -> bool:
        """Under --sanitized, whether this pair is the first of its map or of its fixture with
        this expected outcome; always, otherwise."""
        nonlocal left
        if not sanitized:
            return True
        keys_ = {("map " + name, outcome)} if outcome == "does not apply" else \
            {("map " + name, outcome), ("fixture " + str(rel), outcome)}
        if keys_ <= seen:
            left += 1
            return False
        seen.update(keys_)
        return True
    with tempfile.TemporaryDirectory(prefix="dcpctl-map-audit-") as tmp:
        out = Path(tmp) / "x.safetensors"
        for ckpt in inputs(fixtures):
            keys = tensor_keys(dcpctl, ckpt)
            if not keys:
                continue  # nothing dcpctl opens as one checkpoint without options (e.g. a .bin folder's parent)
            rel = ckpt.relative_to(fixtures)
            for name, fm in family.items():
                cfg_path = config_for(ckpt, fixtures)
                cfg = json.loads(cfg_path.read_text()) if cfg_path else None
                m = mr.concrete(fm, cfg, keys)  # a family's variant for this checkpoint
                try:
                    src, _ = mr.direction(m, keys, mr.Params(m, cfg))
                except mr.MapError:
                    # the map does not apply: dcpctl must say so (exit 2), not map anything
                    if not wanted(rel, name, "does not apply"):
                        continue
                    r = run(dcpctl, "consolidate", ckpt, "-o", out, "--map", name, "--dry-run", "--json")
                    check(r.returncode == EXIT_USAGE and ("matches none" in r.stderr or "ambiguous" in r.stderr),
                          f"{rel} --map {name}: a map matching none (or both sides alike) of the keys: exit {r.returncode}: "
                          f"{r.stderr.strip()[-300:]}")
                    continue
                want = uncovered(m, src, keys, cfg)
                alien, mapped = foreign(m, src, keys, cfg) if not want else ([], 0)
                if want and not wanted(rel, name, "uncovered") or \
                        len(alien) > mapped and not wanted(rel, name, "foreign"):
                    continue
                argv = ["consolidate", ckpt, "-o", out, "--map", name, "--dry-run", "--json"]
                if cfg_path:
                    argv += ["--config", cfg_path]
                if quantized(ckpt):
                    argv += ["--dtype", "bf16"]  # a quantized release: --dtype dequantizes before any map applies
                r = run(dcpctl, *argv)
                what = f"{rel} --map {name} ({src}->)"
                if r.returncode == EXIT_UNSUPPORTED and not want and "could not be made" in r.stderr:
                    # every model key has a rule, but one was taken into an output another input of
                    # which is missing (a wrong map's join): refused too, naming it
                    lost = named_keys(r.stderr, "taken into an output that could not be made")
                    check(named_keys(r.stderr) == [] and lost and all(k in keys for k in lost) and not out.exists(),
                          f"{what}: exit 5 for a lost input: {r.stderr.strip()[-400:]}")
                    table.append((str(rel), name, "refused (exit 5): an output it could not make would lose " + ", ".join(lost[:4])))
                    continue
                if want:
                    got = named_keys(r.stderr)
                    check(r.returncode == EXIT_UNSUPPORTED and got == want and f"map {name} " in r.stderr and not out.exists(),
                          f"{what}: wanted exit 5 naming the {len(want)} model keys no rule covers {want[:6]}; "
                          f"exit {r.returncode}, named {got[:6]}: {r.stderr.strip()[-400:]}")
                    table.append((str(rel), name, f"refused (exit 5): {len(want)} model keys no rule covers: " + ", ".join(want[:4])
                                  + (" ..." if len(want) > 4 else "")))
                    continue
                if not want and len(alien) > mapped:
                    check(r.returncode == EXIT_UNSUPPORTED and f"map {name} ({src}->" in r.stderr
                          and f"the checkpoint is not on its {src} side: {len(alien)} of its tensor keys" in r.stderr
                          and not out.exists(),
                          f"{what}: {len(alien)} keys of neither side against {mapped} mapped: exit 5 wanted; exit {r.returncode}: "
                          f"{r.stderr.strip()[-400:]}")
                    table.append((str(rel), name, f"refused (exit 5): another framework's keys ({len(alien)} of neither side, "
                                                  f"{mapped} matched): " + ", ".join(sorted(alien, key=len)[:3])))
                    continue
                if r.returncode == EXIT_USAGE and "needs parameter" in r.stderr:
                    # every model key is covered (dcpctl refused nothing), but the fixture has no
                    # config.json for the map's numbers: the audit's rule holds, the mapping is not run
                    check("would lose" not in r.stderr, f"{what}: {r.stderr.strip()[-300:]}")
                    table.append((str(rel), name, "every model key covered; not mapped (no config.json for its parameters)"))
                    continue
                if r.returncode != EXIT_OK:
                    fail(f"{what}: no model key is uncovered, so exit 0 wanted; exit {r.returncode}: {r.stderr.strip()[-400:]}")
                    continue
                mp = json.loads(r.stdout)["map"]
                model_left = [k for k in mp["left_out"] if k in keys and any(k.startswith(x) for x in m["model"][src])]
                check(model_left == [] and mp["missing"] == [] and mp["model"] == m["model"][src],
                      f"{what}: exit 0 with model keys left out {model_left[:6]} or missing {mp['missing'][:4]}, model {mp['model']}")
                table.append((str(rel), name, f"mapped: {mp['mapped']} keys, {len(mp['dropped'])} dropped by reason, "
                                              f"{len(mp['left_out'])} outside the model left out"))
    print("\nthe audit (fixture, map, outcome):")
    for row in table:
        print("  " + "  ".join(row))
    if sanitized:
        print(f"--sanitized: {left} (fixture, map) pairs left out, each a map's and a fixture's outcome already run "
              "(the first pass runs them all)")
    check(len(table) >= 20, f"the audit covered {len(table)} (fixture, map) pairs: fewer than the fixtures the maps are for")
    return summary("map_audit_test")


if __name__ == "__main__":
    sys.exit(main())
