// Choosing which items an output holds, and under which names.
//
// --select PREFIX keeps the items under one subtree and strips the prefix: on an app-state
// checkpoint {"app": {"model", "optim", "epoch"}}, `app.model` yields exactly the model's
// state_dict() keys. --include/--exclude are shell globs (fnmatch, case-sensitive, '*' crosses
// dots) matched against the key as saved and against the output key; an item is kept when it is
// under the selected prefix, matches some --include (if any), and matches no --exclude.
#pragma once

#include <string>
#include <vector>

#include "meta/metadata.h"

namespace dcpctl {

struct Selection {
  std::vector<std::string> include, exclude;
  std::string prefix;
  bool empty() const { return include.empty() && exclude.empty() && prefix.empty(); }
};

struct SelectedItem {
  bool tensor = true;
  uint32_t index = 0;          // into Metadata::tensors or ::bytes
  std::string key;             // output key (flat, prefix stripped)
  std::vector<PathElem> path;  // output nesting (planner_data path, prefix stripped)
};

// In state_dict_metadata order. Throws UsageError when nothing is selected.
std::vector<SelectedItem> select_items(const Metadata& md, const Selection& sel);

// The keys (output keys, prefix stripped) that --exclude alone leaves out of the selection: under
// the selected prefix, matching the --include globs (if any), and matching some --exclude. In
// state_dict_metadata order; empty without --exclude. What a key map reports as `excluded`.
std::vector<std::string> excluded_keys(const Metadata& md, const Selection& sel);

}  // namespace dcpctl
