#include "write/model_subtree.h"

#include <set>
#include <vector>

namespace dcpctl {

namespace {

std::vector<std::string> components(const std::string& key) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', start)) {
    out.push_back(key.substr(start, dot - start));
    start = dot + 1;
  }
  out.push_back(key.substr(start));
  return out;
}

bool optimizer_name(const std::string& c) {
  return c.rfind("optim", 0) == 0;
}  // optim, optimizer, optimizers, optim_state

// Top-level namespaces trainers keep beside the model (torchtitan's CheckpointManager states).
bool trainer_state(const std::string& c) {
  static const std::set<std::string> names = {"optimizer",  "optim",       "lr_scheduler", "lr_schedulers",
                                              "dataloader", "train_state", "scheduler",    "rng_state"};
  return names.count(c) > 0;
}

}  // namespace

std::optional<ModelSubtree> model_subtree(const Metadata& md) {
  // Every tensor key's components; a parent path (components before the last `model`) at which
  // both a model tensor and an optimizer tensor hang.
  std::set<std::string> model_parents, optim_parents;
  std::set<std::string> top;
  bool top_model = false;
  for (const TensorMeta& t : md.tensors) {
    std::vector<std::string> c = components(t.fqn);
    if (c.size() < 2) {
      top_model = true;
      continue;
    }
    std::string parent;
    for (size_t i = 0; i + 1 < c.size(); ++i) {
      if (c[i] == "model") model_parents.insert(parent);
      if (optimizer_name(c[i])) optim_parents.insert(parent);
      parent += (parent.empty() ? "" : ".") + c[i];
    }
    if (trainer_state(c[0]))
      top.insert(c[0]);
    else
      top_model = true;
  }
  for (const std::string& p : model_parents) {  // shortest first: std::set orders "" before "app"
    if (!optim_parents.count(p)) continue;
    // The subtree is the model only if every tensor beside it is trainer state: HF-named keys
    // (`model.layers.*` beside `lm_head.weight`) are a model whose first component is `model`.
    const size_t depth = p.empty() ? 0 : components(p).size();
    bool only_state = true;
    std::string optim;
    for (const TensorMeta& t : md.tensors) {
      if (!p.empty() && t.fqn.rfind(p + ".", 0) != 0) continue;
      std::vector<std::string> c = components(t.fqn);
      if (c.size() <= depth + 1) {
        only_state = false;
        break;
      }
      const std::string& here = c[depth];
      if (optimizer_name(here) && optim.empty()) optim = (p.empty() ? "" : p + ".") + here;
      if (here != "model" && !optimizer_name(here) && !trainer_state(here)) only_state = false;
    }
    if (!only_state) continue;
    ModelSubtree m;
    m.selection.prefix = p.empty() ? "model" : p + ".model";
    m.option = "--select " + m.selection.prefix;
    m.beside = optim;
    return m;
  }
  // Flat: model keys beside top-level trainer state holding tensors (an optimizer's moments).
  if (top_model && (top.count("optimizer") || top.count("optim"))) {
    ModelSubtree m;
    for (const std::string& ns : top) {
      m.selection.exclude.push_back(ns + ".*");
      m.option += (m.option.empty() ? "--exclude '" : " --exclude '") + ns + ".*'";
      m.beside += (m.beside.empty() ? "" : ", ") + ns;
    }
    return m;
  }
  return std::nullopt;
}

}  // namespace dcpctl
