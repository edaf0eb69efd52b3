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
#pragma once

namespace dcpctl {

struct Checkpoint;
struct MappedModel;
struct MapConfig;

// For a Megatron -> Hugging Face map: the outputs model.embed_tokens.weight and lm_head.weight
// cut to config.json's vocab_size rows where the rest is Megatron's padding (the map's `vocab`
// in --json says what was dropped, the rule and where it was read); any other map as it is.
// view/model.h's ModelRequest::fit_map (set by the exports, diff and stats).
void fit_megatron_vocab(const Checkpoint& saved, MappedModel& map, const MapConfig& config);

}  // namespace dcpctl
