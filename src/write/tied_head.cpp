#include "write/tied_head.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "item/item_reader.h"
#include "item/window.h"
#include "util/dtype.h"
#include "view/maps/map_view.h"

namespace dcpctl {

namespace {

bool has_suffix(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

bool config_ties(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  // A multimodal model's language model says it in text_config; the top level wins where both do.
  for (const nlohmann::json* c : {&j, j.contains("text_config") ? &j["text_config"] : nullptr})
    if (c && c->is_object() && c->contains("tie_word_embeddings") && (*c)["tie_word_embeddings"].is_boolean())
      return (*c)["tie_word_embeddings"].get<bool>();
  return false;  // transformers' default is true, but without the field nothing says the export ties
}

// Every byte of `a` equals `b`'s: same dtype and shape, then window by window in C order.
bool same_bytes(const ItemReader& reader, const TensorMeta& a, const TensorMeta& b, uint64_t window) {
  if (!a.dtype || !b.dtype || *a.dtype != *b.dtype || a.shape != b.shape) return false;
  const uint64_t item = itemsize(*a.dtype);
  const std::vector<Window> plan = plan_windows(a.shape, std::max<uint64_t>(1, window / item));
  WindowReader ra(reader, nullptr), rb(reader, nullptr);
  ra.expect(a, plan);
  rb.expect(b, plan);
  uint64_t most = 0;
  for (const Window& w : plan) most = std::max(most, w.numel * item);
  std::vector<uint8_t> da(most), sa(most), db(most), sb(most);
  for (const Window& w : plan) {
    ra.fill(a, w, da.data(), sa.data());
    rb.fill(b, w, db.data(), sb.data());
    if (std::memcmp(da.data(), db.data(), w.numel * item) != 0) return false;
  }
  return true;
}

// The embedding among `keys`: `<base>embed_tokens.weight` beside the head's base (model.), else
// the only key ending so.
std::optional<size_t> embedding_of(const std::vector<std::string>& keys) {
  std::optional<size_t> only;
  size_t count = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == "model.embed_tokens.weight") return i;
    if (has_suffix(keys[i], "embed_tokens.weight")) only = i, ++count;
  }
  return count == 1 ? only : std::nullopt;
}

// `map` without the head: its tensor erased, its input counted as dropped with the reason.
void drop_tied_head(MappedModel& map, const TiedHead& tied) {
  auto it = std::find_if(map.tensors.begin(), map.tensors.end(),
                         [&](const MappedTensor& mt) { return mt.meta.fqn == tied.head; });
  if (it == map.tensors.end()) return;
  std::vector<std::string> inputs = it->inputs;
  map.tensors.erase(it);
  // An input nothing else is made of is no longer mapped: it is dropped, with the reason.
  for (const std::string& in : inputs) {
    bool used = std::any_of(map.tensors.begin(), map.tensors.end(), [&](const MappedTensor& mt) {
      return std::find(mt.inputs.begin(), mt.inputs.end(), in) != mt.inputs.end();
    });
    if (used) continue;
    if (map.inputs > 0) --map.inputs;
    map.dropped.push_back(in);
    map.reasons.push_back(
        "tied: equal to " + tied.embedding + " and config.json says tie_word_embeddings, so " + tied.head +
        " is left out as save_pretrained and to_hf leave it (from_pretrained ties it to the embedding)");
  }
}

}  // namespace

std::optional<TiedHead> tied_head_to_drop(const std::string& config, const Checkpoint& ck, const Selection& sel,
                                          uint64_t window) {
  if (!config_ties(config)) return std::nullopt;
  std::vector<std::string> keys;
  std::vector<const TensorMeta*> metas;
  for (const SelectedItem& it : select_items(ck.md, sel))
    if (it.tensor) keys.push_back(it.key), metas.push_back(&ck.md.tensors[it.index]);
  TiedHead t;
  auto head = std::find(keys.begin(), keys.end(), t.head);
  std::optional<size_t> embed = embedding_of(keys);
  if (head == keys.end() || !embed) return std::nullopt;
  const size_t h = static_cast<size_t>(head - keys.begin());
  ItemReader reader(ck);
  if (!same_bytes(reader, *metas[h], *metas[*embed], window)) return std::nullopt;
  t.embedding = keys[*embed];
  return t;
}

std::optional<Checkpoint> without_tied_head(const Checkpoint& table, const TiedHead& tied) {
  if (!table.derived || table.derived->parts.empty() || !table.derived->output.map) return std::nullopt;
  MappedModel map = *table.derived->output.map;
  drop_tied_head(map, tied);
  Checkpoint out = table;
  auto derived = std::make_shared<DerivedTable>(*table.derived);
  set_map(*derived, std::make_shared<const MappedModel>(std::move(map)), true);
  out.derived = std::move(derived);
  auto& order = out.md.order;
  order.erase(std::remove_if(order.begin(), order.end(),
                             [&](const auto& o) { return o.first && out.md.tensors[o.second].fqn == tied.head; }),
              order.end());
  return out;
}

}  // namespace dcpctl
