// dcpctl diff: which keys two inputs share and whether their values agree, streamed window by
// window from both sides at once (each side sharded however it is), in bounded memory.
//
// Keys are compared as flattened (DCP's "app.model.layers.0.w"). A --select prefix is applied
// to each side that has keys under it (and stripped there), so a training checkpoint compares
// with the model exported from it; --include/--exclude as meta/select.h. Per key:
//   only_in_a, only_in_b    the key is on one side only
//   kind_changed            a tensor on one side, a non-tensor value on the other
//   dtype_changed           different dtypes (values are still compared with ignore_dtype)
//   shape_changed           different shapes (never compared)
//   values_changed          same dtype and shape (or ignore_dtype), some element differs
//                           (compare/diff_core.h); non-tensor values: their reprs differ
//   identical
//   tied                    (--map) the export leaves the key out as its config ties it, and the
//                           source's values equal those of the key it is tied to (b_key)
// B quantized (weights a codec reads beside their scales) and A not: B is an export of A, its
// quantized weights decoded and compared within their codec's bound (compare/export_bound.h), each
// such key's bound and inexact elements reported. With --map, B is audited as an export of A
// (compare/audit.h): also compared after the cast to B's dtype, and `same` is the audit's verdict
// (nothing unexplained).
//
// JSON (schema_version 1), built by diff_json():
//   {"schema_version": 1, "same": bool,
//    "a": {"path", "layout"}, "b": {...},
//    "rule": {"exact": bool, "atol", "rtol", "equal_nan", "ignore_dtype"},
//    "counts": {"only_in_a", "only_in_b", "kind_changed", "dtype_changed", "shape_changed",
//               "values_changed", "identical", "tied"},
//    "keys": [{"key", "status", "a": {"dtype", "shape"} | {"value"} | null, "b": ...,
//              for compared tensors: "numel", "differing", "nan_mismatch", "max_abs_diff",
//              "max_rel_diff", "max_ulp_diff" (null when not measurable), "first_index";
//              with --map, or for a quantized weight of B: "bound" ("exact", "cast", "codec"),
//              "inexact", and for "codec" the codec's name ("codec") and what s is ("bound_rule");
//              "b_key" (tied); a file a module compares (DiffKind; a GGUF against its source,
//              gguf/diff.h): "bound" the module's kind ("gguf"), "codec" the file's type,
//              "bound_rule", "inexact", "source_keys"}],
//    "audit": (with --map) audit_json(), "bytes_read", "seconds"}
// keys: differing keys first, largest max_abs_diff first (NaN mismatches before all), then the
// rest in A's order followed by B-only keys.
#pragma once

#include <deque>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compare/audit.h"
#include "compare/diff_core.h"
#include "compare/input.h"
#include "meta/select.h"

namespace dcpctl {

struct DiffOptions {
  Selection selection;
  std::optional<double> atol, rtol;
  bool equal_nan = false;
  bool ignore_dtype = false;
  unsigned threads = 4;
  uint64_t max_memory = 1ull << 30;
  uint64_t window_bytes = 32ull << 20;  // per side
  // Only the verdict is wanted (--quiet): stop reading at the first difference found. The
  // per-key results are then incomplete; `same` is exact.
  bool stop_early = false;
  // --map NAME|FILE (view/maps/keymap.h): A is seen through the map (the direction its keys choose),
  // and B too when its keys are on A's side of the map; --config for its parameters.
  std::string map, map_config;
  // --assets DIR: where a module's comparison (DiffKind: a GGUF's, gguf/diff.h) finds the
  // source's config.json; "": beside the source.
  std::string assets;
  std::function<void(uint64_t done, uint64_t total)> progress;
};

enum class DiffStatus { OnlyInA, OnlyInB, KindChanged, DtypeChanged, ShapeChanged, ValuesChanged, Identical, Tied };
const char* status_name(DiffStatus s);  // "only_in_a", ...

struct KeyDiff {
  std::string key;
  DiffStatus status = DiffStatus::Identical;
  const TensorMeta* a = nullptr;  // tensors
  const TensorMeta* b = nullptr;
  std::optional<std::string> value_a, value_b;  // non-tensor values (repr)
  bool compared = false;                        // tensor values were compared
  // --map (the audit): the export's key compared with this one when it is another (a tied head:
  // the embedding), and the bound the values were compared under (compare/export_bound.h).
  std::string b_key;
  ExportBound::Kind bound = ExportBound::Kind::Exact;
  std::shared_ptr<const ElementBound> codec;  // bound Codec: the codec's bound (its name and rule)
  // A file compared by its module against its source (DiffKind: a GGUF, gguf/diff.h): the bound
  // its values were held to, as the module names it ("bound" its kind, "codec", "bound_rule"),
  // and the source's tensors the file's tensor is made of.
  struct ModuleBound {
    std::string kind, codec, rule;
  };
  std::optional<ModuleBound> module_bound;
  std::vector<std::string> sources;
  DiffAccumulator acc;
};

struct DiffResult {
  std::vector<KeyDiff> keys;  // in report order (see above)
  bool same = true;
  uint64_t bytes_read = 0;
  double seconds = 0;
  std::optional<ExportAudit> audit;  // --map: the export audited against its source; `same` is its verdict
  std::deque<TensorMeta> metas;      // the sides a comparison made itself (a GGUF's source tensors as planned)
  size_t count(DiffStatus s) const;
};

DiffResult diff_inputs(Input& a, Input& b, const DiffOptions& o);

// A kind of input a module compares itself (a GGUF file against the model it was written from:
// gguf/diff.h). diff_inputs hands a pair to the first kind that claims one side and not the
// other: `diff(other, claimed, options, claimed_is_a)`. `assets_use` is the refusal of --assets
// when no side is claimed (--assets names the claimed side's source's config.json).
struct DiffKind {
  bool (*claims)(const Input& in) = nullptr;
  DiffResult (*diff)(Input& other, Input& claimed, const DiffOptions& o, bool claimed_is_a) = nullptr;
  const char* assets_use = nullptr;
};
// Adds a module's kind (once: a kind whose `claims` is there already is ignored).
void register_diff_kind(const DiffKind& kind);

nlohmann::json diff_json(const Input& a, const Input& b, const DiffResult& r, const DiffOptions& o);

}  // namespace dcpctl
