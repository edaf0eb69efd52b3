"""Reference ("oracle") helpers: what real PyTorch sees in a DCP checkpoint.

Everything here goes through torch's own reader, single process, no process group:
``_load_state_dict(..., planner=_EmptyStateDictLoadPlanner(), no_dist=True)``, which is exactly
what ``torch.distributed.checkpoint.format_utils.dcp_to_torch_save`` does. The nested result is
flattened back to DCP's flat keys with the checkpoint's own ``Metadata.planner_data``
(flat key -> path tuple).

Used by tests/fixtures/make_fixtures.py (to write expected.json), tests/fixtures/check_fixtures.py
(CTest sanity test) and by future interop tests that compare dcpctl's output with torch's.

Helpers:
    load_expected(case_dir)             -> dict (parsed expected.json)
    read_metadata(ckpt_dir)             -> torch.distributed.checkpoint.metadata.Metadata
    flat_state_from_dcp(ckpt_dir)       -> {flat_key: tensor | python value}
    sha256_tensor(t)                    -> hex sha256 of the tensor's C-contiguous little-endian bytes
    tensor_bytes(t)                     -> those bytes
    describe_value(v)                   -> the expected.json entry for a value (tensor or bytes item)
    compare_flat(actual, expected_json) -> list of mismatch messages (empty = match)
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

SCHEMA_VERSION = 1
REPR_LIMIT = 200

__all__ = [
    "SCHEMA_VERSION",
    "load_expected",
    "read_metadata",
    "read_metadata_raw",
    "flat_state_from_dcp",
    "nested_state_from_dcp",
    "sha256_tensor",
    "tensor_bytes",
    "dtype_name",
    "describe_value",
    "json_value",
    "compare_flat",
    "values_equal",
    "stable_repr",
]


def _quiet():
    """Silence torch's 'assuming the intent is to load in a single process' style warnings."""
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("ignore")
    return ctx


# ----------------------------------------------------------------------------------------------
# expected.json


def load_expected(case_dir: str | os.PathLike) -> dict:
    """Parse ``<case_dir>/expected.json``."""
    with open(Path(case_dir) / "expected.json", encoding="utf-8") as f:
        data = json.load(f)
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{case_dir}: unsupported schema_version {data.get('schema_version')!r}")
    return data


# ----------------------------------------------------------------------------------------------
# reading with real torch


def read_metadata(ckpt_dir: str | os.PathLike):
    """The checkpoint's ``Metadata`` object, as torch's FileSystemReader unpickles it."""
    from torch.distributed.checkpoint import FileSystemReader

    return FileSystemReader(str(ckpt_dir)).read_metadata()


def read_metadata_raw(ckpt_dir: str | os.PathLike):
    """``pickle.load`` of ``<ckpt_dir>/.metadata`` exactly as stored (FileSystemReader.read_metadata
    additionally sets ``storage_meta.load_id``). Trusted fixtures only: this is plain pickle."""
    import pickle

    with open(Path(ckpt_dir) / ".metadata", "rb") as f:
        return pickle.load(f)


def nested_state_from_dcp(ckpt_dir: str | os.PathLike) -> dict:
    """The nested state dict that ``dcp_to_torch_save`` would write (whole checkpoint in RAM)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    sd: dict = {}
    ctx = _quiet()
    try:
        _load_state_dict(
            sd,
            storage_reader=FileSystemReader(str(ckpt_dir)),
            planner=_EmptyStateDictLoadPlanner(),
            no_dist=True,
        )
    finally:
        ctx.__exit__(None, None, None)
    return sd


def _get_path(root: Any, path: tuple) -> Any:
    cur = root
    for part in path:
        cur = cur[part]  # dict key (str) or list index (int)
    return cur


def flat_state_from_dcp(ckpt_dir: str | os.PathLike) -> dict[str, Any]:
    """{flat key: tensor or python value} for every key of the checkpoint metadata.

    Flat keys are the keys of ``Metadata.state_dict_metadata``; the values are found in the nested
    state dict torch rebuilt, following ``Metadata.planner_data[key]`` (a path tuple of str dict
    keys and int list indices). Tensors are full (unsharded), contiguous CPU tensors.
    """
    md = read_metadata(ckpt_dir)
    nested = nested_state_from_dcp(ckpt_dir)
    planner_data = md.planner_data or {}
    flat: dict[str, Any] = {}
    for key in md.state_dict_metadata:
        path = planner_data.get(key, (key,))
        flat[key] = _get_path(nested, tuple(path))
    return flat


# ----------------------------------------------------------------------------------------------
# hashing and description


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tensor_bytes(t: torch.Tensor) -> bytes:
    """The tensor's elements in C-contiguous (row-major) order, little-endian, as raw bytes.

    Works for every dtype, including bool, complex, float8, float4_e2m1fn_x2, 0-d and empty tensors.
    """
    if sys.byteorder != "little":  # pragma: no cover - all supported hosts are little-endian
        raise RuntimeError("tensor_bytes assumes a little-endian host")
    t = t.detach().cpu().contiguous().reshape(-1)
    if t.numel() == 0:
        return b""
    return t.view(torch.uint8).numpy().tobytes()


def sha256_tensor(t: torch.Tensor) -> str:
    return hashlib.sha256(tensor_bytes(t)).hexdigest()


class _NotJson(Exception):
    pass


def json_value(v: Any) -> Any:
    """``v`` as JSON if JSON represents it exactly (tuples become lists), else raise _NotJson."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise _NotJson
        return float(v)
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    if isinstance(v, dict):
        if not all(isinstance(k, str) for k in v):
            raise _NotJson
        return {k: json_value(x) for k, x in v.items()}
    raise _NotJson


def _json_or_none(v: Any) -> Any:
    try:
        return json_value(v)
    except _NotJson:
        return None


def _stable_repr(v: Any) -> str:
    """repr(), but deterministic for objects whose repr carries a memory address."""
    if isinstance(v, io.BytesIO):
        buf = v.getvalue()
        return f"<_io.BytesIO {len(buf)} bytes sha256={hashlib.sha256(buf).hexdigest()[:16]}>"
    if isinstance(v, torch.Tensor):
        return f"tensor(dtype={dtype_name(v.dtype)}, shape={list(v.shape)}, sha256={sha256_tensor(v)[:16]})"
    if isinstance(v, (list, tuple)) and any(isinstance(x, (io.BytesIO, torch.Tensor)) for x in v):
        inner = ", ".join(_stable_repr(x) for x in v)
        return f"[{inner}]" if isinstance(v, list) else f"({inner})"
    r = repr(v)
    if " at 0x" in r:
        r = f"<{type(v).__module__}.{type(v).__qualname__} object>"
    return r


def describe_value(v: Any, chunks: list | None = None) -> dict:
    """The expected.json entry for one flat value.

    ``chunks``: the TensorStorageMetadata.chunks list for tensors (its length is recorded, and the
    offsets/sizes as an extra ``chunk_list`` field).
    """
    if isinstance(v, torch.Tensor):
        entry = {
            "kind": "tensor",
            "dtype": dtype_name(v.dtype),
            "shape": list(v.shape),
            "nbytes": v.numel() * v.element_size(),
            "sha256": sha256_tensor(v),
        }
        if chunks is not None:
            entry["chunks"] = len(chunks)
            entry["chunk_list"] = [
                {"offsets": list(c.offsets), "sizes": list(c.sizes)} for c in chunks
            ]
        return entry
    entry = {
        "kind": "bytes",
        "python_type": type(v).__name__,
        "value": _json_or_none(v),
        "repr": _stable_repr(v)[:REPR_LIMIT],
    }
    if isinstance(v, io.BytesIO):
        # A BytesIO in the state dict is itself torch.save'd by DCP. Describe its payload too.
        buf = v.getvalue()
        entry["payload_len"] = len(buf)
        entry["payload_sha256"] = hashlib.sha256(buf).hexdigest()
        try:
            inner = torch.load(io.BytesIO(buf), weights_only=False)
            entry["payload_python_type"] = type(inner).__name__
            entry["payload_value"] = _json_or_none(inner)
        except Exception:  # not a torch.save payload
            entry["payload_python_type"] = None
            entry["payload_value"] = None
    elif isinstance(v, bytes):
        entry["payload_len"] = len(v)
        entry["payload_sha256"] = hashlib.sha256(v).hexdigest()
    return entry


def describe_tree(v: Any) -> Any:
    """A whole nested object (what torch.load returns) as JSON that keeps everything ``==`` would
    not: dict key order and key types, container types (dict/OrderedDict, list/tuple), int vs
    float vs bool, floats exactly (repr), and every tensor's dtype, shape, stride, storage offset,
    requires_grad and SHA-256 (C order). Two objects describe alike iff they are the same
    checkpoint, key for key and byte for byte."""
    if isinstance(v, torch.Tensor):
        return {"tensor": {"dtype": dtype_name(v.dtype), "shape": list(v.shape), "stride": list(v.stride()),
                           "storage_offset": v.storage_offset(), "requires_grad": v.requires_grad,
                           "sha256": sha256_tensor(v)}}
    if isinstance(v, dict):
        return {type(v).__name__: [[describe_tree(k), describe_tree(x)] for k, x in v.items()]}
    if isinstance(v, (list, tuple, set, frozenset)):
        items = sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v
        return {type(v).__name__: [describe_tree(x) for x in items]}
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return {"int": str(v)} if abs(v) >= 2**53 else v
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    return {"repr": _stable_repr(v), "type": f"{type(v).__module__}.{type(v).__qualname__}"}


# ----------------------------------------------------------------------------------------------
# comparison


def _values_equal(a: Any, b: Any) -> bool:
    """Exact equality for python values (NaN equals NaN, BytesIO by content, tensors bitwise)."""
    if isinstance(a, io.BytesIO) and isinstance(b, io.BytesIO):
        return a.getvalue() == b.getvalue()
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return (
            a.dtype == b.dtype
            and tuple(a.shape) == tuple(b.shape)
            and tensor_bytes(a) == tensor_bytes(b)
        )
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_values_equal(a[k], b[k]) for k in a)
    return a == b


values_equal = _values_equal
stable_repr = _stable_repr


def compare_flat(actual: dict[str, Any], expected_json: dict) -> list[str]:
    """Compare a flat state ({key: tensor or value}) with an expected.json document.

    Tensors: dtype, shape, nbytes and sha256 must match. Bytes items: python_type, and value
    (when expected.json has a non-null value) or repr otherwise, and the payload hash for BytesIO.
    ``actual`` values may also be expected.json-style entries (dicts with "kind"), e.g. what a
    native tool reports, in which case the fields present in both are compared.
    Returns a list of human-readable mismatch messages; empty means everything matched.
    """
    exp_keys: dict = expected_json["keys"]
    msgs: list[str] = []
    missing = sorted(set(exp_keys) - set(actual))
    extra = sorted(set(actual) - set(exp_keys))
    for k in missing:
        msgs.append(f"missing key: {k}")
    for k in extra:
        msgs.append(f"unexpected key: {k}")
    for key in sorted(set(exp_keys) & set(actual)):
        exp = exp_keys[key]
        got = actual[key]
        if isinstance(got, dict) and "kind" in got:
            got_entry = got
        else:
            got_entry = describe_value(got)
        if got_entry["kind"] != exp["kind"]:
            msgs.append(f"{key}: kind {got_entry['kind']} != expected {exp['kind']}")
            continue
        if exp["kind"] == "tensor":
            for field in ("dtype", "shape", "nbytes", "sha256"):
                if field in got_entry and got_entry[field] != exp[field]:
                    msgs.append(f"{key}: {field} {got_entry[field]!r} != expected {exp[field]!r}")
        else:
            if got_entry.get("python_type") != exp["python_type"]:
                msgs.append(
                    f"{key}: python_type {got_entry.get('python_type')!r} != expected {exp['python_type']!r}"
                )
            if exp.get("value") is not None:
                if got_entry.get("value") != exp["value"]:
                    msgs.append(f"{key}: value {got_entry.get('value')!r} != expected {exp['value']!r}")
            elif "repr" in got_entry and got_entry["repr"] != exp["repr"]:
                msgs.append(f"{key}: repr {got_entry['repr']!r} != expected {exp['repr']!r}")
            for field in ("payload_len", "payload_sha256", "payload_value"):
                if field in exp and field in got_entry and got_entry[field] != exp[field]:
                    msgs.append(f"{key}: {field} {got_entry[field]!r} != expected {exp[field]!r}")
    return msgs
