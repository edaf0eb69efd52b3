"""Typed stubs of dcpctl's Python API (docs/python.md)."""
from os import PathLike
from typing import Any, Callable, Iterator, Literal, Optional, Sequence, Union

__version__: str

Framework = Literal["np", "numpy", "pt", "torch"]
Size = Union[int, str]
_Path = Union[str, PathLike]

class Error(Exception):
    """Any error dcpctl reports; exit_code is what the command line would have exited with."""
    exit_code: int
    message: str
    file: str
    offset: Optional[int]
    key: str
    def __init__(self, message: str, file: str = "", offset: Optional[int] = None, key: str = "") -> None: ...

class UsageError(Error, ValueError):
    """Exit 2: a call that cannot be carried out as asked."""

class DamagedCheckpoint(Error):
    """Exit 3: damaged, invalid or incomplete input (a record failing its CRC-32 names file and offset)."""

class CheckpointIOError(Error, OSError):
    """Exit 4: the operating system or the object store refused."""

IOError = CheckpointIOError

class Unsupported(Error):
    """Exit 5: valid input this version does not handle; the message names what."""

class Slice:
    """A tensor read in part: index it like a NumPy array; only the chunks that meet the slice are read."""
    @property
    def shape(self) -> tuple[int, ...]: ...
    def get_shape(self) -> list[int]: ...
    def get_dtype(self) -> str: ...
    def __getitem__(self, index: Any) -> Any: ...

class Checkpoint:
    """A checkpoint opened by open(); safe to read from several threads at once."""
    path: str
    layout: str
    def keys(self) -> list[str]:
        """The tensors' keys, in the checkpoint's order."""
    def values(self) -> list[str]:
        """The keys of the non-tensor items."""
    def __contains__(self, key: object) -> bool: ...
    def __iter__(self) -> Iterator[str]: ...
    def __len__(self) -> int: ...
    def info(self, key: str) -> dict[str, Any]:
        """{"key", "dtype", "shape", "numel", "nbytes", "readable", "chunks": [{"offsets", "sizes", "file",
        "rank", "offset", "length"}]}."""
    def value(self, key: str) -> str:
        """A non-tensor item as Python would repr it (never unpickled)."""
    def get(self, key: str, dtype: Any = None, framework: Optional[Framework] = None) -> Any:
        """The whole tensor: a NumPy array (bfloat16/float8 as ml_dtypes' types) or, with framework="pt",
        a torch tensor sharing dcpctl's buffer through DLPack."""
    def get_tensor(self, key: str, dtype: Any = None, framework: Optional[Framework] = None) -> Any:
        """get(), under safetensors' name."""
    def get_slice(self, key: str) -> Slice:
        """A Slice: ck.get_slice(key)[a:b, :] reads only the chunks that meet it."""
    def close(self) -> None:
        """Closes the files; later calls raise ValueError."""
    def __enter__(self) -> "Checkpoint": ...
    def __exit__(self, *exc: object) -> bool: ...

def open(path: _Path, *, framework: Framework = "np", max_memory: Size = "1GiB", threads: int = 4,
         check_records: bool = True) -> Checkpoint:
    """Opens any checkpoint dcpctl reads for lazy, bounded, CRC-checked reads."""

def inspect(path: _Path, *, filter: Union[None, str, Sequence[str]] = None, chunks: bool = False) -> dict[str, Any]:
    """What `dcpctl inspect --json` prints."""

def verify(path: _Path, *, deep: bool = False, checksum: bool = False, threads: int = 0,
           max_memory: Optional[Size] = None, io: Literal["auto", "direct", "buffered"] = "direct",
           require_mtp: bool = False, check: bool = False) -> dict[str, Any]:
    """What `dcpctl verify --json` prints; check=True raises DamagedCheckpoint / Unsupported instead of
    returning a failed report."""

Globs = Union[None, str, Sequence[str]]
Progress = Optional[Callable[[int, int], None]]

# The commands' keyword arguments are their flags without the dashes, '-' as '_' (src/args/*_args.h);
# tests/python/test_write_commands.py checks these signatures against them.

def stats(path: _Path, *, select: str = "", filter: Globs = None, include: Globs = None, exclude: Globs = None,
          depth: int = 0, check_finite: bool = False, check_zero: bool = False, threads: int = 4,
          max_memory: Optional[Size] = None, map: str = "", config: Optional[_Path] = None,
          progress: Progress = None) -> dict[str, Any]:
    """What `dcpctl stats --json` prints; progress(bytes_done, bytes_total) as it reads."""

def diff(a: _Path, b: _Path, *, select: str = "", include: Globs = None, exclude: Globs = None,
         atol: Optional[float] = None, rtol: Optional[float] = None, equal_nan: bool = False,
         ignore_dtype: bool = False, threads: int = 4, max_memory: Optional[Size] = None, map: str = "",
         config: Optional[_Path] = None, assets: Optional[_Path] = None, progress: Progress = None) -> dict[str, Any]:
    """What `dcpctl diff --json A B` prints; report["same"] is the verdict."""

def consolidate(path: _Path, output: _Path, *, format: str = "", select: str = "", include: Globs = None,
                exclude: Globs = None, dtype: str = "", keep_dtype: Globs = None, cast_all: bool = False,
                max_memory: Optional[Size] = None, max_shard_size: Optional[Size] = None, threads: int = 4,
                io: Literal["direct", "buffered"] = "direct", manifest: Literal["crc32", "sha256"] = "crc32",
                map: str = "", config: Optional[_Path] = None, assets: Optional[_Path] = None, no_assets: bool = False,
                flat: bool = False, keep_unsafe_values: bool = False, no_lightning_meta: bool = False,
                lora: Literal["keep", "adapter", "merge"] = "keep", lora_name: str = "",
                lora_config: Optional[_Path] = None, lora_alpha: Union[None, str, float] = None, lora_base: str = "",
                lora_layout: Literal["", "fused", "per-expert"] = "", quantize: str = "", quantize_format: str = "",
                quantize_block: str = "", quantize_group: int = 0, quantize_skip: Globs = None,
                iteration: Optional[int] = None, megatron_args: Optional[_Path] = None,
                make_vocab_size_divisible_by: int = 0, tensor_model_parallel_size: int = 0, force: bool = False,
                resume: bool = False, dry_run: bool = False, progress: Progress = None,
                **format_options: str) -> dict[str, Any]:
    """What `dcpctl consolidate --json CKPT -o OUTPUT` prints, the output written as the CLI writes it;
    a format's own options (outtype=, split_max_size=, ...) as keywords too."""

def reshard(path: _Path, output: _Path, *, world_size: int = 0, layout: Literal["fsdp", "keep"] = "fsdp",
            format: Literal["dcp", "megatron"] = "dcp", select: str = "", include: Globs = None, exclude: Globs = None,
            dtype: str = "", keep_dtype: Globs = None, cast_all: bool = False, max_memory: Optional[Size] = None,
            threads: int = 4, io: Literal["direct", "buffered"] = "direct",
            manifest: Literal["crc32", "sha256"] = "crc32", map: str = "", config: Optional[_Path] = None,
            quantize: str = "", quantize_format: str = "", quantize_block: str = "", quantize_group: int = 0,
            quantize_skip: Globs = None, iteration: Optional[int] = None, megatron_args: Optional[_Path] = None,
            make_vocab_size_divisible_by: int = 0, tensor_model_parallel_size: int = 0, force: bool = False,
            resume: bool = False, dry_run: bool = False, progress: Progress = None) -> dict[str, Any]:
    """What `dcpctl reshard --json CKPT -o OUTPUT -w N` prints, the checkpoint written as the CLI writes it."""

def cast(path: _Path, output: _Path, *, dtype: str, select: str = "", include: Globs = None, exclude: Globs = None,
         keep_dtype: Globs = None, cast_all: bool = False, max_memory: Optional[Size] = None, threads: int = 4,
         io: Literal["direct", "buffered"] = "direct", manifest: Literal["crc32", "sha256"] = "crc32", map: str = "",
         config: Optional[_Path] = None, quantize: str = "", quantize_format: str = "", quantize_block: str = "",
         quantize_group: int = 0, quantize_skip: Globs = None, format: Literal["dcp", "megatron"] = "dcp",
         iteration: Optional[int] = None, megatron_args: Optional[_Path] = None,
         make_vocab_size_divisible_by: int = 0, tensor_model_parallel_size: int = 0, force: bool = False,
         resume: bool = False, dry_run: bool = False, progress: Progress = None) -> dict[str, Any]:
    """What `dcpctl cast --json CKPT -o OUTPUT --dtype DTYPE` prints."""
