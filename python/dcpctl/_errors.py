"""dcpctl's exceptions: one class per exit code of the command line (docs/commands.md, "Exit codes").

The extension raises them (python/errors.cpp) with the message the command line prints after
"dcpctl: error: ", and where it happened: the file, the byte offset and the tensor key when known.
"""


class Error(Exception):
    """Any error dcpctl reports (exit code 1 when nothing more specific applies).

    Attributes: message (str), file (str, "" when unknown), offset (int or None), key (str, "" when
    unknown), exit_code (int: what the command line would have exited with)."""

    exit_code = 1

    def __init__(self, message: str, file: str = "", offset=None, key: str = ""):
        super().__init__(message)
        self.message = message
        self.file = file
        self.offset = offset
        self.key = key


class UsageError(Error, ValueError):
    """A call that cannot be carried out as asked (a bad option value, a slice outside the shape): exit 2."""

    exit_code = 2


class DamagedCheckpoint(Error):
    """The checkpoint is damaged, invalid or incomplete (a record failing its CRC-32, a missing shard): exit 3."""

    exit_code = 3


class CheckpointIOError(Error, OSError):
    """The operating system or the object store refused (a missing file, a short read): exit 4."""

    exit_code = 4


class Unsupported(Error):
    """Valid input this version does not handle (a GGUF block type it does not decode, a dtype NumPy
    lacks without ml_dtypes): exit 5. The message names what."""

    exit_code = 5


_BY_CODE = {c.exit_code: c for c in (Error, UsageError, DamagedCheckpoint, CheckpointIOError, Unsupported)}


def error_for(code: int) -> type:
    """The class for a command-line exit code (Error for any other)."""
    return _BY_CODE.get(code, Error)
