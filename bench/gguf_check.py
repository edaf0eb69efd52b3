#!/usr/bin/env python3
"""Two GGUF files compared tensor by tensor, by name (bench/gguf.sh: llama-quantize's Q8_0 against the
converter's, whose tensor order differs: llama-quantize writes its loader's order).

    PYTHONPATH=LLAMA/gguf-py gguf_check.py A.gguf B.gguf

Prints how many tensors have the same type, shape and bytes, which do not (the first few, with the
share of differing bytes), the tensors only one file holds, and the metadata keys whose values
differ. Exit 0 when every tensor and key agrees, 1 otherwise. Reads with gguf-py's GGUFReader
(memory-mapped, one tensor at a time).
"""
import sys

import numpy as np
from gguf import GGUFReader


def value(field):
    try:
        v = field.contents()
    except Exception:  # noqa: BLE001 (an older gguf-py without contents())
        v = [bytes(field.parts[i]).hex() for i in field.data]
    return v


def main(a_path: str, b_path: str) -> int:
    a, b = GGUFReader(a_path), GGUFReader(b_path)
    ta, tb = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
    same, diff = 0, []
    for name in ta.keys() & tb.keys():
        x, y = ta[name], tb[name]
        if x.tensor_type != y.tensor_type or list(x.shape) != list(y.shape):
            diff.append(f"{name}: {x.tensor_type.name} {[int(d) for d in x.shape]} vs {y.tensor_type.name} {[int(d) for d in y.shape]}")
            continue
        bx, by = np.asarray(x.data).view(np.uint8).ravel(), np.asarray(y.data).view(np.uint8).ravel()
        if bx.size == by.size and np.array_equal(bx, by):
            same += 1
        else:
            n = int(np.count_nonzero(bx != by)) if bx.size == by.size else -1
            diff.append(f"{name}: {x.tensor_type.name}, {n} of {bx.size} bytes differ")
    print(f"{same} of {len(ta.keys() & tb.keys())} common tensors equal (type, shape, bytes); {len(diff)} differ")
    for d in sorted(diff)[:8]:
        print(f"  {d}")
    for name in sorted(ta.keys() - tb.keys()):
        print(f"  only in {a_path}: {name}")
    for name in sorted(tb.keys() - ta.keys()):
        print(f"  only in {b_path}: {name}")
    ka, kb = set(a.fields) - {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}, set(b.fields) - {
        "GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}
    keys = sorted(k for k in ka & kb if value(a.fields[k]) != value(b.fields[k]))
    keys += sorted(f"{k} (only one has it)" for k in ka ^ kb)
    print(f"metadata: {len(ka & kb) - len([k for k in keys if 'only' not in k])} of {len(ka | kb)} keys equal"
          + (f"; differ: {', '.join(keys)}" if keys else ""))
    order = [t.name for t in a.tensors] == [t.name for t in b.tensors]
    print(f"tensor order: {'the same' if order else 'differs'}")
    return 0 if not diff and not keys and ta.keys() == tb.keys() else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
