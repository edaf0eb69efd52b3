// The top level of a consolidated Lightning checkpoint (write/lightning_meta.h): Lightning's
// dict.update and _format_checkpoint, step by step. The whole path (real meta.pt files, Lightning's
// own consolidation as the oracle) is tests/interop/lightning_test.py.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "util/error.h"
#include "write/lightning_meta.h"

using namespace dcpctl;

namespace {

// "name=dcp:key", "name=meta:i", "name=[...]" for each entry.
std::string show(const std::vector<TopEntry>& top) {
  std::string s;
  for (const TopEntry& e : top) {
    if (!s.empty()) s += " ";
    s += e.name + "=";
    if (e.kind == TopEntry::Dcp)
      s += "dcp:" + e.dcp;
    else if (e.kind == TopEntry::Meta)
      s += "meta:" + std::to_string(e.meta);
    else
      s += "[" + show(e.items) + "]";
  }
  return s;
}

}  // namespace

TEST_CASE("lightning: Fabric's merge is dict.update, in place for a shared key") {
  CHECK(show(lightning_top_level({"model", "optimizer"}, {"step", "tag"}, false)) ==
        "model=dcp:model optimizer=dcp:optimizer step=meta:0 tag=meta:1");
  // a key both hold keeps the DCP state's place and takes meta.pt's value
  CHECK(show(lightning_top_level({"model", "step", "optimizer"}, {"tag", "step"}, false)) ==
        "model=dcp:model step=meta:1 optimizer=dcp:optimizer tag=meta:0");
  CHECK(show(lightning_top_level({}, {"a"}, false)) == "a=meta:0");
}

TEST_CASE("lightning: the Trainer's form renames model and gathers optimizer_<i>") {
  CHECK(show(lightning_top_level({"model", "optimizer_0"}, {"epoch", "pytorch-lightning_version"}, true)) ==
        "epoch=meta:0 pytorch-lightning_version=meta:1 state_dict=dcp:model "
        "optimizer_states=[optimizer_0=dcp:optimizer_0]");
  // optimizers in index order whatever their order in the checkpoint; none: no optimizer_states
  CHECK(show(lightning_top_level({"optimizer_1", "model", "optimizer_0"}, {"epoch"}, true)) ==
        "epoch=meta:0 state_dict=dcp:model optimizer_states=[optimizer_0=dcp:optimizer_0 optimizer_1=dcp:optimizer_1]");
  CHECK(show(lightning_top_level({"model"}, {"epoch"}, true)) == "epoch=meta:0 state_dict=dcp:model");
  // an existing state_dict key is assigned in place (Python dict assignment)
  CHECK(show(lightning_top_level({"model"}, {"state_dict", "epoch"}, true)) == "state_dict=dcp:model epoch=meta:1");
  // re.match("optimizer_[0-9]+") counts optimizer_0_extra too; Lightning then pops optimizer_0 and
  // optimizer_1 and fails on the missing one: so does dcpctl
  CHECK_THROWS_AS(lightning_top_level({"model", "optimizer_0", "optimizer_0_extra"}, {}, true), UnsupportedError);
  CHECK_THROWS_AS(lightning_top_level({"optimizer_0"}, {}, true), UnsupportedError);  // no model
  // optimizer_x is not an optimizer key
  CHECK(show(lightning_top_level({"model", "optimizer_x"}, {}, true)) ==
        "optimizer_x=dcp:optimizer_x state_dict=dcp:model");
}
