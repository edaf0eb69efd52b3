// The model in a training checkpoint that holds it beside optimizer or trainer state. A Hugging
// Face folder is a model: written from the whole checkpoint it would hold the Adam moments and the
// `app.model.` prefix, which no loader accepts. So `consolidate -o DIR/` without --select,
// --include, --exclude, --map or --lora takes the model alone (and says so); a .safetensors or .pt
// output keeps what it has always written, with a note naming the --select that gives the model.
//
// Recognised, from the tensor keys:
//   - a subtree `[P.]model` beside optimizer tensors `[P.]optim*` (DCP's app-state sample
//     `app.model`/`app.optim`; `{"model", "optimizer"}` as torchtitan-style and Lightning's
//     state dicts hold it): the selection --select [P.]model;
//   - model keys at the top level beside top-level trainer state (torchtitan's `optimizer.*`,
//     `lr_scheduler.*`, `dataloader.*`, `train_state.*`): --exclude of each such namespace.
#pragma once

#include <optional>
#include <string>

#include "meta/metadata.h"
#include "meta/select.h"

namespace dcpctl {

struct ModelSubtree {
  Selection selection;  // what gives the model alone
  std::string option;   // the same as command-line options ("--select app.model")
  std::string beside;   // what it leaves out, for people ("app.optim")
};

std::optional<ModelSubtree> model_subtree(const Metadata& md);

}  // namespace dcpctl
