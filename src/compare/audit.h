// The audit of an export against its source: `dcpctl diff SOURCE EXPORT --map M`, where SOURCE is a
// checkpoint (DCP, any layout) and EXPORT the Hugging Face folder or file dcpctl, Megatron-Bridge or
// transformers wrote from it, M the key map it was written through (issue 49, item 3; the counts
// Megatron-Bridge publishes for its exports).
//
// The source is seen through the map (diff's --map); the export as it is, its quantized weights
// decoded (view/codecs/dequantize.h) so that each is compared with the source's weight within its codec's
// bound, and each tensor in a dtype other than the source's compared after the same
// cast (compare/export_bound.h). Every source key is then accounted for:
//   mapped           the model keys the map takes, and the export keys they make;
//   bit_equal        export values equal to the source's bit for bit;
//   within_codec     equal within their codec's bound, not bit for bit (a quantized export);
//   after_cast       equal after the source is cast to the export's dtype, not bit for bit;
//   tied             a head the export leaves out because its config ties it (tie_word_embeddings),
//                    the source's head equal to the embedding the export keeps;
//   dropped          model keys the map drops by name, each with the map's reason;
//   export_only      export keys a one-sided rule of the export's side names (the map's reason:
//                    e.g. a buffer the export's convention keeps and the source's has no tensor for);
//   left_out         keys outside the model (optimizer, rng, schedulers, trainer state);
//   excluded         keys --exclude left out on purpose;
//   config           the export's config.json against its tensors (check/hf_config_checks.h): the
//                    checks that ran, and their problems;
//   unexplained      everything else: a model key the export lacks, a key the export has and the
//                    source does not make, a shape or dtype no rule explains, a value beyond its
//                    bound, a config problem. Any is exit 1, each named.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/export_bound.h"
#include "compare/input.h"

namespace dcpctl {

struct DiffResult;

// The export's quantized weights seen as float32, as their codecs decode them (the input's
// checkpoint and reader replaced by the dequantize view), and for each the bound its values are
// compared under (compare/export_bound.h), by its name in the view. Nothing when the export has
// none, or when `source` holds quantized weights itself (then both are compared as saved).
// UnsupportedError (exit 5), naming the weight, for a format whose bound is not implemented
// (compressed-tensors' INT4/INT8 pack-quantized, DeepSeek-V4's FP4 experts); what the dequantize
// view refuses (view/codecs/dequantize.h) as it refuses it.
std::map<std::string, ExportBound> dequantize_export(Input& exported, const Input& source);

// Whether the export's config.json (or its text_config) says tie_word_embeddings.
bool export_ties_embeddings(const Input& exported);

struct ExportAudit {
  std::string map, direction;
  size_t mapped = 0, export_keys = 0;
  size_t bit_equal = 0, within_codec = 0, after_cast = 0, tied = 0;
  std::vector<std::pair<std::string, std::string>> dropped;      // key, the map's reason
  std::vector<std::pair<std::string, std::string>> export_only;  // key, the map's reason
  std::vector<std::string> left_out, excluded;
  nlohmann::json config;  // {"path", "checked": [...], "problems": [...]}, or null: the export has none
  std::vector<std::pair<std::string, std::string>> unexplained;  // key (or file), why
  bool clean() const { return unexplained.empty(); }
};

// The audit of `r` (diff_inputs of source `a`, mapped through `map`, and export `b`).
ExportAudit audit_export(const Input& a, const Input& b, const DiffResult& r, const KeyMap& map);

// --json's "audit" object (docs/schemas/diff.schema.json).
nlohmann::json audit_json(const ExportAudit& audit);

}  // namespace dcpctl
