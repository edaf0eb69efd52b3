"""bench/link.sh's torch anchor: what a torch user does to get the model out of an s3:// DCP
checkpoint without dcpctl: `dcp.load` of the model's tensors only (state dict built from the
checkpoint's metadata, keys under PREFIX) through s3torchconnector's S3StorageReader (its default,
the DCP-optimised reader: ranged GETs of what the plan needs, coalesced), then `torch.save`.

    python bench/link_torch_load.py s3://BUCKET/CKPT OUT.pt [PREFIX]     (default app.model)

The endpoint and keys come from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (the
mountpoint client reads them); path-style addressing. Prints one JSON line: the seconds of each step.
"""
import json
import sys
import time

t0 = time.monotonic()
import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.metadata import TensorStorageMetadata  # noqa: E402
from s3torchconnector import S3ClientConfig  # noqa: E402
from s3torchconnector.dcp import S3StorageReader  # noqa: E402


def main():
    url, out = sys.argv[1], sys.argv[2]
    prefix = (sys.argv[3] if len(sys.argv) > 3 else "app.model") + "."
    t1 = time.monotonic()
    cfg = S3ClientConfig(force_path_style=True)
    md = S3StorageReader(region="us-east-1", path=url, s3client_config=cfg).read_metadata()
    sd = {k: torch.empty(m.size, dtype=m.properties.dtype) for k, m in md.state_dict_metadata.items()
          if k.startswith(prefix) and isinstance(m, TensorStorageMetadata)}
    dcp.load(sd, storage_reader=S3StorageReader(region="us-east-1", path=url, s3client_config=cfg), no_dist=True)
    t2 = time.monotonic()
    torch.save({k[len(prefix):]: v for k, v in sd.items()}, out)
    t3 = time.monotonic()
    print(json.dumps({"import_s": round(t1 - t0, 2), "load_s": round(t2 - t1, 2), "save_s": round(t3 - t2, 2),
                      "tensors": len(sd), "bytes": sum(v.numel() * v.element_size() for v in sd.values()),
                      "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
