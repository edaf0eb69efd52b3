// Key maps (view/maps/keymap.h) as geometry: a mapped output assembled from its pieces
// (plan_mapped_pieces + assemble_box) equals the transform computed element by element here, for
// shardings the torchtitan fixtures (FSDP dim-0 shards, all runs) never produce: column shards
// (pieces copied with their frames), uneven row shards, target boxes that cut heads, experts
// stacked and unstacked. And the refusals: a missing parameter, no key matched, a bad map file,
// rows that are not heads x head_dim.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

#include "item/chunk_source.h"
#include "meta/pieces.h"
#include "metadata_models.h"
#include "plan/deal.h"
#include "plan/plan.h"
#include "util/error.h"
#include "view/maps/keymap.h"
#include "view/maps/map_view.h"

namespace dcpctl {
namespace {

// Every saved tensor's element i holds 1000 * (its index in the checkpoint + 1) + i.
class ValueChunks final : public ChunkSource {
 public:
  ValueChunks(const Metadata& md, bool ordered, bool ranges) : md_(md), ordered_(ordered), ranges_(ranges) {}
  std::optional<DirectRun> in_place(const TensorMeta&, size_t) const override { return std::nullopt; }
  void read(unsigned, const TensorMeta&, size_t, const WindowFn&, GateCharge) override { FAIL("not used"); }
  void read_into(unsigned, const TensorMeta& t, size_t chunk, uint8_t* dst) override {
    std::vector<float> full = values(t);
    Box cb = chunk_box(t, chunk);
    copy_box(reinterpret_cast<const uint8_t*>(full.data()), whole_box(t), dst, cb, cb, 4);
    std::lock_guard<std::mutex> lock(mu_);
    ++reads;
  }
  void read_range(unsigned lane, const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, uint8_t* dst) override {
    std::vector<uint8_t> whole(t.chunk_numel(chunk) * 4);
    read_into(lane, t, chunk, whole.data());
    std::memcpy(dst, whole.data() + from, n);
  }
  bool reads_ranges() const override { return ranges_; }
  bool ordered() const override { return ordered_; }
  std::vector<float> values(const TensorMeta& t) const {
    std::vector<float> v(t.numel());
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(1000 * (&t - md_.tensors.data() + 1) + static_cast<int64_t>(i));
    return v;
  }
  int reads = 0;

 private:
  const Metadata& md_;
  bool ordered_, ranges_;
  std::mutex mu_;
};

KeyMap map_of(const std::string& text) {
  char name[] = "/tmp/dcpctl-map-XXXXXX.json";
  int fd = ::mkstemps(name, 5);
  REQUIRE(fd >= 0);
  ::close(fd);
  struct Removed {
    std::string path;
    ~Removed() { std::remove(path.c_str()); }
  } file{name};
  std::ofstream(file.path) << text;
  return load_key_map(file.path);
}

std::vector<SelectedItem> all_items(const Metadata& md) {
  std::vector<SelectedItem> out;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) out.push_back({true, i, md.tensors[i].fqn, {}});
  return out;
}

MapConfig config(const std::string& json) {
  return {nlohmann::json::parse(json), "config.json"};
}

// Box `b` of mapped tensor `mt`, assembled from its pieces over every kind of source.
std::vector<std::vector<float>> assembled(const Metadata& md, const MappedTensor& mt, const Box& b) {
  std::vector<std::vector<float>> out;
  for (int kind = 0; kind < 3; ++kind) {
    ValueChunks src(md, kind == 1, kind == 2);
    std::vector<float> dst(b.numel(), -1);
    assemble_box(src, mt.meta, b, plan_mapped_pieces(md, mt, b), reinterpret_cast<uint8_t*>(dst.data()), 2);
    out.push_back(dst);
  }
  return out;
}

// Element (r, c) of a 2-d box of a 2-d full tensor `f` of `cols` columns.
std::vector<float> cut(const std::vector<float>& f, int64_t cols, const Box& b) {
  std::vector<float> out;
  for (int64_t r = b.offsets[0]; r < b.offsets[0] + b.sizes[0]; ++r)
    for (int64_t c = b.offsets[1]; c < b.offsets[1] + b.sizes[1]; ++c)
      out.push_back(f[static_cast<size_t>(r * cols + c)]);
  return out;
}

// torchtitan's _permute (interleaved -> halves) of rows heads x hd: out (h, a, j) <- in (h, j, a).
std::vector<float> permute_rows(const std::vector<float>& w, int64_t heads, int64_t hd, int64_t cols, bool to_halves) {
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t j = 0; j < hd / 2; ++j) {
        int64_t halves = h * hd + a * (hd / 2) + j, inter = h * hd + 2 * j + a;
        int64_t o = to_halves ? halves : inter, i = to_halves ? inter : halves;
        for (int64_t c = 0; c < cols; ++c)
          out[static_cast<size_t>(o * cols + c)] = w[static_cast<size_t>(i * cols + c)];
      }
  return out;
}

const char* kRopeMap = R"({"schema": "dcpctl-map/1", "name": "t", "sides": ["titan", "hf"],
  "model": {"titan": ["layers."], "hf": ["model."]},
  "params": {"n_heads": {"config": "num_attention_heads"}, "n_kv": {"config": ["num_key_value_heads", "num_attention_heads"]},
             "head_dim": {"config": "head_dim", "default": "hidden_size / num_attention_heads"}},
  "rules": [
    {"titan": "layers.{L}.wq", "hf": "model.layers.{L}.q_proj", "rope": {"heads": "n_heads", "head_dim": "head_dim"}},
    {"titan": "layers.{L}.wqkv", "dim": 0,
     "hf": [{"key": "model.layers.{L}.q", "size": "n_heads * head_dim", "rope": {"heads": "n_heads", "head_dim": "head_dim"}},
            {"key": "model.layers.{L}.k", "size": "n_kv * head_dim", "rope": {"heads": "n_kv", "head_dim": "head_dim"}},
            {"key": "model.layers.{L}.v", "size": "n_kv * head_dim"}]},
    {"titan": "layers.{L}.experts.w1", "hf": "model.layers.{L}.experts.{E}.gate", "experts": {"dim": 0, "count": "n_experts"}},
    {"hf": "model.layers.{L}.inv_freq", "reason": "a buffer"}
  ]})";

}  // namespace

TEST_CASE("keymap: RoPE rows of a column-sharded tensor, whole and in boxes that cut heads") {
  // 2 heads of head_dim 4, 3 columns, saved in two column shards: no piece is a run.
  Checkpoint ck = checkpoint({tensor("layers.0.wq", {8, 3}, {{0, 0, 8, 2}, {0, 2, 8, 1}}, DType::Float32, 2),
                              tensor("optimizer.state", {4}, {{0, 4}})});
  MappedModel mm = apply_key_map(map_of(kRopeMap), ck.md, all_items(ck.md),
                                 config(R"({"num_attention_heads": 2, "hidden_size": 8})"));
  REQUIRE(mm.from == "titan");
  REQUIRE(mm.tensors.size() == 1);
  CHECK(mm.tensors[0].meta.fqn == "model.layers.0.q_proj");
  CHECK(mm.left_out == std::vector<std::string>{"optimizer.state"});
  CHECK(mm.inputs == 1);
  ValueChunks v(ck.md, false, false);
  std::vector<float> want = permute_rows(v.values(ck.md.tensors[0]), 2, 4, 3, true);
  for (const Box& b : {box({0, 0}, {8, 3}), box({3, 0}, {3, 3}), box({5, 1}, {2, 2})}) {
    INFO(b.text());
    for (const auto& got : assembled(ck.md, mm.tensors[0], b)) CHECK(got == cut(want, 3, b));
  }
  // And back: halves -> interleaved gives the saved rows again.
  CHECK(permute_rows(want, 2, 4, 3, false) == v.values(ck.md.tensors[0]));
}

TEST_CASE("keymap: a fused tensor split with RoPE on two parts, and joined back from the parts") {
  // q: 2 heads x 4 rows, k and v: 1 x 4; 2 columns; three uneven row shards.
  Checkpoint ck = checkpoint({tensor("layers.3.wqkv", {16, 2}, {{0, 0, 5, 2}, {5, 0, 9, 2}, {14, 0, 2, 2}})});
  MapConfig cfg = config(R"({"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4})");
  KeyMap km = map_of(kRopeMap);
  MappedModel mm = apply_key_map(km, ck.md, all_items(ck.md), cfg);
  REQUIRE(mm.tensors.size() == 3);
  ValueChunks v(ck.md, false, false);
  std::vector<float> w = v.values(ck.md.tensors[0]);
  std::vector<float> q(w.begin(), w.begin() + 16), k(w.begin() + 16, w.begin() + 24), val(w.begin() + 24, w.end());
  std::map<std::string, std::vector<float>> want = {{"model.layers.3.q", permute_rows(q, 2, 4, 2, true)},
                                                    {"model.layers.3.k", permute_rows(k, 1, 4, 2, true)},
                                                    {"model.layers.3.v", val}};
  for (const auto& mt : mm.tensors) {
    INFO(mt.meta.fqn);
    REQUIRE(want.count(mt.meta.fqn));
    Box whole = whole_box(mt.meta);
    for (const auto& got : assembled(ck.md, mt, whole)) CHECK(got == want[mt.meta.fqn]);
  }
  CHECK(mm.tensors[0].transforms == std::vector<std::string>{"split", "rope"});

  // Join: the hf side's three tensors, column-sharded, make the fused tensor with the rows back in
  // the interleaved order.
  Checkpoint hf = checkpoint({tensor("model.layers.3.q", {8, 2}, {{0, 0, 8, 1}, {0, 1, 8, 1}}),
                              tensor("model.layers.3.k", {4, 2}, {{0, 0, 4, 2}}),
                              tensor("model.layers.3.v", {4, 2}, {{0, 0, 2, 2}, {2, 0, 2, 2}}),
                              tensor("model.layers.3.inv_freq", {2}, {{0, 2}})});
  MappedModel back = apply_key_map(km, hf.md, all_items(hf.md), cfg);
  REQUIRE(back.from == "hf");
  REQUIRE(back.tensors.size() == 1);
  CHECK(back.dropped == std::vector<std::string>{"model.layers.3.inv_freq"});
  ValueChunks hv(hf.md, false, false);
  std::vector<float> fused = permute_rows(hv.values(hf.md.tensors[0]), 2, 4, 2, false);
  std::vector<float> kk = permute_rows(hv.values(hf.md.tensors[1]), 1, 4, 2, false), vv = hv.values(hf.md.tensors[2]);
  fused.insert(fused.end(), kk.begin(), kk.end());
  fused.insert(fused.end(), vv.begin(), vv.end());
  for (const Box& b : {box({0, 0}, {16, 2}), box({6, 0}, {6, 2})})
    for (const auto& got : assembled(hf.md, back.tensors[0], b)) CHECK(got == cut(fused, 2, b));
}

TEST_CASE("keymap: experts unstacked from a stack sharded along its rows, and stacked again in rank boxes") {
  Checkpoint ck = checkpoint({tensor("layers.1.experts.w1", {3, 4, 2}, {{0, 0, 0, 3, 3, 2}, {0, 3, 0, 3, 1, 2}})});
  MapConfig cfg = config(R"({"n_experts": 3})");
  KeyMap km = map_of(
      R"({"schema": "dcpctl-map/1", "name": "e", "sides": ["titan", "hf"], "params": {"n_experts": {"config": "n_experts"}},
    "rules": [{"titan": "layers.{L}.experts.w1", "hf": "model.layers.{L}.experts.{E}.gate", "experts": {"dim": 0, "count": "n_experts"}}]})");
  MappedModel mm = apply_key_map(km, ck.md, all_items(ck.md), cfg);
  REQUIRE(mm.tensors.size() == 3);
  CHECK(mm.inputs == 1);
  ValueChunks v(ck.md, false, false);
  std::vector<float> w = v.values(ck.md.tensors[0]);
  for (int e = 0; e < 3; ++e) {
    const MappedTensor& mt = mm.tensors[static_cast<size_t>(e)];
    CHECK(mt.meta.fqn == "model.layers.1.experts." + std::to_string(e) + ".gate");
    CHECK(mt.meta.shape == std::vector<int64_t>{4, 2});
    std::vector<float> want(w.begin() + e * 8, w.begin() + e * 8 + 8);
    for (const auto& got : assembled(ck.md, mt, whole_box(mt.meta))) CHECK(got == want);
  }
  // Stack: three per-expert tensors (two column-sharded) into [3, 4, 2], written in two row boxes.
  Checkpoint hf = checkpoint({tensor("model.layers.1.experts.0.gate", {4, 2}, {{0, 0, 4, 1}, {0, 1, 4, 1}}),
                              tensor("model.layers.1.experts.1.gate", {4, 2}, {{0, 0, 4, 2}}),
                              tensor("model.layers.1.experts.2.gate", {4, 2}, {{0, 0, 1, 2}, {1, 0, 3, 2}})});
  MappedModel st = apply_key_map(km, hf.md, all_items(hf.md), cfg);
  REQUIRE(st.tensors.size() == 1);
  CHECK(st.tensors[0].meta.fqn == "layers.1.experts.w1");
  CHECK(st.tensors[0].meta.shape == std::vector<int64_t>{3, 4, 2});
  ValueChunks hv(hf.md, false, false);
  std::vector<float> full;
  for (const auto& t : hf.md.tensors) {
    std::vector<float> x = hv.values(t);
    full.insert(full.end(), x.begin(), x.end());
  }
  for (auto [first, rows] : {std::pair<int64_t, int64_t>{0, 2}, {2, 1}}) {
    Box b = box({first, 0, 0}, {rows, 4, 2});
    std::vector<float> want(full.begin() + first * 8, full.begin() + (first + rows) * 8);
    for (const auto& got : assembled(hf.md, st.tensors[0], b)) CHECK(got == want);
  }
  // A missing expert: the stack is not made, and the experts it would have held are model
  // weights lost with it (the map declares no "model": every key is), refused with exit 5; so is
  // a key no rule covers, which is found first.
  Checkpoint gap = checkpoint({tensor("model.layers.1.experts.0.gate", {4, 2}, {{0, 0, 4, 2}}),
                               tensor("model.layers.1.experts.2.gate", {4, 2}, {{0, 0, 4, 2}}),
                               tensor("model.layers.1.other", {4, 2}, {{0, 0, 4, 2}})});
  CHECK_THROWS_WITH(apply_key_map(km, gap.md, all_items(gap.md), cfg),
                    Catch::Contains("no rule covers (1):\n    model.layers.1.other"));
  std::vector<SelectedItem> experts = all_items(gap.md);
  experts.pop_back();
  CHECK_THROWS_AS(apply_key_map(km, gap.md, experts, cfg), UnsupportedError);
  CHECK_THROWS_WITH(apply_key_map(km, gap.md, experts, cfg),
                    Catch::Contains("could not be made") &&
                        Catch::Contains("    model.layers.1.experts.0.gate\n    model.layers.1.experts.2.gate"));
}

TEST_CASE("keymap: refusals name what is wrong") {
  Checkpoint ck = checkpoint({tensor("layers.0.wq", {8, 3}, {{0, 0, 8, 3}})});
  KeyMap km = map_of(kRopeMap);
  // No config value for the heads: the parameter and the keys looked for are named.
  CHECK_THROWS_WITH(apply_key_map(km, ck.md, all_items(ck.md), config("{}")),
                    Catch::Contains("needs parameter n_heads") && Catch::Contains("num_attention_heads"));
  CHECK_THROWS_AS(apply_key_map(km, ck.md, all_items(ck.md), config("{}")), UsageError);
  // Rows that are not heads x head_dim.
  CHECK_THROWS_WITH(apply_key_map(km, ck.md, all_items(ck.md), config(R"({"num_attention_heads": 3, "head_dim": 4})")),
                    Catch::Contains("rows are not 3 heads of 4"));
  // A map none of whose patterns match.
  Checkpoint other = checkpoint({tensor("encoder.w", {2}, {{0, 2}})});
  CHECK_THROWS_WITH(apply_key_map(km, other.md, all_items(other.md), config("{}")),
                    Catch::Contains("matches none of the selected keys"));
  // Bad map files: the rule and field are named.
  CHECK_THROWS_WITH(
      map_of(
          R"({"schema": "dcpctl-map/1", "name": "x", "sides": ["a", "b"], "rules": [{"a": "k", "b": "j", "perm": 1}]})"),
      Catch::Contains("rule 0 has an unknown field \"perm\""));
  CHECK_THROWS_WITH(map_of(R"({"schema": "dcpctl-map/3", "name": "x", "sides": ["a", "b"], "rules": [{"a": "k"}]})"),
                    Catch::Contains("dcpctl-map/1"));
  CHECK_THROWS_WITH(
      map_of(R"({"schema": "dcpctl-map/1", "name": "x", "sides": ["a", "b"], "rules": [{"a": "k.{L", "b": "j"}]})"),
      Catch::Contains("unclosed"));
  CHECK_THROWS_WITH(load_key_map("no-such-map"),
                    Catch::Contains("no built-in map") && Catch::Contains("torchtitan-llama3"));
  // A parameter defined in terms of itself.
  KeyMap loop =
      map_of(R"({"schema": "dcpctl-map/1", "name": "x", "sides": ["a", "b"], "params": {"n": {"default": "n + 1"}},
    "rules": [{"a": "w", "b": "v", "rope": {"heads": "n", "head_dim": "2"}}]})");
  Checkpoint w = checkpoint({tensor("w", {4, 1}, {{0, 0, 4, 1}})});
  CHECK_THROWS_WITH(apply_key_map(loop, w.md, all_items(w.md), config("{}")), Catch::Contains("in terms of itself"));
}

TEST_CASE("keymap: every built-in map parses, and names two sides") {
  std::vector<KeyMap> maps = builtin_key_maps();
  REQUIRE(maps.size() >= 4);
  for (const auto& m : maps) {
    INFO(m.name);
    CHECK(load_key_map(m.name).rules.size() == m.rules.size());
    CHECK_FALSE(m.sides[0].empty());
    CHECK_FALSE(m.description.empty());
  }
}

TEST_CASE(
    "keymap: a whole tensor under a new name is planned as the saved tensor, and streams, a permuted one is "
    "assembled") {
  // Row shards over two ranks: each chunk is a run of the tensor's bytes.
  Checkpoint ck = checkpoint({tensor("layers.0.wq", {8, 3}, {{0, 0, 4, 3}, {4, 0, 4, 3}}, DType::Float32, 2),
                              tensor("tok", {6, 4}, {{0, 0, 3, 4}, {3, 0, 3, 4}}, DType::Float32, 2)},
                             2);
  const char* map = R"({"schema": "dcpctl-map/1", "name": "t", "sides": ["titan", "hf"],
    "params": {"n_heads": {"config": "num_attention_heads"}, "head_dim": {"config": "head_dim"}},
    "rules": [{"titan": "layers.{L}.wq", "hf": "model.layers.{L}.q_proj", "rope": {"heads": "n_heads", "head_dim": "head_dim"}},
              {"titan": "tok", "hf": "model.embed_tokens.weight"}]})";
  MappedModel mm =
      apply_key_map(map_of(map), ck.md, all_items(ck.md), config(R"({"num_attention_heads": 2, "head_dim": 4})"));
  REQUIRE(mm.tensors.size() == 2);
  CHECK_FALSE(renames_whole(ck.md, mm.tensors[0]));
  CHECK(renames_whole(ck.md, mm.tensors[1]));

  // The map's written table (view/maps/map_view.h): the inputs held at their indices, each output's parts.
  const Checkpoint table = mapped_view(ck, mm, MapTable::Written);
  REQUIRE(table.derived);
  const MappedModel& applied = *table.derived->output.map;
  for (const Format* kind : {&formats::safetensors, &formats::torch_file, &formats::dcp}) {
    Target plain;
    plain.format = kind;
    plain.world_size = 2;
    WritePlan a = plan_write(ck, {}, std::nullopt, plain), b = plan_write(table, {}, std::nullopt, plain);
    REQUIRE(b.tensors.size() == 2);
    const PlannedTensor &tok = b.tensors[1], &wq = b.tensors[0];
    CHECK(tok.renamed);
    CHECK(tok.key == "model.embed_tokens.weight");
    CHECK(tok.t == &table.md.tensors[1]);  // read as the saved tensor, held in the table
    CHECK(tok.t->fqn == "tok");
    CHECK_FALSE(wq.renamed);
    CHECK(wq.t == &applied.tensors[0].meta);
    for (size_t ri : wq.records)
      for (const Piece& p : b.records[ri].pieces) CHECK(p.source == &table.md.tensors[0]);  // the input's chunks
    // The renamed tensor's records are the unmapped plan's: the same boxes, pieces, streaming and need.
    const PlannedTensor& want = a.tensors[1];
    REQUIRE(tok.records.size() == want.records.size());
    for (size_t i = 0; i < tok.records.size(); ++i) {
      const Record &r = b.records[tok.records[i]], &w = a.records[want.records[i]];
      CHECK(r.box.offsets == w.box.offsets);
      CHECK(r.box.sizes == w.box.sizes);
      CHECK(r.pieces.size() == w.pieces.size());
      CHECK(r.streams == w.streams);
      CHECK(r.runs == w.runs);
      CHECK(r.need == w.need);
    }
    for (size_t ri : wq.records) CHECK_FALSE(b.records[ri].streams);
    // Dealt like the unmapped tensor: the permuted one is one assembled task, the renamed one not.
    if (kind == &formats::dcp) continue;  // a DCP rank file is written record by record, no tasks
    DealRequest rq;
    Deal d = deal_work(table, b, rq);
    for (const Task& t : d.tasks) {
      if (b.records[t.record].tensor == 0) CHECK(t.whole);
      if (b.records[t.record].tensor == 1)
        CHECK(t.whole == (kind == &formats::torch_file && !b.records[t.record].streams));
    }
  }
}

}  // namespace dcpctl

namespace dcpctl {

// Megatron's stacked, grouped layout: linear_qkv [L, groups x (q share, k share, v share), cols],
// tensor-parallel sharded along its rows (each rank a query group) and, here, along its columns
// too (pieces copied with their frames). Split and unstacked into per-layer q/k/v; joined and
// stacked back.
TEST_CASE("keymap: a stacked grouped concatenation (Megatron's linear_qkv), split per layer and joined back") {
  // 2 layers; 2 query groups of (2 q heads, 1 k head, 1 v head) x head_dim 2 = 8 rows each: 16 rows; 3 columns.
  Checkpoint ck = checkpoint(
      {tensor("decoder.layers.qkv", {2, 16, 3}, {{0, 0, 0, 2, 8, 2}, {0, 8, 0, 2, 8, 2}, {0, 0, 2, 2, 16, 1}})});
  MapConfig cfg =
      config(R"({"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 2})");
  const char* text = R"({"schema": "dcpctl-map/1", "name": "g", "sides": ["megatron", "hf"],
    "params": {"n_layers": {"config": "num_hidden_layers"}, "n_heads": {"config": "num_attention_heads"},
               "n_kv": {"config": "num_key_value_heads"}, "hd": {"config": "head_dim"}},
    "rules": [{"megatron": "decoder.layers.qkv", "dim": 0, "groups": "n_kv", "stack": {"dim": 0, "count": "n_layers"},
               "hf": [{"key": "layers.{L}.q", "size": "n_heads * hd"}, {"key": "layers.{L}.k", "size": "n_kv * hd"},
                      {"key": "layers.{L}.v", "size": "n_kv * hd"}]}]})";
  KeyMap km = map_of(text);
  MappedModel mm = apply_key_map(km, ck.md, all_items(ck.md), cfg);
  REQUIRE(mm.tensors.size() == 6);
  ValueChunks v(ck.md, false, false);
  std::vector<float> w = v.values(ck.md.tensors[0]);
  // Row r of layer l's q/k/v, by the definition: group g's 8 rows are 4 q rows, 2 k rows, 2 v rows.
  auto row_of = [](int part, int64_t i) {  // i: the row within the part
    const int64_t share[3] = {4, 2, 2}, at[3] = {0, 4, 6};
    return (i / share[part]) * 8 + at[part] + i % share[part];
  };
  const char* names[3] = {"q", "k", "v"};
  std::map<std::string, std::vector<float>> want;
  for (int64_t l = 0; l < 2; ++l)
    for (int part = 0; part < 3; ++part) {
      std::vector<float> t;
      for (int64_t i = 0; i < (part == 0 ? 8 : 4); ++i)
        for (int64_t c = 0; c < 3; ++c) t.push_back(w[static_cast<size_t>((l * 16 + row_of(part, i)) * 3 + c)]);
      want["layers." + std::to_string(l) + "." + names[part]] = t;
    }
  for (const auto& mt : mm.tensors) {
    INFO(mt.meta.fqn);
    REQUIRE(want.count(mt.meta.fqn));
    CHECK(mt.transforms == std::vector<std::string>{"split", "unstack"});
    for (const Box& b : {whole_box(mt.meta), box({1, 1}, {mt.meta.shape[0] - 2, 2})}) {
      std::vector<float> full = want[mt.meta.fqn];
      for (const auto& got : assembled(ck.md, mt, b)) CHECK(got == cut(full, 3, b));
    }
  }

  // Back: the six per-layer tensors (two of them column-sharded) make the stack again.
  std::vector<TensorMeta> parts;
  for (int64_t l = 0; l < 2; ++l)
    for (int part = 0; part < 3; ++part) {
      int64_t rows = part == 0 ? 8 : 4;
      parts.push_back(tensor("layers." + std::to_string(l) + "." + names[part], {rows, 3},
                             part == 1 ? std::vector<std::vector<int64_t>>{{0, 0, rows, 1}, {0, 1, rows, 2}}
                                       : std::vector<std::vector<int64_t>>{{0, 0, rows, 3}}));
    }
  Checkpoint hf = checkpoint(parts);
  MappedModel back = apply_key_map(km, hf.md, all_items(hf.md), cfg);
  REQUIRE(back.from == "hf");
  REQUIRE(back.tensors.size() == 1);
  CHECK(back.tensors[0].meta.fqn == "decoder.layers.qkv");
  CHECK(back.tensors[0].meta.shape == std::vector<int64_t>{2, 16, 3});
  CHECK(back.tensors[0].transforms == std::vector<std::string>{"join", "stack"});
  ValueChunks hv(hf.md, false, false);
  std::vector<float> stacked(2 * 16 * 3);
  for (int64_t l = 0; l < 2; ++l)
    for (int part = 0; part < 3; ++part) {
      std::vector<float> t = hv.values(hf.md.tensors[static_cast<size_t>(l * 3 + part)]);
      for (int64_t i = 0; i < (part == 0 ? 8 : 4); ++i)
        for (int64_t c = 0; c < 3; ++c)
          stacked[static_cast<size_t>((l * 16 + row_of(part, i)) * 3 + c)] = t[static_cast<size_t>(i * 3 + c)];
    }
  Box whole = whole_box(back.tensors[0].meta);
  for (const auto& got : assembled(hf.md, back.tensors[0], whole)) CHECK(got == stacked);

  // A part that the groups do not divide is refused, naming it.
  MapConfig odd =
      config(R"({"num_hidden_layers": 2, "num_attention_heads": 3, "num_key_value_heads": 2, "head_dim": 1})");
  CHECK_THROWS_WITH(apply_key_map(km, ck.md, all_items(ck.md), odd), Catch::Contains("not a multiple of the 2 groups"));
}

TEST_CASE("keymap: {NAME + EXPR} placeholders: DeepSeek's MTP block after the main layers, both ways") {
  const char* text = R"({"schema": "dcpctl-map/1", "name": "mtp", "sides": ["titan", "hf"],
    "params": {"n_layers": {"config": "num_hidden_layers"}},
    "rules": [{"titan": "mtp_layers.{M}.norm", "hf": "model.layers.{M + n_layers}.norm"},
              {"hf": "model.layers.{M + n_layers}.embed_tokens", "reason": "repeated"},
              {"titan": "layers.{L}.norm", "hf": "model.layers.{L}.norm"}]})";
  KeyMap km = map_of(text);
  MapConfig cfg = config(R"({"num_hidden_layers": 61})");
  Checkpoint titan = checkpoint({tensor("layers.0.norm", {2}, {{0, 2}}), tensor("layers.60.norm", {2}, {{0, 2}}),
                                 tensor("mtp_layers.0.norm", {2}, {{0, 2}})});
  MappedModel mm = apply_key_map(km, titan.md, all_items(titan.md), cfg);
  std::vector<std::string> names;
  for (const auto& mt : mm.tensors) names.push_back(mt.meta.fqn);
  CHECK(names == std::vector<std::string>{"model.layers.0.norm", "model.layers.60.norm", "model.layers.61.norm"});

  Checkpoint hf = checkpoint(
      {tensor("model.layers.0.norm", {2}, {{0, 2}}), tensor("model.layers.60.norm", {2}, {{0, 2}}),
       tensor("model.layers.61.norm", {2}, {{0, 2}}), tensor("model.layers.61.embed_tokens", {2}, {{0, 2}})});
  MappedModel back = apply_key_map(km, hf.md, all_items(hf.md), cfg);
  names.clear();
  for (const auto& mt : back.tensors) names.push_back(mt.meta.fqn);
  CHECK(names == std::vector<std::string>{"layers.0.norm", "layers.60.norm", "mtp_layers.0.norm"});
  CHECK(back.dropped == std::vector<std::string>{"model.layers.61.embed_tokens"});

  // Without the parameter the layers cannot be told apart: exit 2 naming it.
  CHECK_THROWS_WITH(apply_key_map(km, hf.md, all_items(hf.md), MapConfig{nullptr, "looked for x/config.json"}),
                    Catch::Contains("n_layers"));
  // Malformed offsets are map errors.
  CHECK_THROWS_WITH(
      map_of(
          R"({"schema": "dcpctl-map/1", "name": "x", "sides": ["a", "b"], "rules": [{"a": "x.{M +}", "b": "y.{M}"}]})"),
      Catch::Contains("expression after +"));
}

}  // namespace dcpctl

namespace dcpctl {
namespace {

// The last two dims of a dense [n, a, b] tensor swapped: [n, b, a].
std::vector<float> swap_last(const std::vector<float>& w, int64_t n, int64_t a, int64_t b) {
  std::vector<float> out(w.size());
  for (int64_t e = 0; e < n; ++e)
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < b; ++j)
        out[static_cast<size_t>((e * b + j) * a + i)] = w[static_cast<size_t>((e * a + i) * b + j)];
  return out;
}

// Box `bx` of a dense 3-d tensor of `shape`.
std::vector<float> cut3(const std::vector<float>& f, const std::vector<int64_t>& shape, const Box& bx) {
  std::vector<float> out;
  for (int64_t e = bx.offsets[0]; e < bx.offsets[0] + bx.sizes[0]; ++e)
    for (int64_t i = bx.offsets[1]; i < bx.offsets[1] + bx.sizes[1]; ++i)
      for (int64_t j = bx.offsets[2]; j < bx.offsets[2] + bx.sizes[2]; ++j)
        out.push_back(f[static_cast<size_t>((e * shape[1] + i) * shape[2] + j)]);
  return out;
}

const char* kTransposeMap = R"({"schema": "dcpctl-map/1", "name": "tr", "sides": ["titan", "hf"],
  "params": {"F": {"config": "moe_intermediate_size"}},
  "rules": [
    {"titan": "layers.{L}.mlp2", "hf": "model.layers.{L}.down_proj", "transpose": true},
    {"titan": [{"key": "layers.{L}.w1", "size": "F"}, {"key": "layers.{L}.w3", "size": "F"}], "hf": "model.layers.{L}.gate_up_proj",
     "dim": 2, "transpose": true},
    {"titan": "layers.{L}.norm", "hf": "model.layers.{L}.norm"}
  ]})";

}  // namespace

TEST_CASE(
    "keymap: transposed grouped experts, one to one and fused along the last dim, both ways, in boxes that cut them") {
  // mlp2 [3, 4, 5] sharded by experts and by columns; w1, w3 [2, 3, 4] by rows of the middle dim and by experts.
  Checkpoint ck =
      checkpoint({tensor("layers.0.mlp2", {3, 4, 5}, {{0, 0, 0, 2, 4, 3}, {0, 0, 3, 2, 4, 2}, {2, 0, 0, 1, 4, 5}}),
                  tensor("layers.0.w1", {2, 3, 4}, {{0, 0, 0, 2, 1, 4}, {0, 1, 0, 2, 2, 4}}),
                  tensor("layers.0.w3", {2, 3, 4}, {{0, 0, 0, 1, 3, 4}, {1, 0, 0, 1, 3, 4}}),
                  tensor("layers.0.norm", {5}, {{0, 5}})});
  MapConfig cfg = config(R"({"moe_intermediate_size": 3})");
  KeyMap km = map_of(kTransposeMap);
  CHECK(rule_kinds(km) == std::vector<std::string>{"concat", "rename", "transpose"});
  MappedModel mm = apply_key_map(km, ck.md, all_items(ck.md), cfg);
  REQUIRE(mm.tensors.size() == 3);
  ValueChunks v(ck.md, false, false);
  std::vector<float> down = swap_last(v.values(ck.md.tensors[0]), 3, 4, 5);
  std::vector<float> w1 = swap_last(v.values(ck.md.tensors[1]), 2, 3, 4),
                     w3 = swap_last(v.values(ck.md.tensors[2]), 2, 3, 4);
  std::vector<float> gate_up;  // [2, 4, 6]: per expert and row, w1ᵀ's 3 columns then w3ᵀ's
  for (int64_t e = 0; e < 2; ++e)
    for (int64_t r = 0; r < 4; ++r)
      for (const auto* w : {&w1, &w3})
        for (int64_t c = 0; c < 3; ++c) gate_up.push_back((*w)[static_cast<size_t>((e * 4 + r) * 3 + c)]);

  const MappedTensor& d = mm.tensors[0];
  CHECK(d.meta.fqn == "model.layers.0.down_proj");
  CHECK(d.meta.shape == std::vector<int64_t>{3, 5, 4});
  CHECK(d.transforms == std::vector<std::string>{"transpose"});
  CHECK_FALSE(renames_whole(ck.md, d));
  for (const Box& b : {box({0, 0, 0}, {3, 5, 4}), box({1, 1, 1}, {2, 3, 2}), box({2, 4, 0}, {1, 1, 4})})
    for (const auto& got : assembled(ck.md, d, b)) CHECK(got == cut3(down, {3, 5, 4}, b));
  const MappedTensor& gu = mm.tensors[1];
  CHECK(gu.meta.fqn == "model.layers.0.gate_up_proj");
  CHECK(gu.meta.shape == std::vector<int64_t>{2, 4, 6});
  CHECK(gu.transforms == std::vector<std::string>{"join", "transpose"});
  for (const Box& b : {box({0, 0, 0}, {2, 4, 6}), box({1, 0, 2}, {1, 4, 2}), box({0, 3, 0}, {2, 1, 6})})
    for (const auto& got : assembled(ck.md, gu, b)) CHECK(got == cut3(gate_up, {2, 4, 6}, b));
  CHECK(mm.tensors[2].transforms == std::vector<std::string>{"rename"});

  // Back: hf's gate_up_proj [2, 4, 6] (sharded along its last dim across the w1/w3 seam) splits into w1, w3 [2, 3, 4].
  Checkpoint hf =
      checkpoint({tensor("model.layers.0.gate_up_proj", {2, 4, 6}, {{0, 0, 0, 2, 4, 2}, {0, 0, 2, 2, 4, 4}}),
                  tensor("model.layers.0.down_proj", {3, 5, 4}, {{0, 0, 0, 3, 5, 4}})});
  MappedModel back = apply_key_map(km, hf.md, all_items(hf.md), cfg);
  REQUIRE(back.from == "hf");
  REQUIRE(back.tensors.size() == 3);
  ValueChunks hv(hf.md, false, false);
  std::vector<float> g = hv.values(hf.md.tensors[0]);
  for (int part = 0; part < 2; ++part) {
    std::vector<float> slice;  // [2, 4, 3]: columns part*3 .. part*3+2
    for (int64_t e = 0; e < 2; ++e)
      for (int64_t r = 0; r < 4; ++r)
        for (int64_t c = 0; c < 3; ++c) slice.push_back(g[static_cast<size_t>((e * 4 + r) * 6 + part * 3 + c)]);
    std::vector<float> want = swap_last(slice, 2, 4, 3);
    const MappedTensor& mt = back.tensors[static_cast<size_t>(part)];
    CHECK(mt.meta.fqn == std::string("layers.0.") + (part ? "w3" : "w1"));
    CHECK(mt.meta.shape == std::vector<int64_t>{2, 3, 4});
    CHECK(mt.transforms == std::vector<std::string>{"split", "transpose"});
    for (const Box& b : {box({0, 0, 0}, {2, 3, 4}), box({1, 1, 1}, {1, 2, 3})})
      for (const auto& got : assembled(hf.md, mt, b)) CHECK(got == cut3(want, {2, 3, 4}, b));
  }
  std::vector<float> mlp2 = swap_last(hv.values(hf.md.tensors[1]), 3, 5, 4);
  for (const auto& got : assembled(hf.md, back.tensors[2], whole_box(back.tensors[2].meta))) CHECK(got == mlp2);

  // A 1-d tensor has nothing to transpose; transpose beside rope or a stack is no rule kind.
  Checkpoint flat = checkpoint({tensor("layers.0.mlp2", {6}, {{0, 6}})});
  CHECK_THROWS_WITH(apply_key_map(km, flat.md, all_items(flat.md), cfg), Catch::Contains("no last two to transpose"));
  CHECK_THROWS_WITH(
      map_of(R"({"schema": "dcpctl-map/1", "name": "x", "sides": ["a", "b"], "params": {"h": {"default": "2"}},
    "rules": [{"a": "w", "b": "v", "transpose": true, "rope": {"heads": "h", "head_dim": "h"}}]})"),
      Catch::Contains("\"transpose\" with \"rope\""));
  CHECK_THROWS_WITH(
      map_of(R"({"schema": "dcpctl-map/1", "name": "x", "sides": ["a", "b"], "params": {"n": {"default": "2"}},
    "rules": [{"a": [{"key": "w1.{E}", "size": "n"}, {"key": "w3.{E}", "size": "n"}], "b": "v", "dim": 1, "transpose": true,
               "experts": {"dim": 0, "count": "n"}}]})"),
      Catch::Contains("\"transpose\" of a stacked list"));
  CHECK_THROWS_WITH(
      map_of(
          R"({"schema": "dcpctl-map/1", "name": "x", "sides": ["a", "b"], "rules": [{"a": "w", "b": "v", "transpose": 1}]})"),
      Catch::Contains("true or false"));
}

TEST_CASE(
    "keymap: a stacked transpose with gate/up interleaved (megatron's GPT-OSS experts), both ways, in boxes that cut "
    "them") {
  // w [L 2, E 2, 2F 4, D 3] ([gate; up] along dim 2, one layer's entry [E, 2F, D]) <-> v.<l> [E 2, D 3, 2F 4]
  // alternating: v[l][e][d][2r + h] = w[l][e][h F + r][d], F = 2.
  const char* map = R"({"schema": "dcpctl-map/1", "name": "x", "sides": ["a", "b"], "params": {"n": {"default": "2"}},
    "rules": [{"a": "w", "b": "v.{L}", "transpose": true, "interleave": 1, "stack": {"dim": 0, "count": "n"}}]})";
  KeyMap km = map_of(map);
  CHECK(rule_kinds(km) == std::vector<std::string>{"interleave", "stack", "transpose"});
  Checkpoint ck = checkpoint(
      {tensor("w", {2, 2, 4, 3}, {{0, 0, 0, 0, 1, 2, 4, 3}, {1, 0, 0, 0, 1, 2, 2, 3}, {1, 0, 2, 0, 1, 2, 2, 3}})});
  MappedModel mm = apply_key_map(km, ck.md, all_items(ck.md), config("{}"));
  REQUIRE(mm.tensors.size() == 2);
  std::vector<float> w = ValueChunks(ck.md, false, false).values(ck.md.tensors[0]);
  auto src = [](int64_t c) { return (c % 2) * 2 + c / 2; };  // v's column c <- w's row
  for (int64_t l = 0; l < 2; ++l) {
    const MappedTensor& mt = mm.tensors[static_cast<size_t>(l)];
    CHECK(mt.meta.fqn == "v." + std::to_string(l));
    CHECK(mt.meta.shape == std::vector<int64_t>{2, 3, 4});
    CHECK(mt.transforms == std::vector<std::string>{"unstack", "transpose", "interleave"});
    std::vector<float> want;
    for (int64_t e = 0; e < 2; ++e)
      for (int64_t d = 0; d < 3; ++d)
        for (int64_t c = 0; c < 4; ++c) want.push_back(w[static_cast<size_t>(((l * 2 + e) * 4 + src(c)) * 3 + d)]);
    for (const Box& b : {box({0, 0, 0}, {2, 3, 4}), box({1, 1, 1}, {1, 2, 2}), box({0, 2, 0}, {2, 1, 3})})
      for (const auto& got : assembled(ck.md, mt, b)) CHECK(got == cut3(want, {2, 3, 4}, b));
  }
  // Back: v.0, v.1 (each cut along its last dim, across the interleaving) stacked into w.
  Checkpoint hf = checkpoint({tensor("v.0", {2, 3, 4}, {{0, 0, 0, 2, 3, 2}, {0, 0, 2, 2, 3, 2}}),
                              tensor("v.1", {2, 3, 4}, {{0, 0, 0, 1, 3, 4}, {1, 0, 0, 1, 3, 4}})});
  MappedModel back = apply_key_map(km, hf.md, all_items(hf.md), config("{}"));
  REQUIRE(back.tensors.size() == 1);
  const MappedTensor& bt = back.tensors[0];
  CHECK(bt.meta.fqn == "w");
  CHECK(bt.meta.shape == std::vector<int64_t>{2, 2, 4, 3});
  CHECK(bt.transforms == std::vector<std::string>{"stack", "transpose", "interleave"});
  ValueChunks hv(hf.md, false, false);
  std::vector<float> v0 = hv.values(hf.md.tensors[0]), v1 = hv.values(hf.md.tensors[1]), want;
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t e = 0; e < 2; ++e)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t d = 0; d < 3; ++d)
          want.push_back((l ? v1 : v0)[static_cast<size_t>((e * 3 + d) * 4 + (j % 2) * 2 + j / 2)]);
  auto cut4 = [&](const Box& b) {
    std::vector<float> out;
    for (int64_t a = b.offsets[0]; a < b.offsets[0] + b.sizes[0]; ++a)
      for (int64_t e = b.offsets[1]; e < b.offsets[1] + b.sizes[1]; ++e)
        for (int64_t j = b.offsets[2]; j < b.offsets[2] + b.sizes[2]; ++j)
          for (int64_t d = b.offsets[3]; d < b.offsets[3] + b.sizes[3]; ++d)
            out.push_back(want[static_cast<size_t>(((a * 2 + e) * 4 + j) * 3 + d)]);
    return out;
  };
  for (const Box& b :
       {box({0, 0, 0, 0}, {2, 2, 4, 3}), box({0, 1, 1, 0}, {2, 1, 2, 3}), box({1, 0, 3, 1}, {1, 2, 1, 2})})
    for (const auto& got : assembled(hf.md, bt, b)) CHECK(got == cut4(b));
  // Interleave takes two halves, one key on each side, and no rope.
  Checkpoint odd = checkpoint({tensor("w", {2, 2, 3, 3}, {{0, 0, 0, 0, 2, 2, 3, 3}})});
  CHECK_THROWS_WITH(apply_key_map(km, odd.md, all_items(odd.md), config("{}")),
                    Catch::Contains("not two halves to interleave"));
  CHECK_THROWS_WITH(map_of(R"({"schema": "dcpctl-map/1", "name": "x", "sides": ["a", "b"],
    "rules": [{"a": [{"key": "g", "size": "2"}, {"key": "u", "size": "2"}], "b": "v", "dim": 0, "interleave": 0}]})"),
                    Catch::Contains("\"interleave\" belongs to a rule with one key on each side"));
}

}  // namespace dcpctl

namespace dcpctl {

TEST_CASE("keymap: a parameter from a dotted config key reads a nested object (text_config)") {
  Checkpoint ck = checkpoint({tensor("layers.0.w1", {3, 4, 2}, {{0, 0, 0, 3, 4, 2}})});
  KeyMap km = map_of(R"({"schema": "dcpctl-map/1", "name": "n", "sides": ["titan", "hf"],
    "params": {"n": {"config": ["num_experts", "text_config.num_experts"]}},
    "rules": [{"titan": "layers.{L}.w1", "hf": "m.{L}.experts.{E}.gate", "experts": {"dim": 0, "count": "n"}}]})");
  MappedModel mm = apply_key_map(km, ck.md, all_items(ck.md), config(R"({"text_config": {"num_experts": 3}})"));
  CHECK(mm.tensors.size() == 3);
  CHECK(mm.config == "config.json");
  // The top-level key wins where both are there; a nested value that is not an integer is no value.
  CHECK_THROWS_WITH(
      apply_key_map(km, ck.md, all_items(ck.md), config(R"({"num_experts": 2, "text_config": {"num_experts": 3}})")),
      Catch::Contains("is not the 2 entries of its stack (n, {E})"));
  CHECK_THROWS_WITH(apply_key_map(km, ck.md, all_items(ck.md), config(R"({"text_config": {"num_experts": "3"}})")),
                    Catch::Contains("text_config.num_experts"));
}

}  // namespace dcpctl

namespace dcpctl {

TEST_CASE("keymap: a tied model's missing lm_head.weight is copied from the embedding, only when config.json ties") {
  KeyMap km = map_of(R"({"schema": "dcpctl-map/1", "name": "t", "sides": ["titan", "hf"],
    "rules": [{"titan": "tok_embeddings.weight", "hf": "model.embed_tokens.weight"},
              {"titan": "lm_head.weight", "hf": "lm_head.weight", "tied": {"hf": "model.embed_tokens.weight"}}]})");
  CHECK(rule_kinds(km) == std::vector<std::string>{"rename", "tied"});
  Checkpoint hf = checkpoint({tensor("model.embed_tokens.weight", {6, 2}, {{0, 0, 3, 2}, {3, 0, 3, 2}})});
  MappedModel mm = apply_key_map(km, hf.md, all_items(hf.md), config(R"({"tie_word_embeddings": true})"));
  REQUIRE(mm.tensors.size() == 2);
  const MappedTensor& head = mm.tensors[1];
  CHECK(head.meta.fqn == "lm_head.weight");
  CHECK(head.transforms == std::vector<std::string>{"copy"});
  CHECK(head.inputs == std::vector<std::string>{"model.embed_tokens.weight"});
  CHECK(mm.inputs == 1);
  ValueChunks v(hf.md, false, false);
  for (const auto& got : assembled(hf.md, head, whole_box(head.meta))) CHECK(got == v.values(hf.md.tensors[0]));
  // Not tied, or a head of its own, or the other direction: no copy.
  CHECK(apply_key_map(km, hf.md, all_items(hf.md), config(R"({"tie_word_embeddings": false})")).tensors.size() == 1);
  CHECK(apply_key_map(km, hf.md, all_items(hf.md), config("{}")).tensors.size() == 1);
  Checkpoint own = checkpoint(
      {tensor("model.embed_tokens.weight", {6, 2}, {{0, 0, 6, 2}}), tensor("lm_head.weight", {6, 2}, {{0, 0, 6, 2}})});
  MappedModel kept = apply_key_map(km, own.md, all_items(own.md), config(R"({"tie_word_embeddings": true})"));
  REQUIRE(kept.tensors.size() == 2);
  CHECK(kept.tensors[1].transforms == std::vector<std::string>{"rename"});
  Checkpoint titan = checkpoint({tensor("tok_embeddings.weight", {6, 2}, {{0, 0, 6, 2}})});
  CHECK(apply_key_map(km, titan.md, all_items(titan.md), config(R"({"tie_word_embeddings": true})")).tensors.size() ==
        1);
  CHECK_THROWS_WITH(map_of(R"({"schema": "dcpctl-map/1", "name": "x", "sides": ["a", "b"],
    "rules": [{"a": "l.{L}.w", "b": "m.{L}.w", "tied": {"b": "e"}}]})"),
                    Catch::Contains("\"tied\" is {SIDE: KEY}"));
}

}  // namespace dcpctl
