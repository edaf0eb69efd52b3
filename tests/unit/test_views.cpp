// The view layer (meta/derived.h, src/view/): derived tensors read through the item reader at
// every level of a table, tables carried and renamed, and the memory a derived read holds counted
// by the plan. On real fixtures: DeepSeek-V3-style fp8 blocks (hf_fp8_deepseek, written by
// torch's HuggingFaceStorageWriter over transformers' FineGrainedFP8 quantizer, see its make_*.py).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "item/item_reader.h"
#include "meta/checkpoint.h"
#include "meta/pieces.h"
#include "plan/memory.h"
#include "plan/plan.h"
#include "util/dtype.h"
#include "util/error.h"
#include "view/codecs/dequantize.h"
#include "view/codecs/quantized.h"
#include "view/kernels.h"
#include "view/model.h"

using namespace dcpctl;

namespace {

Checkpoint fp8_fixture() {
  return open_checkpoint(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/layouts/hf_fp8_deepseek/ckpt");
}

const TensorMeta& tensor(const Checkpoint& ck, const std::string& fqn) {
  for (const TensorMeta& t : ck.md.tensors)
    if (t.fqn == fqn) return t;
  FAIL("no tensor " << fqn);
  throw;
}

std::string first_scaled_weight(const Checkpoint& ck) {
  for (const TensorMeta& t : ck.md.tensors)
    if (t.fqn.size() > 10 && t.fqn.compare(t.fqn.size() - 10, 10, "_scale_inv") == 0)
      return t.fqn.substr(0, t.fqn.size() - 10);
  FAIL("the fixture has no scaled weight");
  throw;
}

// A test view: a tensor read as its value in the table below, negated (float32).
class Negated final : public DerivedTensor {
 public:
  explicit Negated(TensorMeta t) : t_(std::move(t)) {}
  const TensorMeta& follows() const override { return t_; }
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    if (n == UINT64_MAX) n = t_.chunk_numel(chunk) * 4 - from;
    below.read(t_, chunk, from, n, dst);
    float* f = static_cast<float*>(dst);
    for (uint64_t i = 0; i < n / 4; ++i) f[i] = -f[i];
  }
  uint64_t working_bytes(size_t) const override { return 7; }

 private:
  TensorMeta t_;
};

std::vector<float> read_chunk_floats(const ItemReader& r, const TensorMeta& t, size_t c) {
  std::vector<float> out(t.chunk_numel(c));
  r.read_chunk(t, c, out.data());
  return out;
}

}  // namespace

TEST_CASE("views: a dequantized weight is computed through the item reader and its scale leaves the table") {
  Checkpoint ck = fp8_fixture();
  const std::string w = first_scaled_weight(ck);
  std::optional<Checkpoint> view = dequantized_view(ck, DType::BFloat16, ModelConfig());
  REQUIRE(view);
  REQUIRE(view->derived);
  REQUIRE(view->derived->find(w));
  CHECK_FALSE(view->derived->find(w + "_scale_inv"));
  for (const TensorMeta& t : view->md.tensors) CHECK(t.fqn != w + "_scale_inv");
  CHECK(view->derived->views.contains("dequantized"));
  CHECK(view->derived->output.dequantized);

  // The saved checkpoint's reader gives the fp8 bytes; the view's computes the float32 values from
  // them and the scale, exactly as the kernel does.
  const TensorMeta& saved = tensor(ck, w);
  const TensorMeta& scale = tensor(ck, w + "_scale_inv");
  ItemReader saved_reader(ck), view_reader(*view);
  REQUIRE(saved.ndim() == 2);
  std::vector<float> scale_values(scale.numel());
  REQUIRE(scale.num_chunks() == 1);
  saved_reader.read_chunk(scale, 0, scale_values.data());
  // The fixture's config.json says 4x4 blocks; the view says what it used.
  const nlohmann::json& said = view->derived->views["dequantized"]["block"];
  REQUIRE(said.is_array());
  const int64_t block[2] = {said[0].get<int64_t>(), said[1].get<int64_t>()};
  CHECK(block[0] == 4);
  for (size_t c = 0; c < saved.num_chunks(); ++c) {
    std::vector<uint8_t> q(saved.chunk_numel(c));
    saved_reader.read_chunk(saved, c, q.data());
    std::vector<float> want(q.size());
    dequantize_fp8_blocks(*saved.dtype, q.data(), chunk_box(saved, c), scale_values.data(), scale.shape[1], block,
                          want.data());
    std::vector<float> got = read_chunk_floats(view_reader, tensor(*view, w), c);
    CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
    // A byte range from inside the chunk is the same bytes.
    if (got.size() > 3) {
      float part[2];
      view_reader.read_chunk_bytes(tensor(*view, w), c, 4, 8, part);
      CHECK(std::memcmp(part, got.data() + 1, 8) == 0);
    }
    CHECK_FALSE(view_reader.readable_in_place(tensor(*view, w), c));
  }
}

TEST_CASE("views: tables compose: a view over a derived tensor reads it through the table below (renamed or dropped)") {
  Checkpoint ck = fp8_fixture();
  const std::string w = first_scaled_weight(ck);
  std::optional<Checkpoint> deq = dequantized_view(ck, DType::Float32, ModelConfig());
  REQUIRE(deq);
  // A second view: w renamed to "renamed.w" and negated; every other derived entry dropped.
  Checkpoint top = *deq;
  std::shared_ptr<DerivedTable> table =
      table_over(deq->derived, [&](const std::string& name) { return name == w ? std::string() : name; });
  CHECK_FALSE(table->find(w));
  CHECK(table->tensors.size() + 1 == deq->derived->tensors.size());
  CHECK(table->views == deq->derived->views);
  TensorMeta below = tensor(*deq, w);
  TensorMeta renamed = below;
  renamed.fqn = "renamed.w";
  for (TensorMeta& t : top.md.tensors)
    if (t.fqn == w) t = renamed;
  table->tensors["renamed.w"] = {std::make_shared<Negated>(below), deq->derived};
  top.derived = table;

  ItemReader deq_reader(*deq), top_reader(top);
  for (size_t c = 0; c < below.num_chunks(); ++c) {
    std::vector<float> want = read_chunk_floats(deq_reader, below, c);
    std::vector<float> got = read_chunk_floats(top_reader, renamed, c);
    REQUIRE(got.size() == want.size());
    bool negated = true;
    for (size_t i = 0; i < got.size(); ++i)
      negated = negated && (got[i] == -want[i] || (got[i] != got[i] && want[i] != want[i]));
    CHECK(negated);
  }
  // Its own 7 bytes, and on top what reading its input holds below: the dequantized weight's
  // largest chunk read (the fp8 chunk, its scale, the float32 values).
  uint64_t below_need = 0;
  for (size_t c = 0; c < below.num_chunks(); ++c)
    below_need = std::max(below_need, deq->derived->working_bytes(below, c));
  CHECK(below_need > 0);
  CHECK(table->working_bytes(renamed, 0) == 7 + below_need);
  CHECK(table->working_bytes(tensor(*deq, w), 0) == 0);  // no entry of that name in the top table
}

TEST_CASE("views: --max-memory counts what a derived read holds (the scale and the fp8 chunk and its float32 copy)") {
  Checkpoint ck = fp8_fixture();
  const std::string w = first_scaled_weight(ck);
  ModelRequest rq;
  rq.cast = DType::BFloat16;
  Model model = build_model(ck, rq);
  const Checkpoint& view = model.checkpoint();
  REQUIRE(view.derived);
  Target target;  // one .safetensors file
  WritePlan plan = plan_write(view, {}, DType::BFloat16, target);
  bool seen = false;
  for (const PlannedTensor& pt : plan.tensors) {
    for (size_t ri : pt.records) {
      const Record& r = plan.records[ri];
      const uint64_t view_need = view_read_need(view.derived.get(), r.pieces);
      Record plain = r;
      const uint64_t without = record_need(pt, plain, target, 0, nullptr);
      if (pt.t->fqn == w) {
        seen = true;
        const TensorMeta& scale = tensor(ck, w + "_scale_inv");
        // At least the scale read whole and the fp8 chunk with its float32 values.
        CHECK(view_need >= scale.numel() * 4 + pt.t->chunk_numel(r.pieces.front().chunk) * 5);
        CHECK(r.need == without + view_need);
      } else if (!view.derived->find(pt.t->fqn)) {
        CHECK(view_need == 0);
        CHECK(r.need == without);
      }
    }
  }
  CHECK(seen);
}

TEST_CASE("views: the model's config.json is read once per file, and each reader's rule picks from the same order") {
  char tmpl[] = "/tmp/dcpctl-model-config-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string root = tmpl;
  auto write = [](const std::string& path, const std::string& text) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  };
  for (const char* d : {"/run", "/run/sharded", "/assets"}) REQUIRE(mkdir((root + d).c_str(), 0755) == 0);
  write(root + "/run/config.json", R"({"where": "run"})");
  write(root + "/assets/config.json", R"({"where": "assets"})");
  write(root + "/given.json", R"({"where": "given"})");
  Checkpoint ck;
  ck.dir = root + "/run/sharded";
  // A sharded/ folder's parent: map, saved and policy all find it.
  const ModelConfig plain;
  CHECK(plain.map(ck.dir).json["where"] == "run");
  CHECK(plain.saved(ck).json["where"] == "run");
  CHECK(plain.policy(ck).json["where"] == "run");
  // --assets first; --config first for the map and the policy, never for the saved config.
  const ModelConfig both(root + "/given.json", root + "/assets");
  CHECK(both.map(ck.dir).json["where"] == "given");
  CHECK(both.policy(ck).json["where"] == "given");
  CHECK(both.saved(ck).json["where"] == "assets");
  CHECK(both.heads_tries(ck, "").front() == root + "/given.json");
  // Read once: the held text stays what was read, the file changed or gone.
  const ModelConfig once;
  REQUIRE(once.file(root + "/run/config.json"));
  std::remove((root + "/run/config.json").c_str());
  CHECK(once.map(ck.dir).json["where"] == "run");
  CHECK(once.file(root + "/run/config.json") == once.file(root + "/run/config.json"));
  CHECK(plain.policy(ck).path == root + "/run/config.json");  // `plain` read it before too
  CHECK(ModelConfig().map(ck.dir).json.is_null());            // a new command looks again
  // Not a JSON object: the map refuses it, the policy passes over it.
  write(ck.dir + "/config.json", "[1]");
  CHECK_THROWS_AS(ModelConfig().map(ck.dir), UsageError);
  CHECK(ModelConfig().policy(ck).json.is_null());
  CHECK_THROWS_AS(ModelConfig(root + "/none.json", "").map(ck.dir), UsageError);
  for (const char* f : {"/run/sharded/config.json", "/assets/config.json", "/given.json"})
    std::remove((root + f).c_str());
  for (const char* d : {"/run/sharded", "/run", "/assets", ""}) rmdir((root + d).c_str());
}

TEST_CASE("views: a dequantized config keeps a pruned model's per-layer expert counts, and only those") {
  using nlohmann::json;
  const json sparsity = {{"method", "prune"}, {"num_experts", {nullptr, 7, 5}}};
  json c = {{"num_local_experts", 5},
            {"dtype", "bfloat16"},
            {"quantization_config",
             {{"quant_method", "compressed-tensors"},
              {"config_groups", {{"group_0", {{"targets", {"Linear"}}}}}},
              {"moe_sparsity_config", sparsity}}}};
  // Layer 1 keeps 7 where the model counts 5: only moe_sparsity_config says so, kept alone.
  json out = json::parse(dequantized_config(c.dump(), DType::Float32));
  CHECK(out["dtype"] == "float32");
  CHECK(out["quantization_config"] == json({{"quant_method", "compressed-tensors"},
                                            {"config_groups", json::object()},
                                            {"moe_sparsity_config", sparsity}}));
  // Every layer the model's count: the config says it all (transformers 5.24 fails on a
  // compressed-tensors config without groups), so the quantization_config goes as before.
  c["num_local_experts"] = 7;
  c["quantization_config"]["moe_sparsity_config"]["num_experts"] = {nullptr, 7, 7};
  CHECK(!json::parse(dequantized_config(c.dump(), DType::BFloat16)).contains("quantization_config"));
  c["quantization_config"].erase("moe_sparsity_config");
  CHECK(!json::parse(dequantized_config(c.dump(), DType::BFloat16)).contains("quantization_config"));
}
