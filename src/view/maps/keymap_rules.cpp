// apply_key_map (view/maps/keymap.h): each input key is taken by the first rule one of whose patterns
// on the input's side matches it, and that rule's kind makes the outputs. One function per kind:
//
//   drop      the other side lacks the key (a one-sided rule): reported, not written;
//   rename    one key to one key, dim-0 rows optionally RoPE-reordered;
//   split     one tensor into the listed ones along `dim` (a list on the output's side);
//   join      the listed tensors into one along `dim` (a list on the input's side);
//   unstack   a stack of `count` experts into one key each (`experts`, input side stacked);
//   stack     `count` per-expert keys into one stack (`experts`, output side stacked).
//
// `transpose` rides on rename, split, join, unstack and stack: each part lands with its last two
// dims swapped (MapPart::transpose), so a grouped expert weight [E, out, in] maps to [E, in, out]
// and the fused [E, in, 2F] is cat(w1ᵀ, w3ᵀ, -1); the piece copier does the swap. `interleave`
// rides on rename, unstack and stack: one part per slice of the interleaved dimension.
//
// A map's rule has one shape in the file (view/maps/keymap.h's RuleShape); the direction of the
// mapping decides which kind carries it out (a list is split one way, joined the other). Every
// kind yields geometry only (parts: boxes of saved tensors and where they land); no byte moves.
#include <algorithm>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "meta/pieces.h"
#include "util/dtype.h"
#include "util/error.h"
#include "view/maps/keymap.h"
#include "view/maps/keymap_terms.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// The RoPE row order of `heads` groups of `head_dim` rows: output row i comes from input row
// perm[i]. interleaved -> halves (torchtitan's _permute): out (h, a, b) <- in (h, b, a), a in
// {0, 1}; halves -> interleaved (_reverse_permute): out (h, b, a) <- in (h, a, b).
std::shared_ptr<const std::vector<int64_t>> rope_rows(int64_t heads, int64_t head_dim, bool to_halves) {
  auto v = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(heads * head_dim));
  int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < head_dim; ++j) {
      int64_t src = to_halves ? h * head_dim + (j % half) * 2 + j / half : h * head_dim + (j % 2) * half + j / 2;
      (*v)[static_cast<size_t>(h * head_dim + j)] = src;
    }
  return v;
}

class MapBuilder {
 public:
  MapBuilder(const KeyMap& map, const Metadata& md, const std::vector<SelectedItem>& items, const MapConfig& config,
             const std::string& from)
      : map_(map), md_(md), items_(items), config_(config), params_(map, config), want_from_(from) {}

  MappedModel build() {
    out_.name = map_.name;
    for (const auto& it : items_)
      if (it.tensor) {
        by_key_.emplace(it.key, it.index);
        shapes_.emplace_back(it.key, tensor(it.index).shape);
      }
    params_.set_shapes(&shapes_);
    choose_direction();
    for (const auto& it : items_) {
      if (!it.tensor) {
        out_.left_out.push_back(it.key);
        continue;
      }
      if (used_.count(it.key)) continue;
      if (!take(it)) {
        out_.left_out.push_back(it.key);
        unmatched_.insert(it.key);
      }
    }
    copy_tied();
    make_zeros();
    return finish();
  }

 private:
  // A rule's patterns matched an input key: which rule and pattern, and the placeholders' values.
  struct Match {
    size_t rule;
    size_t pattern;  // which of the input side's patterns (a list side has several)
    std::map<std::string, std::string> vals;
    const SelectedItem& item;
  };
  using Kind = void (MapBuilder::*)(const Match&);

  // The side the input is on: the one whose patterns match more of its tensor keys.
  void choose_direction() {
    for (int s = 0; s < 2; ++s)
      for (const auto& r : map_.rules) {
        pats_[s].emplace_back();
        for (const auto& p : r.side[s]) pats_[s].back().push_back(Pattern::parse(p.pattern, map_.source));
      }
    size_t hits[2] = {0, 0};
    std::vector<std::string> unmatched[2];  // per side: the tensor keys none of its patterns match
    for (const auto& it : items_) {
      if (!it.tensor) continue;
      for (int s = 0; s < 2; ++s) {
        bool any = false;
        for (const auto& rp : pats_[s])
          for (const auto& p : rp) {
            std::map<std::string, std::string> v;
            try {
              any = any || p.match(it.key, v, &params_);
            } catch (const UsageError&) {
              any = true;  // the key has this side's shape; the parameter an offset needs is asked for again when the
                           // key is mapped
            }
          }
        hits[s] += any;
        if (!any) unmatched[s].push_back(it.key);
      }
    }
    if (hits[0] == 0 && hits[1] == 0)
      throw UsageError(Where(md_.source), "map " + map_.name + " matches none of the selected keys (neither its " +
                                              map_.sides[0] + " nor its " + map_.sides[1] +
                                              " names); check --select, or the map");
    if (hits[0] == hits[1])
      throw UsageError(Where(md_.source), "map " + map_.name + ": as many keys match its " + map_.sides[0] +
                                              " names as its " + map_.sides[1] + " names (" + std::to_string(hits[0]) +
                                              "); the direction is ambiguous");
    from_ = hits[0] > hits[1] ? 0 : 1;
    to_ = 1 - from_;
    out_.from = map_.sides[from_];
    out_.to = map_.sides[to_];
    if (!want_from_.empty() && out_.from != want_from_)
      throw UsageError(Where(md_.source),
                       "map " + map_.name + ": the keys are on its " + out_.from + " side, not " + want_from_);
    for (const auto& r : map_.rules) kinds_.push_back(kind_of(r));
    // Refused here, before any parameter is asked for: a model weight no rule covers is lost
    // whatever config.json says.
    std::vector<std::string> uncovered;
    for (const auto& k : unmatched[from_])
      if (is_model(k)) uncovered.push_back(k);
    refuse_losses(uncovered, {});
    refuse_foreign(unmatched, hits[from_]);
  }

  // The function that carries out rule `r` in this direction.
  Kind kind_of(const KeyMap::Rule& r) const {
    if (r.side[to_].empty()) return &MapBuilder::drop;
    switch (r.shape) {
      case RuleShape::Experts: return stacked_is_from(r) ? &MapBuilder::unstack : &MapBuilder::stack;
      case RuleShape::Concat: return r.list[to_] ? &MapBuilder::split : &MapBuilder::join;
      case RuleShape::OneToOne: break;
    }
    return &MapBuilder::rename;
  }

  // The first rule with a pattern on the input's side matching `it` takes it.
  bool take(const SelectedItem& it) {
    for (size_t ri = 0; ri < map_.rules.size(); ++ri)
      for (size_t pi = 0; pi < pats_[from_][ri].size(); ++pi) {
        std::map<std::string, std::string> vals;
        if (!pats_[from_][ri][pi].match(it.key, vals, &params_)) continue;
        (this->*kinds_[ri])(Match{ri, pi, std::move(vals), it});
        return true;
      }
    return false;
  }

  // ---- the kinds ----

  void drop(const Match& m) {
    out_.dropped.push_back(m.item.key);
    out_.reasons.push_back(map_.rules[m.rule].reason);
    if (map_.rules[m.rule].drop_when_zeros) out_.zero_checked.push_back(m.item.key);
    used_.insert(m.item.key);
  }

  void rename(const Match& m) {
    const KeyMap::Rule& rule = map_.rules[m.rule];
    const TensorMeta& t = tensor(m.item.index);
    MappedTensor mt =
        new_tensor(to_pat(m.rule, 0).fill(m.vals, &params_), transposed(t.shape, rule, m.item.key), t, m.rule);
    MapPart part = whole_part(m.item.index);
    if (!rule.rope.is_null()) {
      if (t.ndim() < 1) shape_error(m.item.key, "a 0-d tensor has no rows to reorder");
      part.rows = rope_of(rule.rope, t.shape[0], m.item.key, m.rule);
    }
    part.transpose = rule.transpose;
    mt.transforms = {part.rows ? "rope" : rule.transpose ? "transpose" : "rename"};
    if (rule.interleave >= 0) {
      interleaved_parts(part, m, static_cast<int64_t>(t.ndim()), 0, -1, mt);
      mt.transforms.push_back("interleave");
    } else {
      mt.parts.push_back(part);
    }
    mt.inputs.push_back(m.item.key);
    out_.tensors.push_back(std::move(mt));
    used_.insert(m.item.key);
  }

  // The sizes of a list rule's parts along its dimension, and with `groups` where each part's
  // share of one repetition starts: part k of group g is at g * stride + at[k], size[k] / groups.
  struct Layout {
    std::vector<int64_t> size, at;
    int64_t groups = 1, stride = 0, total = 0;
  };
  Layout layout(const Match& m, const std::vector<KeyMap::Part>& list, const std::string& key) {
    const KeyMap::Rule& rule = map_.rules[m.rule];
    Layout l;
    if (!rule.groups.empty())
      l.groups = params_.eval(rule.groups, "the groups of " + key + " (" + rule_name(m.rule) + ")");
    if (l.groups <= 0) shape_error(key, "the concatenation's groups are " + std::to_string(l.groups));
    for (const auto& p : list) {
      int64_t n = params_.eval(p.size, "the part " + p.pattern + " of " + key + " (" + rule_name(m.rule) + ")");
      if (n < 0 || n % l.groups)
        shape_error(key, "the part " + p.pattern + " is " + std::to_string(n) + " long, not a multiple of the " +
                             std::to_string(l.groups) + " groups");
      l.at.push_back(l.stride);
      l.size.push_back(n);
      l.stride += n / l.groups;
      l.total += n;
    }
    return l;
  }

  // One tensor into the listed ones along `dim` (`groups` times over); with a stack, each of its
  // entries so (the listed keys then name the entry).
  void split(const Match& m) {
    const KeyMap::Rule& rule = map_.rules[m.rule];
    const TensorMeta& t = tensor(m.item.index);
    std::optional<Experts> e;
    if (!rule.experts.is_null()) e = experts(m);
    if (e && !stack_fits(t, *e))
      shape_error(m.item.key, "shape " + whole_box(t).text() + " is not the stacked entries " + stack_text(*e));
    const int64_t dim = rule.dim, entry_rank = static_cast<int64_t>(t.ndim()) - (e ? e->units() : 0);
    if (dim < 0 || dim >= entry_rank)
      shape_error(m.item.key, "split dimension " + std::to_string(dim) + " out of range");
    const int64_t sdim = e && e->dim <= dim ? dim + e->units() : dim;  // `dim` in the saved tensor
    Layout l = layout(m, rule.side[to_], m.item.key);
    if (l.total != t.shape[static_cast<size_t>(sdim)])
      shape_error(m.item.key, "its parts' sizes sum to " + std::to_string(l.total) + ", dimension " +
                                  std::to_string(dim) + " is " + std::to_string(t.shape[static_cast<size_t>(sdim)]));
    for (int64_t x = 0; x < (e ? e->count : 1); ++x) {
      auto vals = m.vals;
      if (e) e->set(vals, x);
      for (size_t k = 0; k < rule.side[to_].size(); ++k) {
        std::vector<int64_t> shape = t.shape;
        if (e) shape.erase(shape.begin() + e->dim, shape.begin() + e->dim + e->units());
        shape[static_cast<size_t>(dim)] = l.size[k];
        shape = transposed(shape, rule, m.item.key);
        MappedTensor mt = new_tensor(to_pat(m.rule, k).fill(vals, &params_), shape, t, m.rule);
        const int64_t share = l.size[k] / l.groups;
        for (int64_t g = 0; g < l.groups; ++g) {
          MapPart part = whole_part(m.item.index);
          part.from.offsets[static_cast<size_t>(sdim)] = g * l.stride + l.at[k];
          part.from.sizes[static_cast<size_t>(sdim)] = share;
          part.to.assign(shape.size(), 0);
          part.to[static_cast<size_t>(dim)] = g * share;  // g is 0 when transposed (no groups)
          part.transpose = rule.transpose;
          if (e) {
            for (size_t a = 0; a < e->axes.size(); ++a) {
              part.from.offsets[static_cast<size_t>(e->axes[a].dim)] = e->coord(a, x);
              part.from.sizes[static_cast<size_t>(e->axes[a].dim)] = 1;
            }
            part.drop = static_cast<int>(e->dim);
            part.units = e->units();
          }
          if (!rule.side[to_][k].rope.is_null()) {
            if (dim != 0) shape_error(m.item.key, "RoPE rows of a part split along dimension " + std::to_string(dim));
            part.rows = rope_of(rule.side[to_][k].rope, l.size[k], mt.meta.fqn, m.rule);
          }
          if (share > 0 || g == 0) mt.parts.push_back(part);
        }
        mt.transforms = {"split"};
        if (e) mt.transforms.push_back("unstack");
        if (rule.transpose) mt.transforms.push_back("transpose");
        if (mt.parts[0].rows) mt.transforms.push_back("rope");
        mt.inputs.push_back(m.item.key);
        out_.tensors.push_back(std::move(mt));
      }
    }
    used_.insert(m.item.key);
  }

  // The listed tensors into one along `dim` (`groups` times over); with a stack, the lists of
  // every entry, each into its place along the stack's new dimension.
  void join(const Match& m) {
    const KeyMap::Rule& rule = map_.rules[m.rule];
    const auto& fp = pats_[from_][m.rule];
    std::optional<Experts> e;
    if (!rule.experts.is_null()) e = experts(m);
    auto base = m.vals;
    if (e) e->erase(base);
    const int64_t count = e ? e->count : 1;
    std::vector<std::string> keys;  // entry by entry, part by part
    for (int64_t x = 0; x < count; ++x) {
      auto vals = base;
      if (e) e->set(vals, x);
      for (const auto& p : fp) keys.push_back(p.fill(vals, &params_));
    }
    const std::string output = to_pat(m.rule, 0).fill(base, &params_);
    std::vector<uint32_t> parts = gather(keys, output);
    for (const auto& k : keys)
      if (by_key_.count(k)) used_.insert(k);
    if (parts.empty()) return;
    const int64_t dim = rule.dim;  // of the output
    const size_t n = fp.size();
    std::vector<int64_t> shape = tensor(parts[0]).shape;
    if (dim < 0 || dim >= static_cast<int64_t>(shape.size()))
      shape_error(keys[0], "join dimension " + std::to_string(dim) + " out of range");
    // `dim` in the parts: the other of the last two when they land transposed.
    const int64_t rank = static_cast<int64_t>(shape.size()),
                  pdim = rule.transpose && dim >= rank - 2 ? 2 * rank - 3 - dim : dim;
    Layout l = layout(m, rule.side[from_], output);
    for (size_t i = 0; i < parts.size(); ++i) {
      const TensorMeta& pk = tensor(parts[i]);
      std::vector<int64_t> a = pk.shape, b = shape;
      if (a.size() != b.size()) shape_error(keys[i], "parts of one join differ in rank");
      a[static_cast<size_t>(pdim)] = b[static_cast<size_t>(pdim)] = 0;
      if (a != b || pk.dtype_name != tensor(parts[0]).dtype_name)
        shape_error(keys[i], "parts of one join differ in shape or dtype");
      if (l.size[i % n] != pk.shape[static_cast<size_t>(pdim)])
        shape_error(keys[i], "dimension " + std::to_string(pdim) + " is " +
                                 std::to_string(pk.shape[static_cast<size_t>(pdim)]) + ", the map says " +
                                 std::to_string(l.size[i % n]));
    }
    shape = transposed(shape, rule, keys[0]);
    shape[static_cast<size_t>(dim)] = l.total;
    if (e) {
      if (e->dim < 0 || e->dim > static_cast<int64_t>(shape.size()))
        shape_error(m.item.key, "stack dimension out of range");
      for (auto a = e->axes.rbegin(); a != e->axes.rend(); ++a) shape.insert(shape.begin() + e->dim, a->count);
    }
    const int64_t odim = e && e->dim <= dim ? dim + e->units() : dim;  // `dim` in the output
    MappedTensor mt = new_tensor(output, shape, tensor(parts[0]), m.rule);
    mt.transforms = {"join"};
    if (e) mt.transforms.push_back("stack");
    if (rule.transpose) mt.transforms.push_back("transpose");
    for (size_t i = 0; i < parts.size(); ++i) {
      const size_t k = i % n;
      const int64_t x = static_cast<int64_t>(i / n), share = l.size[k] / l.groups;
      for (int64_t g = 0; g < l.groups; ++g) {
        MapPart part = whole_part(parts[i]);
        part.from.offsets[static_cast<size_t>(pdim)] = g * share;
        part.from.sizes[static_cast<size_t>(pdim)] = share;
        part.to.assign(shape.size(), 0);
        part.to[static_cast<size_t>(odim)] = g * l.stride + l.at[k];
        part.transpose = rule.transpose;
        if (e) {
          for (size_t a = 0; a < e->axes.size(); ++a) part.to[static_cast<size_t>(e->axes[a].dim)] = e->coord(a, x);
          part.add = static_cast<int>(e->dim);
          part.units = e->units();
        }
        if (!rule.side[from_][k].rope.is_null()) {
          if (dim != 0) shape_error(keys[i], "RoPE rows of a part joined along dimension " + std::to_string(dim));
          part.rows = rope_of(rule.side[from_][k].rope, tensor(parts[i]).shape[0], keys[i], m.rule);
        }
        if (part.rows && mt.transforms.back() != "rope") mt.transforms.push_back("rope");
        if (share > 0 || g == 0) mt.parts.push_back(part);
      }
      mt.inputs.push_back(keys[i]);
    }
    out_.tensors.push_back(std::move(mt));
  }

  // One stacked tensor -> `count` tensors, one per expert.
  void unstack(const Match& m) {
    const KeyMap::Rule& rule = map_.rules[m.rule];
    const TensorMeta& t = tensor(m.item.index);
    Experts e = experts(m);
    if (!stack_fits(t, e))
      shape_error(m.item.key, e.units() == 1
                                  ? "dimension " + std::to_string(e.dim) + " of shape " + whole_box(t).text() +
                                        " is not the " + std::to_string(e.count) + " entries of its stack (" +
                                        e.axes[0].count_expr + ", {" + e.axes[0].name + "})"
                                  : "shape " + whole_box(t).text() + " is not the stacked entries " + stack_text(e));
    for (int64_t x = 0; x < e.count; ++x) {
      auto v = m.vals;
      e.set(v, x);
      std::vector<int64_t> shape = t.shape;
      shape.erase(shape.begin() + e.dim, shape.begin() + e.dim + e.units());
      if (rule.transpose && e.dim + e.units() > static_cast<int64_t>(t.ndim()) - 2)
        shape_error(m.item.key, "a stack along one of the last two dims, which the rule transposes");
      shape = transposed(shape, rule, m.item.key);
      MappedTensor mt = new_tensor(to_pat(m.rule, 0).fill(v, &params_), shape, t, m.rule);
      MapPart part = whole_part(m.item.index);
      for (size_t a = 0; a < e.axes.size(); ++a) {
        part.from.offsets[static_cast<size_t>(e.axes[a].dim)] = e.coord(a, x);
        part.from.sizes[static_cast<size_t>(e.axes[a].dim)] = 1;
      }
      part.to.assign(shape.size(), 0);
      part.drop = static_cast<int>(e.dim);
      part.units = e.units();
      part.transpose = rule.transpose;
      if (rule.interleave >= 0) {
        interleaved_parts(part, m, static_cast<int64_t>(shape.size()), e.units(), e.dim, mt);
      } else {
        mt.parts.push_back(part);
      }
      mt.transforms = {"unstack"};
      if (rule.transpose) mt.transforms.push_back("transpose");
      if (rule.interleave >= 0) mt.transforms.push_back("interleave");
      mt.inputs.push_back(m.item.key);
      out_.tensors.push_back(std::move(mt));
    }
    used_.insert(m.item.key);
  }

  // `count` per-expert tensors -> one stack: gather them all.
  void stack(const Match& m) {
    const KeyMap::Rule& rule = map_.rules[m.rule];
    const TensorMeta& t = tensor(m.item.index);
    Experts e = experts(m);
    std::vector<std::string> keys;
    auto base = m.vals;
    e.erase(base);
    for (int64_t x = 0; x < e.count; ++x) {
      auto v = base;
      e.set(v, x);
      keys.push_back(pats_[from_][m.rule][0].fill(v, &params_));
    }
    std::vector<uint32_t> parts = gather(keys, to_pat(m.rule, 0).fill(m.vals, &params_));
    // The keys before the first missing one are taken (the stack is reported missing).
    for (size_t k = 0; k < keys.size() && (!parts.empty() || by_key_.count(keys[k])); ++k) used_.insert(keys[k]);
    if (parts.empty()) return;
    std::vector<int64_t> shape = transposed(t.shape, rule, m.item.key);
    if (e.dim < 0 || e.dim > static_cast<int64_t>(shape.size()))
      shape_error(m.item.key, "experts dimension out of range");
    if (rule.transpose && e.dim > static_cast<int64_t>(shape.size()) - 2)
      shape_error(m.item.key, "a stack along one of the last two dims, which the rule transposes");
    for (auto a = e.axes.rbegin(); a != e.axes.rend(); ++a) shape.insert(shape.begin() + e.dim, a->count);
    MappedTensor mt = new_tensor(to_pat(m.rule, 0).fill(base, &params_), shape, t, m.rule);
    for (int64_t x = 0; x < e.count; ++x) {
      const TensorMeta& pe = tensor(parts[static_cast<size_t>(x)]);
      if (pe.shape != t.shape || pe.dtype_name != t.dtype_name)
        shape_error(keys[static_cast<size_t>(x)], "experts of one stack differ in shape or dtype from " + keys[0]);
      MapPart part = whole_part(parts[static_cast<size_t>(x)]);
      part.to.assign(shape.size(), 0);
      for (size_t a = 0; a < e.axes.size(); ++a) part.to[static_cast<size_t>(e.axes[a].dim)] = e.coord(a, x);
      part.add = static_cast<int>(e.dim);
      part.units = e.units();
      part.transpose = rule.transpose;
      if (rule.interleave >= 0) {
        interleaved_parts(part, m, static_cast<int64_t>(pe.ndim()), 0, -1, mt, e.units(), e.dim);
      } else {
        mt.parts.push_back(part);
      }
      mt.transforms = {"stack"};
      if (rule.transpose) mt.transforms.push_back("transpose");
      if (rule.interleave >= 0) mt.transforms.push_back("interleave");
      mt.inputs.push_back(keys[static_cast<size_t>(x)]);
    }
    out_.tensors.push_back(std::move(mt));
  }

  // `base` (one entry's whole part) cut along the rule's `interleave` dimension into one part per
  // slice, input slice i landing at its place on the other side: the first side holds two halves
  // ([gate; up]), the second the slices alternating (gate 0, up 0, gate 1, ...). `rank` is one
  // entry's; the input's stack dims (`in_units` from `in_dim`) and the output's (`out_units` from
  // `out_dim`) shift the dimension in part.from and part.to. A transposed rule's second side has the
  // dimension's partner among the last two.
  void interleaved_parts(const MapPart& base, const Match& m, int64_t rank, int in_units, int64_t in_dim,
                         MappedTensor& mt, int out_units = 0, int64_t out_dim = -1) {
    const KeyMap::Rule& rule = map_.rules[m.rule];
    const int64_t d = rule.interleave;
    if (d >= rank)
      shape_error(m.item.key,
                  "interleave dimension " + std::to_string(d) + " out of range of one entry's " + std::to_string(rank));
    const int64_t partner = rule.transpose && d >= rank - 2 ? 2 * rank - 3 - d : d;
    const int64_t din = from_ == 0 ? d : partner, dout = from_ == 0 ? partner : d;
    const int64_t fdim = din + (in_units && in_dim <= din ? in_units : 0),
                  tdim = dout + (out_units && out_dim <= dout ? out_units : 0);
    const int64_t n = base.from.sizes[static_cast<size_t>(fdim)], half = n / 2;
    if (n % 2)
      shape_error(m.item.key, "dimension " + std::to_string(fdim) + " is " + std::to_string(n) +
                                  " long: not two halves to interleave");
    for (int64_t i = 0; i < n; ++i) {
      MapPart p = base;
      p.from.offsets[static_cast<size_t>(fdim)] += i;
      p.from.sizes[static_cast<size_t>(fdim)] = 1;
      p.to[static_cast<size_t>(tdim)] += from_ == 0 ? (i % half) * 2 + i / half : (i % 2) * half + i / 2;
      mt.parts.push_back(p);
    }
  }

  // A tied model's missing tensor (`tied`): when the input lacks a rule's key on its side and
  // config.json ties the embeddings, the output is a copy of the rule's `tied` key, as the
  // adapters' from_hf copies the embedding into lm_head.weight (torchtitan refuses a checkpoint
  // without it). The copy is that saved tensor under the rule's output name.
  void copy_tied() {
    const bool ties = config_.json.is_object() && config_.json.contains("tie_word_embeddings") &&
                      config_.json["tie_word_embeddings"].is_boolean() &&
                      config_.json["tie_word_embeddings"].get<bool>();
    if (!ties) return;
    for (size_t ri = 0; ri < map_.rules.size(); ++ri) {
      const KeyMap::Rule& rule = map_.rules[ri];
      if (rule.tied[from_].empty()) continue;
      const std::string& own = rule.side[from_][0].pattern;
      auto src = by_key_.find(rule.tied[from_]);
      if (by_key_.count(own) || src == by_key_.end()) continue;
      const TensorMeta& t = tensor(src->second);
      MappedTensor mt = new_tensor(to_pat(ri, 0).fill({}, &params_), t.shape, t, ri);
      mt.parts.push_back(whole_part(src->second));
      mt.transforms = {"copy"};
      mt.inputs.push_back(src->first);
      out_.tensors.push_back(std::move(mt));
    }
  }

  // A "drop_when": "zeros" rule with "zeros", mapping to its side: its key as zeros beside every
  // output its `beside` pattern matches (torchtitan's expert_bias_E beside each MoE layer's router
  // weight: the zeros its model starts from, which its strict dcp.load asks for), placed right
  // after that output; not where another rule made that key from the input (a GLM-4.5 router's
  // e_score_correction_bias from Megatron's router.expert_bias, when the run trained one).
  void make_zeros() {
    std::set<std::string> made;
    for (const MappedTensor& mt : out_.tensors) made.insert(mt.meta.fqn);
    for (size_t ri = 0; ri < map_.rules.size(); ++ri) {
      const KeyMap::Rule& rule = map_.rules[ri];
      if (rule.zeros_beside.empty() || !rule.side[from_].empty() || rule.side[to_].empty()) continue;
      const Pattern beside = Pattern::parse(rule.zeros_beside, map_.source);
      std::vector<MappedTensor> out;
      for (MappedTensor& mt : out_.tensors) {
        std::map<std::string, std::string> vals;
        const bool match = !mt.zeros && !mt.parts.empty() && beside.match(mt.meta.fqn, vals, &params_);
        const uint32_t place = mt.parts.empty() ? 0 : mt.parts[0].tensor;
        out.push_back(std::move(mt));
        if (!match) continue;
        const std::string key = to_pat(ri, 0).fill(vals, &params_);
        if (made.count(key) || held_unselected(ri, key, vals)) continue;
        made.insert(key);
        MappedTensor z;
        z.meta.fqn = key;
        out_.zero_reasons[key] = rule.reason;
        z.meta.dtype = dtype_from_torch_name(rule.zeros_dtype);
        z.meta.dtype_name = rule.zeros_dtype;
        for (const auto& d : rule.zeros_shape) {
          const int64_t n = params_.eval(d, "the shape of " + z.meta.fqn + " (" + rule_name(ri) + ")");
          if (n < 0) shape_error(z.meta.fqn, "a zeros tensor's dimension " + d + " is " + std::to_string(n));
          z.meta.shape.push_back(n);
        }
        z.rule = ri;
        z.zeros = true;
        z.place = place;
        z.transforms = {"zeros"};
        out.push_back(std::move(z));
      }
      out_.tensors = std::move(out);
    }
  }

  // Whether another rule makes `key` (a zeros rule's output) from an input the checkpoint holds
  // that the selection left out (--exclude '*.expert_bias'): then no zeros stand in for a trained
  // tensor, and the output lacks it (the folder's check names it). Saved keys are matched whole or
  // as a suffix after a dot (a --select prefix).
  bool held_unselected(size_t zeros_rule, const std::string& key, const std::map<std::string, std::string>& vals) {
    for (size_t ri = 0; ri < map_.rules.size(); ++ri) {
      const KeyMap::Rule& r = map_.rules[ri];
      if (ri == zeros_rule || r.side[from_].empty()) continue;
      bool makes = false;
      for (const auto& part : r.side[to_]) {
        std::map<std::string, std::string> v;
        makes = makes || Pattern::parse(part.pattern, map_.source).match(key, v, &params_);
      }
      if (!makes) continue;
      for (const auto& part : r.side[from_]) {
        const std::string in = Pattern::parse(part.pattern, map_.source).fill(vals, &params_);
        for (const TensorMeta& t : md_.tensors)
          if (t.fqn == in || (t.fqn.size() > in.size() && t.fqn.compare(t.fqn.size() - in.size(), in.size(), in) == 0 &&
                              t.fqn[t.fqn.size() - in.size() - 1] == '.'))
            return true;
      }
    }
    return false;
  }

  // ---- what the kinds share ----

  const TensorMeta& tensor(uint32_t i) const { return md_.tensors[i]; }

  // `shape` with its last two dims swapped when the rule transposes.
  std::vector<int64_t> transposed(std::vector<int64_t> shape, const KeyMap::Rule& rule, const std::string& key) const {
    if (!rule.transpose) return shape;
    if (shape.size() < 2)
      shape_error(key, "a tensor of " + std::to_string(shape.size()) + " dims has no last two to transpose");
    std::swap(shape[shape.size() - 2], shape[shape.size() - 1]);
    return shape;
  }
  const Pattern& to_pat(size_t rule, size_t k) const { return pats_[to_][rule][k]; }
  static std::string rule_name(size_t rule) { return "rule " + std::to_string(rule); }

  // The per-expert side's pattern has one placeholder more than the stacked side's: the expert.
  bool stacked_is_from(const KeyMap::Rule& r) const {
    return Pattern::parse(r.side[from_][0].pattern, map_.source).names.size() <
           Pattern::parse(r.side[to_][0].pattern, map_.source).names.size();
  }
  // A stack's axes: one (experts, or layers), or several on consecutive dimensions (Megatron's
  // experts [L, E, ...]). Its entries are numbered row-major over the axes.
  struct Axis {
    int64_t dim, count;
    std::string name;        // the placeholder indexing it
    std::string count_expr;  // the count's expression ("n_experts", "n_layers")
  };
  struct Experts {
    std::vector<Axis> axes;
    int64_t dim = 0, count = 1;  // the first axis's dimension; entries (the product of the counts)
    int units() const { return static_cast<int>(axes.size()); }
    // Entry x's placeholder values.
    void set(std::map<std::string, std::string>& vals, int64_t x) const {
      for (size_t i = axes.size(); i-- > 0;) {
        vals[axes[i].name] = std::to_string(x % axes[i].count);
        x /= axes[i].count;
      }
    }
    void erase(std::map<std::string, std::string>& vals) const {
      for (const auto& a : axes) vals.erase(a.name);
    }
    // Entry x's coordinate on axis i.
    int64_t coord(size_t i, int64_t x) const {
      for (size_t k = axes.size(); k-- > i + 1;) x /= axes[k].count;
      return x % axes[i].count;
    }
  };
  Experts experts(const Match& m) {
    const KeyMap::Rule& rule = map_.rules[m.rule];
    const bool from_stacked = stacked_is_from(rule);
    const Pattern& per = from_stacked ? to_pat(m.rule, 0) : pats_[from_][m.rule][0];
    const Pattern& stacked = from_stacked ? pats_[from_][m.rule][0] : to_pat(m.rule, 0);
    std::vector<std::string> extra;  // the per-entry side's placeholders the stacked side lacks
    for (const auto& n : per.names)
      if (std::find(stacked.names.begin(), stacked.names.end(), n) == stacked.names.end()) extra.push_back(n);
    const json axes = rule.experts.is_array() ? rule.experts : json::array({rule.experts});
    Experts e;
    for (const auto& a : axes) {
      Axis x;
      x.dim = a.value("dim", int64_t{0});
      x.count_expr = a["count"].get<std::string>();
      x.count = params_.eval(x.count_expr, "the stack of " + m.item.key + " (" + rule_name(m.rule) + ")");
      x.name = a.contains("index") ? a["index"].get<std::string>() : extra.size() == 1 ? extra[0] : "";
      if (x.name.empty() || std::find(extra.begin(), extra.end(), x.name) == extra.end())
        bad_map(
            map_.source,
            rule_name(m.rule) +
                ": each axis of a stack is indexed by a placeholder the per-entry side has and the stacked side lacks");
      if (x.count <= 0) shape_error(m.item.key, "a stack of " + std::to_string(x.count) + " entries");
      e.count *= x.count;
      e.axes.push_back(x);
    }
    if (extra.size() != e.axes.size() || per.names.size() != stacked.names.size() + e.axes.size())
      bad_map(map_.source,
              rule_name(m.rule) +
                  ": \"experts\" / \"stack\" needs exactly one placeholder more on the per-entry side per axis");
    e.dim = e.axes[0].dim;
    return e;
  }
  // Whether stacked tensor `t` has the stack's axes.
  bool stack_fits(const TensorMeta& t, const Experts& e) const {
    for (const auto& a : e.axes)
      if (a.dim < 0 || a.dim >= static_cast<int64_t>(t.ndim()) || t.shape[static_cast<size_t>(a.dim)] != a.count)
        return false;
    return true;
  }
  std::string stack_text(const Experts& e) const {
    std::string s;
    for (const auto& a : e.axes)
      s += (s.empty() ? "" : " x ") + std::to_string(a.count) + " (dimension " + std::to_string(a.dim) + ")";
    return s;
  }

  // The saved tensors of `keys`, in order; empty (and `output` reported missing, naming the
  // first key not there) when one is missing.
  std::vector<uint32_t> gather(const std::vector<std::string>& keys, const std::string& output) {
    std::vector<uint32_t> parts;
    for (const auto& k : keys) {
      auto f = by_key_.find(k);
      if (f == by_key_.end()) {
        out_.missing.push_back(output + " (no " + k + ")");
        return {};
      }
      parts.push_back(f->second);
    }
    return parts;
  }

  [[noreturn]] void shape_error(const std::string& key, const std::string& what) const {
    throw UsageError(Where(config_.path, std::nullopt, key),
                     "map " + map_.name + ": " + what + " (is the config.json the checkpoint's model's?)");
  }

  MappedTensor new_tensor(const std::string& key, std::vector<int64_t> shape, const TensorMeta& like,
                          size_t rule) const {
    MappedTensor mt;
    mt.meta.fqn = key;
    mt.meta.dtype_name = like.dtype_name;
    mt.meta.dtype = like.dtype;
    mt.meta.requires_grad = like.requires_grad;
    mt.meta.shape = std::move(shape);
    mt.rule = rule;
    return mt;
  }

  // All of saved tensor `i`, landing at the output's origin.
  MapPart whole_part(uint32_t i) const {
    MapPart part;
    part.tensor = i;
    part.from = whole_box(tensor(i));
    part.to.assign(tensor(i).ndim(), 0);
    return part;
  }

  std::shared_ptr<const std::vector<int64_t>> rope_of(const json& rope, int64_t rows, const std::string& key,
                                                      size_t rule) {
    if (rope.is_null()) return nullptr;
    std::string why = "the RoPE row order of " + key + " (" + rule_name(rule) + ")";
    int64_t heads = params_.eval(rope["heads"].get<std::string>(), why),
            hd = params_.eval(rope["head_dim"].get<std::string>(), why);
    if (heads <= 0 || hd <= 0 || hd % 2 || heads * hd != rows)
      shape_error(key, "its " + std::to_string(rows) + " rows are not " + std::to_string(heads) + " heads of " +
                           std::to_string(hd) + " (an even head_dim) for the RoPE row order");
    // The first side holds the interleaved order.
    return rope_rows(heads, hd, from_ == 0);
  }

  // Refused (exit 5): a direction whose input side the checkpoint is not on. Another framework's
  // checkpoint can match a rule or two of a map by accident (torchtitan's `lm_head.weight` is
  // Hugging Face's name too), which picks a direction; its real weights then lie outside every
  // namespace of the map and would be left out like optimizer state, and the run would exit 0. A
  // tensor key is foreign when no pattern of either side matches it, it is under neither side's
  // model namespaces, and it does not hold a key of the input side (an optimizer's
  // `optimizer.state.exp_avg.<key>` does); more foreign keys than mapped ones is another layout.
  // Asked after the uncovered model keys are refused: a checkpoint with keys under the input
  // side's model namespaces is on that side, and what its map lacks is said by that refusal.
  void refuse_foreign(const std::vector<std::string> unmatched[2], size_t mapped) const {
    if (!map_.has_model) return;  // every key is the model's: an uncovered one is refused anyway
    const std::set<std::string> not_from(unmatched[from_].begin(), unmatched[from_].end());
    const std::set<std::string> not_to(unmatched[to_].begin(), unmatched[to_].end());
    // The input side's keys: matched by its rules, or under its model namespaces (views of
    // items_' keys, so a training checkpoint's million optimizer keys are looked up without a copy).
    std::unordered_set<std::string_view> taken;
    for (const auto& it : items_)
      if (it.tensor && (!not_from.count(it.key) || is_model(it.key))) {
        taken.insert(it.key);
        // and its tail from a model namespace on: a wrapper's key (Megatron-FSDP's
        // `model.module.decoder.layers.0.x`) is held by its optimizer's under another wrapper
        // (`optimizer.state.module.module.module.decoder.layers.0.x.exp_avg`)
        const std::string_view key(it.key);
        for (size_t dot = key.find('.'); dot != std::string_view::npos; dot = key.find('.', dot + 1))
          for (const auto& p : map_.model[from_])
            if (key.compare(dot + 1, p.size(), p) == 0) taken.insert(key.substr(dot + 1));
      }
    auto under_model = [this](const std::string& key) {
      for (int s = 0; s < 2; ++s)
        for (const auto& p : map_.model[s])
          if (key.compare(0, p.size(), p) == 0) return true;
      return false;
    };
    auto holds_taken = [&taken](std::string_view key) {  // some run of its dot-separated parts
      for (size_t a = 0;;) {
        for (size_t b = a; b <= key.size(); ++b)
          if ((b == key.size() || key[b] == '.') && taken.count(key.substr(a, b - a))) return true;
        const size_t dot = key.find('.', a);
        if (dot == std::string_view::npos) return false;
        a = dot + 1;
      }
    };
    std::vector<std::string> foreign;
    for (const auto& k : unmatched[from_])
      if (not_to.count(k) && !under_model(k) && !holds_taken(k)) foreign.push_back(k);
    if (foreign.size() <= mapped) return;
    std::vector<std::string> matched;
    for (const auto& it : items_)
      if (it.tensor && !not_from.count(it.key)) matched.push_back(it.key);
    // The shortest first: a model's own names (`tok_embeddings.weight`) rather than its optimizer's.
    std::stable_sort(foreign.begin(), foreign.end(),
                     [](const std::string& a, const std::string& b) { return a.size() < b.size(); });
    auto some = [](const std::vector<std::string>& keys) {
      std::string s;
      for (size_t i = 0; i < keys.size() && i < 6; ++i) s += (i ? ", " : "") + keys[i];
      return s + (keys.size() > 6 ? ", ..." : "");
    };
    std::string ns[2];
    for (int s = 0; s < 2; ++s)
      for (const auto& p : map_.model[s]) ns[s] += (ns[s].empty() ? "" : ", ") + p + "*";
    throw UnsupportedError(
        Where(md_.source),
        "map " + map_.name + " (" + out_.from + "->" + out_.to + "): the checkpoint is not on its " + out_.from +
            " side: " + std::to_string(foreign.size()) + " of its tensor keys are neither " + map_.sides[0] + " (" +
            ns[0] + ") nor " + map_.sides[1] + " (" + ns[1] + ") names (" + some(foreign) + "), and only " +
            std::to_string(mapped) + " match its " + out_.from + " rules (" + some(matched) +
            "); the keys look like another layout: pick the map for it (dcpctl maps); nothing is written");
  }

  // Whether an input key is one of the model's weights (the input side's "model" namespaces).
  bool is_model(const std::string& key) const {
    if (!map_.has_model) return true;
    for (const auto& p : map_.model[from_])
      if (key.compare(0, p.size(), p) == 0) return true;
    return false;
  }

  // Refuses (exit 5) a mapping that would lose a model weight: a model key no rule covers, or one
  // a rule took into an output it could not make (another input missing). Everything else a map
  // leaves out (optimizer state, trainer state, non-tensor items) is listed in left_out.
  // The first kind is found when the direction is chosen (choose_direction), the second once
  // every rule ran (lost_inputs).
  void refuse_losses(const std::vector<std::string>& uncovered, const std::vector<std::string>& lost) const {
    if (uncovered.empty() && lost.empty()) return;
    std::string ns;
    for (const auto& p : map_.model[from_]) ns += (ns.empty() ? "" : ", ") + p;
    std::string text = "map " + map_.name + " (" + out_.from + "->" + out_.to + ") would lose " +
                       std::to_string(uncovered.size() + lost.size()) + " of the model's weights (" +
                       (map_.has_model ? "its " + out_.from + " model keys are those under " + ns
                                       : "the map declares no \"model\": every tensor key") +
                       "); nothing is written";
    auto list = [&text](const std::string& head, const std::vector<std::string>& keys) {
      if (keys.empty()) return;
      text += "\n  " + head + " (" + std::to_string(keys.size()) + "):";
      const size_t shown = std::min<size_t>(keys.size(), 200);
      for (size_t i = 0; i < shown; ++i) text += "\n    " + keys[i];
      if (shown < keys.size()) text += "\n    ... and " + std::to_string(keys.size() - shown) + " more";
    };
    list("no rule covers", uncovered);
    list("taken into an output that could not be made (an input of it is missing; see --dry-run --json's map.missing)",
         lost);
    text += "\n  leave a key out on purpose with --exclude GLOB, or give the map a rule for it";
    throw UnsupportedError(Where(md_.source), text);
  }

  // Model keys a rule took but no output holds: an input of that output is missing.
  std::vector<std::string> lost_inputs() const {
    std::set<std::string> made(out_.dropped.begin(), out_.dropped.end());
    for (const auto& mt : out_.tensors) made.insert(mt.inputs.begin(), mt.inputs.end());
    std::vector<std::string> lost;
    for (const auto& it : items_)
      if (it.tensor && is_model(it.key) && !made.count(it.key) && !unmatched_.count(it.key)) lost.push_back(it.key);
    return lost;
  }

  MappedModel finish() {
    refuse_losses({}, lost_inputs());
    if (out_.tensors.empty())
      throw UsageError(
          Where(md_.source),
          "map " + map_.name + " makes no tensor of the selection (every matched key is dropped or incomplete)");
    std::set<std::string> seen;
    for (const auto& mt : out_.tensors)
      if (!seen.insert(mt.meta.fqn).second)
        throw UsageError(Where(md_.source, std::nullopt, mt.meta.fqn),
                         "map " + map_.name + " makes this key twice (two rules, or a pattern matching two inputs)");
    if (params_.used_config()) out_.config = config_.path;
    out_.params = params_.sources();
    if (map_.has_model) out_.model = map_.model[from_];
    std::set<std::string> inputs;
    for (const auto& mt : out_.tensors) inputs.insert(mt.inputs.begin(), mt.inputs.end());
    out_.inputs = inputs.size();
    if (config_.json.is_object() && config_.json.contains("tie_word_embeddings") &&
        config_.json["tie_word_embeddings"].is_boolean())
      out_.tied = config_.json["tie_word_embeddings"].get<bool>() ? "true" : "false";
    return std::move(out_);
  }

  const KeyMap& map_;
  const Metadata& md_;
  const std::vector<SelectedItem>& items_;
  const MapConfig& config_;
  Params params_;
  const std::string want_from_;
  int from_ = 0, to_ = 1;
  std::vector<std::vector<Pattern>> pats_[2];  // per side, per rule: its patterns
  std::vector<Kind> kinds_;                    // per rule, in this direction
  std::unordered_map<std::string, uint32_t> by_key_;
  std::vector<std::pair<std::string, std::vector<int64_t>>>
      shapes_;  // the input's tensors, for parameters read from shapes
  std::set<std::string> used_;
  std::set<std::string> unmatched_;  // tensor keys no rule's pattern matches
  MappedModel out_;
};

}  // namespace

MappedModel apply_key_map(const KeyMap& map, const Metadata& md, const std::vector<SelectedItem>& items,
                          const MapConfig& config, const std::string& from) {
  std::vector<std::string> keys;
  for (const auto& it : items)
    if (it.tensor) keys.push_back(it.key);
  // A family's map: the variant for this model (choose_variant), then the map it leaves.
  auto build = [&](const KeyMap& m, std::string* variant, std::string* why) {
    KeyMap chosen = choose_variant(m, config.json, keys, variant, why);
    return MapBuilder(chosen, md, items, config, from).build();
  };
  std::string variant, why;
  try {
    MappedModel out = build(map, &variant, &why);
    out.family = map.family;
    out.variant = variant;
    out.variant_from = why;
    out.variant_args = variant_args(map, variant);
    return out;
  } catch (const UnsupportedError& e) {
    std::string detail = e.detail();
    // A family without a variant for the config's model_type maps only what every variant shares.
    if (!map.family.empty() && variant.empty()) {
      std::string vs;
      for (const auto& v : map.variants) {
        std::string types;
        for (const auto& t : v.model_types) types += (types.empty() ? "" : ", ") + t;
        vs += (vs.empty() ? "" : "; ") + v.name + " (" + types + ")";
      }
      detail += "\n  " + why + ": map " + map.name +
                " has no variant for it, so only the rules every variant shares apply (its variants: " + vs + ")";
    }
    // A built-in map that refuses a checkpoint another built-in map of the same two sides takes
    // whole (a Megatron model keyed per layer, a Mixtral's expert names): say which, so the user
    // need not read every map's description. Tried only on this path, each in full.
    std::string fits;
    if (map.source.rfind("built-in", 0) == 0)
      for (const KeyMap& other : builtin_key_maps()) {
        if (other.name == map.name || other.sides[0] != map.sides[0] || other.sides[1] != map.sides[1]) continue;
        try {
          build(other, nullptr, nullptr);
          fits += (fits.empty() ? "" : ", ") + other.name;
        } catch (const Error&) {
        }
      }
    if (fits.empty() && detail == e.detail()) throw;
    if (fits.empty()) throw UnsupportedError(e.where(), detail);
    throw UnsupportedError(e.where(),
                           detail + "\n  the built-in map" + (fits.find(',') == std::string::npos ? " " : "s ") + fits +
                               " map" + (fits.find(',') == std::string::npos ? "s" : "") +
                               " every model key of this checkpoint: --map " + fits.substr(0, fits.find(',')));
  }
}

}  // namespace dcpctl
