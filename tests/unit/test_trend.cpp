// dcpctl report's naming rules (kinds, optimizer roles, layer groups), its --fail-on parser, and the
// page's size at the scale: 60 layers of 384 experts over 100 steps, drawn by groups.
#include <catch2/catch.hpp>
#include <string>

#include "compare/trend.h"
#include "report/trend_report.h"
#include "util/error.h"

using namespace dcpctl;
using nlohmann::json;

TEST_CASE("trend: kinds from the names trainers use") {
  CHECK(classify_key("layers.3.attention.wq.weight") == TensorKind::Attention);
  CHECK(classify_key("model.layers.0.self_attn.q_proj.weight") == TensorKind::Attention);
  CHECK(classify_key("decoder.layers.0.self_attention.linear_qkv.weight") == TensorKind::Attention);
  CHECK(classify_key("layers.3.attention_norm.weight") == TensorKind::Norm);
  CHECK(classify_key("model.layers.0.input_layernorm.weight") == TensorKind::Norm);
  CHECK(classify_key("layers.3.feed_forward.w2.weight") == TensorKind::Mlp);
  CHECK(classify_key("model.layers.0.mlp.down_proj.weight") == TensorKind::Mlp);
  CHECK(classify_key("model.layers.0.mlp.experts.17.down_proj.weight") == TensorKind::Experts);
  CHECK(classify_key("layers.1.moe.experts.w1") == TensorKind::Experts);
  CHECK(classify_key("tok_embeddings.weight") == TensorKind::Embedding);
  CHECK(classify_key("lm_head.weight") == TensorKind::Embedding);
  CHECK(classify_key("embedding.word_embeddings.weight") == TensorKind::Embedding);
  CHECK(classify_key("fc1.weight") == TensorKind::Mlp);
  CHECK(classify_key("bias") == TensorKind::Other);
}

TEST_CASE("trend: optimizer roles and their parameters, by the trainer's own names") {
  std::string p;
  CHECK(classify_role("optimizer.state.layers.0.attention.wq.weight.exp_avg", p) == TensorRole::ExpAvg);
  CHECK(p == "layers.0.attention.wq.weight");
  CHECK(classify_role("app.optim.state.fc1.weight.exp_avg_sq", p) == TensorRole::ExpAvgSq);
  CHECK(p == "fc1.weight");
  CHECK(classify_role("optimizer_0.state.net.0.bias.exp_avg_sq", p) == TensorRole::ExpAvgSq);
  CHECK(p == "net.0.bias");
  CHECK(classify_role("optimizer.state.norm.weight.step", p) == TensorRole::OptimizerOther);
  CHECK(classify_role("model.layers.0.mlp.linear_fc1.weight", p) == TensorRole::Weight);
  CHECK(p == "model.layers.0.mlp.linear_fc1.weight");
  // A weight whose name happens to end like a moment is a weight outside an optimizer's key.
  CHECK(classify_role("model.exp_avg", p) == TensorRole::Weight);
}

TEST_CASE("trend: layer groups up to the layer number, or --depth components") {
  CHECK(layer_group("model.layers.12.mlp.experts.3.w1", 0) == "model.layers.12");
  CHECK(layer_group("decoder.layers.0.self_attention.linear_qkv.weight", 0) == "decoder.layers.0");
  CHECK(layer_group("model.norm.weight", 0) == "model.norm");
  CHECK(layer_group("bias", 0) == "bias");
  CHECK(layer_group("model.layers.12.mlp.experts.3.w1", 2) == "model.layers");
}

TEST_CASE("trend: --fail-on conditions") {
  TrendGates g;
  parse_fail_on("nan", g);
  parse_fail_on("update-ratio>0.5", g);
  parse_fail_on("norm-growth>2", g);
  CHECK(g.nonfinite);
  CHECK(*g.update_ratio == 0.5);
  CHECK(*g.norm_growth == 2);
  CHECK(g.conditions.size() == 3);
  for (const char* bad : {"nans", "update-ratio>", "update-ratio>x", "norm-growth>-1", "update-ratio<1", ""})
    CHECK_THROWS_AS(parse_fail_on(bad, g), UsageError);
}

namespace {

// A report's JSON as trend_json builds it, of `layers` layer groups and `steps` steps (the page
// reads the groups, the optimizer's kinds, the anomalies and the movers, never the tensors).
json big_report(size_t layers, size_t steps, size_t anomalies) {
  json j;
  j["schema_version"] = 1;
  j["run"] = "run";
  j["steps"] = json::array();
  for (size_t s = 0; s < steps; ++s)
    j["steps"].push_back({{"index", s}, {"name", "step-" + std::to_string(s)}, {"step", s}});
  auto series = [&](double base) {
    json r = json::object(), l2 = json::array(), ratio = json::array();
    for (size_t s = 0; s < steps; ++s) {
      l2.push_back(base * (1 + 0.01 * static_cast<double>(s)));
      ratio.push_back(s ? json(1e-3 * base) : json(nullptr));
    }
    r["l2"] = l2;
    r["update_ratio"] = ratio;
    return r;
  };
  j["groups"] = {{"layer", json::array()}, {"kind", json::array()}};
  for (size_t l = 0; l < layers; ++l)
    j["groups"]["layer"].push_back({{"name", "model.layers." + std::to_string(l)}, {"series", series(1 + l)}});
  json eff = json::array();
  for (size_t s = 0; s < steps; ++s) eff.push_back(1.0);
  j["optimizer"] = {{"layer", json::array()}, {"kind", json::array()}};
  for (const char* k : {"attention", "mlp", "experts", "norms", "embeddings"}) {
    j["groups"]["kind"].push_back({{"name", k}, {"series", series(2)}});
    j["optimizer"]["kind"].push_back({{"name", k}, {"effective_step", eff}, {"exp_avg_sq_rms", eff}});
  }
  j["anomalies"] = json::array();
  for (size_t a = 0; a < anomalies; ++a)
    j["anomalies"].push_back({{"anomaly", "nan"},
                              {"key", "model.layers.1.mlp.experts." + std::to_string(a) + ".w1"},
                              {"group", "model.layers.1"},
                              {"name", "step-7"},
                              {"value", 1}});
  j["top_movers"] = json::array();
  j["gates"] = {{"ok", true}, {"conditions", json::array()}, {"failures", json::array()}};
  return j;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("trend: the page of 60 layers x 384 experts x 100 steps is drawn by groups") {
  // 23,040 expert tensors in 60 layer groups: the page has 60 rows of 100 cells per heatmap, the
  // anomalies table stops at 500 rows, whatever the tensors.
  std::string page = trend_html(big_report(60, 100, 23040));
  CHECK(page.size() < 4'000'000);
  CHECK(count(page, "<svg class=\"plot") == 5);
  CHECK(count(page, "<rect x=") > 2 * 60 * 100);
  CHECK(count(page, "<tr><td>step-7</td>") == 500);
  CHECK(page.find("23040 anomalies") != std::string::npos);
  CHECK(page.find("<script") == std::string::npos);
  CHECK(page.find("http://") == std::string::npos);
  CHECK(page.find("https://") == std::string::npos);
  CHECK(page.find("data-series=\"60\"") != std::string::npos);
  CHECK(page.find("data-series=\"5\"") != std::string::npos);
  // Names are escaped: a key is text, never markup.
  json j = big_report(1, 3, 1);
  j["anomalies"][0]["key"] = "<b>x</b>&";
  page = trend_html(j);
  CHECK(page.find("&lt;b&gt;x&lt;/b&gt;&amp;") != std::string::npos);
}
