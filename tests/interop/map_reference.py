#!/usr/bin/env python3
"""A small reference implementation of dcpctl's key maps (schema "dcpctl-map/1", src/maps/*.json):
what `--map` must do to a state dict, written in Python so that the schema is shown to express
torchtitan's StateDictAdapters (tests/interop/map_reference_test.py checks it against their
to_hf/from_hf outputs recorded in tests/fixtures/layouts/titan_*) before, and beside, the C++ engine.

    from map_reference import load_map, apply_map
    m = load_map("torchtitan-llama3")               # a built-in name or a path to a .json file
    out, report = apply_map(m, state_dict, config)  # config: the parsed config.json (a dict)

    map_reference.py MAP CONFIG.json IN.safetensors OUT.safetensors   # the same from the shell

Semantics (the schema's, docs in src/maps/README.md):
  - a pattern is a key with `{NAME}` placeholders, each matching a decimal integer (no sign, no
    leading zero unless "0"); a pattern matches a whole key. The values carry over to the other side.
  - the direction follows the input's keys: the side whose patterns match more of them is the
    source (a map where neither side matches any key is an error: MapError, exit 2 in dcpctl; a tie
    between two sides that both match is an error too).
  - a rule with both sides renames; one with only the source side names keys that are dropped
    (report["dropped"]); a key no rule matches is left out (report["left_out"]).
  - "rope": dim-0 rows are `heads` groups of `head_dim` rows; torchtitan holds each head in the
    interleaved order, hf in the halves order: torchtitan->hf applies the adapters' _permute
    (view(heads, head_dim/2, 2, rest).transpose(1, 2)), hf->torchtitan their _reverse_permute.
  - a list side with "dim": one tensor = the concatenation along "dim" of the listed tensors, in
    order, with the given sizes; each part has its own optional "rope".
  - "experts": {"dim", "count"}: the torchtitan tensor stacks along "dim" (a new dimension) `count`
    tensors the hf side holds one key each, {E} = 0..count-1.
  - params: {"config": KEY or [KEY, ...] (first present), "default": EXPR}; expressions are integer
    arithmetic (+ - * / and parentheses) over param names, config keys and integers; "/" must divide
    exactly. A param is resolved only when a rule that matched the input needs it; one that cannot
    be resolved is a MapError naming it.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

MAPS_DIR = Path(__file__).resolve().parents[2] / "src" / "maps"
SCHEMA = "dcpctl-map/1"
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class MapError(Exception):
    """A map that cannot be applied (dcpctl: exit 2): bad map, missing param, no key matched."""


# ------------------------------------------------------------------------------------------ loading


def load_map(name_or_path: str | Path) -> dict:
    p = Path(name_or_path)
    if not (p.suffix == ".json" and p.is_file()):
        p = MAPS_DIR / f"{name_or_path}.json"
        if not p.is_file():
            raise MapError(f"no map named {name_or_path!r} (built-in: {', '.join(builtin_names())})")
    try:
        m = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise MapError(f"{p}: not JSON: {e}") from e
    validate(m, str(p))
    return m


def builtin_names() -> list[str]:
    return sorted(p.stem for p in MAPS_DIR.glob("*.json"))


def validate(m: Any, where: str) -> None:
    def fail(msg):
        raise MapError(f"{where}: {msg}")

    if not isinstance(m, dict):
        fail("a map is a JSON object")
    extra = set(m) - {"schema", "name", "description", "sides", "params", "rules"}
    if extra:
        fail(f"unknown fields {sorted(extra)}")
    if m.get("schema") != SCHEMA:
        fail(f"schema must be {SCHEMA!r}, got {m.get('schema')!r}")
    if not isinstance(m.get("name"), str) or not isinstance(m.get("description", ""), str):
        fail("name and description are strings")
    sides = m.get("sides")
    if not (isinstance(sides, list) and len(sides) == 2 and all(isinstance(s, str) for s in sides)
            and sides[0] != sides[1]):
        fail("sides is a list of two different names")
    params = m.get("params", {})
    if not isinstance(params, dict):
        fail("params is an object")
    for name, spec in params.items():
        if not isinstance(spec, dict) or not set(spec) <= {"config", "default"} or not spec:
            fail(f"param {name}: {{'config': KEY or [KEYS], 'default': EXPR}}")
        c = spec.get("config")
        if c is not None and not (isinstance(c, str) or (isinstance(c, list) and c and all(isinstance(x, str) for x in c))):
            fail(f"param {name}: config is a key or a list of keys")
        if "default" in spec:
            _parse_expr(spec["default"], f"{where}: param {name}")
    rules = m.get("rules")
    if not isinstance(rules, list) or not rules:
        fail("rules is a non-empty list")
    for i, r in enumerate(rules):
        if not isinstance(r, dict):
            fail(f"rule {i}: an object")
        present = [s for s in sides if s in r]
        if not present:
            fail(f"rule {i}: names neither side")
        extra = set(r) - set(sides) - {"rope", "dim", "experts"}
        if extra:
            fail(f"rule {i}: unknown fields {sorted(extra)}")
        lists = [s for s in present if isinstance(r[s], list)]
        if lists:
            if len(present) != 2 or len(lists) != 1 or "dim" not in r or "experts" in r or "rope" in r:
                fail(f"rule {i}: a list side needs the other side, 'dim', and no 'experts'/'rope' of its own")
            for part in r[lists[0]]:
                if not (isinstance(part, dict) and isinstance(part.get("key"), str) and "size" in part
                        and set(part) <= {"key", "size", "rope"}):
                    fail(f"rule {i}: parts are {{'key', 'size', optional 'rope'}}")
        if "experts" in r:
            e = r["experts"]
            if len(present) != 2 or not (isinstance(e, dict) and set(e) == {"dim", "count"}):
                fail(f"rule {i}: experts is {{'dim', 'count'}} on a rule with both sides")
            if "{E}" not in r[sides[1]] or "{E}" in r[sides[0]]:
                fail(f"rule {i}: experts: {{E}} on the {sides[1]} side only")
        if len(present) == 1 and set(r) - set(sides):
            fail(f"rule {i}: a one-sided rule only names keys")
        for s in present:
            for pat in ([p["key"] for p in r[s]] if isinstance(r[s], list) else [r[s]]):
                if not isinstance(pat, str) or not pat:
                    fail(f"rule {i}: patterns are strings")


# ------------------------------------------------------------------------------------- patterns


def _compile(pattern: str) -> re.Pattern:
    out, pos = [], 0
    for mt in _PLACEHOLDER.finditer(pattern):
        out.append(re.escape(pattern[pos:mt.start()]))
        out.append(f"(?P<{mt.group(1)}>0|[1-9][0-9]*)")
        pos = mt.end()
    out.append(re.escape(pattern[pos:]))
    return re.compile("".join(out) + r"\Z")


def _fill(pattern: str, values: dict[str, str]) -> str:
    def sub(mt):
        if mt.group(1) not in values:
            raise MapError(f"pattern {pattern!r}: placeholder {{{mt.group(1)}}} has no value on the other side")
        return values[mt.group(1)]

    return _PLACEHOLDER.sub(sub, pattern)


def _patterns(rule: dict, side: str) -> list[str]:
    v = rule.get(side)
    if v is None:
        return []
    return [p["key"] for p in v] if isinstance(v, list) else [v]


# ---------------------------------------------------------------------------------- expressions


def _parse_expr(text: Any, where: str) -> ast.AST:
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str):
        raise MapError(f"{where}: an expression is a string or an integer")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise MapError(f"{where}: bad expression {text!r}") from e
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Load,
                                 ast.Add, ast.Sub, ast.Mult, ast.Div, ast.USub, ast.UAdd)):
            raise MapError(f"{where}: {text!r}: only + - * / ( ), names and integers")
        if isinstance(node, ast.Constant) and (not isinstance(node.value, int) or isinstance(node.value, bool)):
            raise MapError(f"{where}: {text!r}: only integer constants")
    return tree


class Params:
    """Lazily resolved params: `get(name)` evaluates the param (or a config key) on first use."""

    def __init__(self, m: dict, config: dict | None):
        self.specs = m.get("params", {})
        self.config = config or {}
        self.values: dict[str, int] = {}
        self.used: list[str] = []

    def get(self, name: str, stack: tuple = ()) -> int:
        if name in self.values:
            return self.values[name]
        if name in stack:
            raise MapError(f"param {name}: defined in terms of itself")
        if name in self.specs:
            spec = self.specs[name]
            keys = spec.get("config", [])
            keys = [keys] if isinstance(keys, str) else keys
            for k in keys:
                v = self.config.get(k)
                if v is not None:
                    self.values[name] = self._int(v, f"config.json {k}")
                    break
            else:
                if "default" not in spec:
                    tried = " or ".join(keys) if keys else "(no config key)"
                    raise MapError(f"the map needs param {name!r}: config.json has no {tried} "
                                   f"(give --config FILE or --assets DIR with a config.json that has it)")
                self.values[name] = self.eval(spec["default"], stack + (name,))
            self.used.append(name)
            return self.values[name]
        if name in self.config and self.config[name] is not None:
            return self._int(self.config[name], f"config.json {name}")
        raise MapError(f"the map needs {name!r}: neither a param of the map nor a key of config.json")

    @staticmethod
    def _int(v: Any, what: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise MapError(f"{what} is {v!r}, not an integer")
        return v

    def eval(self, expr: Any, stack: tuple = ()) -> int:
        tree = _parse_expr(expr, "expression")

        def ev(n):
            if isinstance(n, ast.Expression):
                return ev(n.body)
            if isinstance(n, ast.Constant):
                return n.value
            if isinstance(n, ast.Name):
                return self.get(n.id, stack)
            if isinstance(n, ast.UnaryOp):
                v = ev(n.operand)
                return -v if isinstance(n.op, ast.USub) else v
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Add):
                return a + b
            if isinstance(n.op, ast.Sub):
                return a - b
            if isinstance(n.op, ast.Mult):
                return a * b
            if b == 0 or a % b:
                raise MapError(f"expression {expr!r}: {a} / {b} is not an exact integer division")
            return a // b

        return ev(tree)


# ------------------------------------------------------------------------------------ transforms


def rope_permute(t, heads: int, head_dim: int, to_halves: bool):
    """torchtitan's Llama3StateDictAdapter._permute (to_halves, torchtitan -> hf) and
    _reverse_permute (hf -> torchtitan), on dim 0, any trailing shape."""
    rows = t.shape[0]
    if heads <= 0 or head_dim <= 0 or head_dim % 2 or heads * head_dim != rows:
        raise MapError(f"rope: {heads} heads x head_dim {head_dim} != {rows} rows (or head_dim odd)")
    rest = tuple(t.shape[1:])
    if to_halves:
        return t.reshape(heads, head_dim // 2, 2, *rest).transpose(1, 2).reshape(rows, *rest).contiguous()
    return t.reshape(heads, 2, head_dim // 2, *rest).transpose(1, 2).reshape(rows, *rest).contiguous()


# ------------------------------------------------------------------------------------- applying


def _match(rule: dict, side: str, key: str):
    v = rule.get(side)
    if v is None or isinstance(v, list):
        return None
    mt = _compile(v).match(key)
    return mt.groupdict() if mt else None


def _match_part(rule: dict, side: str, key: str):
    v = rule.get(side)
    if not isinstance(v, list):
        return None
    for i, part in enumerate(v):
        mt = _compile(part["key"]).match(key)
        if mt:
            return i, mt.groupdict()
    return None


def direction(m: dict, keys) -> tuple[str, str]:
    a, b = m["sides"]
    counts = {}
    for side in (a, b):
        regs = [_compile(p) for r in m["rules"] for p in _patterns(r, side)]
        counts[side] = sum(1 for k in keys if any(rg.match(k) for rg in regs))
    if counts[a] == 0 and counts[b] == 0:
        raise MapError(f"map {m['name']!r} matches none of the input's keys")
    if counts[a] == counts[b]:
        raise MapError(f"map {m['name']!r}: as many input keys match its {a} side as its {b} side "
                       f"({counts[a]}): cannot tell the direction")
    return (a, b) if counts[a] > counts[b] else (b, a)


def apply_map(m: dict, sd: dict, config: dict | None) -> tuple[dict, dict]:
    """Maps a state dict (key -> torch.Tensor; other values are left out if no rule names them).
    Returns (output state dict, report {name, direction, mapped, left_out, dropped, params})."""
    import torch

    src, dst = direction(m, sd.keys())
    first = m["sides"][0]
    params = Params(m, config)
    out: dict[str, Any] = {}
    left_out, dropped = [], []
    mapped = 0
    pending: dict[tuple, dict] = {}  # gathers (list parts, experts) on the hf -> torchtitan side

    def put(key, value):
        if key in out:
            raise MapError(f"two input keys map to {key!r}")
        out[key] = value

    for key, value in sd.items():
        hit = None
        for idx, rule in enumerate(m["rules"]):
            vals = _match(rule, src, key)
            if vals is not None:
                hit = ("whole", idx, rule, vals)
                break
            part = _match_part(rule, src, key)
            if part is not None:
                hit = ("part", idx, rule, part)
                break
        if hit is None:
            left_out.append(key)
            continue
        kind, idx, rule, info = hit
        if dst not in rule:
            dropped.append(key)
            continue
        if not isinstance(value, torch.Tensor):
            raise MapError(f"{key}: matched rule {idx} but is not a tensor")
        mapped += 1
        if kind == "whole" and isinstance(rule[dst], list):  # split one tensor into parts
            dim = rule["dim"]
            sizes = [params.eval(p["size"]) for p in rule[dst]]
            if sum(sizes) != value.shape[dim]:
                raise MapError(f"{key}: parts {sizes} do not add up to dim {dim} = {value.shape[dim]}")
            for part, piece in zip(rule[dst], torch.split(value, sizes, dim=dim)):
                piece = piece.contiguous()
                if "rope" in part:
                    piece = _rope(params, part["rope"], piece, to_halves=(src == first))
                put(_fill(part["key"], info), piece)
            continue
        if kind == "part":  # one part of a concatenation: gather
            pi, vals = info
            group = (idx, tuple(sorted(vals.items())))
            pending.setdefault(group, {"rule": rule, "vals": vals, "parts": {}})["parts"][pi] = (key, value)
            continue
        vals = info
        if "experts" in rule and src == first:  # unstack the experts
            e = rule["experts"]
            count, dim = params.eval(e["count"]), e["dim"]
            if value.shape[dim] != count:
                raise MapError(f"{key}: dim {dim} is {value.shape[dim]}, the map says {count} experts")
            for i, piece in enumerate(torch.unbind(value, dim=dim)):
                put(_fill(rule[dst], {**vals, "E": str(i)}), piece.contiguous())
            continue
        if "experts" in rule:  # one expert of a stack: gather
            evals = {k: v for k, v in vals.items() if k != "E"}
            group = (idx, tuple(sorted(evals.items())))
            pending.setdefault(group, {"rule": rule, "vals": evals, "parts": {}})["parts"][int(vals["E"])] = (key, value)
            continue
        t = value
        if "rope" in rule:
            t = _rope(params, rule["rope"], t, to_halves=(src == first))
        put(_fill(rule[dst], vals), t)

    for (idx, _), g in pending.items():
        rule, vals, parts = g["rule"], g["vals"], g["parts"]
        if "experts" in rule:
            e = rule["experts"]
            count = params.eval(e["count"])
            missing = [i for i in range(count) if i not in parts]
            extra = [i for i in parts if i >= count]
            if missing or extra:
                raise MapError(f"rule {idx} ({_fill(rule[dst], vals)}): experts {missing} missing"
                               + (f", {extra} beyond {count}" if extra else ""))
            put(_fill(rule[dst], vals), torch.stack([parts[i][1] for i in range(count)], dim=e["dim"]))
        else:
            plist = rule[src]
            missing = [_fill(p["key"], vals) for i, p in enumerate(plist) if i not in parts]
            if missing:
                raise MapError(f"rule {idx}: {missing} missing to build {_fill(rule[dst], vals)}")
            pieces = []
            for i, p in enumerate(plist):
                t = parts[i][1]
                size = params.eval(p["size"])
                if t.shape[rule["dim"]] != size:
                    raise MapError(f"{parts[i][0]}: dim {rule['dim']} is {t.shape[rule['dim']]}, the map says {size}")
                if "rope" in p:
                    t = _rope(params, p["rope"], t, to_halves=False)
                pieces.append(t)
            put(_fill(rule[dst], vals), torch.cat(pieces, dim=rule["dim"]))

    report = {"name": m["name"], "direction": f"{src}->{dst}", "mapped": mapped, "left_out": left_out,
              "dropped": dropped, "params": {k: params.values[k] for k in params.used}}
    return out, report


def _rope(params: Params, spec: dict, t, to_halves: bool):
    return rope_permute(t, params.eval(spec["heads"]), params.eval(spec["head_dim"]), to_halves)


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    from safetensors.torch import load_file, save_file

    try:
        m = load_map(argv[0])
        config = json.loads(Path(argv[1]).read_text())
        out, report = apply_map(m, load_file(argv[2]), config)
    except MapError as e:
        print(f"map_reference: {e}", file=sys.stderr)
        return 2
    save_file(out, argv[3], metadata={"format": "pt"})
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
