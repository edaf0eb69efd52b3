"""dcpctl from Python: lazy, bounded, CRC-checked reads of any checkpoint dcpctl reads, and its
commands as functions (docs/python.md).

    import dcpctl
    with dcpctl.open("ckpt/step-12000") as ck:
        print(ck.keys()[:5], ck.info("model.tok_embeddings.weight")["shape"])
        w = ck.get("model.layers.0.attention.wq.weight")            # a NumPy array
        rows = ck.get_slice("model.tok_embeddings.weight")[0:128]   # reads only the chunks it meets
    report = dcpctl.verify("ckpt/step-12000", deep=True)             # what `verify --json` prints

Everything runs in this process (the extension dcpctl._dcpctl calls dcpctl's C++ library; no
subprocess, no process group), with the GIL released while it reads.
"""
import json as _json

from . import _dcpctl
from ._errors import CheckpointIOError, DamagedCheckpoint, Error, Unsupported, UsageError

__version__ = _dcpctl.__version__
IOError = CheckpointIOError  # the name for exit code 4 (dcpctl.IOError); an OSError too

__all__ = ["open", "Checkpoint", "Slice", "inspect", "verify", "stats", "diff", "consolidate", "reshard", "cast",
           "Error", "UsageError", "DamagedCheckpoint", "CheckpointIOError", "IOError", "Unsupported"]

# torch's dtype names (what info() reports) -> (NumPy type name, or the ml_dtypes type's, itemsize).
_NUMPY = {
    "float32": "float32", "float64": "float64", "float16": "float16",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "bool": "bool", "complex64": "complex64", "complex128": "complex128",
}
_ML_DTYPES = {
    "bfloat16": "bfloat16", "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
    "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e5m2fnuz": "float8_e5m2fnuz", "float8_e8m0fnu": "float8_e8m0fnu",
}
_FRAMEWORKS = {"np": "np", "numpy": "np", "pt": "pt", "torch": "pt"}


def _size(value, what: str) -> int:
    if isinstance(value, int):
        if value <= 0:
            raise UsageError(f"{what}: {value} is not a size")
        return value
    return _dcpctl._parse_size(str(value), what)


def _framework(name) -> str:
    try:
        return _FRAMEWORKS[name]
    except (KeyError, TypeError):
        raise UsageError(f"framework={name!r}: none of 'np' (NumPy), 'pt' (torch)") from None


def _numpy_dtype(name: str, key: str):
    import numpy as np

    if name in _NUMPY:
        return np.dtype(_NUMPY[name])
    if name in _ML_DTYPES:
        try:
            import ml_dtypes
        except ImportError:
            raise Unsupported(
                f"'{key}' is {name}, which NumPy has no type for: install ml_dtypes (pip install ml_dtypes), "
                f"or read it with framework='pt' (torch), or convert it with dtype='float32'", key=key) from None
        return np.dtype(getattr(ml_dtypes, _ML_DTYPES[name]))
    raise Unsupported(f"'{key}' is {name}, which NumPy has no type for: read it with framework='pt' (torch)", key=key)


def _as_numpy(raw, name: str, shape, key: str, dtype):
    import numpy as np

    if dtype is not None and name == "bfloat16" and np.dtype(dtype) == np.float32:
        # Exact without ml_dtypes: a bfloat16 is the high half of the float32 it stands for.
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    a = raw.view(_numpy_dtype(name, key)).reshape(shape)
    return a if dtype is None else a.astype(dtype)


def _as_torch(raw, name: str, shape, dtype):
    import torch

    # DLPack: the tensor shares the array's buffer (dcpctl's), no copy.
    t = torch.from_dlpack(raw).view(getattr(torch, name)).reshape(tuple(shape))
    if dtype is None:
        return t
    return t.to(getattr(torch, dtype) if isinstance(dtype, str) else dtype)


def _box(index, shape):
    """A NumPy-style index (ints, slices, Ellipsis) of a tensor of `shape` -> the box to read
    (offsets, sizes), the positive-step slicing of what is read, the dimensions to flip (negative
    steps); an int index reads one row and drops its dimension."""
    if not isinstance(index, tuple):
        index = (index,)
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise UsageError("an index can have only one Ellipsis")
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (len(shape) - len(index) + 1) + index[at + 1:]
    if len(index) > len(shape):
        raise UsageError(f"{len(index)} indices for a tensor of {len(shape)} dimensions")
    index = index + (slice(None),) * (len(shape) - len(index))
    offsets, sizes, post, flip = [], [], [], []
    for d, (i, n) in enumerate(zip(index, shape)):
        if isinstance(i, slice):
            r = range(*i.indices(n))
            lo = min(r) if len(r) else 0
            offsets.append(lo)
            sizes.append(max(r) - lo + 1 if len(r) else 0)
            post.append(slice(0, None, abs(r.step)))
            if r.step < 0:
                flip.append(len(post) - 1)
            continue
        try:
            k = int(i.__index__())
        except (AttributeError, TypeError):
            raise UsageError(f"index {i!r}: only integers, slices and Ellipsis") from None
        if not -n <= k < n:
            raise UsageError(f"index {k} is out of range for dimension {d} of size {n}")
        offsets.append(k % n)
        sizes.append(1)
        post.append(0)
    return offsets, sizes, tuple(post), flip


class Slice:
    """A tensor to be read in part: index it as a NumPy array (ints, slices with steps, Ellipsis).
    Only the chunks that meet the slice are read (with steps, those that meet the range they span)."""

    def __init__(self, checkpoint: "Checkpoint", key: str):
        self._ck = checkpoint
        self._key = key
        self._info = checkpoint.info(key)

    def get_shape(self) -> list:
        return list(self._info["shape"])

    def get_dtype(self) -> str:
        return self._info["dtype"]

    @property
    def shape(self) -> tuple:
        return tuple(self._info["shape"])

    def __getitem__(self, index):
        offsets, sizes, post, flip = _box(index, self._info["shape"])
        out = self._ck._read(self._key, offsets, sizes, None, None)
        out = out[post]
        if flip:
            import numpy as np

            dims = [d - sum(1 for p in post[:d] if isinstance(p, int)) for d in flip]  # after ints drop theirs
            out = np.flip(out, axis=dims) if isinstance(out, np.ndarray) else out.flip(dims)
        return out

    def __repr__(self):
        return f"<dcpctl.Slice {self._key!r} {self._info['dtype']} {self._info['shape']}>"


class Checkpoint:
    """A checkpoint opened by dcpctl.open(). Safe to read from several threads at once."""

    def __init__(self, path, *, framework="np", max_memory="1GiB", threads=4, check_records=True):
        self._framework = _framework(framework)
        self._check_records = bool(check_records)
        self._c = _dcpctl._Checkpoint(str(path), _size(max_memory, "max_memory"), int(threads))
        self._infos = {}
        d = self._c.describe()
        self.path, self.layout = d["path"], d["layout"]

    # -- what it holds
    def keys(self) -> list:
        """The tensors' keys, in the checkpoint's order (flat FQNs, as inspect prints them)."""
        return self._c.keys()

    def values(self) -> list:
        """The keys of the non-tensor items (a step counter, an RNG state, ...)."""
        return self._c.values()

    def __contains__(self, key) -> bool:
        return isinstance(key, str) and self._c.contains(key)

    def __iter__(self):
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def info(self, key: str) -> dict:
        """{"key", "dtype" (torch's name), "shape", "numel", "nbytes", "readable", "chunks": [{"offsets",
        "sizes", "file", "rank" (from the file name, or None), "offset", "length"}]}: how it is chunked."""
        i = self._infos.get(key)
        if i is None:
            i = self._infos[key] = self._c.info(key)
        return i

    def value(self, key: str) -> str:
        """A non-tensor item as Python would repr it (decoded by dcpctl's restricted VM, never executed)."""
        return self._c.value(key)

    # -- reads
    def _read(self, key, offsets, sizes, dtype, framework):
        i = self.info(key)
        raw = self._c.read(key, offsets, sizes, self._check_records)
        shape = list(sizes)
        fw = self._framework if framework is None else _framework(framework)
        if fw == "pt":
            return _as_torch(raw, i["dtype"], shape, dtype)
        return _as_numpy(raw, i["dtype"], shape, key, dtype)

    def get(self, key: str, dtype=None, framework=None):
        """The whole tensor `key`: a NumPy array (bfloat16 and float8 as ml_dtypes' types), or with
        framework="pt" a torch tensor sharing dcpctl's buffer (DLPack). `dtype` converts it
        (torch's .to(), NumPy's astype; bfloat16 -> "float32" needs no ml_dtypes)."""
        shape = self.info(key)["shape"]
        return self._read(key, [0] * len(shape), list(shape), dtype, framework)

    get_tensor = get  # safetensors' name

    def get_slice(self, key: str) -> Slice:
        """A Slice of `key`: ck.get_slice(key)[a:b, :] reads only the chunks that meet rows a:b."""
        if key not in self:
            self._c.info(key)  # the KeyError, saying why
        return Slice(self, key)

    # -- life
    def close(self) -> None:
        """Closes the files (waits for the reads in flight); later calls raise ValueError."""
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"<dcpctl.Checkpoint {self.path!r} ({self.layout})>"


def open(path, *, framework="np", max_memory="1GiB", threads=4, check_records=True) -> Checkpoint:
    """Opens any checkpoint dcpctl reads (DCP of any layout, Hugging Face folders, .safetensors, .pt,
    GGUF, s3://, gs://) for reads. An incomplete checkpoint raises DamagedCheckpoint.

    framework: "np" (default) or "pt", what get() returns. max_memory: what one read may hold beyond
    the array it returns (int bytes or "512MiB"; the CLI's --max-memory). threads: readers per read.
    check_records: a slice reads the rest of each torch.save record it touches, so that its CRC-32
    is checked (False: only the slice's bytes are read, unchecked)."""
    return Checkpoint(path, framework=framework, max_memory=max_memory, threads=threads, check_records=check_records)


def _strs(v) -> list:
    if v is None:
        return []
    return [v] if isinstance(v, str) else [str(x) for x in v]


def inspect(path, *, filter=None, chunks=False) -> dict:
    """What `dcpctl inspect --json PATH` prints, as a dict. filter: a glob or list of globs (--filter);
    chunks: every tensor's chunk list (--chunks)."""
    return _json.loads(_dcpctl._inspect(str(path), _strs(filter), bool(chunks)))


def verify(path, *, deep=False, checksum=False, threads=0, max_memory=None, io="direct", require_mtp=False,
           check=False) -> dict:
    """What `dcpctl verify --json PATH` prints, as a dict (report["ok"]: no problem found). The options
    are the CLI's (--deep, --checksum, --threads, --max-memory, --io, --require-mtp). check=True raises
    what the command line's exit code says instead of returning a failed report: DamagedCheckpoint (3)
    naming the first problem, Unsupported (5)."""
    mm = "" if max_memory is None else str(_size(max_memory, "max_memory"))
    r = _json.loads(_dcpctl._verify(str(path), bool(deep), bool(checksum), int(threads), mm, str(io), bool(require_mtp)))
    if check and r.get("unsupported"):
        raise Unsupported(f"{path}: verify: " + "; ".join(p["message"] for p in r["problems"]), file=str(path))
    if check and not r["ok"]:
        p = r["problems"][0]
        raise DamagedCheckpoint(f"{p['file']}: [{p['code']}] {p['message']} ({len(r['problems'])} problem(s))",
                                file=p["file"], offset=p["offset"], key=p["key"])
    return r


# The commands' arguments (positional on the command line), held by the args objects beside their options.
_ARGUMENTS = {"checkpoint", "output", "a", "b", "is_cast"}


def _fill(args, command: str, options: dict, extra=None):
    """Sets each keyword option on `args` (a dcpctl._dcpctl._*Args: one attribute per option of the
    command, named as the CLI's flag without its dashes, '-' as '_'; src/args/*_args.h). None is
    "not given"; a list option takes a string or a sequence; a string option a path or a number too
    (max_memory=2**30). `extra(args, name, value)` takes the options no attribute holds (consolidate's
    formats' own: outtype=...); any other is a TypeError, as for a function's unknown keyword."""
    import os

    for name, value in options.items():
        if value is None:
            continue
        if name.startswith("_") or name in _ARGUMENTS or not hasattr(args, name):
            if extra is not None and extra(args, name, value):
                continue
            raise TypeError(f"{command}() got an unexpected keyword argument {name!r}")
        current = getattr(args, name)
        if isinstance(current, list):
            value = _strs(value)
        elif isinstance(current, str):
            if isinstance(value, os.PathLike):
                value = os.fspath(value)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)
        try:
            setattr(args, name, value)
        except TypeError:
            raise TypeError(f"{command}(): {name}={value!r} is not a {type(current).__name__}") from None
    return args


def _summary(result) -> dict:
    """A write command's summary (the text --json prints) as a dict; its notes (what the CLI prints
    as "dcpctl: note: ...") logged on the logger "dcpctl" at INFO level, never printed."""
    text, notes = result
    if notes:
        import logging

        log = logging.getLogger("dcpctl")
        for n in notes:
            log.info("%s", n)
    return _json.loads(text)


def stats(path, *, progress=None, **options) -> dict:
    """What `dcpctl stats --json PATH` prints, as a dict, with the CLI's options as keyword arguments
    (--select: select=, --filter: filter=, --include, --exclude, --depth, --check-finite,
    --check-zero, --threads, --max-memory, --map, --config). The gates' verdicts are in
    report["checks"]. progress: called as progress(bytes_done, bytes_total) from dcpctl's threads as
    it reads (an exception it raises is raised when the command is over)."""
    a = _fill(_dcpctl._StatsArgs(), "stats", options)
    a.checkpoint = str(path)
    return _json.loads(_dcpctl._stats(a, progress))


def diff(a, b, *, progress=None, **options) -> dict:
    """What `dcpctl diff --json A B` prints, as a dict: report["same"] is the verdict (the CLI's exit 0
    or 1). The CLI's options as keyword arguments (--select, --include, --exclude, --atol, --rtol,
    --equal-nan, --ignore-dtype, --threads, --max-memory, --map, --config, --assets); progress as
    stats'."""
    args = _fill(_dcpctl._DiffArgs(), "diff", options)
    args.a, args.b = str(a), str(b)
    return _json.loads(_dcpctl._diff(args, progress))


def consolidate(path, output, *, progress=None, **options) -> dict:
    """What `dcpctl consolidate PATH -o OUTPUT --json` prints, as a dict: one .safetensors, a
    Hugging Face folder (OUTPUT ending in "/"), a .pt, a .gguf ... written as the command line writes
    it, byte for byte. Every option of the command as a keyword argument, named as its flag without
    the dashes ('-' as '_'): dtype="bf16", select="app.model", map=, config=, assets=, quantize=,
    lora="merge", max_shard_size="2GB", force=True, dry_run=True, outtype="q8_0" (a format's own), ...
    (docs/python.md has the table; --quiet and --json have no keyword: nothing is printed and the
    summary is returned). progress(bytes_done, bytes_total) as stats'. A refusal raises the class of
    the command line's exit code with its message (UsageError, Unsupported, DamagedCheckpoint, ...),
    leaving no output behind."""
    a = _fill(_dcpctl._ConsolidateArgs(), "consolidate", options,
              extra=lambda args, name, value: _dcpctl._set_format_option(args, name, str(value)))
    a.checkpoint, a.output = str(path), str(output)
    return _summary(_dcpctl._consolidate(a, progress))


def reshard(path, output, *, progress=None, **options) -> dict:
    """What `dcpctl reshard PATH -o OUTPUT --json` prints, as a dict: a DCP checkpoint for another
    world size (world_size=N, the CLI's -w/--world-size), or the source's chunks (layout="keep"), or
    megatron-core's (format="megatron"). Every option of the command as a keyword argument (dtype=,
    select=, include=, exclude=, map=, quantize=, force=, dry_run=, threads=, max_memory=, ...);
    progress and refusals as consolidate's."""
    a = _fill(_dcpctl._ReshardArgs(), "reshard", options)
    a.checkpoint, a.output = str(path), str(output)
    return _summary(_dcpctl._reshard(a, progress))


def cast(path, output, *, dtype, progress=None, **options) -> dict:
    """What `dcpctl cast PATH -o OUTPUT --dtype DTYPE --json` prints, as a dict: a DCP copy with the
    floating tensors cast (the source's chunks kept). The options are reshard's but world_size and
    layout."""
    if "world_size" in options or "layout" in options:
        raise TypeError("cast() keeps the source's chunks: world_size and layout are reshard()'s")
    a = _fill(_dcpctl._ReshardArgs(), "cast", dict(options, dtype=dtype))
    a.checkpoint, a.output, a.is_cast = str(path), str(output), True
    return _summary(_dcpctl._reshard(a, progress))
