// The model in a training checkpoint (write/model_subtree.h): what `consolidate -o DIR/` takes
// without a selection, from the tensor keys alone.
#include <catch2/catch.hpp>

#include "metadata_models.h"
#include "write/model_subtree.h"

namespace dcpctl {
namespace {

Metadata keys(std::vector<std::string> names) {
  std::vector<TensorMeta> ts;
  for (auto& n : names) ts.push_back(tensor(n, {2}, {{0, 2}}));
  return checkpoint(std::move(ts)).md;
}

TEST_CASE("model subtree: app.model beside app.optim (DCP's app-state sample)", "[model_subtree]") {
  auto m = model_subtree(keys({"app.model.layers.0.w", "app.model.tok.weight", "app.optim.state.layers.0.w.exp_avg"}));
  REQUIRE(m);
  CHECK(m->selection.prefix == "app.model");
  CHECK(m->selection.exclude.empty());
  CHECK(m->option == "--select app.model");
  CHECK(m->beside == "app.optim");
}

TEST_CASE("model subtree: model beside optimizer at the top", "[model_subtree]") {
  auto m = model_subtree(keys({"model.layers.0.w", "optimizer.state.model.layers.0.w.exp_avg", "lr_scheduler.x"}));
  REQUIRE(m);
  CHECK(m->selection.prefix == "model");
  CHECK(m->beside == "optimizer");
}

TEST_CASE("model subtree: torchtitan's flat model keys beside optimizer.*", "[model_subtree]") {
  auto m = model_subtree(keys({"tok_embeddings.weight", "layers.0.attention.wq.weight",
                               "optimizer.state.layers.0.w.exp_avg", "optimizer.state.layers.0.w.step"}));
  REQUIRE(m);
  CHECK(m->selection.prefix.empty());
  CHECK(m->selection.exclude == std::vector<std::string>{"optimizer.*"});
  CHECK(m->option == "--exclude 'optimizer.*'");
}

TEST_CASE("model subtree: HF-named keys are the model, not a model. subtree", "[model_subtree]") {
  // model.* beside lm_head.weight and optimizer.*: `--select model` would lose lm_head and strip
  // the names loaders want; the optimizer is left out instead.
  auto m =
      model_subtree(keys({"model.embed_tokens.weight", "lm_head.weight", "optimizer.state.lm_head.weight.exp_avg"}));
  REQUIRE(m);
  CHECK(m->selection.prefix.empty());
  CHECK(m->selection.exclude == std::vector<std::string>{"optimizer.*"});
}

TEST_CASE("model subtree: nothing beside the model, nothing taken", "[model_subtree]") {
  CHECK_FALSE(model_subtree(keys({"model.embed_tokens.weight", "lm_head.weight"})));
  CHECK_FALSE(model_subtree(keys({"app.model.w", "app.model.b"})));
  CHECK_FALSE(model_subtree(keys({"layers.0.w", "norm.weight"})));
}

}  // namespace
}  // namespace dcpctl
