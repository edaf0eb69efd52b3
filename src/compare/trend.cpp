#include "compare/trend.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>

#include "compare/input.h"
#include "item/window.h"
#include "plan/memory.h"
#include "util/elements.h"
#include "util/memory_gate.h"

namespace dcpctl {

namespace {

constexpr size_t kTrendWiden = 1 << 13;           // elements widened to float64 at a time, per step
constexpr uint64_t kTrendMinWindow = 1ull << 20;  // the smallest window a pass plans for, per step
// A step's metadata parsed into the model takes about 4.4 times its .metadata's size (18 MB of
// .metadata, 70,209 tensors and their Adam state: 80 MB); 5 leaves room.
constexpr uint64_t kMetadataFactor = 5;

bool has_component(const std::string& key, const std::vector<std::string>& words) {
  for (const auto& w : words)
    if (key.find(w) != std::string::npos) return true;
  return false;
}

// The components of `key`, lowercased.
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const char* kind_name(TensorKind k) {
  switch (k) {
    case TensorKind::Attention: return "attention";
    case TensorKind::Mlp: return "mlp";
    case TensorKind::Experts: return "experts";
    case TensorKind::Norm: return "norms";
    case TensorKind::Embedding: return "embeddings";
    case TensorKind::Other: return "other";
  }
  return "other";
}

const char* role_name(TensorRole r) {
  switch (r) {
    case TensorRole::Weight: return "weight";
    case TensorRole::ExpAvg: return "exp_avg";
    case TensorRole::ExpAvgSq: return "exp_avg_sq";
    case TensorRole::OptimizerOther: return "optimizer_other";
  }
  return "weight";
}

// By the names torchtitan, Hugging Face, megatron-core and plain torch modules use; the first rule
// that matches wins (a norm inside an attention block is a norm, an expert's MLP an expert).
TensorKind classify_key(const std::string& key) {
  const std::string k = lower(key);
  if (has_component(k, {"expert"})) return TensorKind::Experts;
  if (has_component(k, {"norm", "ln_", ".ln", "bn."})) return TensorKind::Norm;
  if (has_component(k, {"embed", "wte", "wpe", "lm_head", "output_layer", "output.weight"}))
    return TensorKind::Embedding;
  if (has_component(k, {"attn", "attention", "q_proj", "k_proj", "v_proj", "o_proj", ".wq", ".wk", ".wv", ".wo", "qkv",
                        "linear_proj"}))
    return TensorKind::Attention;
  if (has_component(k, {"mlp", "feed_forward", "ffn", "fc1", "fc2", ".w1", ".w2", ".w3", "gate_proj", "up_proj",
                        "down_proj", "linear_fc", "router", "gate."}))
    return TensorKind::Mlp;
  return TensorKind::Other;
}

// torch.optim's Adam/AdamW names (exp_avg, exp_avg_sq) under the trainer's optimizer key:
// "optimizer.state.<param>.exp_avg" (torchtitan, megatron-core), "app.optim.state.<param>...",
// "optimizer_0.state.<param>..." (Lightning). The parameter is what follows "state.".
TensorRole classify_role(const std::string& key, std::string& param) {
  param = key;
  size_t opt = std::string::npos;
  for (size_t pos = 0; pos < key.size();) {
    size_t end = key.find('.', pos);
    if (end == std::string::npos) end = key.size();
    if (key.compare(pos, 5, "optim") == 0) {
      opt = pos;
      break;
    }
    pos = end + 1;
  }
  if (opt == std::string::npos) return TensorRole::Weight;
  size_t st = key.find(".state.", opt);
  std::string rest = st == std::string::npos ? key.substr(opt) : key.substr(st + 7);
  for (auto [suffix, role] :
       {std::pair{".exp_avg_sq", TensorRole::ExpAvgSq}, std::pair{".exp_avg", TensorRole::ExpAvg}})
    if (rest.size() > std::string(suffix).size() &&
        rest.compare(rest.size() - std::string(suffix).size(), std::string::npos, suffix) == 0) {
      param = rest.substr(0, rest.size() - std::string(suffix).size());
      return role;
    }
  param = rest;
  return TensorRole::OptimizerOther;
}

namespace {

// One pass: steps [b0, b1) open at once, each tensor's windows filled from every one of them.
// Figures are recorded for steps from `first_new` on (the two before it, when it is not b0, were
// recorded by the previous pass and are read again only for the differences).
class Pass {
 public:
  Pass(RunTrend& r, std::map<std::string, size_t>& index, std::string& map_from, const TrendOptions& o, size_t b0,
       size_t b1, size_t first_new)
      : r_(r),
        index_(index),
        map_from_(map_from),
        o_(o),
        b0_(b0),
        b1_(b1),
        new_(first_new),
        gate_(o.max_memory),
        threads_(std::max(1u, o.threads)) {}

  void run(size_t pass, size_t passes) {
    open();
    plan();
    std::atomic<uint64_t> done{0};
    run_tasks(tasks_.size(), threads_, gate_, [&](size_t i, WorkerBuffers& buf) {
      uint64_t bytes = walk(tasks_[i], buf);
      uint64_t now = done.fetch_add(bytes) + bytes;
      if (o_.progress) o_.progress(pass, passes, now, total_);
    });
    r_.bytes_read += done.load();
    for (size_t j = b0_; j < b1_; ++j) r_.step_reads[j]++;
  }

 private:
  // A run of consecutive steps of the pass holding a tensor with the same shape.
  struct Segment {
    size_t tensor;
    std::vector<size_t> steps;  // global step indices
    std::vector<const TensorMeta*> metas;
    uint64_t per_elem = 0;
    size_t max_item = 0;
  };
  struct Task {
    size_t segment;
    Window w;
  };

  void open() {
    for (size_t j = b0_; j < b1_; ++j) {
      inputs_.push_back(open_input(r_.steps[j].path));
      Input& in = *inputs_.back();
      if (!o_.map.empty()) map_step(in);
      items_.push_back(input_items(in, o_.selection));
      std::vector<const SelectedItem*> reads;
      for (const auto& it : items_.back())
        if (it.tensor && readable(in, it)) reads.push_back(&it);
      expect_reads(in, reads);
      for (const auto* it : reads) present_[tensor_index(it->key)].emplace_back(j, &input_tensor(in, *it));
    }
    for (auto& in : inputs_) readers_.push_back(std::make_unique<WindowReader>(*in->reader, &gate_));
  }

  // --map: every step into the names the first step's keys chose (a run whose last step was saved
  // in the map's other names, torchtitan's last_save_in_hf, is already there: left as it is, as
  // diff leaves its B).
  void map_step(Input& in) {
    if (map_from_.empty()) {
      map_input(in, o_.map, o_.selection, o_.map_config);
      map_from_ = in.map->from;
      return;
    }
    try {
      map_input(in, o_.map, o_.selection, o_.map_config, map_from_);
    } catch (const UsageError&) {
      // in the map's target names already
    }
  }

  // Floating tensors are followed; anything else is listed once as skipped.
  bool readable(const Input& in, const SelectedItem& it) {
    const TensorMeta& t = input_tensor(in, it);
    std::string why = !t.dtype                   ? "dtype " + t.dtype_name + " unknown to this version"
                      : !decodable(*t.dtype)     ? "packed float4 (not decoded)"
                      : !is_real_float(*t.dtype) ? "not a real floating dtype"
                                                 : "";
    if (why.empty()) return true;
    if (!index_.count(it.key)) {
      bool listed = std::any_of(r_.skipped.begin(), r_.skipped.end(), [&](const auto& s) { return s.key == it.key; });
      if (!listed) r_.skipped.push_back({it.key, t.dtype_name, why});
    }
    return false;
  }

  size_t tensor_index(const std::string& key) {
    auto [it, added] = index_.emplace(key, r_.tensors.size());
    if (added) {
      TensorTrend t;
      t.key = key;
      t.role = classify_role(key, t.param);
      t.kind = classify_key(t.param);
      t.steps.resize(r_.steps.size());
      r_.tensors.push_back(std::move(t));
    }
    return it->second;
  }

  void plan() {
    const uint64_t budget = window_budget(inputs_.front()->ck.md, o_.max_memory);
    for (auto& [ti, list] : present_) {
      for (size_t a = 0; a < list.size();) {
        Segment s{ti, {}, {}, 0, 0};
        size_t b = a;
        while (b < list.size() &&
               (b == a || (list[b].first == list[b - 1].first + 1 && list[b].second->shape == list[a].second->shape)))
          ++b;
        for (size_t k = a; k < b; ++k) add_step(s, list[k].first, list[k].second);
        plan_segment(std::move(s), budget);
        a = b;
      }
    }
  }

  void add_step(Segment& s, size_t j, const TensorMeta* t) {
    s.steps.push_back(j);
    s.metas.push_back(t);
    size_t item = itemsize(*t->dtype);
    s.per_elem += item;
    s.max_item = std::max(s.max_item, item);
    if (j >= new_) {
      TensorTrend& tt = r_.tensors[s.tensor];
      tt.steps[j].present = true;
      tt.steps[j].dtype = t->dtype_name;
      tt.shape = t->shape;
    }
  }

  void plan_segment(Segment s, uint64_t budget) {
    for (size_t k = 0; k < s.steps.size(); ++k) require_tiled(*inputs_[s.steps[k] - b0_], *s.metas[k]);
    uint64_t elems = window_elems(o_.window_bytes, s.max_item, budget, threads_, s.per_elem + s.max_item);
    std::vector<Window> windows = plan_windows(s.metas.front()->shape, elems);
    for (size_t k = 0; k < s.steps.size(); ++k) {
      readers_[s.steps[k] - b0_]->expect(*s.metas[k], windows);
      total_ += s.metas[k]->nbytes();
    }
    for (const Window& w : windows) tasks_.push_back({segments_.size(), w});
    segments_.push_back(std::move(s));
  }

  // The window from every step of the segment, then its figures merged into the tensor's.
  uint64_t walk(const Task& task, WorkerBuffers& buf) {
    const Segment& s = segments_[task.segment];
    const uint64_t n = task.w.numel;
    buf.prepare(n * s.per_elem, n * s.max_item, 3 * kTrendWiden * sizeof(double));
    std::vector<const uint8_t*> at;
    uint8_t* p = buf.a();
    for (size_t k = 0; k < s.steps.size(); ++k) {
      readers_[s.steps[k] - b0_]->fill(*s.metas[k], task.w, p, buf.b());
      at.push_back(p);
      p += n * itemsize(*s.metas[k]->dtype);
    }
    std::vector<TensorAtStep> part(s.steps.size());
    for (size_t k = 0; k < s.steps.size(); ++k)
      if (s.steps[k] >= new_) part[k].s.add_raw(*s.metas[k]->dtype, at[k], static_cast<size_t>(n), task.w.start);
    differences(s, at, n, part);
    merge(s, part);
    return n * s.per_elem;
  }

  // update_sq and dot of each step of the segment from its window and the two before it.
  void differences(const Segment& s, const std::vector<const uint8_t*>& at, uint64_t n,
                   std::vector<TensorAtStep>& part) const {
    if (s.steps.size() < 2 || s.steps.back() < new_) return;
    thread_local std::array<std::vector<double>, 3> x;
    for (auto& v : x) v.resize(kTrendWiden);
    for (uint64_t e = 0; e < n; e += kTrendWiden) {
      size_t m = static_cast<size_t>(std::min<uint64_t>(kTrendWiden, n - e));
      for (size_t k = 0; k < s.steps.size(); ++k) {
        DType d = *s.metas[k]->dtype;
        double* cur = x[k % 3].data();
        widen(d, at[k] + e * itemsize(d), m, cur);
        if (k == 0 || s.steps[k] < new_) continue;
        const double* prev = x[(k + 2) % 3].data();
        double sq = 0, dot = 0;
        if (k >= 2) {
          const double* prev2 = x[(k + 1) % 3].data();
          for (size_t i = 0; i < m; ++i) {
            double u = cur[i] - prev[i];
            sq += u * u;
            dot += u * (prev[i] - prev2[i]);
          }
          part[k].has_dot = true;
        } else {
          for (size_t i = 0; i < m; ++i) sq += (cur[i] - prev[i]) * (cur[i] - prev[i]);
        }
        part[k].update_sq += sq;
        part[k].dot += dot;
        part[k].has_update = true;
      }
    }
  }

  void merge(const Segment& s, const std::vector<TensorAtStep>& part) {
    std::lock_guard<std::mutex> lock(locks_[s.tensor % locks_.size()]);
    TensorTrend& tt = r_.tensors[s.tensor];
    for (size_t k = 0; k < s.steps.size(); ++k) {
      if (s.steps[k] < new_) continue;
      TensorAtStep& ts = tt.steps[s.steps[k]];
      ts.s.merge(part[k].s);
      ts.update_sq += part[k].update_sq;
      ts.dot += part[k].dot;
      ts.has_update = ts.has_update || part[k].has_update;
      ts.has_dot = ts.has_dot || part[k].has_dot;
    }
  }

  RunTrend& r_;
  std::map<std::string, size_t>& index_;
  std::string& map_from_;  // --map: the names the first step's keys chose
  const TrendOptions& o_;
  const size_t b0_, b1_, new_;
  MemoryGate gate_;  // before the readers, which give back to it what they hold when destroyed
  const unsigned threads_;
  std::vector<std::unique_ptr<Input>> inputs_;
  std::vector<std::vector<SelectedItem>> items_;
  std::vector<std::unique_ptr<WindowReader>> readers_;
  std::map<size_t, std::vector<std::pair<size_t, const TensorMeta*>>> present_;
  std::vector<Segment> segments_;
  std::vector<Task> tasks_;
  uint64_t total_ = 0;
  std::array<std::mutex, 64> locks_;
};

// As many steps as the budget holds a window of kTrendMinWindow for, per thread, and their
// metadata; at least 3, at most 64.
size_t steps_per_pass(const TrendOptions& o, const std::vector<TrendStep>& steps) {
  if (o.steps_per_pass) return std::min(steps.size(), std::max<size_t>(3, o.steps_per_pass));
  uint64_t per_step = kTrendMinWindow * 2 * std::max(1u, o.threads), meta = 0;
  for (const TrendStep& s : steps) meta = std::max(meta, s.metadata_bytes * kMetadataFactor);
  uint64_t fit = std::min<uint64_t>(64, o.max_memory / 2 / per_step);
  if (meta) fit = std::min(fit, o.max_memory / 2 / meta);
  return std::min(steps.size(), std::max<size_t>(3, static_cast<size_t>(fit)));
}

}  // namespace

RunTrend compute_trend(const std::vector<TrendStep>& steps, const TrendOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  RunTrend r;
  r.steps = steps;
  r.step_reads.assign(steps.size(), 0);
  r.steps_per_pass = steps_per_pass(o, steps);
  const size_t B = r.steps_per_pass;
  // Passes [0, B), [B - 2, 2B - 2), ...: each overlaps the one before by two steps.
  r.passes = steps.size() <= B ? 1 : 1 + (steps.size() - B + (B - 3)) / (B - 2);
  std::map<std::string, size_t> index;
  std::string map_from;
  size_t b0 = 0;
  for (size_t pass = 0; pass < r.passes; ++pass) {
    size_t b1 = std::min(steps.size(), b0 + B);
    Pass(r, index, map_from, o, b0, b1, pass == 0 ? 0 : b0 + 2).run(pass, r.passes);
    b0 = b1 - 2;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace dcpctl
