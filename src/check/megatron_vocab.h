// A Megatron checkpoint's padded vocabulary, exported to Hugging Face.
//
// Megatron-LM pads the embedding and the output layer to a multiple of
// `--make-vocab-size-divisible-by` (default 128) times the tensor-parallel size:
//
//   padded = ceil(vocab / (divisible_by * tp)) * (divisible_by * tp)
//
// (megatron.core.tokenizers.utils.build_tokenizer.vocab_size_with_padding, and
// megatron.training.vocab_utils.calculate_padded_vocab_size, megatron-core 0.19.2), and saves
// args.padded_vocab_size. The tokenizer's vocab_size (config.json's) is smaller: the extra rows are
// no token's. Megatron-Bridge's export keeps the first vocab_size rows (model_bridge.py,
// `_truncate_vocab_padding`: `tensor[:vocab_size]`, NVIDIA-NeMo/Megatron-Bridge f5f02605a, #5375).
//
// fit_megatron_vocab does the same, and only where the extra rows are exactly that padding:
//   - with the checkpoint's args (read_megatron_args): args.padded_vocab_size, else the rule with
//     args.make_vocab_size_divisible_by and args.tensor_model_parallel_size; args.vocab_size, when
//     set (NullTokenizer's --vocab-size), must be config.json's;
//   - without args: the rule with Megatron-LM's default 128 and the TP the checkpoint shows (the
//     number of equal row blocks the embedding is saved in: torch_dist writes one per TP rank).
// Anything else (rows that are not that padding, a TP that cannot be told) is UnsupportedError
// (exit 5: a valid checkpoint this map does not cover), naming the counts, the rule and where it
// was read, and which vocab_size values the rows would be the padding of. Fewer rows than
// vocab_size are left to the export's checks.
//
// The other way (pad_megatron_vocab), a Hugging Face model written for a Megatron-LM run
// (--format megatron with --megatron-args FILE, --make-vocab-size-divisible-by N or
// --tensor-model-parallel-size N): the embedding (and an untied output layer) gets the rows
// Megatron-LM pads the tokenizer's vocab_size to for that run, zero rows at the end, as
// Megatron-Bridge's import writes them (param_mapping.py, `_pad_right_dim0`: torch.cat([x,
// zeros(pad_size, ...)], dim=0)). The rule, as Megatron-LM's own validate_args + build_tokenizer:
// the file's padded_vocab_size when it has one and no divisor, else the ceil above with the file's
// (or the flags') make_vocab_size_divisible_by (default 128) and tensor_model_parallel_size
// (default 1); a flag and the file disagreeing is a usage error, and so is a padded_vocab_size
// that is not that rule's, or a file's vocab_size that is not config.json's (both named). The
// common state then carries `args` (write/formats/megatron.cpp), an argparse.Namespace as
// Megatron-LM's save_checkpoint writes it: the file's fields, or without a file the ones
// Megatron-LM's load_checkpoint compares with its run (check_checkpoint_args: num_layers,
// hidden_size, num_attention_heads, max_position_embeddings) from config.json; with, either way,
// vocab_size, padded_vocab_size, make_vocab_size_divisible_by, tensor_model_parallel_size,
// untie_embeddings_and_output_weights (whether output_layer.weight is written), ckpt_format
// "torch_dist", and no_save_optim / no_save_rng True (the checkpoint holds neither, so
// load_checkpoint resumes from it without --no-load-optim / --no-load-rng or --finetune). Without
// any of the three options nothing is padded and no args are written (megatron-core's
// dist_checkpointing.load into a GPTModel built with config.json's vocab_size, as before).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace dcpctl {

struct Checkpoint;
struct MappedModel;
struct MapConfig;

// The Megatron-LM run a Hugging Face model is written for (--format megatron with --map
// megatron: pad_megatron_vocab below): --megatron-args FILE (a JSON object of
// Megatron-LM's argument names, what `json.dump(vars(args))` writes), --make-vocab-size-divisible-by,
// --tensor-model-parallel-size (0: not given). Any of them given: the vocabulary is padded as
// Megatron-LM pads it and the common state carries an `args` Namespace.
struct MegatronTarget {
  std::string args_file;
  int64_t divisible_by = 0, tp = 0;
  bool given() const { return !args_file.empty() || divisible_by > 0 || tp > 0; }
};

// For a Megatron -> Hugging Face map: the outputs model.embed_tokens.weight and lm_head.weight
// cut to config.json's vocab_size rows where the rest is Megatron's padding (the map's `vocab`
// in --json says what was dropped, the rule and where it was read); any other map as it is.
// view/model.h's ModelRequest::fit_map (set by the exports, diff and stats).
void fit_megatron_vocab(const Checkpoint& saved, MappedModel& map, const MapConfig& config);

// For a Hugging Face -> Megatron map with `target` given: the vocabulary's outputs padded (their
// MappedTensor::pad_rows) and map.megatron_args set, map.vocab saying what was added; UsageError
// when `target` is given and the map is not Hugging Face -> Megatron, or the target contradicts
// itself or config.json. Nothing when `target` is not given.
void pad_megatron_vocab(const MegatronTarget& target, MappedModel& map, const MapConfig& config);

}  // namespace dcpctl
