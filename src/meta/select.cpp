#include "meta/select.h"

#include <fnmatch.h>

#include "util/error.h"

namespace dcpctl {
namespace {

bool glob_any(const std::vector<std::string>& globs, const std::string& a, const std::string& b) {
  for (const auto& g : globs)
    if (::fnmatch(g.c_str(), a.c_str(), 0) == 0 || ::fnmatch(g.c_str(), b.c_str(), 0) == 0) return true;
  return false;
}

std::string elem_text(const PathElem& e) {
  return e.is_index ? std::to_string(e.index) : e.key;
}

// The path of `key` with the selected prefix removed. When the prefix ends on a path-element
// boundary the remaining elements keep their nesting; otherwise the rest is one flat element.
std::vector<PathElem> strip_path(const Metadata& md, const std::string& key, const std::string& prefix,
                                 const std::string& out_key) {
  auto it = md.planner_data.find(key);
  std::vector<PathElem> path;
  if (it == md.planner_data.end()) {
    path.push_back(PathElem{false, out_key, 0});
    return path;
  }
  const auto& full = it->second;
  if (prefix.empty()) return full;
  std::string joined;
  for (size_t i = 0; i < full.size(); ++i) {
    joined += (i ? "." : "") + elem_text(full[i]);
    if (joined == prefix) return std::vector<PathElem>(full.begin() + static_cast<long>(i) + 1, full.end());
    if (joined.size() >= prefix.size()) break;
  }
  path.push_back(PathElem{false, out_key, 0});
  return path;
}

// The output key of `key` under the selection's prefix and --include globs; false when it is
// not selected by them (--exclude aside).
bool selected_key(const Selection& sel, const std::string& key, std::string& out_key) {
  out_key = key;
  if (!sel.prefix.empty()) {
    if (key.size() <= sel.prefix.size() || key.compare(0, sel.prefix.size(), sel.prefix) != 0 ||
        key[sel.prefix.size()] != '.')
      return false;
    out_key = key.substr(sel.prefix.size() + 1);
  }
  return sel.include.empty() || glob_any(sel.include, key, out_key);
}

}  // namespace

std::vector<std::string> excluded_keys(const Metadata& md, const Selection& sel) {
  std::vector<std::string> out;
  if (sel.exclude.empty()) return out;
  for (const auto& [is_tensor, idx] : md.order) {
    const std::string& key = is_tensor ? md.tensors[idx].fqn : md.bytes[idx].fqn;
    std::string out_key;
    if (selected_key(sel, key, out_key) && glob_any(sel.exclude, key, out_key)) out.push_back(std::move(out_key));
  }
  return out;
}

std::vector<SelectedItem> select_items(const Metadata& md, const Selection& sel) {
  std::vector<SelectedItem> out;
  for (const auto& [is_tensor, idx] : md.order) {
    const std::string& key = is_tensor ? md.tensors[idx].fqn : md.bytes[idx].fqn;
    std::string out_key;
    if (!selected_key(sel, key, out_key)) continue;
    if (glob_any(sel.exclude, key, out_key)) continue;
    SelectedItem s;
    s.tensor = is_tensor;
    s.index = idx;
    s.path = strip_path(md, key, sel.prefix, out_key);
    s.key = std::move(out_key);
    out.push_back(std::move(s));
  }
  if (out.empty()) {
    std::string what = sel.prefix.empty() ? "" : "--select " + sel.prefix;
    for (const auto& g : sel.include) what += (what.empty() ? "" : " ") + std::string("--include ") + g;
    for (const auto& g : sel.exclude) what += (what.empty() ? "" : " ") + std::string("--exclude ") + g;
    throw UsageError(Where(md.source), "nothing selected" +
                                           (what.empty() ? std::string(" (empty checkpoint)") : " by " + what) +
                                           "; see the keys with `dcpctl inspect --flat`");
  }
  return out;
}

}  // namespace dcpctl
