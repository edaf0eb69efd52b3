// What consolidate and reshard decide alike about each selected tensor before any byte moves:
// whether its chunks cover it (else the run is refused, naming every hole), which dtype it is
// written in under --dtype (and the precision policy). (The memory budget is plan/memory.h's.)
#pragma once

#include <map>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/metadata.h"
#include "plan/precision.h"
#include "util/dtype.h"
#include "util/error.h"

namespace dcpctl {

// Collects the tensors whose chunks do not tile them exactly (holes, overlaps, chunks out of
// bounds, chunks without a storage entry), with a description of each (the first ~2000 chars).
class CoverageCheck {
 public:
  // True if `t` is fully covered; otherwise records why and returns false. Asked again of the same
  // tensor (a map's stack of 384 experts is a part of 384 outputs), the first answer, counted once.
  bool covered(const TensorMeta& t);
  // Throws FormatError (exit 3) at `where` if any tensor was not covered: "N selected tensor(s)
  // are not fully covered by their chunks; refusing to <what>:" and the list.
  void refuse_if_incomplete(const Where& where, const std::string& what) const;

 private:
  bool check(const TensorMeta& t);
  size_t incomplete_ = 0;
  std::string holes_;
  std::unordered_map<const TensorMeta*, bool> seen_;
};

// --dtype: floating tensors that can be cast are written in the target dtype, but those the
// precision policy keeps (plan/precision.h), which keep their saved dtype; floating tensors that
// cannot be cast (complex, or a dtype with no cast) are listed, and other dtypes are kept silently.
class CastChoice {
 public:
  explicit CastChoice(std::optional<DType> cast, const PrecisionPolicy* policy = nullptr)
      : cast_(cast), policy_(policy) {}
  // The dtype tensor `key` (`fqn` in the checkpoint's table) of dtype `src` is written in.
  DType target(DType src, const std::string& key, const std::string& fqn = "");
  // Tensors (by their name in the table) a view wrote in the dtype they must keep (the quantize
  // view's fp8 weights and scales): never cast, listed as kept with `reason`, whatever --cast-all says.
  void keep_for_view(const std::vector<std::string>& fqns, const std::string& reason);
  // A tensor the policy keeps: written in `dtype` (its saved one, or float32 where a Hugging Face
  // folder's transformers keeps it so: PrecisionPolicy::keeps_float32), or, under --cast-all, cast from it.
  struct Kept {
    std::string key;
    DType dtype;
    std::string reason;
  };
  const std::vector<std::string>& cast_keys() const { return cast_keys_; }
  const std::vector<std::string>& not_cast() const { return not_cast_; }
  const std::vector<Kept>& kept() const { return kept_; }
  const std::vector<Kept>& cast_anyway() const { return cast_anyway_; }
  // The "cast" object of a --json summary: {"dtype", "tensors" (how many cast), "not_cast",
  // "kept" and "cast_anyway" ([{"key", "dtype", "reason"}]), "policy"}.
  nlohmann::json summary() const;

 private:
  // A kept tensor (`why`) that transformers loads in float32 (PrecisionPolicy::keeps_float32), saved
  // narrower: recorded as kept in float32, and true (it is written in float32, as transformers'
  // from_pretrained(dtype=...) + save_pretrained write it).
  bool kept_float32(DType src, const std::string& key, const std::string& why);
  std::optional<DType> cast_;
  const PrecisionPolicy* policy_ = nullptr;
  std::vector<std::string> cast_keys_, not_cast_;
  std::vector<Kept> kept_, cast_anyway_;
  std::map<std::string, std::string> view_kept_;
};

}  // namespace dcpctl
