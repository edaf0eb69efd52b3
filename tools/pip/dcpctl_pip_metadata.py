"""scikit-build-core metadata provider (pyproject.toml): the wheel's `torch` requirement.

dcpctl is built against the torch in the build environment (pip install --no-build-isolation):
its LibTorch plugin links that torch's libraries, whose C++ ABI changes between minor releases.
So the wheel requires the same minor release, `torch==X.Y.*`, as torch C++ extensions do.
"""

from __future__ import annotations


def dynamic_metadata(field, settings=None):
    if field != "dependencies":
        raise RuntimeError(f"dcpctl_pip_metadata provides only 'dependencies', not {field!r}")
    if settings:
        raise RuntimeError(f"dcpctl_pip_metadata takes no settings (got {sorted(settings)})")
    try:
        import torch
    except ImportError as e:  # the message pip shows
        raise RuntimeError(
            "dcpctl builds against the torch of the environment it is installed into, and this "
            "environment has none: install torch first, then `pip install --no-build-isolation .`"
        ) from e
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return [f"torch=={major}.{minor}.*"]
