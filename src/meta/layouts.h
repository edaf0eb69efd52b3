// The openers of meta/'s rows of the readers' table (readers.h). Internal to meta/.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "meta/checkpoint.h"

namespace dcpctl::meta_detail {

bool ends_with(const std::string& s, const std::string& suffix);

// A Hugging Face index (`model.safetensors.index.json`, `pytorch_model.bin.index.json`): its
// weight_map, key -> file name inside the directory (names leaving it are refused).
std::map<std::string, std::string> read_weight_map(const std::string& index);

// Sizes of the data files md.files names (fills ck.files).
void stat_data_files(Checkpoint& ck);

// DCP saved with SerializationFormat.SAFETENSORS: points every tensor item of a file whose
// items start with a safetensors blob at its own bytes (ItemFormat::Raw). Other files untouched.
void resolve_safetensors_items(Checkpoint& ck);

// `.metadata` (or its bytes, received from another rank) and the data files it names.
Checkpoint open_dcp(const std::string& dir, const std::vector<uint8_t>* metadata);

// `__R.metadata` files (names given) merged into one view.
Checkpoint open_rank_local(const std::string& dir, const std::vector<std::string>& rank_files);

// Safetensors files `names` (relative to dir) as one view; `index` is the
// model.safetensors.index.json path or empty.
Checkpoint open_safetensors_files(const std::string& dir, const std::vector<std::string>& names,
                                  const std::string& index);

}  // namespace dcpctl::meta_detail
