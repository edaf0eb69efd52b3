#include "report/trend_report.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>

#include "compare/stats.h"
#include "util/error.h"

namespace dcpctl {

using nlohmann::json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A tensor, or a group of tensors taken as one vector, at one step.
struct Sums {
  bool present = false;
  uint64_t n = 0, nan = 0, inf = 0, zeros = 0;
  double sum_sq = 0, abs_max = 0;
  // Over the tensors whose step before holds them: the update's squares, the step before's squares.
  bool has_update = false;
  double update_sq = 0, prev_sq = 0, cur_sq = 0;
  // Over the tensors with three steps: the dot product and both updates' squares.
  bool has_dot = false;
  double dot = 0, dot_cur_sq = 0, dot_prev_sq = 0;
};

double l2_of(const Sums& s) {
  return s.nan ? kNaN : std::sqrt(s.sum_sq);
}

std::vector<Sums> tensor_sums(const TensorTrend& t) {
  std::vector<Sums> out(t.steps.size());
  for (size_t j = 0; j < t.steps.size(); ++j) {
    const TensorAtStep& a = t.steps[j];
    Sums& s = out[j];
    if (!a.present) continue;
    s.present = true;
    s.n = a.s.n;
    s.nan = a.s.nan;
    s.inf = a.s.pos_inf + a.s.neg_inf;
    s.zeros = a.s.zeros;
    s.sum_sq = a.s.sum_sq;
    s.abs_max = a.s.abs_max_value();
    if (a.has_update && j > 0) {
      s.has_update = true;
      s.update_sq = a.update_sq;
      s.prev_sq = t.steps[j - 1].s.nan ? kNaN : t.steps[j - 1].s.sum_sq;
      s.cur_sq = s.nan ? kNaN : s.sum_sq;
    }
    if (a.has_dot && j > 0) {
      s.has_dot = true;
      s.dot = a.dot;
      s.dot_cur_sq = a.update_sq;
      s.dot_prev_sq = t.steps[j - 1].update_sq;
    }
  }
  return out;
}

void add(Sums& g, const Sums& s) {
  if (!s.present) return;
  g.present = true;
  g.n += s.n;
  g.nan += s.nan;
  g.inf += s.inf;
  g.zeros += s.zeros;
  g.sum_sq += s.sum_sq;
  g.abs_max = std::isnan(s.abs_max) || std::isnan(g.abs_max) ? kNaN : std::max(g.abs_max, s.abs_max);
  if (s.has_update) {
    g.has_update = true;
    g.update_sq += s.update_sq;
    g.prev_sq += s.prev_sq;
    g.cur_sq += s.cur_sq;
  }
  if (s.has_dot) {
    g.has_dot = true;
    g.dot += s.dot;
    g.dot_cur_sq += s.dot_cur_sq;
    g.dot_prev_sq += s.dot_prev_sq;
  }
}

std::optional<double> update_ratio(const Sums& s) {
  if (!s.has_update || s.prev_sq == 0) return std::nullopt;
  return std::sqrt(s.update_sq) / std::sqrt(s.prev_sq);
}
std::optional<double> norm_growth(const Sums& s) {
  if (!s.has_update || s.prev_sq == 0) return std::nullopt;
  return std::sqrt(s.cur_sq) / std::sqrt(s.prev_sq);
}
std::optional<double> update_cosine(const Sums& s) {
  if (!s.has_dot || s.dot_cur_sq == 0 || s.dot_prev_sq == 0) return std::nullopt;
  return s.dot / (std::sqrt(s.dot_cur_sq) * std::sqrt(s.dot_prev_sq));
}

json opt(const std::optional<double>& v) {
  return v ? json_float(*v) : json(nullptr);
}

json series_json(const std::vector<Sums>& steps) {
  json j = json::object();
  for (const char* f :
       {"numel", "l2", "rms", "abs_max", "nan", "inf", "zeros", "update_ratio", "update_cosine", "norm_growth"})
    j[f] = json::array();
  for (const Sums& s : steps) {
    if (!s.present) {
      for (auto& [k, v] : j.items()) v.push_back(nullptr);
      continue;
    }
    double l2 = l2_of(s);
    j["numel"].push_back(s.n);
    j["l2"].push_back(json_float(l2));
    j["rms"].push_back(s.n ? json_float(l2 / std::sqrt(static_cast<double>(s.n))) : json(nullptr));
    j["abs_max"].push_back(json_float(s.abs_max));
    j["nan"].push_back(s.nan);
    j["inf"].push_back(s.inf);
    j["zeros"].push_back(s.zeros);
    j["update_ratio"].push_back(opt(update_ratio(s)));
    j["update_cosine"].push_back(opt(update_cosine(s)));
    j["norm_growth"].push_back(opt(norm_growth(s)));
  }
  return j;
}

json dtypes_json(const TensorTrend& t) {
  json out = json::array();
  for (const TensorAtStep& a : t.steps) out.push_back(a.present ? json(a.dtype) : json(nullptr));
  return out;
}

json step_ref(const RunTrend& r, size_t j) {
  const TrendStep& s = r.steps[j];
  return {{"step_index", j}, {"step", s.step ? json(*s.step) : json(nullptr)}, {"name", s.name}};
}

// Groups of model weights (by layer, by kind), each a Sums per step, in the order first seen.
struct Grouped {
  std::vector<std::string> order;
  std::map<std::string, std::pair<size_t, std::vector<Sums>>> sums;
  void add_tensor(const std::string& name, const std::vector<Sums>& t) {
    auto [it, added] = sums.emplace(name, std::make_pair(size_t{0}, std::vector<Sums>(t.size())));
    if (added) order.push_back(name);
    it->second.first++;
    for (size_t j = 0; j < t.size(); ++j) add(it->second.second[j], t[j]);
  }
  json to_json(const char* count_name) const {
    json out = json::array();
    for (const auto& g : order) {
      const auto& [n, steps] = sums.at(g);
      out.push_back({{"name", g}, {count_name, n}, {"series", series_json(steps)}});
    }
    return out;
  }
};

// Adam's first and second moments summed per group of parameters, per step.
struct Moments {
  uint64_t nm = 0, nv = 0;
  double m_sq = 0, v_sq = 0, v_sum = 0;
  bool m = false, v = false;
};

struct OptimizerGroups {
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::set<std::string>, std::vector<Moments>>> groups;
  void add_tensor(const std::string& name, const TensorTrend& t) {
    auto [it, added] =
        groups.emplace(name, std::make_pair(std::set<std::string>{}, std::vector<Moments>(t.steps.size())));
    if (added) order.push_back(name);
    it->second.first.insert(t.param);
    for (size_t j = 0; j < t.steps.size(); ++j) {
      const TensorAtStep& a = t.steps[j];
      if (!a.present) continue;
      Moments& m = it->second.second[j];
      double sq = a.s.nan ? kNaN : a.s.sum_sq;
      if (t.role == TensorRole::ExpAvg) {
        m.m = true, m.nm += a.s.n, m.m_sq += sq;
      } else {
        m.v = true, m.nv += a.s.n, m.v_sq += sq;
        m.v_sum += a.s.n ? a.s.mean_value() * static_cast<double>(a.s.n) : 0.0;
      }
    }
  }
  json to_json() const {
    json out = json::array();
    for (const auto& g : order) {
      const auto& [params, steps] = groups.at(g);
      json m_rms = json::array(), v_rms = json::array(), eff = json::array();
      for (const Moments& m : steps) {
        double rm = m.m && m.nm ? std::sqrt(m.m_sq / static_cast<double>(m.nm)) : kNaN;
        double rv = m.v && m.nv ? std::sqrt(m.v_sq / static_cast<double>(m.nv)) : kNaN;
        double mean_v = m.v && m.nv ? m.v_sum / static_cast<double>(m.nv) : kNaN;
        m_rms.push_back(m.m && m.nm ? json_float(rm) : json(nullptr));
        v_rms.push_back(m.v && m.nv ? json_float(rv) : json(nullptr));
        eff.push_back(m.m && m.v && m.nm && m.nv && mean_v > 0 ? json_float(rm / std::sqrt(mean_v)) : json(nullptr));
      }
      out.push_back({{"name", g},
                     {"params", params.size()},
                     {"exp_avg_rms", m_rms},
                     {"exp_avg_sq_rms", v_rms},
                     {"effective_step", eff}});
    }
    return out;
  }
};

}  // namespace

std::string layer_group(const std::string& key, int depth) {
  if (depth > 0) return group_prefix(key, depth);
  size_t pos = 0;
  while (pos < key.size()) {
    size_t end = key.find('.', pos);
    if (end == std::string::npos) break;
    bool digits = end > pos && std::all_of(key.begin() + static_cast<long>(pos), key.begin() + static_cast<long>(end),
                                           [](char c) { return c >= '0' && c <= '9'; });
    if (digits) return key.substr(0, end);
    pos = end + 1;
  }
  size_t last = key.rfind('.');
  return last == std::string::npos ? key : key.substr(0, last);
}

void parse_fail_on(const std::string& text, TrendGates& g) {
  auto value = [&](const std::string& name) -> std::optional<double> {
    if (text.rfind(name + ">", 0) != 0) return std::nullopt;
    std::string v = text.substr(name.size() + 1);
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !std::isfinite(x) || x < 0)
      throw UsageError(Where(), "--fail-on " + text + ": " + name + "> needs a number of 0 or more");
    return x;
  };
  if (text == "nan")
    g.nonfinite = true;
  else if (auto x = value("update-ratio"))
    g.update_ratio = x, g.update_ratio_text = text;
  else if (auto y = value("norm-growth"))
    g.norm_growth = y, g.norm_growth_text = text;
  else
    throw UsageError(Where(), "--fail-on " + text + ": not a condition (nan, update-ratio>X, norm-growth>Y)");
  g.conditions.push_back(text);
}

namespace {

struct TrendFindings {
  json anomalies = json::array(), failures = json::array(), movers = json::array();
};

json finding(const RunTrend& r, const TensorTrend& t, const std::string& group, size_t j, const char* what,
             double value) {
  json e = {{"key", t.key}, {"group", group}, {"value", json_float(value)}};
  e.update(step_ref(r, j));
  e[what[0] == 'a' ? "anomaly" : "condition"] = what + 2;  // "a:" anomaly, "g:" gate
  return e;
}

// Each tensor's first step of each anomaly and of each gate it fails.
void find(const RunTrend& r, const TensorTrend& t, const std::vector<Sums>& s, const std::string& group,
          const TrendReportOptions& o, TrendFindings& f) {
  std::set<std::string> seen;
  auto note = [&](const char* what, size_t j, double v) {
    if (seen.insert(what).second)
      (what[0] == 'a' ? f.anomalies : f.failures).push_back(finding(r, t, group, j, what, v));
  };
  const bool weight = t.role == TensorRole::Weight;
  for (size_t j = 0; j < s.size(); ++j) {
    if (!s[j].present) continue;
    if (s[j].nan) note("a:nan", j, static_cast<double>(s[j].nan));
    if (s[j].inf) note("a:inf", j, static_cast<double>(s[j].inf));
    if (o.gates.nonfinite && (s[j].nan || s[j].inf)) note("g:nan", j, static_cast<double>(s[j].nan + s[j].inf));
    auto ratio = update_ratio(s[j]), growth = norm_growth(s[j]);
    if (weight && ratio && *ratio > o.update_ratio) note("a:update_ratio", j, *ratio);
    if (weight && growth && *growth > o.norm_growth) note("a:norm_growth", j, *growth);
    if (weight && ratio && o.gates.update_ratio && !(*ratio <= *o.gates.update_ratio))
      note(("g:" + o.gates.update_ratio_text).c_str(), j, *ratio);
    if (weight && growth && o.gates.norm_growth && !(*growth <= *o.gates.norm_growth))
      note(("g:" + o.gates.norm_growth_text).c_str(), j, *growth);
    if (weight && j > 0 && s[j - 1].present && s[j].n && s[j].zeros == s[j].n && s[j - 1].zeros < s[j - 1].n)
      note("a:all_zero", j, 0);
    if (t.role == TensorRole::ExpAvgSq && j > 0 && s[j - 1].present && s[j - 1].sum_sq > 0 &&
        s[j].sum_sq < o.second_moment_drop * o.second_moment_drop * s[j - 1].sum_sq)
      note("a:second_moment_collapse", j, std::sqrt(s[j].sum_sq / s[j - 1].sum_sq));
  }
}

}  // namespace
namespace {

// The weights that moved most: each one's largest update ratio, largest first.
json top_movers(const RunTrend& r, const std::vector<std::vector<Sums>>& sums, int depth, size_t top) {
  struct Mover {
    size_t t, j;
    double ratio;
  };
  std::vector<Mover> movers;
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    if (r.tensors[i].role != TensorRole::Weight) continue;
    std::optional<Mover> best;
    for (size_t j = 0; j < sums[i].size(); ++j) {
      auto v = update_ratio(sums[i][j]);
      if (v && std::isfinite(*v) && (!best || *v > best->ratio)) best = Mover{i, j, *v};
    }
    if (best) movers.push_back(*best);
  }
  std::stable_sort(movers.begin(), movers.end(), [](const Mover& a, const Mover& b) { return a.ratio > b.ratio; });
  json out = json::array();
  for (size_t k = 0; k < movers.size() && k < top; ++k) {
    const TensorTrend& t = r.tensors[movers[k].t];
    json e = {{"key", t.key},
              {"group", layer_group(t.key, depth)},
              {"kind", kind_name(t.kind)},
              {"max_update_ratio", json_float(movers[k].ratio)}};
    e.update(step_ref(r, movers[k].j));
    out.push_back(e);
  }
  return out;
}

json steps_json(const RunTrend& r) {
  json out = json::array();
  for (size_t j = 0; j < r.steps.size(); ++j) {
    const TrendStep& s = r.steps[j];
    out.push_back({{"index", j},
                   {"name", s.name},
                   {"path", s.path},
                   {"step", s.step ? json(*s.step) : json(nullptr)},
                   {"reads", r.step_reads[j]}});
  }
  return out;
}

void sort_findings(json& list) {
  std::stable_sort(list.begin(), list.end(), [](const json& a, const json& b) {
    return a["step_index"].get<size_t>() < b["step_index"].get<size_t>();
  });
}

}  // namespace

json trend_json(const RunTrend& r, const TrendReportOptions& o) {
  json j;
  j["schema_version"] = 1;
  j["run"] = o.run.empty() ? json(nullptr) : json(o.run);
  j["steps"] = steps_json(r);
  j["skipped_steps"] = json::array();
  for (const auto& [path, why] : o.skipped_steps) j["skipped_steps"].push_back({{"path", path}, {"why", why}});
  j["thresholds"] = {
      {"update_ratio", o.update_ratio}, {"norm_growth", o.norm_growth}, {"second_moment_drop", o.second_moment_drop}};
  Grouped by_layer, by_kind;
  OptimizerGroups opt_layer, opt_kind;
  TrendFindings f;
  std::vector<std::vector<Sums>> sums;
  j["tensors"] = json::array();
  for (const TensorTrend& t : r.tensors) {
    sums.push_back(tensor_sums(t));
    std::string group = layer_group(t.param, o.depth);
    if (o.tensors)
      j["tensors"].push_back({{"key", t.key},
                              {"param", t.param},
                              {"kind", kind_name(t.kind)},
                              {"role", role_name(t.role)},
                              {"group", group},
                              {"shape", t.shape},
                              {"dtype", dtypes_json(t)},
                              {"series", series_json(sums.back())}});
    if (t.role == TensorRole::Weight) {
      by_layer.add_tensor(group, sums.back());
      by_kind.add_tensor(kind_name(t.kind), sums.back());
    } else if (t.role != TensorRole::OptimizerOther) {
      opt_layer.add_tensor(group, t);
      opt_kind.add_tensor(kind_name(t.kind), t);
    }
    find(r, t, sums.back(), group, o, f);
  }
  j["skipped"] = json::array();
  for (const auto& s : r.skipped) j["skipped"].push_back({{"key", s.key}, {"dtype", s.dtype}, {"reason", s.reason}});
  j["groups"] = {{"layer", by_layer.to_json("tensors")}, {"kind", by_kind.to_json("tensors")}};
  j["optimizer"] = {{"layer", opt_layer.to_json()}, {"kind", opt_kind.to_json()}};
  sort_findings(f.anomalies);
  sort_findings(f.failures);
  j["anomalies"] = f.anomalies;
  j["top_movers"] = top_movers(r, sums, o.depth, o.top);
  j["gates"] = {{"ok", f.failures.empty()}, {"conditions", o.gates.conditions}, {"failures", f.failures}};
  j["read"] = {{"passes", r.passes}, {"steps_per_pass", r.steps_per_pass}, {"bytes_read", r.bytes_read}};
  j["seconds"] = r.seconds;
  return j;
}

}  // namespace dcpctl
