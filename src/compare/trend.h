// dcpctl report: how every tensor of a run moved from one checkpoint to the next.
//
// For each step (a checkpoint of a run folder, or one named by hand) and each floating tensor,
// the figures stats computes (compare/stats_core.h: L2 norm, sum of squares, abs max, NaN/Inf/zero
// counts), and between consecutive steps where the tensor keeps its shape:
//   update_sq  ||W_t - W_{t-1}||^2            in float64 (each side widened exactly, util/elements.h)
//   dot        (W_t - W_{t-1}) . (W_{t-1} - W_{t-2})   where three consecutive steps hold it
// From these the report (report/trend_json.cpp) derives the update ratio ||W_t - W_{t-1}|| /
// ||W_{t-1}||, the cosine of consecutive updates, the norm growth and the optimizer's figures, with
// nothing kept of the tensors themselves.
//
// How the steps are read: in lockstep. A pass opens up to `steps_per_pass` consecutive steps and
// walks each tensor window by window (item/window.h), filling the same window from every step of
// the pass before moving on, so every byte of a step is read once per pass, in bounded memory
// (a window per step per thread, within --max-memory), the windows of all tensors in parallel.
// The differences of W_{t-1} and W_{t-2} need those steps' bytes next to W_t's: consecutive passes
// overlap by two steps, which are read twice (once as the last steps of a pass, once as the first
// of the next); with the default budget a pass holds up to 64 steps, so a run of 100 steps is
// read in two passes and 2 of its steps twice (RunTrend::step_reads says how often each step was
// read). Sums over a tensor split into several windows are merged as windows finish: with more
// than one thread their order, and so the last bits of a figure, may differ from one run to the
// next.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compare/stats_core.h"
#include "meta/select.h"

namespace dcpctl {

// One checkpoint of the run, in order.
struct TrendStep {
  std::string name, path;       // path: the checkpoint directory read
  std::optional<int64_t> step;  // the trainer's step number, when its name says
  uint64_t metadata_bytes = 0;  // its metadata's size, when known (a run folder's judged entry)
};

// What a tensor is, from its name (trend.cpp: classify_key).
enum class TensorKind { Attention, Mlp, Experts, Norm, Embedding, Other };
enum class TensorRole { Weight, ExpAvg, ExpAvgSq, OptimizerOther };
const char* kind_name(TensorKind k);
const char* role_name(TensorRole r);

// One tensor at one step.
struct TensorAtStep {
  bool present = false;
  std::string dtype;
  StatsAccumulator s;
  bool has_update = false;  // the step before holds it with the same shape
  bool has_dot = false;     // and the one before that too
  double update_sq = 0, dot = 0;
};

struct TensorTrend {
  std::string key;
  std::string param;  // the parameter an optimizer state is of (after the trainer's "state."), else key
  TensorKind kind = TensorKind::Other;
  TensorRole role = TensorRole::Weight;
  std::vector<int64_t> shape;       // at the last step holding it
  std::vector<TensorAtStep> steps;  // one per TrendStep
};

struct SkippedTensor {
  std::string key, dtype, reason;
};

struct TrendOptions {
  Selection selection;
  std::string map, map_config;  // --map, --config: each step seen through the key map
  unsigned threads = 4;
  uint64_t max_memory = 1ull << 30;
  uint64_t window_bytes = 8ull << 20;  // the most a window of one step holds
  // 0: as many as the budget allows (at least 3): half of --max-memory for the windows (1 MiB a
  // step a thread), half for the steps' parsed metadata (kMetadataFactor times its size).
  size_t steps_per_pass = 0;
  // progress(pass, passes, bytes done, bytes of the pass)
  std::function<void(size_t, size_t, uint64_t, uint64_t)> progress;
};

struct RunTrend {
  std::vector<TrendStep> steps;
  std::vector<TensorTrend> tensors;    // in the order first seen
  std::vector<SkippedTensor> skipped;  // not floating, or not decoded
  std::vector<unsigned> step_reads;    // how many passes read each step
  size_t passes = 0, steps_per_pass = 0;
  uint64_t bytes_read = 0;
  double seconds = 0;
};

RunTrend compute_trend(const std::vector<TrendStep>& steps, const TrendOptions& o);

// Kind and role of a key; the parameter an optimizer state key belongs to.
TensorKind classify_key(const std::string& key);
TensorRole classify_role(const std::string& key, std::string& param);

}  // namespace dcpctl
