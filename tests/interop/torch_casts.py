"""torch's ``Tensor.to()`` as the oracle of dcpctl's ``--dtype``: bit for bit, NaN payloads included.

The README promises casts that match ``Tensor.to()`` bit for bit, so a NaN whose sign or payload
differs from torch's is a failure like any other wrong value. One narrow exception, where torch
is not consistent with itself: torch 2.14.1's CPU conversion kernels are vectorized, and for two
(source, target) pairs the vector lanes and the scalar tail of the same kernel write different
NaN bits for the same input, so torch's own answer for a NaN depends on where the element falls
in the tensor (measured for every NaN input over tensor lengths 1..65549):

  float64 -> bfloat16   vector lanes 0xFFFF, scalar tail 0x7FC0 (every NaN input);
  float16 -> float32    vector lanes widen exactly (sign and payload kept, quiet bit set:
                        0xFC01 -> 0xFFC02000), scalar tail 0x7FFFFFFF.

For those two pairs only, a NaN element may hold either of torch's two answers for that very
input; any other bits fail. Every other pair, NaNs included, must equal ``src.to(dst)`` exactly.
"""

from __future__ import annotations

import torch

# (source, target) pairs whose NaN bits torch's CPU kernels choose by position (see above).
PATH_DEPENDENT_NAN = {(torch.float64, torch.bfloat16), (torch.float16, torch.float32)}

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The elements' bit patterns as a flat integer tensor of the same width."""
    t = t.detach().contiguous().reshape(-1)
    return t.view(_INT_VIEW[t.element_size()])


def _mask(t: torch.Tensor) -> int:
    return (1 << (8 * t.element_size())) - 1


def _vector_path(x: torch.Tensor, dst: torch.dtype) -> torch.Tensor:
    """torch's vector-lane answer for each element of the flat tensor x: each element repeated 64
    times, so element i*64 starts a full block of every vector width torch uses (8, 16)."""
    if x.numel() == 0:
        return torch.empty(0, dtype=_INT_VIEW[torch.empty(0, dtype=dst).element_size()])
    return bits(x.reshape(-1, 1).expand(-1, 64).contiguous().to(dst)[:, 0])


def _scalar_path(x: torch.Tensor, dst: torch.dtype) -> torch.Tensor:
    """torch's scalar answer for each element (a 1-element tensor has no vector block)."""
    if x.numel() == 0:
        return torch.empty(0, dtype=_INT_VIEW[torch.empty(0, dtype=dst).element_size()])
    return torch.cat([bits(x[i:i + 1].clone().to(dst)) for i in range(x.numel())])


def compare(got, src: torch.Tensor, dst: torch.dtype) -> list[str]:
    """Messages describing how `got` differs from torch's ``src.to(dst)`` (empty: identical)."""
    if not isinstance(got, torch.Tensor) or got.dtype != dst or tuple(got.shape) != tuple(src.shape):
        return [f"got {getattr(got, 'dtype', type(got).__name__)} {tuple(getattr(got, 'shape', ()))}, "
                f"want {dst} {tuple(src.shape)}"]
    want = src.to(dst)
    gb, wb = bits(got), bits(want)
    diff = (gb != wb).nonzero().reshape(-1)
    if diff.numel() == 0:
        return []
    flat = src.detach().contiguous().reshape(-1)
    excused = 0
    if (src.dtype, dst) in PATH_DEPENDENT_NAN:
        nan = torch.isnan(flat[diff])
        cand = diff[nan]
        x = flat[cand]
        ok = (gb[cand] == _vector_path(x, dst)) | (gb[cand] == _scalar_path(x, dst))
        excused = int(ok.sum())
        diff = torch.sort(torch.cat([diff[~nan], cand[~ok]])).values
        if diff.numel() == 0:
            return []
    sb = bits(flat)
    ex = []
    for i in diff[:6].tolist():
        ex.append(f"[{i}] src {src.dtype} {int(sb[i]) & _mask(src):#x} ({flat[i].item()!r}) -> torch "
                  f"{int(wb[i]) & _mask(want):#x} ({want.reshape(-1)[i].item()!r}), dcpctl {int(gb[i]) & _mask(got):#x} "
                  f"({got.reshape(-1)[i].item()!r})")
    nans = int(torch.isnan(flat[diff].to(torch.float64) if flat.dtype.itemsize == 1 else flat[diff]).sum())
    return [f"{diff.numel()} of {src.numel()} elements differ from torch's .to({dst}) ({nans} of them NaN"
            + (f"; {excused} NaN(s) hold torch's other, position-dependent answer and pass" if excused else "")
            + "): " + "; ".join(ex)]
