#!/usr/bin/env python3
"""A small reference implementation of dcpctl's key maps (schema "dcpctl-map/1", src/maps/*.json):
what `--map` must do to a state dict, written in Python so that the schema is shown to express
torchtitan's StateDictAdapters and Megatron-Bridge's Megatron -> HF export
(tests/interop/map_reference_test.py checks it against their outputs recorded in
tests/fixtures/layouts/titan_* and megatron_*) before, and beside, the C++ engine. Plain torch ops
(narrow, cat, stack, unbind, reshape/transpose for rope), one rule at a time.

    from map_reference import load_map, apply_map
    m = load_map("torchtitan-llama3")               # a built-in name or a path to a .json file
    out, report = apply_map(m, state_dict, config)  # config: the parsed config.json (a dict)

    map_reference.py MAP CONFIG.json IN.safetensors OUT.safetensors   # the same from the shell

Semantics (the schema's, docs in src/maps/README.md):
  - a pattern is a key with placeholders, each matching a decimal integer (no sign, no leading zero
    unless "0"); a pattern matches a whole key. `{NAME}` holds NAME's value; `{NAME + EXPR}` (EXPR an
    expression, below; only `+`) holds NAME's value plus EXPR: matching subtracts EXPR (a number
    smaller than EXPR does not match), filling adds it. The values carry over to the other side.
  - rules are tried in order; the first rule whose input-side pattern (or one of its parts) matches
    a key takes it.
  - the direction follows the input's keys: the side whose patterns match more of them is the
    source (a map where neither side matches any key is an error: MapError, exit 2 in dcpctl; a tie
    between two sides that both match is an error too).
  - a rule with both sides renames; one with only the source side names keys that are dropped
    (report["dropped"]); a key no rule matches is left out (report["left_out"]). A rule may carry a
    "note" (text, ignored).
  - "rope": dim-0 rows are `heads` groups of `head_dim` rows; the first side (torchtitan) holds each
    head in the interleaved order, the second (hf) in the halves order: first->second applies the
    adapters' _permute (view(heads, head_dim/2, 2, rest).transpose(1, 2)), second->first their
    _reverse_permute.
  - a list side with "dim": one tensor = the concatenation along "dim" of the listed tensors, in
    order, with the given sizes; each part has its own optional "rope". With "groups": G, the one
    tensor is G repetitions of that concatenation, part i giving size_i / G each time (Megatron's
    linear_qkv: per query group, its q rows, its k row block, its v row block); rope on a part of a
    grouped rule is a map error.
  - "stack" {"dim": D, "count": EXPR} (and its synonym "experts"): one side's tensor stacks `count`
    tensors along a new dimension D; the other side holds one key each, its pattern having one
    placeholder more (the index, 0..count-1). With a list side, the list side is the per-index side
    (each part has the extra placeholder) and "dim" is a dimension of the per-index tensor: the
    stacked tensor is unbound along D, each slice split into the parts (one way), and the parts of
    each index joined, then stacked (the other).
  - "transpose": true: each tensor of one side is its counterpart's with the last two dims swapped
    (t.transpose(-2, -1)); on a list rule each part is, and "dim" is a dimension of the one joined
    tensor (Qwen 3.5's gate_up_proj = cat(w1ᵀ, w3ᵀ, -1) in torchtitan's adapter). Not with "rope",
    "groups" or a stack.
  - "tied": {SIDE: KEY} on a rename of two keys without placeholders: mapping from SIDE, when the
    input lacks the rule's SIDE key, config.json says tie_word_embeddings: true and the input has KEY,
    the output is KEY's tensor under the rule's other name (the adapters' from_hf copies the
    embedding into lm_head.weight).
  - "zeros": {"beside": PATTERN, "shape": [EXPR, ...], "dtype": NAME} on a "drop_when" rule: mapping
    to its side, the rule's key is written as zeros of that shape and dtype beside every output key
    PATTERN matches (the same placeholder values), unless another rule made that key from the input:
    torchtitan's expert_bias_E, which from_hf leaves at the zeros the model starts from; GLM-4.5's
    e_score_correction_bias when the Megatron run trained no router.expert_bias (zeros shift no choice).
    In a family's layer rule, "beside" takes the prefix of the rule's side.
  - "keep_dtype": true: no transform; --dtype keeps the rule's tensors in their saved dtype (dcpctl's
    precision policy, checked by tests/interop/precision_test.py), which this reference does not cast.
  - params: {"config": KEY or [KEY, ...] (first present, as written or through transformers'
    attribute_map of config.json's model_type, both ways), "default": EXPR}; expressions are integer
    arithmetic (+ - * / and parentheses) over param names, config keys and integers; "/" must divide
    exactly. A param is resolved only when it is needed: by a rule that matched the input, or to
    match a pattern that has it in an offset; one that cannot be resolved is a MapError naming it.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

MAPS_DIR = Path(__file__).resolve().parents[2] / "src" / "maps"
SCHEMA = "dcpctl-map/1"
SCHEMA2 = "dcpctl-map/2"  # a family: layer rules shared by prefix, variants by model_type (expand)
_BRACES = re.compile(r"\{([^{}]*)\}")
_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(.*)\Z", re.S)
_RULE_FIELDS = {"variants", "drop_when", "zeros", "rope", "dim", "groups", "experts", "stack", "transpose", "tied", "note", "reason", "keep_dtype"}


class MapError(Exception):
    """A map that cannot be applied (dcpctl: exit 2): bad map, missing param, no key matched."""


# ------------------------------------------------------------------------------------------ loading


def load_map(name_or_path: str | Path) -> dict:
    """A map by built-in name (a file's own name, or a family file's alias) or path; a family file
    (schema dcpctl-map/2, with "layer_rules") comes back expanded (`expand`)."""
    p = Path(name_or_path)
    alias = None
    if not (p.suffix == ".json" and p.is_file()):
        p = MAPS_DIR / f"{name_or_path}.json"
        if not p.is_file():
            for f in sorted(MAPS_DIR.glob("*.json")):
                if name_or_path in json.loads(f.read_text()).get("aliases", {}):
                    p, alias = f, str(name_or_path)
                    break
            else:
                raise MapError(f"no map named {name_or_path!r} (built-in: {', '.join(builtin_names())})")
    try:
        m = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise MapError(f"{p}: not JSON: {e}") from e
    if m.get("schema") == SCHEMA2:
        m = expand(m, alias, str(p))
    validate(m, str(p))
    return m


def builtin_names() -> list[str]:
    names = []
    for p in MAPS_DIR.glob("*.json"):
        names += [p.stem] + list(json.loads(p.read_text()).get("aliases", {}))
    return sorted(names)


def expand(fam: dict, alias: str | None = None, where: str = "map") -> dict:
    """A family file (dcpctl-map/2) as one flat map: its "rules" (or the alias's) with each
    {"group": NAME} replaced by the group's rules and each {"layers": PREFIX} by the layer rules
    under that prefix (a rule's sides prefixed; a prefix with "stack" stacks each rule's tensors
    over its axis, before the rule's own); the variants the alias allows, rules tagged with
    "variants" kept for `concrete` to choose among."""
    def fail(msg):
        raise MapError(f"{where}: {msg}")

    a = {}
    if alias is not None:
        a = fam.get("aliases", {}).get(alias)
        if a is None:
            fail(f"no alias {alias!r}")
    sides = fam["sides"]
    allowed = a.get("variants", list(fam.get("variants", {})))
    for v in allowed:
        if v not in fam.get("variants", {}):
            fail(f"alias {alias}: no variant {v!r}")
    prefixes = fam.get("prefixes", {})
    rules: list = []

    def layer(pname):
        p = prefixes.get(pname)
        if p is None:
            fail(f"no prefix {pname!r}")
        for r in fam.get("layer_rules", []):
            ps = r.get("prefixes")
            if (ps is None and p.get("explicit")) or (ps is not None and pname not in ps):
                continue
            nr = {k: v for k, v in r.items() if k != "prefixes"}
            for s in sides:
                if isinstance(nr.get(s), str):
                    nr[s] = p[s] + nr[s]
                elif isinstance(nr.get(s), list):
                    nr[s] = [dict(part, key=p[s] + part["key"]) for part in nr[s]]
                if s in nr and isinstance(nr.get("zeros"), dict):  # `beside` is a key of the rule's side
                    nr["zeros"] = dict(nr["zeros"], beside=p[s] + nr["zeros"]["beside"])
            if "stack" in p and all(s in nr for s in sides):  # a one-sided rule stacks nothing
                own = nr.pop("stack", nr.pop("experts", None))
                ax = p["stack"]
                if own is None:
                    nr["stack"] = {"dim": ax["dim"], "count": ax["count"]}
                else:
                    # the rule's own axis is indexed by the placeholder its per-entry side has
                    # and its stacked side lacks (the expert's {E})
                    names = [_side_names(r, s) for s in sides]
                    index = sorted(names[0] ^ names[1])
                    if len(index) != 1 or isinstance(own, list):
                        fail(f"layer rule {r}: a stack under a stacked prefix is one axis, indexed by one placeholder")
                    nr["stack"] = [dict(ax), {"dim": own["dim"] + 1, "count": own["count"], "index": index[0]}]
            rules.append(nr)

    def emit(entries):
        for e in entries:
            if "group" in e:
                emit(fam.get("groups", {})[e["group"]])
            elif "layers" in e:
                layer(e["layers"])
            else:
                rules.append(e)

    emit(a.get("rules", fam["rules"]))
    out = {"schema": SCHEMA2, "name": alias or fam["name"], "family": fam["name"],
           "description": a.get("description", fam.get("description", "")), "sides": sides,
           "models": a.get("models", fam.get("models", [])), "params": fam.get("params", {}),
           "variants": {v: fam["variants"][v] for v in allowed}, "rules": rules}
    if "model" in a or "model" in fam:
        out["model"] = a.get("model", fam.get("model"))
    return out


def choose_variant(m: dict, config: dict | None, keys=()) -> str | None:
    """The variant of a family map for a model: config.json's model_type's (None: the family has
    none for it, unless the config is remote code, auto_map, whose architectures names a variant's
    class), else the one whose own rules match most of the keys, else the default."""
    variants = m.get("variants") or {}
    mt = (config or {}).get("model_type")
    if len(variants) == 1:  # a name that allows one variant (megatron-mixtral) chooses it
        return next(iter(variants))
    if isinstance(mt, str) and mt:
        pick = next((n for n, v in variants.items() if mt in v.get("model_types", [])), None)
        arch = (config or {}).get("architectures")
        if pick is None and isinstance((config or {}).get("auto_map"), dict) and isinstance(arch, list) and len(arch) == 1:
            # remote code (Kimi-K2's kimi_k2) naming a class a variant writes
            pick = next((n for n, v in variants.items() if arch[0] in v.get("classes", [])), None)
        return pick
    score, tied = 0, []
    for n in variants:
        pats = [_pattern(p) for r in m["rules"] if n in r.get("variants", []) for s in m["sides"] for p in _patterns(r, s)]
        c = sum(1 for k in keys if any(p.regex.match(k) for p in pats if not any(o for _, o in p.slots)))
        if c > score:
            score, tied = c, []
        if c == score and c > 0:
            tied.append(n)
    default = next((n for n, v in variants.items() if v.get("default")), None)
    return (default if default in tied else tied[0]) if tied else default


def concrete(m: dict, config: dict | None, keys=()) -> dict:
    """A family map with its variant chosen (`choose_variant`): the rules of other variants gone,
    the variant's params over the family's. A map without variants as it is."""
    if "variants" not in m:
        return m
    v = choose_variant(m, config, keys)
    spec = m["variants"].get(v, {}) if v else {}
    out = {k: x for k, x in m.items() if k != "variants"}
    out["variant"] = v
    out["params"] = dict(m.get("params", {}), **spec.get("params", {}))
    out["rules"] = [{k: x for k, x in r.items() if k != "variants"} for r in m["rules"] if v in r.get("variants", [v])]
    return out


def _stack_spec(r: dict) -> dict | None:
    return r.get("stack", r.get("experts"))


def _is_dim(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def validate(m: Any, where: str) -> None:
    def fail(msg):
        raise MapError(f"{where}: {msg}")

    if not isinstance(m, dict):
        fail("a map is a JSON object")
    extra = set(m) - {"schema", "name", "description", "sides", "models", "model", "params", "rules", "family", "variants", "variant"}
    if extra:
        fail(f"unknown fields {sorted(extra)}")
    models = m.get("models", [])
    if not (isinstance(models, list) and all(isinstance(x, str) and x for x in models)):
        fail("models is a list of names (the models the map covers)")
    if m.get("schema") not in (SCHEMA, SCHEMA2):
        fail(f"schema must be {SCHEMA!r} (or an expanded {SCHEMA2!r}), got {m.get('schema')!r}")
    if not isinstance(m.get("name"), str) or not isinstance(m.get("description", ""), str):
        fail("name and description are strings")
    sides = m.get("sides")
    if not (isinstance(sides, list) and len(sides) == 2 and all(isinstance(s, str) for s in sides)
            and sides[0] != sides[1]):
        fail("sides is a list of two different names")
    if "model" in m:  # {SIDE: [KEY PREFIX, ...]}, both sides: which keys are the model's weights
        mo = m["model"]
        if not (isinstance(mo, dict) and set(mo) == set(sides)
                and all(isinstance(v, list) and v and all(isinstance(x, str) and x for x in v) for v in mo.values())):
            fail("model is {SIDE: [KEY PREFIX, ...]} for both sides")
    params = m.get("params", {})
    if not isinstance(params, dict):
        fail("params is an object")
    for name, spec in params.items():
        # "shape" (the tensors' shapes when config.json lacks the value) is read by dcpctl only: the
        # reference's cases' config.json files have every value (maps_test.py checks "shape")
        if not isinstance(spec, dict) or not set(spec) <= {"config", "default", "shape"} or not spec:
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
        extra = set(r) - set(sides) - _RULE_FIELDS
        if extra:
            fail(f"rule {i}: unknown fields {sorted(extra)}")
        if "keep_dtype" in r and not isinstance(r["keep_dtype"], bool):
            fail(f"rule {i}: keep_dtype is true or false")
        if "note" in r and not isinstance(r["note"], str):
            fail(f"rule {i}: note is a string")
        if "drop_when" in r and (r["drop_when"] != "zeros" or len(present) != 1):
            fail(f"rule {i}: drop_when is 'zeros', on a one-sided rule")
        if "zeros" in r:
            z = r["zeros"]
            if not ("drop_when" in r and isinstance(z, dict) and set(z) == {"beside", "shape", "dtype"}
                    and isinstance(z["beside"], str) and isinstance(z["shape"], list) and z["shape"]
                    and all(isinstance(d, str) for d in z["shape"]) and z["dtype"] in ("float32", "float64", "bfloat16", "float16")):
                fail(f"rule {i}: zeros is {{beside: pattern, shape: [expr], dtype: torch dtype}} on a drop_when rule")
        if len(present) == 1 and set(r) - set(sides) - {"note", "reason", "keep_dtype", "drop_when", "zeros", "variants"}:
            fail(f"rule {i}: a one-sided rule only names keys (with its reason, an optional note and keep_dtype)")
        if len(present) == 1 and not (isinstance(r.get("reason"), str) and r["reason"]):
            fail(f"rule {i}: a one-sided rule drops keys and says why: 'reason'")
        if len(present) == 2 and "reason" in r:
            fail(f"rule {i}: 'reason' belongs to a one-sided rule")
        for s in present:
            if isinstance(r[s], list):
                if not r[s]:
                    fail(f"rule {i}: a list side has parts")
                for part in r[s]:
                    if not (isinstance(part, dict) and isinstance(part.get("key"), str) and "size" in part
                            and set(part) <= {"key", "size", "rope"}):
                        fail(f"rule {i}: parts are {{'key', 'size', optional 'rope'}}")
                    _parse_expr(part["size"], f"{where}: rule {i}: size")
            elif not isinstance(r[s], str):
                fail(f"rule {i}: patterns are strings")
            for pat in _patterns(r, s):
                if not pat:
                    fail(f"rule {i}: patterns are non-empty strings")
                try:
                    _pattern(pat)
                except MapError as e:
                    fail(f"rule {i}: {e}")
        if "rope" in r:
            _check_rope(r["rope"], lambda msg: fail(f"rule {i}: {msg}"))
        lists = [s for s in present if isinstance(r[s], list)]
        if lists:
            if len(present) != 2 or len(lists) != 1 or not _is_dim(r.get("dim")) or "rope" in r:
                fail(f"rule {i}: a list side needs the other side, 'dim' (an index >= 0), and no 'rope' of its "
                     "own (its parts may have one)")
            for part in r[lists[0]]:
                if "rope" in part:
                    _check_rope(part["rope"], lambda msg: fail(f"rule {i}: {msg}"))
            if "groups" in r:
                _parse_expr(r["groups"], f"{where}: rule {i}: groups")
                if any("rope" in part for part in r[lists[0]]):
                    fail(f"rule {i}: rope on a part of a grouped rule (a part's rows are not contiguous)")
        elif "dim" in r or "groups" in r:
            fail(f"rule {i}: 'dim' and 'groups' belong to a rule with a list side")
        if "transpose" in r:
            if not isinstance(r["transpose"], bool):
                fail(f"rule {i}: transpose is true or false")
            if r["transpose"] and (len(present) != 2 or "rope" in r or "groups" in r or _stack_spec(r) is not None
                                   or any("rope" in p for s in present if isinstance(r[s], list) for p in r[s])):
                fail(f"rule {i}: transpose needs both sides, and goes with no rope, groups or stack")
        if "tied" in r:
            t = r["tied"]
            if not (isinstance(t, dict) and len(t) == 1 and set(t) <= set(sides) and all(isinstance(v, str) for v in t.values())
                    and len(present) == 2 and all(isinstance(r[s], str) and not _pattern(r[s]).slots for s in present)
                    and not set(r) & {"rope", "dim", "groups", "experts", "stack", "transpose"}
                    and not any(_pattern(v).slots for v in t.values())):
                fail(f"rule {i}: tied is {{SIDE: KEY}} on a plain rename of two keys without placeholders")
        if "stack" in r and "experts" in r:
            fail(f"rule {i}: 'stack' and 'experts' are synonyms: give one")
        st = _stack_spec(r)
        if isinstance(st, list):
            # a stack over several axes (Megatron's experts [L, E, ...]): dcpctl's engine only; the
            # reference refuses to apply it (maps_test.py checks it against megatron-core's logits)
            r["_unsupported"] = True
        elif st is not None:
            what = "stack" if "stack" in r else "experts"
            if len(present) != 2 or not (isinstance(st, dict) and set(st) == {"dim", "count"}) or not _is_dim(st["dim"]):
                fail(f"rule {i}: {what} is {{'dim' (an index >= 0), 'count'}} on a rule with both sides")
            _parse_expr(st["count"], f"{where}: rule {i}: {what} count")
            if "rope" in r:
                fail(f"rule {i}: rope on a {what} rule (give it to the parts of a list side)")
            try:
                _stack_sides(r, sides)
            except MapError as e:
                fail(f"rule {i}: {what}: {e}")
        else:
            try:  # whatever the destination fills must come from the source
                names = {s: _side_names(r, s) for s in present}
                if len(present) == 2 and names[sides[0]] != names[sides[1]]:
                    raise MapError(f"the sides' placeholders differ: {sorted(names[sides[0]])} vs "
                                   f"{sorted(names[sides[1]])}")
            except MapError as e:
                fail(f"rule {i}: {e}")


def _check_rope(spec: Any, fail) -> None:
    if not (isinstance(spec, dict) and set(spec) == {"heads", "head_dim"}):
        fail("rope is {'heads', 'head_dim'}")
    for v in spec.values():
        _parse_expr(v, "rope")


def _side_names(rule: dict, side: str) -> set[str]:
    """The placeholder names of a side (every part of a list side must have the same)."""
    sets = [frozenset(n for n, _ in _pattern(p).slots) for p in _patterns(rule, side)]
    if len(set(sets)) > 1:
        raise MapError(f"the parts of the {side} side have different placeholders")
    return set(sets[0])


def _stack_sides(rule: dict, sides: list[str]) -> tuple[str, str, str]:
    """(stacked side, per-index side, index placeholder) of a stack/experts rule."""
    a, b = sides
    na, nb = _side_names(rule, a), _side_names(rule, b)
    if isinstance(rule[a], list) or isinstance(rule[b], list):
        per, stacked = (a, b) if isinstance(rule[a], list) else (b, a)
    elif len(na) != len(nb):
        per, stacked = (a, b) if len(na) > len(nb) else (b, a)
    else:
        raise MapError("the per-index side's pattern needs one placeholder more than the stacked side's (the index)")
    extra = _side_names(rule, per) - _side_names(rule, stacked)
    if len(extra) != 1 or not _side_names(rule, stacked) <= _side_names(rule, per):
        raise MapError(f"the {per} side's placeholders must be the {stacked} side's plus one (the index); "
                       f"{sorted(_side_names(rule, per))} vs {sorted(_side_names(rule, stacked))}")
    return stacked, per, next(iter(extra))


# ------------------------------------------------------------------------------------- patterns


class Pattern:
    """A key pattern: regex with one group per placeholder, slots = [(name, offset expr or None)]."""

    def __init__(self, text: str):
        self.text = text
        self.slots: list[tuple[str, Any]] = []
        out, pos = [], 0
        for mt in _BRACES.finditer(text):
            out.append(re.escape(text[pos:mt.start()]))
            inner = mt.group(1)
            nm = _NAME.match(inner)
            if not nm:
                raise MapError(f"pattern {text!r}: placeholder {{{inner}}}: a name, or a name + an expression")
            name, rest = nm.group(1), nm.group(2).strip()
            off = None
            if rest:
                if not rest.startswith("+") or not rest[1:].strip():
                    raise MapError(f"pattern {text!r}: placeholder {{{inner}}}: only NAME + EXPR is allowed")
                off = rest[1:].strip()
                _parse_expr(off, f"pattern {text!r}: placeholder {{{inner}}}")
            if any(n == name for n, _ in self.slots):
                raise MapError(f"pattern {text!r}: placeholder {name} appears twice")
            self.slots.append((name, off))
            out.append("(0|[1-9][0-9]*)")
            pos = mt.end()
        tail = text[pos:]
        if "{" in _BRACES.sub("", text) or "}" in _BRACES.sub("", text):
            raise MapError(f"pattern {text!r}: unbalanced braces")
        out.append(re.escape(tail))
        self.regex = re.compile("".join(out) + r"\Z")

    def match(self, key: str, params: "Params") -> dict[str, int] | None:
        mt = self.regex.match(key)
        if not mt:
            return None
        vals = {}
        for (name, off), g in zip(self.slots, mt.groups()):
            v = int(g)
            if off is not None:
                v -= params.eval(off)
                if v < 0:
                    return None
            vals[name] = v
        return vals

    def fill(self, values: dict[str, int], params: "Params") -> str:
        it = iter(self.slots)

        def sub(mt):
            name, off = next(it)
            if name not in values:
                raise MapError(f"pattern {self.text!r}: placeholder {{{name}}} has no value on the other side")
            v = values[name] + (params.eval(off) if off is not None else 0)
            if v < 0:
                raise MapError(f"pattern {self.text!r}: {{{mt.group(1)}}} is {v} < 0")
            return str(v)

        return _BRACES.sub(sub, self.text)


@lru_cache(maxsize=None)
def _pattern(text: str) -> Pattern:
    return Pattern(text)


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
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise MapError(f"{where}: bad expression {text!r}") from e
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Load,
                                 ast.Add, ast.Sub, ast.Mult, ast.Div, ast.USub, ast.UAdd)):
            raise MapError(f"{where}: {text!r}: only + - * / ( ), names and integers")
        if isinstance(node, ast.Constant) and (not isinstance(node.value, int) or isinstance(node.value, bool)):
            raise MapError(f"{where}: {text!r}: only integer constants")
    return tree


def _config_value(config: dict, key: str) -> Any:
    """config.json's value for a key as written, else for a dotted path into nested objects (a
    multimodal release keeps the language model's numbers under text_config)."""
    if key in config or "." not in key:
        return config.get(key)
    v: Any = config
    for name in key.split("."):
        if not isinstance(v, dict) or name not in v:
            return None
        v = v[name]
    return v


def _aliased_value(config: dict, key: str) -> Any:
    """config.json's value for key as transformers reads it: through the attribute_map of the
    config's model_type class, both ways (transformers 5.23 writes Qwen3-MoE's num_experts as
    num_local_experts, which Qwen3MoeConfig.attribute_map aliases to num_experts). transformers itself
    is the oracle here, not dcpctl's table (src/view/maps/config_aliases.json)."""
    v = _config_value(config, key)
    if v is not None or "." in key or not isinstance(config.get("model_type"), str):
        return v
    try:
        from transformers import CONFIG_MAPPING
        amap = getattr(CONFIG_MAPPING[config["model_type"]], "attribute_map", {}) or {}
    except (ImportError, KeyError):
        return None
    names = ([amap[key]] if key in amap else []) + [a for a, b in amap.items() if b == key]
    return next((config[n] for n in names if config.get(n) is not None), None)


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
                v = _aliased_value(self.config, k)
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
        if _config_value(self.config, name) is not None:
            return self._int(_config_value(self.config, name), f"config.json {name}")
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


def split_parts(t, dim: int, sizes: list[int], groups: int, what: str) -> list:
    """One tensor -> its parts along dim: `groups` repetitions of [part 0 | part 1 | ...], part i
    giving sizes[i] / groups rows (elements along dim) to each repetition."""
    import torch

    if dim >= t.dim():
        raise MapError(f"{what}: dim {dim} of a {t.dim()}-d tensor")
    if groups <= 0 or any(s % groups for s in sizes):
        raise MapError(f"{what}: part sizes {sizes} are not divisible by groups = {groups}")
    if sum(sizes) != t.shape[dim]:
        raise MapError(f"{what}: parts {sizes} do not add up to dim {dim} = {t.shape[dim]}")
    per = [s // groups for s in sizes]
    span = sum(per)
    out = []
    for i, p in enumerate(per):
        start = sum(per[:i])
        out.append(torch.cat([t.narrow(dim, g * span + start, p) for g in range(groups)], dim=dim).contiguous())
    return out


def join_parts(parts: list, dim: int, sizes: list[int], groups: int, what: str):
    """The inverse of split_parts: the parts (each sizes[i] along dim) -> one tensor."""
    import torch

    if groups <= 0 or any(s % groups for s in sizes):
        raise MapError(f"{what}: part sizes {sizes} are not divisible by groups = {groups}")
    per = [s // groups for s in sizes]
    pieces = [parts[i].narrow(dim, g * per[i], per[i]) for g in range(groups) for i in range(len(parts))]
    return torch.cat(pieces, dim=dim).contiguous()


# ------------------------------------------------------------------------------------- applying


def _match_side(rule: dict, side: str, key: str, params: Params):
    """("whole", vals) or ("part", part index, vals) or None."""
    v = rule.get(side)
    if v is None:
        return None
    if isinstance(v, list):
        for i, part in enumerate(v):
            vals = _pattern(part["key"]).match(key, params)
            if vals is not None:
                return ("part", i, vals)
        return None
    vals = _pattern(v).match(key, params)
    return None if vals is None else ("whole", vals)


def direction(m: dict, keys, params: Params | None = None) -> tuple[str, str]:
    a, b = m["sides"]
    params = params or Params(m, {})
    counts = {}
    for side in (a, b):
        pats = [_pattern(p) for r in m["rules"] for p in _patterns(r, side)]
        # patterns without offsets first: a key they match counts without resolving a param
        pats.sort(key=lambda p: any(off is not None for _, off in p.slots))
        counts[side] = sum(1 for k in keys if any(p.match(k, params) is not None for p in pats))
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

    m = concrete(m, config, sd.keys())
    params = Params(m, config)
    src, dst = direction(m, sd.keys(), params)
    first = m["sides"][0]
    to_halves = src == first
    out: dict[str, Any] = {}
    left_out, dropped = [], []
    mapped = 0
    pending: dict[tuple, dict] = {}  # gathers: the parts of a concatenation, the slices of a stack

    def put(key, value):
        if key in out:
            raise MapError(f"two input keys map to {key!r}")
        out[key] = value

    def rope(spec, t):
        return rope_permute(t, params.eval(spec["heads"]), params.eval(spec["head_dim"]), to_halves)

    def sizes_of(rule, side):
        return [params.eval(p["size"]) for p in rule[side]]

    def groups_of(rule):
        return params.eval(rule["groups"]) if "groups" in rule else 1

    def flip(rule, t, what):
        if not rule.get("transpose"):
            return t
        if t.dim() < 2:
            raise MapError(f"{what}: a {t.dim()}-d tensor has no last two dims to transpose")
        return t.transpose(-2, -1).contiguous()

    def emit(rule, vals, t, what):
        """One tensor of the source's shape of a (per-index) rule side -> the destination side."""
        if isinstance(rule[dst], list):
            parts = split_parts(t, rule["dim"], sizes_of(rule, dst), groups_of(rule), what)
            for p, piece in zip(rule[dst], parts):
                if "rope" in p:
                    piece = rope(p["rope"], piece)
                put(_pattern(p["key"]).fill(vals, params), flip(rule, piece, what))
        else:
            if "rope" in rule:
                t = rope(rule["rope"], t)
            put(_pattern(rule[dst]).fill(vals, params), flip(rule, t, what))

    for key, value in sd.items():
        hit = None
        for idx, rule in enumerate(m["rules"]):
            h = _match_side(rule, src, key, params)
            if h is not None:
                hit = (idx, rule, h)
                break
        if hit is None:
            left_out.append(key)
            continue
        idx, rule, h = hit
        if rule.get("_unsupported"):
            raise MapError(f"rule {idx}: a stack over several axes is not applied by the reference")
        if dst not in rule:
            # "drop_when": "zeros": dropped only when it holds nothing (dcpctl: exit 5 otherwise)
            if rule.get("drop_when") == "zeros" and isinstance(value, torch.Tensor) and bool(value.ne(0).any()):
                raise MapError(f"{key}: rule {idx} drops it only when all zeros, and it is not")
            dropped.append(key)
            continue
        if not isinstance(value, torch.Tensor):
            raise MapError(f"{key}: matched rule {idx} but is not a tensor")
        mapped += 1
        vals = h[-1]
        pi = h[1] if h[0] == "part" else None
        st = _stack_spec(rule)
        if st is not None:
            stacked, per_side, ix = _stack_sides(rule, m["sides"])
            count, sdim = params.eval(st["count"]), st["dim"]
            if src == stacked:  # unstack, then (list rule) split each slice
                if sdim >= value.dim() or value.shape[sdim] != count:
                    raise MapError(f"{key}: dim {sdim} of shape {tuple(value.shape)} is not the map's count {count}")
                for i, piece in enumerate(torch.unbind(value, dim=sdim)):
                    emit(rule, {**vals, ix: i}, piece.contiguous(), f"{key}[{i}]")
                continue
            base = {k: v for k, v in vals.items() if k != ix}  # one slice (or one part of one): gather
            g = pending.setdefault((idx, tuple(sorted(base.items()))), {"rule": rule, "vals": base, "parts": {}})
            g["parts"][(vals[ix], pi)] = (key, value)
            continue
        if pi is not None:  # one part of a concatenation: gather
            g = pending.setdefault((idx, tuple(sorted(vals.items()))), {"rule": rule, "vals": vals, "parts": {}})
            g["parts"][(None, pi)] = (key, value)
            continue
        emit(rule, vals, value, key)

    for (idx, _), g in pending.items():
        rule, vals, parts = g["rule"], g["vals"], g["parts"]
        st = _stack_spec(rule)
        target = _pattern(rule[dst]).fill(vals, params)

        def joined(i):
            """The per-index (or, without a stack, the one) tensor of the source side, at index i."""
            if not isinstance(rule[src], list):
                return parts[(i, None)][1]
            plist = rule[src]
            missing = [_pattern(p["key"]).fill({**vals, **({} if i is None else {ix: i})}, params)
                       for j, p in enumerate(plist) if (i, j) not in parts]
            if missing:
                raise MapError(f"rule {idx}: {missing} missing to build {target}")
            sizes = sizes_of(rule, src)
            pieces = []
            for j, p in enumerate(plist):
                k, t = parts[(i, j)]
                t = flip(rule, t, k)
                d = rule["dim"]
                if d >= t.dim() or t.shape[d] != sizes[j]:
                    raise MapError(f"{k}: dim {d} of shape {tuple(t.shape)} is not the map's size {sizes[j]}")
                if "rope" in p:
                    t = rope(p["rope"], t)
                pieces.append(t)
            return join_parts(pieces, rule["dim"], sizes, groups_of(rule), target)

        if st is None:
            put(target, joined(None))
            continue
        _, _, ix = _stack_sides(rule, m["sides"])
        count = params.eval(st["count"])
        have = sorted({i for i, _ in parts})
        missing = [i for i in range(count) if i not in have]
        extra = [i for i in have if i >= count]
        if missing or extra:
            raise MapError(f"rule {idx} ({target}): indices {missing} missing"
                           + (f", {extra} beyond count {count}" if extra else ""))
        slices = [joined(i) for i in range(count)]
        if st["dim"] > slices[0].dim():
            raise MapError(f"rule {idx} ({target}): stack dim {st['dim']} beyond a {slices[0].dim()}-d slice")
        shapes = {tuple(t.shape) for t in slices}
        if len(shapes) != 1:
            raise MapError(f"rule {idx} ({target}): slices of different shapes {sorted(shapes)}")
        put(target, torch.stack(slices, dim=st["dim"]))

    if (config or {}).get("tie_word_embeddings") is True:
        for rule in m["rules"]:
            tied = (rule.get("tied") or {}).get(src)
            if tied and rule[src] not in sd and tied in sd:
                put(rule[dst], sd[tied])

    # "zeros" (mapping to a drop_when rule's side): its key as zeros beside each output `beside` matches,
    # unless another rule made that key from the input (GLM-4.5's e_score_correction_bias from router.expert_bias)
    for rule in m["rules"]:
        z = rule.get("zeros")
        if not z or src in rule or dst not in rule:
            continue
        beside = _pattern(z["beside"])
        for key in list(out):
            vals = beside.match(key, params)
            if vals is not None:
                key_z = _pattern(rule[dst]).fill(vals, params)
                if key_z in out:
                    continue
                shape = [params.eval(d) for d in z["shape"]]
                put(key_z, torch.zeros(shape, dtype=getattr(torch, z["dtype"])))

    report = {"name": m["name"], "direction": f"{src}->{dst}", "mapped": mapped, "left_out": left_out,
              "dropped": dropped, "params": {k: params.values[k] for k in params.used}}
    return out, report


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
