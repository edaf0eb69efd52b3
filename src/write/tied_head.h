// A tied model's Hugging Face export leaves `lm_head.weight` out, as transformers' save_pretrained
// and torchtitan's `to_hf` do: with `tie_word_embeddings: true` in config.json, from_pretrained
// ties the head to the input embedding and never reads a stored one. Training checkpoints hold
// both (FSDP's state dict, torchtitan's `output.weight` beside `tok_embeddings.weight`); an export
// that keeps the head writes the embedding twice and, if the two ever differ, a head the loader
// silently ignores.
//
// The head is left out only when its bytes equal the embedding's (read in bounded windows, through
// the key map where there is one); a head that differs stays, and the export's own check
// (check/hf_checks.h: tied-head-differs) refuses the folder, so nothing is lost in silence.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meta/checkpoint.h"
#include "meta/select.h"

namespace dcpctl {

struct TiedHead {
  std::string head = "lm_head.weight";
  std::string embedding;  // the output key of the input embedding it equals
};

// Whether `config` (config.json's text) ties the word embeddings and the selected keys of `ck`
// (the model's table: a key map's outputs where there is one) hold lm_head.weight equal, byte for
// byte, to the embedding: then the head to leave out. `window` bounds the bytes read at a time.
std::optional<TiedHead> tied_head_to_drop(const std::string& config, const Checkpoint& ck, const Selection& sel,
                                          uint64_t window = 64ull << 20);

// A key map's written table (view/maps/map_view.h) without the head: no longer an item, and the map
// without its tensor, its input counted as dropped with the reason. Nothing for any other table
// (the caller excludes the head from its selection).
std::optional<Checkpoint> without_tied_head(const Checkpoint& table, const TiedHead& tied);

}  // namespace dcpctl
