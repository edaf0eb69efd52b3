"""bench/link.sh's checkpoint: a transformer-shaped model and its Adam state, saved with real torch
(`dcp.save`, FileSystemWriter with 8 threads: 8 data files, as 8 ranks write), about SIZE_GB in all,
a third of it the model, so `--select app.model` needs a third of the bytes. Every tensor float32;
hidden 2048, ffn 5504, vocab 16000 (items of 16 to 45 MB, embeddings 131 MB); layers are added
until the model reaches SIZE_GB / 3.

    python bench/link_ckpt.py OUT_DIR [SIZE_GB]

Writes OUT_DIR (replaced) and OUT_DIR.json: {"model_bytes", "total_bytes", "files", ...}.
"""
import json
import os
import shutil
import sys
import time

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict

HIDDEN, FFN, VOCAB = 2048, 5504, 16000


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = torch.nn.LayerNorm(HIDDEN)
        self.wq, self.wk, self.wv, self.wo = (torch.nn.Linear(HIDDEN, HIDDEN, bias=False) for _ in range(4))
        self.ffn_norm = torch.nn.LayerNorm(HIDDEN)
        self.w1 = torch.nn.Linear(HIDDEN, FFN, bias=False)
        self.w3 = torch.nn.Linear(HIDDEN, FFN, bias=False)
        self.w2 = torch.nn.Linear(FFN, HIDDEN, bias=False)


class Model(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(VOCAB, HIDDEN)
        self.layers = torch.nn.ModuleList(Block() for _ in range(layers))
        self.norm = torch.nn.LayerNorm(HIDDEN)
        self.output = torch.nn.Linear(HIDDEN, VOCAB, bias=False)


def main():
    out = sys.argv[1]
    size_gb = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    per_layer = (4 * HIDDEN * HIDDEN + 3 * HIDDEN * FFN + 4 * HIDDEN) * 4
    fixed = (2 * VOCAB * HIDDEN + 2 * HIDDEN) * 4
    layers = max(1, round((size_gb * 1e9 / 3 - fixed) / per_layer))
    t = time.time()
    torch.manual_seed(0)
    with torch.device("meta"):
        model = Model(layers)
    model = model.to_empty(device="cpu")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02, generator=g)
    opt = torch.optim.Adam(model.parameters())
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g) * 1e-3
    opt.step()
    msd, osd = get_state_dict(model, opt)
    if os.path.exists(out):
        shutil.rmtree(out)
    dcp.save({"app": {"model": msd, "optim": osd}}, storage_writer=dcp.FileSystemWriter(out, thread_count=8))
    model_bytes = sum(v.numel() * v.element_size() for v in msd.values())
    files = sorted(os.listdir(out))
    total = sum(os.path.getsize(os.path.join(out, f)) for f in files)
    info = {"layers": layers, "tensors": len(msd), "model_bytes": model_bytes, "total_bytes": total,
            "largest_item": max(v.numel() * v.element_size() for v in msd.values()), "files": files,
            "seconds": round(time.time() - t, 1), "torch": torch.__version__}
    with open(out.rstrip("/") + ".json", "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
