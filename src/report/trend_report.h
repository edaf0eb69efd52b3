// dcpctl report's figures, anomalies and gates, as JSON data (compare/trend.h computes the sums
// they come from); the HTML page (report/trend_html.cpp) is drawn from this JSON alone.
//
// JSON schema, version 1 (additions keep the version; removals or changes bump it). Per-step
// figures are arrays with one entry per step, null where the tensor (or group) is absent or the
// figure undefined; floats that are not finite are the strings "nan", "inf", "-inf".
// {"schema_version": 1, "run": "<run folder>"|null,
//  "steps": [{"index", "name", "path", "step" (int|null), "reads": passes that read it}],
//  "skipped_steps": [{"name", "path", "why"}],                    incomplete checkpoints of the run
//  "thresholds": {"update_ratio", "norm_growth", "second_moment_drop"},    what an anomaly is
//  "tensors": [{"key", "param", "kind", "role", "group", "shape" (at the last step holding it),
//               "dtype": [per step], "series": series}],
//  "skipped": [{"key", "dtype", "reason"}],                       not floating, or not decoded
//  "groups": {"layer": [{"name", "tensors", "series": series}], "kind": [...]}   model weights
//  "optimizer": {"layer": [{"name", "params", "exp_avg_rms": [..], "exp_avg_sq_rms": [..],
//                           "effective_step": [..]}], "kind": [...]}          Adam's state
//  "anomalies": [{"anomaly", "key", "group", "step_index", "step", "name", "value"}],
//  "top_movers": [{"key", "group", "kind", "max_update_ratio", "step_index", "name"}],
//  "gates": {"ok", "conditions": ["nan", "update-ratio>X", "norm-growth>Y"],
//            "failures": [{"condition", "key", "step_index", "name", "value"}]},
//  "read": {"passes", "steps_per_pass", "bytes_read"}, "seconds"}
// series: {"numel", "l2", "rms", "abs_max", "nan", "inf", "zeros": [per step],
//          "update_ratio": ||W_t - W_{t-1}|| / ||W_{t-1}|| (null at the first step, where the step
//                          before lacks the tensor or has another shape, or ||W_{t-1}|| is 0),
//          "update_cosine": cos(W_t - W_{t-1}, W_{t-1} - W_{t-2}) (null without three steps or
//                          where an update is zero),
//          "norm_growth": ||W_t|| / ||W_{t-1}|| (null as update_ratio)}
// A group's figures are those of its tensors taken as one vector: l2 = sqrt(sum of squares),
// rms = l2 / sqrt(numel), abs_max the largest, counts summed; its update ratio and cosine are over
// the tensors that have one at that step. Groups: "layer" by the key up to its first numeric
// component ("layers.3"; --depth N: the first N components, as stats --depth), else the key less
// its last component; "kind": attention, mlp, experts, norms, embeddings, other (compare/trend.h).
// optimizer: over the exp_avg / exp_avg_sq tensors, grouped by their parameter's name:
// exp_avg_rms = sqrt(mean(m^2)), exp_avg_sq_rms = sqrt(mean(v^2)), effective_step =
// exp_avg_rms / sqrt(mean(v)): Adam's update per unit of learning rate, m / sqrt(v), as an
// aggregate (RMS of m over RMS of sqrt(v); eps and bias correction left out).
// Anomalies (each tensor's first step for each): "nan", "inf", "update_ratio" (above the threshold),
// "norm_growth" (above), "all_zero" (a weight that was not all zeros becomes so),
// "second_moment_collapse" (an exp_avg_sq whose RMS falls below second_moment_drop times its
// RMS at the step before).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compare/trend.h"

namespace dcpctl {

// --fail-on: "nan" (a NaN or an Inf in any floating tensor), "update-ratio>X", "norm-growth>Y"
// (model weights).
struct TrendGates {
  bool nonfinite = false;
  std::optional<double> update_ratio, norm_growth;
  std::string update_ratio_text, norm_growth_text;  // those two conditions as given
  std::vector<std::string> conditions;              // as given
};
// Parses one --fail-on condition into `g`; throws UsageError naming what is wrong.
void parse_fail_on(const std::string& text, TrendGates& g);

struct TrendReportOptions {
  std::string run;                                                 // the run folder, "" when the checkpoints were named
  std::vector<std::pair<std::string, std::string>> skipped_steps;  // name/path, why
  int depth = 0;
  double update_ratio = 1.0, norm_growth = 2.0, second_moment_drop = 1e-3;  // anomalies
  TrendGates gates;
  size_t top = 20;  // top movers listed
  // Each tensor's series ("tensors"): what --json prints; the table and the page use the groups
  // alone, and leave them out (23,040 experts over 100 steps make a document of gigabytes).
  bool tensors = true;
};

nlohmann::json trend_json(const RunTrend& r, const TrendReportOptions& o);

// The group a key belongs to (see above).
std::string layer_group(const std::string& key, int depth);

// The self-contained HTML page of a report (inline SVG and CSS, no script, nothing fetched).
std::string trend_html(const nlohmann::json& report);

}  // namespace dcpctl
