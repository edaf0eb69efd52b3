#include "compare/diff.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>

#include "compare/stats.h"
#include "item/window.h"
#include "plan/memory.h"
#include "util/elements.h"
#include "util/memory_gate.h"
#include "util/numeric.h"

namespace dcpctl {

using nlohmann::json;

namespace {

constexpr size_t kWiden = 1 << 15;  // elements compared in float64 at a time

bool has_prefix(const Metadata& md, const std::string& prefix) {
  for (const auto& t : md.tensors)
    if (t.fqn.size() > prefix.size() && t.fqn.compare(0, prefix.size(), prefix) == 0 && t.fqn[prefix.size()] == '.')
      return true;
  for (const auto& b : md.bytes)
    if (b.fqn.size() > prefix.size() && b.fqn.compare(0, prefix.size(), prefix) == 0 && b.fqn[prefix.size()] == '.')
      return true;
  return false;
}

int rank(const KeyDiff& k) {
  switch (k.status) {
    case DiffStatus::ValuesChanged: return 0;
    case DiffStatus::KindChanged:
    case DiffStatus::DtypeChanged:
    case DiffStatus::ShapeChanged: return 1;
    case DiffStatus::OnlyInA: return 2;
    case DiffStatus::OnlyInB: return 3;
    case DiffStatus::Identical:
    case DiffStatus::Tied: return 4;
  }
  return 5;
}

// The key a mapped tensor is tied to on the side it was mapped to (the map's "tied" rule), or "".
std::string tied_key(const MappedModel& m, const MappedTensor& t, const KeyMap& km) {
  if (t.rule >= km.rules.size()) return "";
  for (int s = 0; s < 2; ++s)
    if (km.sides[s] == m.to) return km.rules[t.rule].tied[s];
  return "";
}

}  // namespace

const char* status_name(DiffStatus s) {
  switch (s) {
    case DiffStatus::OnlyInA: return "only_in_a";
    case DiffStatus::OnlyInB: return "only_in_b";
    case DiffStatus::KindChanged: return "kind_changed";
    case DiffStatus::DtypeChanged: return "dtype_changed";
    case DiffStatus::ShapeChanged: return "shape_changed";
    case DiffStatus::ValuesChanged: return "values_changed";
    case DiffStatus::Identical: return "identical";
    case DiffStatus::Tied: return "tied";
  }
  return "?";
}

size_t DiffResult::count(DiffStatus s) const {
  return static_cast<size_t>(std::count_if(keys.begin(), keys.end(), [s](const KeyDiff& k) { return k.status == s; }));
}

namespace {

std::vector<DiffKind>& diff_kinds() {
  static std::vector<DiffKind> kinds;
  return kinds;
}

}  // namespace

void register_diff_kind(const DiffKind& kind) {
  for (const DiffKind& k : diff_kinds())
    if (k.claims == kind.claims) return;
  diff_kinds().push_back(kind);
}

namespace {

// diff_inputs's steps over two inputs of the same kind: the keys selected on each side, paired
// (pair_keys); each pair judged by its metadata or planned as windows (plan_pair); the windows
// compared on the workers (compare_window); the verdict (finish).
class Differ {
 public:
  Differ(Input& a, Input& b, const DiffOptions& o)
      : a_(a), b_(b), o_(o), audit_(!o.map.empty()), gate_(o.max_memory), threads_(std::max(1u, o.threads)) {}

  DiffResult run() && {
    const auto t0 = std::chrono::steady_clock::now();
    select();
    pair_keys();
    plan();
    compare();
    finish();
    r_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return std::move(r_);
  }

 private:
  struct Pair {
    size_t key;
    const SelectedItem* ia;
    const SelectedItem* ib;
  };
  struct Task {
    size_t key;
    Window w;
  };

  Selection side_selection(bool use_prefix) const {
    Selection s = o_.selection;
    if (!use_prefix) s.prefix.clear();
    return s;
  }
  std::vector<SelectedItem> select_side(const Input& in, bool use_prefix) const {
    try {
      return input_items(in, side_selection(use_prefix));
    } catch (const UsageError&) {
      return {};
    }
  }

  // The keys each side compares: under --select's prefix where that side has it, through --map.
  void select() {
    const std::string& prefix = o_.selection.prefix;
    const bool pa = !prefix.empty() && has_prefix(a_.ck.md, prefix),
               pb = !prefix.empty() && has_prefix(b_.ck.md, prefix);
    if (!prefix.empty() && !pa && !pb)
      throw UsageError(Where(),
                       "--select " + prefix + ": neither " + a_.path + " nor " + b_.path + " has keys under it");
    // B quantized and A not (an export of A): B's quantized weights decoded, each with the bound
    // its values are held to.
    bounds_ = dequantize_export(b_, a_);
    if (audit_) {
      keymap_ = load_key_map(o_.map);
      // A through the map; B too when its keys are on A's side (else B is already named as the map
      // names A's tensors).
      map_input(a_, o_.map, side_selection(pa), o_.map_config);
      try {
        // Only on A's side: B on the other is not mapped, and its keys are not the map's to refuse.
        map_input(b_, o_.map, side_selection(pb), o_.map_config, a_.map->from);
      } catch (const UsageError&) {
        // left as it was
      }
    }
    sa_ = select_side(a_, pa);
    sb_ = select_side(b_, pb);
    if (sa_.empty() && sb_.empty())
      throw UsageError(Where(), "nothing selected on either side; see the keys with `dcpctl inspect --flat`");
  }

  // Every key of A with its B (or the one its head is tied to), then B's left unmatched.
  void pair_keys() {
    std::map<std::string, size_t> in_b;
    for (size_t i = 0; i < sb_.size(); ++i) in_b.emplace(sb_[i].key, i);
    std::vector<bool> b_matched(sb_.size(), false);
    for (const auto& ia : sa_) {
      KeyDiff k;
      k.key = ia.key;
      auto it = in_b.find(ia.key);
      if (it == in_b.end() && audit_ && ia.tensor) {
        // A head the export leaves out because its config ties it: compared with what it is tied to.
        const MappedTensor* mt = mapped_tensor(a_, a_.ck.md.tensors[ia.index].fqn);
        std::string tied = mt ? tied_key(*a_.map, *mt, *keymap_) : "";
        if (!tied.empty() && in_b.count(tied) && export_ties_embeddings(b_)) {
          it = in_b.find(tied);
          k.b_key = tied;
        }
      }
      if (it == in_b.end()) {
        k.status = DiffStatus::OnlyInA;
        if (ia.tensor) k.a = &input_tensor(a_, ia);
      } else {
        b_matched[it->second] = true;
        pairs_.push_back({r_.keys.size(), &ia, &sb_[it->second]});
      }
      r_.keys.push_back(std::move(k));
    }
    for (size_t i = 0; i < sb_.size(); ++i) {
      if (b_matched[i]) continue;
      KeyDiff k;
      k.key = sb_[i].key;
      k.status = DiffStatus::OnlyInB;
      if (sb_[i].tensor) k.b = &input_tensor(b_, sb_[i]);
      r_.keys.push_back(std::move(k));
    }
  }

  void plan() {
    std::vector<const SelectedItem*> read_a, read_b;  // what is compared is read
    for (const Pair& p : pairs_) read_a.push_back(p.ia), read_b.push_back(p.ib);
    expect_reads(a_, read_a);
    expect_reads(b_, read_b);
    // Window buffers and decoded chunks kept for several windows (item/window.h) share the gate;
    // it is declared before the readers, which give back what they hold when destroyed.
    ra_.emplace(*a_.reader, &gate_);
    rb_.emplace(*b_.reader, &gate_);
    buffer_budget_ = std::min(window_budget(a_.ck.md, o_.max_memory), window_budget(b_.ck.md, o_.max_memory));
    rules_.resize(r_.keys.size());
    kbounds_.resize(r_.keys.size());
    for (const Pair& p : pairs_) plan_pair(p);
  }

  // A pair judged by what its metadata says (kind, value, shape, dtype), else its windows planned.
  void plan_pair(const Pair& p) {
    KeyDiff& k = r_.keys[p.key];
    if (p.ia->tensor != p.ib->tensor) {
      k.status = DiffStatus::KindChanged;
      if (p.ia->tensor) k.a = &input_tensor(a_, *p.ia);
      if (p.ib->tensor) k.b = &input_tensor(b_, *p.ib);
      return;
    }
    if (!p.ia->tensor) {
      k.value_a = value_repr(a_, a_.ck.md.bytes[p.ia->index]);
      k.value_b = value_repr(b_, b_.ck.md.bytes[p.ib->index]);
      k.status = *k.value_a == *k.value_b ? DiffStatus::Identical : DiffStatus::ValuesChanged;
      return;
    }
    const TensorMeta& ta = input_tensor(a_, *p.ia);
    const TensorMeta& tb = input_tensor(b_, *p.ib);
    k.a = &ta;
    k.b = &tb;
    if (ta.shape != tb.shape) {
      k.status = DiffStatus::ShapeChanged;
      return;
    }
    if (auto bd = bounds_.find(p.ib->key); bd != bounds_.end())
      k.bound = ExportBound::Kind::Codec, k.codec = bd->second.codec;
    else if (audit_ && ta.dtype != tb.dtype && ta.dtype && tb.dtype && castable(*ta.dtype) && castable(*tb.dtype))
      k.bound = ExportBound::Kind::Cast;
    if (ta.dtype_name != tb.dtype_name && !o_.ignore_dtype && k.bound == ExportBound::Kind::Exact) {
      k.status = DiffStatus::DtypeChanged;
      return;
    }
    for (const auto* t : {&ta, &tb})
      if (!t->dtype)
        throw UnsupportedError(Where(t == &ta ? a_.path : b_.path, std::nullopt, k.key),
                               "tensor of unknown dtype " + t->dtype_name);
    rules_[p.key] = rule_for(k, p);
    require_tiled(a_, ta);
    require_tiled(b_, tb);
    k.compared = true;
    size_t ia = itemsize(*ta.dtype), ib = itemsize(*tb.dtype);
    uint64_t per_elem = ia + ib + std::max(ia, ib) + (k.codec ? 1 : 0);  // a codec's scales: a float a group
    std::vector<Window> windows =
        plan_windows(ta.shape, window_elems(o_.window_bytes, std::max(ia, ib), buffer_budget_, threads_, per_elem));
    ra_->expect(ta, windows);
    rb_->expect(tb, windows);
    for (const Window& w : windows) tasks_.push_back({p.key, w});
    total_ += ta.nbytes() + tb.nbytes();
  }

  // How a compared pair's values are held: exactly, within --atol/--rtol, or within the bound of
  // the cast or codec that made B.
  DiffRule rule_for(const KeyDiff& k, const Pair& p) {
    const TensorMeta &ta = *k.a, &tb = *k.b;
    DiffRule rule;
    rule.exact = !o_.atol && !o_.rtol && *ta.dtype == *tb.dtype;
    if (k.bound != ExportBound::Kind::Exact) {
      if (k.bound == ExportBound::Kind::Codec)
        kbounds_[p.key] = bounds_.at(p.ib->key);
      else
        kbounds_[p.key].kind = ExportBound::Kind::Cast;
      rule.exact = false;
    }
    rule.atol = o_.atol.value_or(0);
    rule.rtol = o_.rtol.value_or(0);
    rule.equal_nan = o_.equal_nan;
    if (!rule.exact && (!decodable(*ta.dtype) || !decodable(*tb.dtype)))
      throw UnsupportedError(Where(a_.path, std::nullopt, k.key),
                             "values of dtype " + ta.dtype_name + " / " + tb.dtype_name +
                                 " are not decoded; compare them exactly (no --atol/--rtol)");
    return rule;
  }

  void compare() {
    partial_.resize(tasks_.size());
    if (o_.stop_early)
      for (const auto& k : r_.keys)
        if (!k.compared && k.status != DiffStatus::Identical) found_ = true;
    run_tasks(tasks_.size(), threads_, gate_, [&](size_t i, WorkerBuffers& buf) {
      if (o_.stop_early && found_.load(std::memory_order_relaxed)) return;
      compare_window(i, buf);
    });
  }

  void compare_window(size_t i, WorkerBuffers& buf) {
    const Task& task = tasks_[i];
    const KeyDiff& k = r_.keys[task.key];
    DType da = *k.a->dtype, db = *k.b->dtype;
    size_t ia = itemsize(da), ib = itemsize(db);
    uint64_t n = task.w.numel;
    const ExportBound& bound = kbounds_[task.key];
    // A codec's bound: the scales of the rows the window spans, read for it.
    int64_t r0 = 0, rows = 0;
    if (bound.kind == ExportBound::Kind::Codec) {
      const uint64_t cols = static_cast<uint64_t>(bound.codec->cols());
      r0 = static_cast<int64_t>(task.w.start / cols);
      rows = static_cast<int64_t>((task.w.start + n - 1) / cols + 1) - r0;
    }
    // a: both sides' window; b: the scratch (its pages are touched only for chunks that do not
    // span the trailing dimensions). The float64 widening buffers are small and per thread.
    buf.prepare(n * (ia + ib), n * std::max(ia, ib), 4 * kWiden * 8 + (rows ? bound.codec->scale_bytes(rows) : 0));
    uint8_t* ba = buf.a();
    uint8_t* bb = ba + n * ia;
    thread_local std::vector<double> wa(2 * kWiden), wb(2 * kWiden);
    thread_local std::vector<uint8_t> cast(kWiden * 16);
    ra_->fill(*k.a, task.w, ba, buf.b());
    rb_->fill(*k.b, task.w, bb, buf.b());
    std::vector<float> scales;
    if (rows) bound.codec->scales(*bound.saved, r0, rows, scales);
    const ScaleWindow sw{scales.data(), r0};
    for (uint64_t e = 0; e < n; e += kWiden) {
      size_t m = static_cast<size_t>(std::min<uint64_t>(kWiden, n - e));
      if (bound.kind != ExportBound::Kind::Exact)
        compare_bounded(da, ba + e * ia, db, bb + e * ib, m, task.w.start + e, bound, sw, cast.data(), wa.data(),
                        wb.data(), partial_[i]);
      else
        compare_elements(da, ba + e * ia, db, bb + e * ib, m, task.w.start + e, rules_[task.key], wa.data(), wb.data(),
                         partial_[i]);
    }
    if (partial_[i].differ) found_ = true;
    uint64_t now = done_.fetch_add(n * (ia + ib)) + n * (ia + ib);
    if (o_.progress) o_.progress(now, total_);
  }

  // Each key's status from its windows; the keys by how much they differ; the audit through --map.
  void finish() {
    for (size_t i = 0; i < tasks_.size(); ++i) r_.keys[tasks_[i].key].acc.merge(partial_[i]);
    for (auto& k : r_.keys) {
      if (k.compared)
        k.status = k.acc.differ       ? DiffStatus::ValuesChanged
                   : !k.b_key.empty() ? DiffStatus::Tied
                                      : DiffStatus::Identical;
      if (k.status == DiffStatus::Tied) continue;
      if (k.status != DiffStatus::Identical) r_.same = false;
    }
    if (found_) r_.same = false;
    std::stable_sort(r_.keys.begin(), r_.keys.end(), [](const KeyDiff& x, const KeyDiff& y) {
      int rx = rank(x), ry = rank(y);
      if (rx != ry) return rx < ry;
      if (rx != 0) return false;
      bool nx = x.acc.nan_mismatch > 0, ny = y.acc.nan_mismatch > 0;
      if (nx != ny) return nx;
      return x.acc.max_abs > y.acc.max_abs;
    });
    if (audit_) {
      r_.audit = audit_export(a_, b_, r_, *keymap_);
      r_.same =
          r_.audit->clean() && !found_;  // --quiet stops at the first difference: what is left unread is not clean
    }
    r_.bytes_read = done_.load();
  }

  Input& a_;
  Input& b_;
  const DiffOptions& o_;
  const bool audit_;
  std::map<std::string, ExportBound> bounds_;
  std::optional<KeyMap> keymap_;
  std::vector<SelectedItem> sa_, sb_;
  DiffResult r_;
  std::vector<Pair> pairs_;
  std::vector<Task> tasks_;
  MemoryGate gate_;  // before the readers, which give back to it what they hold when destroyed
  std::optional<WindowReader> ra_, rb_;
  uint64_t buffer_budget_ = 0;
  std::vector<DiffRule> rules_;
  std::vector<ExportBound> kbounds_;
  uint64_t total_ = 0;
  const unsigned threads_;
  std::vector<DiffAccumulator> partial_;
  std::atomic<uint64_t> done_{0};
  std::atomic<bool> found_{false};
};

}  // namespace

DiffResult diff_inputs(Input& a, Input& b, const DiffOptions& o) {
  // A module's file against the model it was written from (a GGUF: through the writer's plan).
  for (const DiffKind& kind : diff_kinds())
    if (kind.claims(a) != kind.claims(b)) return kind.claims(b) ? kind.diff(a, b, o, false) : kind.diff(b, a, o, true);
  if (!o.assets.empty())
    throw UsageError(Where(o.assets), diff_kinds().empty()
                                          ? "--assets names the config.json of a module's file's source (a .gguf's), "
                                            "and this build of dcpctl has no such module"
                                          : diff_kinds().front().assets_use);
  // Two files of a layout whose module decodes its opaque types (two GGUFs): each side's block
  // tensors compared as the float32 values they decode to (meta/readers.h's decode_opaque); a type
  // the module does not decode stays opaque, and is refused as before.
  decode_opaque(a);
  decode_opaque(b);
  return Differ(a, b, o).run();
}

json diff_json(const Input& a, const Input& b, const DiffResult& r, const DiffOptions& o) {
  json j;
  j["schema_version"] = 1;
  j["same"] = r.same;
  j["a"] = {{"path", a.path}, {"layout", layout_name(a.ck.layout)}};
  j["b"] = {{"path", b.path}, {"layout", layout_name(b.ck.layout)}};
  j["rule"] = {{"exact", !o.atol && !o.rtol},
               {"atol", o.atol.value_or(0)},
               {"rtol", o.rtol.value_or(0)},
               {"equal_nan", o.equal_nan},
               {"ignore_dtype", o.ignore_dtype}};
  json counts = json::object();
  for (DiffStatus s : {DiffStatus::OnlyInA, DiffStatus::OnlyInB, DiffStatus::KindChanged, DiffStatus::DtypeChanged,
                       DiffStatus::ShapeChanged, DiffStatus::ValuesChanged, DiffStatus::Identical, DiffStatus::Tied})
    counts[status_name(s)] = r.count(s);
  j["counts"] = counts;
  auto side = [](const TensorMeta* t, const std::optional<std::string>& v) -> json {
    if (t) return {{"dtype", t->dtype_name}, {"shape", t->shape}};
    if (v) return {{"value", *v}};
    return nullptr;
  };
  j["keys"] = json::array();
  for (const auto& k : r.keys) {
    json e = {
        {"key", k.key}, {"status", status_name(k.status)}, {"a", side(k.a, k.value_a)}, {"b", side(k.b, k.value_b)}};
    if (k.status == DiffStatus::OnlyInB) e["a"] = nullptr;
    if (k.status == DiffStatus::OnlyInA) e["b"] = nullptr;
    if (k.compared) {
      e["numel"] = k.a->numel();
      e["differing"] = k.acc.differ;
      e["nan_mismatch"] = k.acc.nan_mismatch;
      e["max_abs_diff"] = json_float(k.acc.max_abs);
      e["max_rel_diff"] = json_float(k.acc.max_rel);
      e["max_ulp_diff"] = k.acc.ulp_known ? json(k.acc.max_ulp) : json(nullptr);
      e["first_index"] = k.acc.first == UINT64_MAX ? json(nullptr) : json(unravel(k.a->shape, k.acc.first));
      if (r.audit || k.codec) {
        static const char* names[] = {"exact", "cast", "codec"};
        e["bound"] = names[static_cast<int>(k.bound)];
        e["inexact"] = k.acc.inexact;
        if (k.codec) {
          e["codec"] = k.codec->codec().name;
          e["bound_rule"] = k.codec->rule();
        }
      }
    }
    if (k.module_bound && k.compared) {
      e["bound"] = k.module_bound->kind;
      e["inexact"] = k.acc.inexact;
      e["codec"] = k.module_bound->codec;
      e["bound_rule"] = k.module_bound->rule;
    }
    if (!k.sources.empty() || k.module_bound) e["source_keys"] = k.sources;
    if (!k.b_key.empty()) e["b_key"] = k.b_key;
    j["keys"].push_back(e);
  }
  if (r.audit) j["audit"] = audit_json(*r.audit);
  j["bytes_read"] = r.bytes_read;
  j["seconds"] = r.seconds;
  return j;
}

}  // namespace dcpctl
