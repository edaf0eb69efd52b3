// A tied model's Hugging Face export leaves `lm_head.weight` out, as transformers' save_pretrained
// and torchtitan's `to_hf` do: with `tie_word_embeddings: true` in config.json, from_pretrained
// ties the head to the input embedding and never reads a stored one. Training checkpoints hold
// both (FSDP's state dict, torchtitan's `output.weight` beside `tok_embeddings.weight`); an export
// that keeps the head writes the embedding twice and, if the two ever differ, a head the loader
// silently ignores.
//
// The head is left out only when its bytes equal the embedding's (read in bounded windows, through
// the key map where there is one); a head that differs stays, and the export's own check
// (meta/hf_checks.h: tied-head-differs) refuses the folder, so nothing is lost in silence.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meta/checkpoint.h"
#include "meta/keymap.h"
#include "meta/select.h"

namespace dcpctl {

struct TiedHead {
  std::string head = "lm_head.weight";
  std::string embedding;  // the output key of the input embedding it equals
  std::string input;      // with a map: the input key the head is made of (e.g. output.weight)
};

// Whether `config` (config.json's text) ties the word embeddings and the output (the selected
// keys of `ck`, or `map`'s tensors over it) holds lm_head.weight equal, byte for byte, to the
// embedding: then the head to leave out. `window` bounds the bytes read at a time.
std::optional<TiedHead> tied_head_to_drop(const std::string& config, const Checkpoint& ck, const Selection& sel,
                                          const MappedModel* map, uint64_t window = 64ull << 20);

// `map` without the head: its tensor erased, its input counted as dropped with the reason.
void drop_tied_head(MappedModel& map, const TiedHead& tied);

}  // namespace dcpctl
