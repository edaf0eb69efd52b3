#!/usr/bin/env python3
"""The checkpoint and the PEFT anchor of bench/lora.sh (`dcpctl consolidate --lora merge` beside PEFT's
own merge_and_unload). Three subcommands, run with the project venv's python (torch 2.15.0,
transformers 5.23.0, peft 0.21.0, safetensors):

    python bench/lora_ckpt.py make WORK            # WORK/base, WORK/adapter, WORK/ckpt (kept: made once)
    python bench/lora_ckpt.py make-moe WORK        # the same for a Qwen3-MoE (MOE=1 bench/lora.sh)
    python bench/lora_ckpt.py peft-merge BASE ADAPTER OUT   # the anchor, timed by lora.sh
    python bench/lora_ckpt.py check OUT_A OUT_B [BASE]  # every tensor of two HF folders, max |a - b|

make (no download, no training, no FSDP; one process):
  * base/     torch.manual_seed(0); LlamaForCausalLM(CONFIG) (transformers' own random init, float32,
              untied embeddings: hidden 2048, intermediate 5632, 12 layers, 16 heads / 4 KV heads,
              vocab 32000 -- TinyLlama's shapes with 12 layers: 672,188,416 parameters, 2.69 GB)
              .save_pretrained(base/) (safetensors);
  * the adapter: get_peft_model(that model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
              target_modules q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)) (lora_A: PEFT's
              default init, seeded), then every lora_B (PEFT's init: zeros) set to seeded
              randn * 0.02, so that the merge changes every targeted weight (84 Linears);
  * ckpt/     dcp.save({"model": get_model_state_dict(peft_model)}, checkpoint_id=ckpt/, no_dist=True):
              torch's own save in ONE process without a process group (no FSDP), so the checkpoint holds
              whole tensors in one .distcp file (FileSystemWriter's defaults); the keys are the real
              ones, model.base_model.model.model.layers.N.self_attn.q_proj.base_layer.weight,
              ...q_proj.lora_A.default.weight, ...lora_B.default.weight; ckpt/adapter_config.json is a
              copy of PEFT's (dcpctl reads the one beside the checkpoint);
  * adapter/  peft_model.save_pretrained(adapter/): PEFT's own adapter folder of the same adapter (what
              the anchor loads); its base_model_name_or_path is the base/ folder.
  Written under WORK/.tmp-make first and renamed into place; WORK/lora_info.json last (its presence
  means everything is there).

make-moe (the MoE row: FSDP2 on 2 gloo ranks, torch.multiprocessing.spawn, CPU):
  * every rank: torch.manual_seed(0); Qwen3MoeForCausalLM(MOE_CONFIG) (transformers 5.23's random init,
              float32: hidden 1024, 10 layers, 32 experts of moe_intermediate 512 each, fused
              experts.gate_up_proj [32, 1024, 1024] / down_proj [32, 1024, 512]; 595,417,344 parameters,
              2.38 GB); rank 0 save_pretrained(base/) (transformers writes the experts unfused);
  * the adapter: get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules q/k/v/o_proj,
              target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])) (PEFT 0.21's
              ParamWrapper: lora_A [16*32, in], lora_B [out, 16*32]), lora_B seeded randn * 0.02 (the
              same on both ranks); rank 0 save_pretrained(adapter/);
  * ckpt/     fully_shard(each decoder layer, 1-D CPU mesh of 2) then fully_shard(peft model); dcp.save(
              {"model": get_model_state_dict(pm)}, checkpoint_id=ckpt/) by both ranks (gloo):
              the experts' parameters saved as dim-0 shards (16 experts a rank).

peft-merge: exactly what users do today (prints its phases on stderr):
    base = AutoModelForCausalLM.from_pretrained(BASE); pm = PeftModel.from_pretrained(base, ADAPTER)
    m = pm.merge_and_unload(); m.save_pretrained(OUT)

check: key sets of the two folders' *.safetensors, dtype, shape, and per tensor torch.equal, else the
max absolute (and relative) difference; exit 0 when every tensor is bit-identical, 1 otherwise. With
BASE (the base/ folder), also counts the tensors of OUT_A that differ from the base's (the merged
ones: 84 here; the merge is no no-op).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CONFIG = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=12,
              num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
              bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, dtype="float32")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA = dict(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS)
SEED = 0
B_STD = 0.02
MOE_CONFIG = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, moe_intermediate_size=512,
                  num_hidden_layers=10, num_attention_heads=16, num_key_value_heads=4, head_dim=64,
                  num_experts=32, num_experts_per_tok=4, decoder_sparse_step=1, mlp_only_layers=[],
                  max_position_embeddings=2048, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                  dtype="float32")
MOE_LORA = dict(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])


def _quiet() -> None:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    for name in ("transformers", "peft", "torch.distributed"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def param_count(c: dict) -> int:
    h, i, v, n = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
    layer = 2 * h * h + 2 * h * kv + 3 * h * i + 2 * h  # q, o; k, v; gate, up, down; 2 RMSNorms
    return n * layer + 2 * v * h + h  # + embed_tokens, lm_head (untied), final norm


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _already(info_path: Path) -> bool:
    if not info_path.is_file():
        return False
    info = json.loads(info_path.read_text())
    print(f"{info_path.parent}: already there ({info['parameters']:,} parameters, checkpoint {info['ckpt_bytes'] / 1e9:.2f} GB)")
    return True


def _peft_model(model, config):
    """get_peft_model (lora_A: PEFT's seeded init), every lora_B set to seeded randn * B_STD; and their count."""
    import torch
    from peft import get_peft_model

    torch.manual_seed(SEED + 1)
    pm = get_peft_model(model, config)
    g = torch.Generator().manual_seed(SEED + 2)
    n_b = 0
    with torch.no_grad():
        for name, p in pm.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * B_STD)
                n_b += 1
    return pm, n_b


def _into_place(tmp: Path, work: Path) -> None:
    for d in ("base", "adapter", "ckpt"):
        shutil.rmtree(work / d, ignore_errors=True)
        (tmp / d).rename(work / d)


def _write_info(work: Path, config: dict, lora: dict, n: int, n_b: int, n_keys: int, t0: float, **extra) -> int:
    """WORK/lora_info.json, written last: its presence means everything is there."""
    import torch

    ckpt_bytes = sum(f.stat().st_size for f in (work / "ckpt").iterdir() if f.is_file())
    info = {"config": config, "parameters": n, "base_bytes": n * 4, "lora": lora, "lora_B_init": f"randn * {B_STD}",
            "seed": SEED, "lora_modules": n_b, "ckpt_model_keys": n_keys, "ckpt_bytes": ckpt_bytes, **extra,
            "ckpt_files": sorted(f.name for f in (work / "ckpt").iterdir()),
            "versions": {"torch": torch.__version__, "peft": __import__("peft").__version__,
                         "transformers": __import__("transformers").__version__},
            "seconds": round(time.monotonic() - t0, 1)}
    (work / "lora_info.json").write_text(json.dumps(info, indent=2))
    print(f"{work}: {n:,} parameters; ckpt/ {ckpt_bytes / 1e9:.2f} GB ({n_keys} model keys, "
          f"{n_b} LoRA modules); made in {info['seconds']} s")
    return 0


def make(work: Path) -> int:
    import torch
    import torch.distributed.checkpoint as dcp
    from peft import LoraConfig
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from transformers import LlamaConfig, LlamaForCausalLM

    if _already(work / "lora_info.json"):
        return 0
    _quiet()
    expect = param_count(CONFIG)
    print(f"LlamaForCausalLM {CONFIG}: {expect:,} parameters, {expect * 4 / 1e9:.2f} GB float32", flush=True)
    tmp = work / ".tmp-make"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    t0 = time.monotonic()
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(LlamaConfig(**CONFIG)).to(torch.float32)
    n = sum(p.numel() for p in model.parameters())
    assert n == expect, (n, expect)
    model.save_pretrained(tmp / "base")
    log(f"  base/ written ({time.monotonic() - t0:.1f} s)")

    pm, n_b = _peft_model(model, LoraConfig(**LORA))
    assert n_b == len(TARGETS) * CONFIG["num_hidden_layers"], n_b
    pm.save_pretrained(tmp / "adapter")
    # the adapter's base is the base/ folder beside it (PeftModel.from_pretrained does not need it)
    cfg_path = tmp / "adapter" / "adapter_config.json"
    acfg = json.loads(cfg_path.read_text())
    acfg["base_model_name_or_path"] = str(work / "base")
    cfg_path.write_text(json.dumps(acfg, indent=2, sort_keys=True))
    log(f"  adapter/ written ({time.monotonic() - t0:.1f} s)")

    sd = get_model_state_dict(pm)
    n_keys = len(sd)
    dcp.save({"model": sd}, checkpoint_id=str(tmp / "ckpt"), no_dist=True)
    shutil.copy(cfg_path, tmp / "ckpt" / "adapter_config.json")
    del sd
    log(f"  ckpt/ written ({time.monotonic() - t0:.1f} s)")

    _into_place(tmp, work)
    tmp.rmdir()
    return _write_info(work, CONFIG, LORA, n, n_b, n_keys, t0)


def _moe_rank(rank: int, port: int, tmp: str, out: dict) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from peft import LoraConfig
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    _quiet()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    t0 = time.monotonic()
    torch.manual_seed(SEED)
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**MOE_CONFIG)).to(torch.float32)
    if rank == 0:
        model.save_pretrained(Path(tmp) / "base")
        log(f"  base/ written ({time.monotonic() - t0:.1f} s)")
    pm, n_b = _peft_model(model, LoraConfig(**MOE_LORA))
    if rank == 0:
        pm.save_pretrained(Path(tmp) / "adapter")
        log(f"  adapter/ written ({time.monotonic() - t0:.1f} s)")
    mesh = init_device_mesh("cpu", (2,))
    for layer in pm.base_model.model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(pm, mesh=mesh)
    sd = get_model_state_dict(pm)
    dcp.save({"model": sd}, checkpoint_id=str(Path(tmp) / "ckpt"))
    if rank == 0:
        out.update(parameters=sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n),
                   lora_modules=n_b, ckpt_model_keys=len(sd))
        (Path(tmp) / "moe_counts.json").write_text(json.dumps(dict(out)))
        log(f"  ckpt/ written ({time.monotonic() - t0:.1f} s)")
    dist.barrier()
    dist.destroy_process_group()


def make_moe(work: Path) -> int:
    import socket

    import torch.multiprocessing as mp

    if _already(work / "lora_info.json"):
        return 0
    tmp = work / ".tmp-make"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    t0 = time.monotonic()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_moe_rank, args=(port, str(tmp), {}), nprocs=2, join=True)
    counts = json.loads((tmp / "moe_counts.json").read_text())
    acfg_path = tmp / "adapter" / "adapter_config.json"
    acfg = json.loads(acfg_path.read_text())
    acfg["base_model_name_or_path"] = str(work / "base")
    acfg_path.write_text(json.dumps(acfg, indent=2, sort_keys=True))
    shutil.copy(acfg_path, tmp / "ckpt" / "adapter_config.json")
    _into_place(tmp, work)
    shutil.rmtree(tmp)
    return _write_info(work, MOE_CONFIG, MOE_LORA, counts["parameters"], counts["lora_modules"],
                       counts["ckpt_model_keys"], t0, world_size=2)


def peft_merge(base_dir: str, adapter_dir: str, out: str) -> int:
    t0 = time.monotonic()
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    _quiet()
    t1 = time.monotonic()
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    t2 = time.monotonic()
    pm = PeftModel.from_pretrained(base, adapter_dir)
    t3 = time.monotonic()
    m = pm.merge_and_unload()
    t4 = time.monotonic()
    m.save_pretrained(out)
    t5 = time.monotonic()
    log(f"peft-merge phases: imports {t1 - t0:.1f} s, from_pretrained(base) {t2 - t1:.1f} s "
        f"(dtype {next(base.parameters()).dtype}), PeftModel.from_pretrained {t3 - t2:.1f} s, "
        f"merge_and_unload {t4 - t3:.1f} s, save_pretrained {t5 - t4:.1f} s")
    return 0


def _tensors(folder: Path) -> dict:
    from safetensors import safe_open

    where = {}
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as h:
            for k in h.keys():
                where[k] = f
    return where


def check(a_dir: str, b_dir: str, base_dir: str | None = None) -> int:
    import torch
    from safetensors import safe_open

    a, b = _tensors(Path(a_dir)), _tensors(Path(b_dir))
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    if only_a or only_b:
        print(f"check: keys only in {a_dir}: {only_a[:10]} ({len(only_a)}); only in {b_dir}: {only_b[:10]} ({len(only_b)})")
    equal = differ = 0
    worst_abs, worst_rel, worst_key = 0.0, 0.0, None
    for k in sorted(set(a) & set(b)):
        with safe_open(str(a[k]), "pt") as fa, safe_open(str(b[k]), "pt") as fb:
            x, y = fa.get_tensor(k), fb.get_tensor(k)
        if x.dtype != y.dtype or x.shape != y.shape:
            print(f"check: {k}: {x.dtype} {list(x.shape)} vs {y.dtype} {list(y.shape)}")
            differ += 1
            continue
        if torch.equal(x, y):
            equal += 1
            continue
        differ += 1
        d = (x.double() - y.double()).abs()
        m = float(d.max())
        r = float((d / y.double().abs().clamp_min(1e-30)).max())
        if m > worst_abs:
            worst_abs, worst_key = m, k
        worst_rel = max(worst_rel, r)
    if base_dir is not None:
        base = _tensors(Path(base_dir))
        changed = 0
        for k in sorted(set(a) & set(base)):
            with safe_open(str(a[k]), "pt") as fa, safe_open(str(base[k]), "pt") as fb:
                changed += not torch.equal(fa.get_tensor(k), fb.get_tensor(k))
        print(f"check: {changed} of {len(a)} tensors of {a_dir} differ from the base's (the merged weights)")
    ok = not only_a and not only_b and differ == 0
    print(f"check: {len(set(a) & set(b))} common tensors: {equal} bit-identical, {differ} differ"
          + (f" (max |a - b| {worst_abs:.3g} in {worst_key}; max relative {worst_rel:.3g})" if differ else "")
          + f"; {'OK: every tensor equal' if ok else 'NOT identical'}")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "make":
        return make(Path(argv[1]).resolve())
    if len(argv) == 2 and argv[0] == "make-moe":
        return make_moe(Path(argv[1]).resolve())
    if len(argv) == 4 and argv[0] == "peft-merge":
        return peft_merge(*argv[1:])
    if len(argv) in (3, 4) and argv[0] == "check":
        return check(*argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
