// A key map never drops a model weight without saying so in the exit code (view/maps/keymap.h): the
// map's "model" namespaces say which input keys are the model; a model key no rule covers, or one
// taken into an output that could not be made, is UnsupportedError (exit 5) naming the map and
// every such key; a one-sided rule drops a key only with its "reason"; --exclude (excluded_keys)
// is how a user leaves one out on purpose; what lies outside the model is left out as before.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "meta/select.h"
#include "metadata_models.h"
#include "util/error.h"
#include "view/maps/keymap.h"

namespace dcpctl {
namespace {

KeyMap model_map_of(const std::string& text) {
  char name[] = "/tmp/dcpctl-model-map-XXXXXX.json";
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

MapConfig no_config() {
  return {nlohmann::json::object(), "config.json"};
}

const char* kModelMap = R"({"schema": "dcpctl-map/1", "name": "m", "sides": ["titan", "hf"],
  "model": {"titan": ["layers.", "norm."], "hf": ["model."]},
  "rules": [
    {"titan": "layers.{L}.w", "hf": "model.layers.{L}.w"},
    {"titan": "layers.{L}.expert_bias", "reason": "the router's load-balancing bias; hf has none"},
    {"titan": "layers.{L}.qk", "dim": 0, "hf": [{"key": "model.layers.{L}.q", "size": "2"}, {"key": "model.layers.{L}.k", "size": "2"}]}
  ]})";

TensorMeta t2(const std::string& key) {
  return tensor(key, {2, 2}, {{0, 0, 2, 2}});
}

}  // namespace

TEST_CASE("keymap model: keys outside the model are left out, dropped ones carry their rule's reason") {
  KeyMap km = model_map_of(kModelMap);
  REQUIRE(km.has_model);
  Checkpoint ck = checkpoint({t2("layers.0.w"), t2("layers.0.expert_bias"), t2("optimizer.state.layers.0.w.exp_avg")});
  MappedModel mm = apply_key_map(km, ck.md, select_items(ck.md, {}), no_config());
  CHECK(mm.left_out == std::vector<std::string>{"optimizer.state.layers.0.w.exp_avg"});
  CHECK(mm.dropped == std::vector<std::string>{"layers.0.expert_bias"});
  CHECK(mm.reasons == std::vector<std::string>{"the router's load-balancing bias; hf has none"});
  CHECK(mm.model == std::vector<std::string>{"layers.", "norm."});
  nlohmann::json j = mm.describe();
  CHECK(j["drop_reasons"]["layers.0.expert_bias"] == "the router's load-balancing bias; hf has none");
  CHECK(j["model"] == nlohmann::json({"layers.", "norm."}));
  CHECK(j["excluded"] == nlohmann::json::array());
}

TEST_CASE(
    "keymap model: a model key no rule covers is exit 5 naming the map and every such key, and --exclude leaves it out "
    "on purpose") {
  KeyMap km = model_map_of(kModelMap);
  Checkpoint ck =
      checkpoint({t2("layers.0.w"), t2("layers.0.q_layernorm.weight"), t2("norm.weight"), t2("optimizer.step")});
  auto run = [&](const Selection& sel) { return apply_key_map(km, ck.md, select_items(ck.md, sel), no_config()); };
  CHECK_THROWS_AS(run({}), UnsupportedError);
  CHECK_THROWS_WITH(run({}),
                    Catch::Contains("map m (titan->hf) would lose 2 of the model's weights") &&
                        Catch::Contains("no rule covers (2):\n    layers.0.q_layernorm.weight\n    norm.weight\n") &&
                        Catch::Contains("layers., norm.") && Catch::Contains("--exclude GLOB") &&
                        !Catch::Contains("optimizer.step"));
  // Leaving them out on purpose: the same map makes its tensor, and excluded_keys lists them.
  Selection sel;
  sel.exclude = {"*.q_layernorm.*", "norm.weight"};
  MappedModel mm = run(sel);
  CHECK(mm.tensors.size() == 1);
  CHECK(mm.left_out == std::vector<std::string>{"optimizer.step"});
  CHECK(excluded_keys(ck.md, sel) == std::vector<std::string>{"layers.0.q_layernorm.weight", "norm.weight"});
  CHECK(excluded_keys(ck.md, {}).empty());
  // Under --select, the keys are the selected ones (prefix stripped), and so are the excluded.
  Checkpoint app = checkpoint({t2("app.model.layers.0.w"), t2("app.model.norm.weight"), t2("app.optim.x")});
  Selection under;
  under.prefix = "app.model";
  CHECK_THROWS_WITH(apply_key_map(km, app.md, select_items(app.md, under), no_config()),
                    Catch::Contains("    norm.weight"));
  under.exclude = {"norm.*"};
  CHECK(apply_key_map(km, app.md, select_items(app.md, under), no_config()).tensors.size() == 1);
  CHECK(excluded_keys(app.md, under) == std::vector<std::string>{"norm.weight"});
}

TEST_CASE("keymap model: a model key taken into an output that could not be made is refused too") {
  KeyMap km = model_map_of(kModelMap);
  // hf -> titan: qk joins q and k; k is missing, so q would be lost with the output.
  Checkpoint ck = checkpoint({t2("model.layers.0.w"), t2("model.layers.0.q")});
  CHECK_THROWS_AS(apply_key_map(km, ck.md, select_items(ck.md, {}), no_config()), UnsupportedError);
  CHECK_THROWS_WITH(apply_key_map(km, ck.md, select_items(ck.md, {}), no_config()),
                    Catch::Contains("(hf->titan) would lose 1") && Catch::Contains("could not be made") &&
                        Catch::Contains("    model.layers.0.q"));
  Checkpoint both = checkpoint({t2("model.layers.0.w"), t2("model.layers.0.q"), t2("model.layers.0.k")});
  CHECK(apply_key_map(km, both.md, select_items(both.md, {}), no_config()).tensors.size() == 2);
}

TEST_CASE("keymap model: another framework's checkpoint that matches a rule by accident is refused, exit 5") {
  // A map with a plain key both frameworks name alike (torchtitan's and Hugging Face's lm_head).
  KeyMap km = model_map_of(R"({"schema": "dcpctl-map/1", "name": "mg", "sides": ["megatron", "hf"],
    "model": {"megatron": ["decoder.", "output_layer."], "hf": ["model.", "lm_head."]},
    "rules": [{"megatron": "decoder.w", "hf": "model.w"}, {"megatron": "output_layer.weight", "hf": "lm_head.weight"}]})");
  // A torchtitan checkpoint: lm_head.weight picks hf -> megatron, the rest is neither side's.
  Checkpoint titan = checkpoint({t2("lm_head.weight"), t2("tok_embeddings.weight"), t2("layers.0.attention.wq.weight"),
                                 t2("optimizer.state.layers.0.attention.wq.weight.exp_avg")});
  CHECK_THROWS_AS(apply_key_map(km, titan.md, select_items(titan.md, {}), no_config()), UnsupportedError);
  CHECK_THROWS_WITH(apply_key_map(km, titan.md, select_items(titan.md, {}), no_config()),
                    Catch::Contains("map mg (hf->megatron): the checkpoint is not on its hf side") &&
                        Catch::Contains("3 of its tensor keys") && Catch::Contains("tok_embeddings.weight") &&
                        Catch::Contains("only 1 match its hf rules (lm_head.weight)"));
  // Its own side's training checkpoint: the optimizer's keys hold a mapped key, so they are left
  // out, not foreign, however many there are.
  Checkpoint own = checkpoint({t2("model.w"), t2("lm_head.weight"), t2("optimizer.state.model.w.exp_avg"),
                               t2("optimizer.state.model.w.exp_avg_sq"), t2("optimizer.state.lm_head.weight.exp_avg"),
                               t2("rng.cuda")});
  MappedModel mm = apply_key_map(km, own.md, select_items(own.md, {}), no_config());
  CHECK(mm.tensors.size() == 2);
  CHECK(mm.left_out.size() == 4);
}

TEST_CASE("keymap model: a map without \"model\" counts every tensor key as the model") {
  KeyMap km = model_map_of(
      R"({"schema": "dcpctl-map/1", "name": "bare", "sides": ["a", "b"], "rules": [{"a": "x", "b": "y"}]})");
  CHECK_FALSE(km.has_model);
  Checkpoint ck = checkpoint({t2("x"), t2("optimizer.x")});
  CHECK_THROWS_WITH(apply_key_map(km, ck.md, select_items(ck.md, {}), no_config()),
                    Catch::Contains("declares no \"model\"") && Catch::Contains("    optimizer.x"));
}

TEST_CASE("keymap model: the map file's \"model\" and \"reason\" are checked when it is read") {
  auto bad = [](const std::string& text, const std::string& needle) {
    INFO(text);
    CHECK_THROWS_AS(model_map_of(text), UsageError);
    CHECK_THROWS_WITH(model_map_of(text), Catch::Contains(needle));
  };
  const std::string head = R"({"schema": "dcpctl-map/1", "name": "x", "sides": ["a", "b"], )";
  bad(head + R"("rules": [{"a": "k", "b": "j"}, {"a": "z"}]})",
      "rule 1 names one side only: it drops those keys, and needs a \"reason\"");
  bad(head + R"("rules": [{"a": "k", "b": "j", "reason": "why"}]})", "rule 0: \"reason\" belongs to a one-sided rule");
  bad(head + R"("rules": [{"a": "z", "reason": ""}]})", "rule 0: \"reason\" is a sentence");
  bad(head + R"("model": {"a": ["x."]}, "rules": [{"a": "k", "b": "j"}]})",
      "\"model\" is {SIDE: [KEY PREFIX, ...]} for both sides");
  bad(head + R"("model": {"a": ["x."], "c": ["y."]}, "rules": [{"a": "k", "b": "j"}]})", "\"model\" is {SIDE");
  bad(head + R"("model": {"a": "x.", "b": ["y."]}, "rules": [{"a": "k", "b": "j"}]})", "\"model\" is {SIDE");
  bad(head + R"("model": {"a": [""], "b": ["y."]}, "rules": [{"a": "k", "b": "j"}]})", "\"model\" is {SIDE");
}

TEST_CASE("keymap model: every built-in map declares its model on both sides, and a reason for every drop") {
  for (const auto& m : builtin_key_maps()) {
    INFO(m.name);
    CHECK(m.has_model);
    CHECK_FALSE(m.model[0].empty());
    CHECK_FALSE(m.model[1].empty());
    for (const auto& r : m.rules)
      if (r.side[0].empty() || r.side[1].empty()) CHECK_FALSE(r.reason.empty());
  }
}

}  // namespace dcpctl

namespace dcpctl {
namespace {

// A family (dcpctl-map/2): layer rules written once under two prefixes, a variant per HF family.
const char* kFamilyMap = R"({"schema": "dcpctl-map/2", "name": "fam", "sides": ["mg", "hf"],
  "model": {"mg": ["decoder."], "hf": ["model."]},
  "variants": {"a": {"model_types": ["type_a"], "default": true}, "b": {"model_types": ["type_b"]}},
  "prefixes": {"stacked": {"mg": "decoder.layers.", "hf": "model.layers.{L}.", "stack": {"dim": 0, "count": "2", "index": "L"}},
               "layer": {"mg": "decoder.layers.{L}.", "hf": "model.layers.{L}."}},
  "layer_rules": [{"mg": "attn.w", "hf": "attn.w"},
                  {"mg": "moe.shared.w", "hf": "mlp.shared_expert.w", "variants": ["a"]},
                  {"mg": "moe.shared.w", "hf": "mlp.shared_experts.w", "variants": ["b"]},
                  {"mg": "moe.bias", "hf": "mlp.gate.bias", "variants": ["b"]}],
  "rules": [{"layers": "stacked"}, {"layers": "layer"}],
  "aliases": {"fam-a": {"description": "a only", "variants": ["a"], "rules": [{"layers": "layer"}]}}})";

MapConfig config_of(const std::string& json) {
  return {nlohmann::json::parse(json), "config.json"};
}

std::vector<std::string> output_keys(const MappedModel& mm) {
  std::vector<std::string> keys;
  for (const auto& t : mm.tensors) keys.push_back(t.meta.fqn);
  return keys;
}

}  // namespace

TEST_CASE(
    "keymap family: layer rules expand under each prefix, the variant comes from model_type, else the keys, else the "
    "default") {
  KeyMap km = model_map_of(kFamilyMap);
  CHECK(km.family == "fam");
  REQUIRE(km.rules.size() == 8);  // 4 layer rules x 2 prefixes
  CHECK(km.rules[0].side[0][0].pattern == "decoder.layers.attn.w");
  CHECK(km.rules[0].experts.value("count", "") == "2");
  CHECK(km.rules[4].side[0][0].pattern == "decoder.layers.{L}.attn.w");
  Checkpoint ck = checkpoint({t2("decoder.layers.0.attn.w"), t2("decoder.layers.0.moe.shared.w")});
  // model_type chooses
  MappedModel a = apply_key_map(km, ck.md, select_items(ck.md, {}), config_of(R"({"model_type": "type_a"})"));
  CHECK(a.variant == "a");
  CHECK(output_keys(a) == std::vector<std::string>{"model.layers.0.attn.w", "model.layers.0.mlp.shared_expert.w"});
  MappedModel b = apply_key_map(km, ck.md, select_items(ck.md, {}), config_of(R"({"model_type": "type_b"})"));
  CHECK(b.variant == "b");
  CHECK(output_keys(b) == std::vector<std::string>{"model.layers.0.attn.w", "model.layers.0.mlp.shared_experts.w"});
  CHECK(b.describe()["variant"] == "b");
  // a model_type no variant lists: only the shared rules apply, the rest is refused naming it
  CHECK_THROWS_AS(apply_key_map(km, ck.md, select_items(ck.md, {}), config_of(R"({"model_type": "other"})")),
                  UnsupportedError);
  CHECK_THROWS_WITH(apply_key_map(km, ck.md, select_items(ck.md, {}), config_of(R"({"model_type": "other"})")),
                    Catch::Contains("decoder.layers.0.moe.shared.w") &&
                        Catch::Contains("config.json's model_type other") && Catch::Contains("has no variant for it"));
  // no model_type: the keys (b's own rule matches the bias), a tie goes to the default
  Checkpoint biased =
      checkpoint({t2("decoder.layers.0.attn.w"), t2("decoder.layers.0.moe.shared.w"), t2("decoder.layers.0.moe.bias")});
  CHECK(apply_key_map(km, biased.md, select_items(biased.md, {}), no_config()).variant == "b");
  CHECK(apply_key_map(km, ck.md, select_items(ck.md, {}), no_config()).variant == "a");
  // the hf side's names tell too
  Checkpoint hf = checkpoint({t2("model.layers.0.attn.w"), t2("model.layers.0.mlp.shared_experts.w"),
                              t2("model.layers.1.attn.w"), t2("model.layers.1.mlp.shared_experts.w")});
  MappedModel back = apply_key_map(km, hf.md, select_items(hf.md, {}), no_config());
  CHECK(back.variant == "b");
  CHECK(output_keys(back) == std::vector<std::string>{"decoder.layers.attn.w", "decoder.layers.moe.shared.w"});
}

TEST_CASE("keymap family: an alias has its own rules and variants, and a bad family is refused naming what is wrong") {
  std::vector<KeyMap> all = builtin_key_maps();
  bool megatron = false;
  for (const auto& m : all)
    megatron = megatron || (m.name == "megatron-mixtral" && m.family == "megatron" && m.variants.size() == 1);
  CHECK(megatron);
  CHECK_THROWS_WITH(
      model_map_of(R"({"schema": "dcpctl-map/2", "name": "x", "sides": ["a", "b"], "rules": [{"layers": "nope"}]})"),
      Catch::Contains("no prefix nope"));
  CHECK_THROWS_WITH(
      model_map_of(
          R"({"schema": "dcpctl-map/2", "name": "x", "sides": ["a", "b"], "variants": {"v": {}}, "rules": [{"a": "k", "b": "k"}]})"),
      Catch::Contains("variant v"));
  // "drop_when": "zeros" belongs to a one-sided rule; there it marks the keys build_model checks
  CHECK_THROWS_WITH(
      model_map_of(
          R"({"schema": "dcpctl-map/1", "name": "x", "sides": ["a", "b"], "rules": [{"a": "k", "b": "j", "drop_when": "zeros"}]})"),
      Catch::Contains("drop_when"));
  KeyMap z = model_map_of(R"({"schema": "dcpctl-map/1", "name": "z", "sides": ["a", "b"],
    "rules": [{"a": "w", "b": "w"}, {"a": "bias", "reason": "none on b", "drop_when": "zeros"}]})");
  Checkpoint ck = checkpoint({t2("w"), t2("bias")});
  MappedModel mm = apply_key_map(z, ck.md, select_items(ck.md, {}), no_config());
  CHECK(mm.zero_checked == std::vector<std::string>{"bias"});
  CHECK(mm.describe()["dropped_zeros"] == nlohmann::json::array({"bias"}));
}

}  // namespace dcpctl
