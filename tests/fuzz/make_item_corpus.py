#!/usr/bin/env python3
"""Regenerates the item seed corpora of the fuzz targets from the fixtures (written by real torch):

  tests/fuzz/corpus_item/   fuzz_item: a flags byte (1: zstd-framed, 2: non-tensor item), then a
                            real item cut out of a .distcp file (a torch.save zip, or its zstd frame)
  tests/fuzz/corpus_zstd/   fuzz_zstd: a 2-byte cap in KiB (little-endian, minus one; low 12 bits), then the
                            zstd fixture's encoded items as they are on disk

Up to ITEMS_PER_FIXTURE items of at most MAX_ITEM bytes per fixture, in storage_data order.
Needs the virtualenv's torch (to read storage_data): .venv/bin/python tests/fuzz/make_item_corpus.py
"""
import os
import shutil
import sys

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import BytesStorageMetadata

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")
ITEMS_PER_FIXTURE = 5
MAX_ITEM = 48 << 10


def main():
    out_item = os.path.join(HERE, "corpus_item")
    out_zstd = os.path.join(HERE, "corpus_zstd")
    for d in (out_item, out_zstd):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    for name in sorted(os.listdir(FIXTURES)):
        ckpt = os.path.join(FIXTURES, name, "ckpt")
        if not os.path.isfile(os.path.join(ckpt, ".metadata")):
            continue
        md = dcp.FileSystemReader(ckpt).read_metadata()
        n = 0
        for idx, info in md.storage_data.items():
            if n == ITEMS_PER_FIXTURE or info.length > MAX_ITEM:
                continue
            with open(os.path.join(ckpt, info.relative_path), "rb") as f:
                f.seek(info.offset)
                item = f.read(info.length)
            zstd = bool(getattr(info, "transform_descriptors", None))
            is_bytes = isinstance(md.state_dict_metadata[idx.fqn], BytesStorageMetadata)
            flags = (1 if zstd else 0) | (2 if is_bytes else 0)
            with open(os.path.join(out_item, f"{name}_{n}"), "wb") as f:
                f.write(bytes([flags]) + item)
            if zstd:
                cap_kib = 255  # 256 KiB: above every fixture item's decoded size
                with open(os.path.join(out_zstd, f"{name}_{n}"), "wb") as f:
                    f.write(bytes([cap_kib & 0xFF, cap_kib >> 8]) + item)
            n += 1
    print(f"{len(os.listdir(out_item))} item seeds, {len(os.listdir(out_zstd))} zstd seeds")


if __name__ == "__main__":
    sys.exit(main())
