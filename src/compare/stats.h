// dcpctl stats: per-tensor summary statistics of any input (compare/input.h), streamed window by
// window (item/window.h) in bounded memory, windows of all tensors in parallel.
//
// JSON (schema_version 1), built by stats_json():
//   {"schema_version": 1, "checkpoint": path, "layout": "dcp" | ...,
//    "tensors": [{"key", "dtype", "shape", "numel", "min", "max", "mean", "std", "abs_max",
//                 "l2_norm", "nan", "pos_inf", "neg_inf", "zeros", "first_nonfinite_index",
//                 "view_as_real" (complex only: the shape summarised, shape + [2])}],
//    "skipped": [{"key", "dtype", "reason"}],        packed fp4 tensors, dtypes unknown
//    "groups": [{"prefix", "tensors", <the same statistics>}]   with depth > 0
//    "values": N,                                    non-tensor items (not summarised)
//    "checks": {"finite": {"ok", "failures": [{"key", "nan", "pos_inf", "neg_inf", "first_index"}]},
//               "zero": {"ok", "failures": [{"key"}]}}     only the checks asked for
//    "bytes_read", "seconds",
//    "chunk_decodes": chunks decoded in memory (zstd items, non-contiguous views): each once when
//                     its windows share it within --max-memory (item/window.h), else per window}
// Floats that are not finite are written as the strings "nan", "inf", "-inf"; an empty tensor's
// min/max/mean/std are null. first_nonfinite_index is a multi-index, or null.
//
// A complex tensor is summarised as torch.view_as_real(t) shows it: its real and imaginary parts
// as one real tensor of shape [..., 2]. numel, every statistic and count, and
// first_nonfinite_index are over those 2 * numel(t) values (so abs_max is the largest |re| or
// |im|, and l2_norm equals torch.linalg.vector_norm(t)). The gates cover complex tensors as they
// do real floating ones.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compare/input.h"
#include "compare/stats_core.h"
#include "meta/select.h"

namespace dcpctl {

struct StatsOptions {
  Selection selection;
  unsigned threads = 4;
  uint64_t max_memory = 1ull << 30;
  uint64_t window_bytes = 32ull << 20;  // per window of raw elements (float64 widening on top)
  int depth = 0;                        // group by the first `depth` key components (0: no groups)
  bool check_finite = false, check_zero = false;
  std::string map, map_config;  // --map NAME|FILE, --config FILE (view/maps/keymap.h)
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct TensorStatsReport {
  std::string key;
  const TensorMeta* t = nullptr;
  StatsAccumulator s;
  std::string skipped;  // non-empty: not summarised, and why
};

struct StatsResult {
  std::vector<TensorStatsReport> tensors;
  size_t values = 0;
  uint64_t bytes_read = 0;
  uint64_t chunk_decodes = 0;  // chunks decoded in memory (zstd, non-contiguous views)
  double seconds = 0;
  bool finite_ok = true, zero_ok = true;
};

StatsResult compute_stats(Input& in, const StatsOptions& o);

// The shape of the values summarised: t.shape, with a trailing 2 for complex (view_as_real).
std::vector<int64_t> value_shape(const TensorMeta& t);

// "a.b.c" grouped at depth 2 -> "a.b"; keys with fewer components are their own group.
std::string group_prefix(const std::string& key, int depth);

nlohmann::json stats_json(const Input& in, const StatsResult& r, const StatsOptions& o);

// A float for JSON: a number, or "nan"/"inf"/"-inf".
nlohmann::json json_float(double v);

}  // namespace dcpctl
