#include "plan/checks.h"

#include "meta/geometry.h"
#include "util/numeric.h"

namespace dcpctl {

bool CoverageCheck::covered(const TensorMeta& t) {
  if (auto it = seen_.find(&t); it != seen_.end()) return it->second;
  const bool exact = check(t);
  seen_.emplace(&t, exact);
  return exact;
}

bool CoverageCheck::check(const TensorMeta& t) {
  Coverage cov = check_coverage(t, 4);
  bool missing = false;
  for (size_t c = 0; c < t.num_chunks(); ++c) missing = missing || (!t.storage[c].present() && t.chunk_numel(c) > 0);
  if (cov.exact && !missing) return true;
  ++incomplete_;
  if (holes_.size() < 2000) {
    holes_ += "\n  " + t.fqn + ": ";
    if (missing) holes_ += "chunk(s) without storage entry; ";
    if (cov.missing_elements) {
      holes_ += std::to_string(cov.missing_elements) + " elements missing, holes";
      for (const auto& h : cov.holes) holes_ += " " + h.text();
    }
    if (cov.overlap_elements) holes_ += std::to_string(cov.overlap_elements) + " elements overlap";
    if (!cov.out_of_bounds.empty()) holes_ += "chunk(s) out of bounds";
  }
  return false;
}

void CoverageCheck::refuse_if_incomplete(const Where& where, const std::string& what) const {
  if (incomplete_)
    throw FormatError(where, std::to_string(incomplete_) +
                                 " selected tensor(s) are not fully covered by their chunks; refusing to " + what +
                                 ":" + holes_);
}

void CastChoice::keep_for_view(const std::vector<std::string>& fqns, const std::string& reason) {
  for (const std::string& k : fqns) view_kept_[k] = reason;
}

bool CastChoice::kept_float32(DType src, const std::string& key, const std::string& why) {
  if (!info(src).floating || itemsize(src) >= itemsize(DType::Float32) || !policy_->keeps_float32(key)) return false;
  kept_.push_back(
      {key, DType::Float32, why + "; written in float32 (saved " + torch_name(src) + "), as transformers loads it"});
  return true;
}

DType CastChoice::target(DType src, const std::string& key, const std::string& fqn) {
  if (!cast_) return src;
  if (*cast_ == src) {
    // already the target's dtype: only what transformers loads in float32 changes (a bf16 folder's
    // router bias, upcast as from_pretrained(dtype=bfloat16) upcasts it)
    if (policy_ && !policy_->cast_all() && !view_kept_.count(fqn.empty() ? key : fqn))
      if (std::string why = policy_->reason(key); !why.empty() && kept_float32(src, key, why)) return DType::Float32;
    return src;
  }
  if (auto v = view_kept_.find(fqn.empty() ? key : fqn); v != view_kept_.end()) {
    kept_.push_back({key, src, v->second});
    return src;
  }
  if (castable(src)) {
    if (policy_)
      if (std::string why = policy_->reason(key); !why.empty()) {
        if (!policy_->cast_all()) {
          if (kept_float32(src, key, why)) return DType::Float32;
          kept_.push_back({key, src, std::move(why)});
          return src;
        }
        cast_anyway_.push_back({key, src, std::move(why)});
      }
    cast_keys_.push_back(key);
    return *cast_;
  }
  if (info(src).floating) not_cast_.push_back(key);
  return src;
}

nlohmann::json CastChoice::summary() const {
  auto list = [](const std::vector<Kept>& v) {
    nlohmann::json out = nlohmann::json::array();
    for (const Kept& k : v) out.push_back({{"key", k.key}, {"dtype", torch_name(k.dtype)}, {"reason", k.reason}});
    return out;
  };
  return {{"dtype", cast_ ? nlohmann::json(torch_name(*cast_)) : nlohmann::json(nullptr)},
          {"tensors", cast_keys_.size()},
          {"not_cast", not_cast_},
          {"kept", list(kept_)},
          {"cast_anyway", list(cast_anyway_)},
          {"policy", cast_ && policy_ ? policy_->describe() : nlohmann::json(nullptr)}};
}

}  // namespace dcpctl
