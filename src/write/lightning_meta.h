// A Lightning checkpoint's `meta.pt`, merged into a consolidated `.pt` as Lightning's own
// consolidation merges it.
//
// Lightning (Fabric's and the Trainer's FSDPStrategy / ModelParallelStrategy with sharded state
// dicts) saves modules and optimizers with DCP and everything else (Trainer: epoch, global_step,
// pytorch-lightning_version, loops, callbacks, lr_schedulers, hparams...; Fabric: whatever the
// user's state holds besides modules and optimizers) with torch.save into `meta.pt` beside
// `.metadata`, from rank 0. Lightning's consolidation (checked against lightning 2.6.6):
//   lightning.fabric.utilities.consolidate_checkpoint (load.py _load_distributed_checkpoint):
//     checkpoint = the DCP state, nested by planner_data (_EmptyStateDictLoadPlanner, as
//                  format_utils.dcp_to_torch_save);
//     checkpoint.update(torch.load(meta.pt, map_location="cpu"))   top-level keys merged at the
//                  top level: a key both have keeps its place and takes meta.pt's value;
//   lightning.pytorch.utilities.consolidate_checkpoint additionally (_format_checkpoint):
//     checkpoint["state_dict"] = checkpoint.pop("model");
//     keys matching re.match("optimizer_[0-9]+") (n of them) become
//     checkpoint["optimizer_states"] = [checkpoint.pop(f"optimizer_{i}") for i in range(n)]
//     (a key assigned that exists keeps its place; one that does not goes last).
// dcpctl picks the Trainer's form when meta.pt holds "pytorch-lightning_version" (the Trainer
// always writes it; Fabric never does) and the DCP state has "model": the form
// Trainer(ckpt_path=...) and LightningModule.load_from_checkpoint read.
//
// meta.pt is read with the restricted VM (pickle/vm.h), never executed. Its tensors (a
// ModelCheckpoint's kth_value, a user's tensor) are carried over: their persistent ids are
// rewritten to storages of the output (location "cpu", as map_location="cpu" leaves them) and
// their storage records copied, CRC-checked. Refused (UnsupportedError, exit 5), naming meta.pt
// and the key: a global torch.load(weights_only=True) refuses (Lightning's torch.load of meta.pt
// refuses it too, weights_only being torch's default) unless --keep-unsafe-values; a persistent
// id that is not a torch storage, a copyreg extension code (EXT opcodes: parsed with
// ParseOptions::opaque_extensions so that the key holding one is named), or anything else the
// pickle writer cannot re-emit; a top-level key that is not a string. A pickle the VM cannot
// decode at all (out-of-band buffers, damage) is refused with its byte offset.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/checkpoint.h"
#include "pickle/pickler.h"
#include "pickle/value.h"
#include "plan/plan.h"
#include "write/consolidate.h"
#include "write/output.h"
#include "write/torch_save.h"

namespace dcpctl {

// One top-level entry of the consolidated checkpoint.
struct TopEntry {
  enum Kind { Dcp, Meta, List } kind = Dcp;
  std::string name;             // its key in the output
  std::string dcp;              // Dcp: the DCP state's top-level key it holds
  size_t meta = 0;              // Meta: index into the meta.pt keys
  std::vector<TopEntry> items;  // List: optimizer_states' items (Dcp or Meta entries)
};

// The top level Lightning's consolidation leaves (see the top of this file), from the DCP
// state's top-level keys and meta.pt's, in order. `trainer`: the Trainer's form. Throws
// UnsupportedError where Lightning's own tool fails (an optimizer_<i> missing among n).
std::vector<TopEntry> lightning_top_level(const std::vector<std::string>& dcp_keys,
                                          const std::vector<std::string>& meta_keys, bool trainer);

class LightningMeta {
 public:
  // Reads `path` (meta.pt); storages are renamed `first_key`, `first_key + 1`, ... in the output.
  LightningMeta(const std::string& path, size_t first_key, bool keep_unsafe);
  ~LightningMeta();

  const std::string& path() const { return path_; }
  const std::vector<std::string>& keys() const { return keys_; }
  size_t tensors() const { return tensors_; }

  // Decides the output's top level from the DCP state's top-level keys (see lightning_top_level).
  void arrange(const std::vector<std::string>& dcp_keys);
  bool trainer() const { return trainer_; }

  // Emits the whole checkpoint dict; `emit_dcp(key)` emits the DCP state's subtree `key`.
  void emit_checkpoint(Pickler& p, const std::function<void(const std::string&)>& emit_dcp) const;
  // Appends meta.pt's storage records to the archive (after the DCP tensors', before finish()).
  void write_storages(TorchSaveWriter& w, OutputFile& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
  std::vector<std::string> keys_;
  size_t tensors_ = 0;
  bool trainer_ = false;
  std::vector<TopEntry> top_;
};

// What consolidate does with a checkpoint's meta.pt (rank 0, once planned): merges it when the
// output is a nested .pt of the whole DCP state; else leaves it out, saying why.
struct LightningMerge {
  std::unique_ptr<LightningMeta> meta;  // set when merged
  nlohmann::json summary;               // null when there is no meta.pt
  std::string note;                     // for stderr: why it was left out ("" if merged or asked)
};
LightningMerge merge_lightning_meta(const Checkpoint& ck, const WritePlan& plan,
                                    const std::vector<const SelectedItem*>& kept_values, const ConsolidateOptions& o);

}  // namespace dcpctl
