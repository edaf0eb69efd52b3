#!/usr/bin/env python3
"""The megatron side of tests/e2e/megatron_vocab_pad_test.py, in megatron-core's Python
(.venv-megatron): one gloo rank (TP 1) loads dcpctl's HF -> Megatron output of a padded vocabulary

  1. with Megatron-LM's own training loader: parse_args / validate_args / set_global_variables
     (NullTokenizer, 250 tokens: Megatron-LM pads them to 256 itself), a GPTModel as
     make_megatron_vocab.py builds it, megatron.training.checkpointing.load_checkpoint(--load RUN)
     with no --no-load-optim / --no-load-rng / --finetune: it resumes at the iteration written;
  2. with megatron-core's dist_checkpointing.load into make_megatron_vocab.tp1_model;
then runs megatron-core's forward and writes what it found as JSON (argv[4]): the logits' max abs
difference from HF_LOGITS (transformers' of the Hugging Face model), the padding rows' largest
absolute value, the iteration load_checkpoint returned.

    python megatron_vocab_pad_load.py {tied|untied} RUN HF_LOGITS OUT.json
"""
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAYOUTS = HERE.parent / "fixtures" / "layouts"
sys.path[:0] = [str(LAYOUTS), str(HERE.parent), str(HERE.parent / "interop")]


def main() -> int:
    tied = sys.argv[1] == "tied"
    run, hf_logits, out = Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    import make_megatron_fsdp as mf
    import make_megatron_vocab as mv

    mf._shim_cpu()
    import warnings

    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file

    import make_megatron_hf as mh

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(mf.free_port()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("gloo", rank=0, world_size=1)
    argv = mv.argv(tied)
    argv[argv.index("--tensor-model-parallel-size") + 1] = "1"
    argv[argv.index("--load") + 1] = str(run)
    argv[argv.index("--save") + 1] = str(run.parent / "unused-save")
    sys.argv = argv
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.training.arguments import core_transformer_config_from_args, parse_args, validate_args
    from megatron.training.checkpointing import load_checkpoint
    from megatron.training.global_vars import set_global_variables
    from megatron.training.initialize import _set_random_seed

    args = parse_args()
    validate_args(args, {})
    set_global_variables(args, build_tokenizer=True)
    ps.initialize_model_parallel(1, 1)
    _set_random_seed(args.seed, args.data_parallel_random_init)
    tensor_parallel.model_parallel_cuda_manual_seed(args.seed)
    config = core_transformer_config_from_args(args)
    spec = get_gpt_layer_local_spec(args.num_experts, args.moe_grouped_gemm, args.qk_layernorm, args.multi_latent_attention,
                                    normalization=args.normalization)
    model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=args.padded_vocab_size,
                     max_sequence_length=args.max_position_embeddings, pre_process=True, post_process=True,
                     share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
                     position_embedding_type=args.position_embedding_type, rotary_percent=args.rotary_percent,
                     rotary_base=args.rotary_base)
    iteration, _ = load_checkpoint([model], None, None, strict=True)
    want = load_file(str(hf_logits))
    model.eval()
    lm_logits = mh.megatron_logits(model, want["tokens"])

    core = mv.tp1_model(tied)
    loaded = dist_checkpointing.load(core.sharded_state_dict(), str(run / "iter_0000001"))
    core.load_state_dict(loaded, strict=False)
    core.eval()
    core_logits = mh.megatron_logits(core, want["tokens"])
    pads = [core.embedding.word_embeddings.weight[mv.VOCAB:]] + ([] if tied else [core.output_layer.weight[mv.VOCAB:]])
    same = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), core.state_dict().values())
               if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor))
    doc = {"iteration": iteration, "padded_vocab_size": args.padded_vocab_size,
           "rows": core.embedding.word_embeddings.weight.shape[0],
           "load_checkpoint_vs_hf": (lm_logits[..., :mv.VOCAB] - want["logits"]).abs().max().item(),
           "dist_checkpointing_vs_hf": (core_logits[..., :mv.VOCAB] - want["logits"]).abs().max().item(),
           "padding_max_abs": max(p.abs().max().item() for p in pads), "same_weights": same}
    out.write_text(json.dumps(doc))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
