#include "compare/stats.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>

#include "item/window.h"
#include "plan/memory.h"
#include "util/elements.h"
#include "util/memory_gate.h"

namespace dcpctl {

using nlohmann::json;

namespace {

constexpr size_t kDecodeBlock = 4096 * 8;  // stats_kernel.cpp's float64 block

std::string skip_reason(const TensorMeta& t) {
  if (!t.dtype) return "dtype " + t.dtype_name + " unknown to this version";
  if (!decodable(*t.dtype)) return "packed float4 (not decoded)";
  return "";
}

// Tensors the gates look at: those that can hold NaN, Inf (real floating and complex).
bool gated(DType d) {
  return is_real_float(d) || info(d).complex;
}

}  // namespace

std::vector<int64_t> value_shape(const TensorMeta& t) {
  std::vector<int64_t> s = t.shape;
  if (t.dtype && info(*t.dtype).complex) s.push_back(2);
  return s;
}

std::string group_prefix(const std::string& key, int depth) {
  size_t pos = 0;
  for (int i = 0; i < depth; ++i) {
    pos = key.find('.', pos);
    if (pos == std::string::npos) return key;
    if (i + 1 < depth) ++pos;
  }
  return key.substr(0, pos);
}

json json_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

StatsResult compute_stats(Input& in, const StatsOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  StatsResult r;
  decode_opaque(in);  // a GGUF's block tensors: their decoded values
  const Metadata& md = in.ck.md;
  if (!o.map.empty()) map_input(in, o.map, o.selection, o.map_config);
  std::vector<SelectedItem> items = input_items(in, o.selection);
  std::vector<const SelectedItem*> reads;
  for (const SelectedItem& it : items) reads.push_back(&it);
  expect_reads(in, reads);
  struct Task {
    size_t report;
    Window w;
  };
  std::vector<Task> tasks;
  // Window buffers and decoded chunks kept for several windows (item/window.h) share it;
  // declared before the reader, which gives back what it holds when destroyed.
  MemoryGate gate(o.max_memory);
  const uint64_t buffer_budget = window_budget(md, o.max_memory);
  WindowReader reader(*in.reader, &gate);
  uint64_t total_bytes = 0;
  unsigned threads = std::max(1u, o.threads);
  for (const auto& it : items) {
    if (!it.tensor) {
      ++r.values;
      continue;
    }
    const TensorMeta& t = input_tensor(in, it);
    TensorStatsReport rep;
    rep.key = it.key;
    rep.t = &t;
    rep.skipped = skip_reason(t);
    size_t ri = r.tensors.size();
    r.tensors.push_back(std::move(rep));
    if (!r.tensors.back().skipped.empty()) continue;
    require_tiled(in, t);
    size_t item = itemsize(*t.dtype);
    uint64_t per_elem = 2 * item;
    std::vector<Window> windows =
        plan_windows(t.shape, window_elems(o.window_bytes, item, buffer_budget, threads, per_elem));
    reader.expect(t, windows);
    for (const Window& w : windows) tasks.push_back({ri, w});
    total_bytes += t.nbytes();
  }
  std::vector<StatsAccumulator> partial(tasks.size());
  std::atomic<uint64_t> done{0};
  run_tasks(tasks.size(), threads, gate, [&](size_t i, WorkerBuffers& buf) {
    const Task& task = tasks[i];
    const TensorMeta& t = *r.tensors[task.report].t;
    DType d = *t.dtype;
    size_t item = itemsize(d);
    uint64_t bytes = task.w.numel * item;
    // The window, the scratch (touched only when needed), the 32 KiB decode block on the stack.
    buf.prepare(bytes, bytes, kDecodeBlock);
    reader.fill(t, task.w, buf.a(), buf.b());
    partial[i].add_raw(d, buf.a(), static_cast<size_t>(task.w.numel), task.w.start);
    uint64_t now = done.fetch_add(bytes) + bytes;
    if (o.progress) o.progress(now, total_bytes);
  });
  for (size_t i = 0; i < tasks.size(); ++i) r.tensors[tasks[i].report].s.merge(partial[i]);
  for (const auto& rep : r.tensors) {
    if (!rep.skipped.empty()) continue;
    // Zero-size tensors have no windows; their count is still their numel (0).
    bool floating = gated(*rep.t->dtype);
    if (o.check_finite && floating && rep.s.nonfinite()) r.finite_ok = false;
    if (o.check_zero && floating && rep.s.n > 0 && rep.s.zeros == rep.s.n) r.zero_ok = false;
  }
  r.bytes_read = done.load();
  r.chunk_decodes = reader.decodes();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

static json stats_fields(const StatsAccumulator& s) {
  json j;
  j["numel"] = s.n;
  bool empty = s.n == 0;
  j["min"] = empty ? json(nullptr) : json_float(s.min_value());
  j["max"] = empty ? json(nullptr) : json_float(s.max_value());
  j["mean"] = empty ? json(nullptr) : json_float(s.mean_value());
  j["std"] = s.n < 2 ? json(nullptr) : json_float(s.std_value());
  j["abs_max"] = json_float(s.abs_max_value());
  j["l2_norm"] = json_float(s.l2_norm());
  j["nan"] = s.nan;
  j["pos_inf"] = s.pos_inf;
  j["neg_inf"] = s.neg_inf;
  j["zeros"] = s.zeros;
  return j;
}

json stats_json(const Input& in, const StatsResult& r, const StatsOptions& o) {
  json j;
  j["schema_version"] = 1;
  j["checkpoint"] = in.path;
  j["layout"] = layout_name(in.ck.layout);
  j["tensors"] = json::array();
  j["skipped"] = json::array();
  std::vector<std::string> group_order;
  std::map<std::string, std::pair<uint64_t, StatsAccumulator>> groups;
  json finite_failures = json::array(), zero_failures = json::array();
  for (const auto& rep : r.tensors) {
    const TensorMeta& t = *rep.t;
    if (!rep.skipped.empty()) {
      j["skipped"].push_back({{"key", rep.key}, {"dtype", t.dtype_name}, {"reason", rep.skipped}});
      continue;
    }
    json e = {{"key", rep.key}, {"dtype", t.dtype_name}, {"shape", t.shape}};
    // A complex tensor is summarised as torch.view_as_real(t): shape [..., 2], every count and
    // index over those real values.
    std::vector<int64_t> vshape = value_shape(t);
    if (info(*t.dtype).complex) e["view_as_real"] = vshape;
    e.update(stats_fields(rep.s));
    e["first_nonfinite_index"] =
        rep.s.first_nonfinite == UINT64_MAX ? json(nullptr) : json(unravel(vshape, rep.s.first_nonfinite));
    j["tensors"].push_back(e);
    if (o.depth > 0) {
      std::string g = group_prefix(rep.key, o.depth);
      auto [it, added] = groups.emplace(g, std::make_pair(uint64_t{0}, StatsAccumulator{}));
      if (added) group_order.push_back(g);
      it->second.first++;
      it->second.second.merge(rep.s);
    }
    bool floating = gated(*t.dtype);
    if (o.check_finite && floating && rep.s.nonfinite())
      finite_failures.push_back({{"key", rep.key},
                                 {"nan", rep.s.nan},
                                 {"pos_inf", rep.s.pos_inf},
                                 {"neg_inf", rep.s.neg_inf},
                                 {"first_index", unravel(vshape, rep.s.first_nonfinite)}});
    if (o.check_zero && floating && rep.s.n > 0 && rep.s.zeros == rep.s.n) zero_failures.push_back({{"key", rep.key}});
  }
  if (o.depth > 0) {
    j["groups"] = json::array();
    for (const auto& g : group_order) {
      json e = {{"prefix", g}, {"tensors", groups[g].first}};
      e.update(stats_fields(groups[g].second));
      j["groups"].push_back(e);
    }
  }
  j["values"] = r.values;
  j["checks"] = json::object();
  if (o.check_finite) j["checks"]["finite"] = {{"ok", finite_failures.empty()}, {"failures", finite_failures}};
  if (o.check_zero) j["checks"]["zero"] = {{"ok", zero_failures.empty()}, {"failures", zero_failures}};
  j["bytes_read"] = r.bytes_read;
  j["chunk_decodes"] = r.chunk_decodes;
  j["seconds"] = r.seconds;
  return j;
}

}  // namespace dcpctl
