// The modules a build may leave out (src/CMakeLists.txt, "the modules"), as such a build sees the
// core: each refused where it is met, with exit 5 naming the module and the option that builds it,
// then served once its register function (or, here, a stand-in) has run. This process (one per
// test file) registers none of them but GGUF (tests/unit/main.cpp); the binary's is
// src/modules/modules.cpp.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "item/torch_file.h"
#include "lora/register.h"
#include "meta/checkpoint.h"
#include "plan/format.h"
#include "store/store.h"
#include "torch_checkpointing/register.h"
#include "util/error.h"
#include "view/model.h"

using namespace dcpctl;

namespace {

// An object store that answers nothing: what the table of schemes hands out is the point.
class SilentStore final : public store::ObjectStore {
 public:
  std::optional<uint64_t> size_of(const store::Location&) override { return std::nullopt; }
  void get_range(const store::Location&, uint64_t, uint64_t, void*) override {}
  store::Listing list_objects(const store::Location&, bool) override { return {}; }
  bool any_object(const store::Location&) override { return false; }
  void put(const store::Location&, const void*, size_t) override {}
  std::string start_upload(const store::Location&) override { return ""; }
  std::string upload_part(const store::Location&, const std::string&, int, const void*, size_t) override { return ""; }
  void complete_upload(const store::Location&, const std::string&, const std::vector<std::string>&) override {}
  void abort_upload(const store::Location&, const std::string&) override {}
  std::vector<std::pair<store::Location, std::string>> open_uploads(const store::Location&) override { return {}; }
  void remove(const store::Location&) override {}
  const char* report_name() const override { return "silent"; }
  nlohmann::json report() const override { return nlohmann::json::object(); }
  uint64_t requests_made() const override { return 0; }
};

store::ObjectStore& silent_store() {
  static SilentStore s;
  return s;
}

}  // namespace

// The object-store module: its schemes refused by name, then served by what is installed.
TEST_CASE("store: an s3:// or gs:// path without the object-store module is exit 5 naming it; installed, its store") {
  for (const char* url : {"s3://bucket/ckpt/.metadata", "gs://bucket/ckpt/.metadata"}) {
    try {
      store::for_path(url);
      FAIL("no UnsupportedError for " << url);
    } catch (const UnsupportedError& e) {
      CHECK(exit_code_of(e) == ExitCode::unsupported);
      CHECK_THAT(e.what(), Catch::Contains(url) && Catch::Contains("src/objstore/") &&
                               Catch::Contains("-DDCPCTL_WITH_OBJSTORE=ON"));
    }
  }
  CHECK(store::in_use().empty());
  store::install_object_store("gs", silent_store);
  CHECK(&store::for_path("gs://bucket/ckpt") == &silent_store());
  CHECK(&store::of_url("gs://other/x") == &silent_store());
  CHECK_THROWS_AS(store::for_path("s3://bucket/ckpt"), UnsupportedError);  // s3 still has none
  CHECK_THROWS_AS(store::install_object_store("ftp", silent_store), UsageError);
  CHECK(store::in_use().empty());  // made, but no request yet
}

TEST_CASE("torch_checkpointing: a folder of its items without the module is exit 5 naming it; registered, it opens") {
  install_item_readers();
  const std::string dir = std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/layouts/tc_sync_2r/ckpt";
  try {
    open_checkpoint(dir);
    FAIL("no UnsupportedError for " << dir);
  } catch (const UnsupportedError& e) {
    CHECK(exit_code_of(e) == ExitCode::unsupported);
    CHECK_THAT(e.what(),
               Catch::Contains("src/torch_checkpointing/") && Catch::Contains("-DDCPCTL_WITH_TORCH_CHECKPOINTING=ON"));
  }
  register_torch_checkpointing();
  const Checkpoint ck = open_checkpoint(dir);
  CHECK(ck.layout == CheckpointLayout::TorchCheckpointing);
  CHECK(ck.incomplete.empty());
  CHECK_FALSE(ck.md.tensors.empty());
}

TEST_CASE("lora: --lora adapter | merge without the module is exit 5 naming it; registered, its view and row") {
  install_item_readers();
  CHECK(formats::by_name("peft-adapter") == nullptr);
  const Checkpoint ck = open_checkpoint(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/layouts/peft_lora/ckpt");
  ModelRequest rq;
  rq.lora.mode = LoraMode::Merge;
  try {
    build_model(ck, rq);
    FAIL("no UnsupportedError for --lora merge");
  } catch (const UnsupportedError& e) {
    CHECK(exit_code_of(e) == ExitCode::unsupported);
    CHECK_THAT(e.what(), Catch::Contains("src/lora/") && Catch::Contains("-DDCPCTL_WITH_LORA=ON"));
  }
  rq.lora.mode = LoraMode::Keep;
  CHECK_NOTHROW(build_model(ck, rq));  // no view asked: the core alone
  register_lora();
  REQUIRE(formats::by_name("peft-adapter") != nullptr);
  CHECK(formats::by_name("peft-adapter")->name == "peft-adapter");
  rq.lora.mode = LoraMode::Adapter;
  const Model m = build_model(ck, rq);
  CHECK(m.checkpoint().derived != nullptr);  // the LoRA view, made by the module's maker
}
