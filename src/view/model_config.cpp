#include "view/model_config.h"

#include "meta/checkpoint.h"
#include "store/file.h"
#include "util/error.h"
#include "view/maps/keymap.h"

namespace dcpctl {

using nlohmann::json;

std::shared_ptr<const ConfigFile> ModelConfig::file(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = files_.find(path); it != files_.end()) return it->second;
  if (!path_exists(path) || is_directory(path)) return nullptr;  // not kept: a later look sees a file made since
  auto f = std::make_shared<ConfigFile>();
  f->path = path;
  f->text = read_text(path);
  f->json = json::parse(f->text, nullptr, false);
  files_[path] = f;
  return f;
}

namespace {

// map()'s files: `config` alone when given, else `assets`/config.json, beside `dir`, and for a
// `sharded/` folder (spelled with a slash before it) its parent's.
std::vector<std::string> map_tries(const std::string& config, const std::string& assets, const std::string& dir) {
  if (!config.empty()) return {config};
  std::vector<std::string> tries;
  if (!assets.empty()) tries.push_back(join_path(assets, "config.json"));
  tries.push_back(join_path(dir, "config.json"));
  std::string parent = dir;
  while (!parent.empty() && parent.back() == '/') parent.pop_back();
  size_t slash = parent.rfind('/');
  if (slash != std::string::npos && parent.substr(slash + 1) == "sharded")
    tries.push_back(join_path(parent.substr(0, slash), "config.json"));
  return tries;
}

// store/file.h's base_name ("a/sharded/" is "sharded"), spelled here: a unity batch may hold
// another file's own base_name.
std::string folder_name(const std::string& path) {
  std::string d = path;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  size_t slash = d.find_last_of('/');
  return slash == std::string::npos ? d : d.substr(slash + 1);
}

}  // namespace

// The first of `tries` there is; one that is not a JSON object is refused. None: json null and
// `path` says where dcpctl looked.
MapConfig ModelConfig::first_object(const std::vector<std::string>& tries) const {
  for (const auto& p : tries) {
    std::shared_ptr<const ConfigFile> f = file(p);
    if (!f) continue;
    if (f->json.is_discarded() || !f->json.is_object())
      throw UsageError(Where(p), "not a JSON object: not a model's config.json");
    MapConfig c;
    c.path = p;
    c.json = f->json;
    return c;
  }
  MapConfig none;
  none.path = "looked for";
  for (size_t i = 0; i < tries.size(); ++i) none.path += (i ? ", " : " ") + tries[i];
  return none;
}

MapConfig ModelConfig::map(const std::string& checkpoint_dir) const {
  if (!config_.empty() && (!path_exists(config_) || is_directory(config_)))
    throw UsageError(Where(config_), "--config: no such file");
  return first_object(map_tries(config_, assets_, checkpoint_dir));
}

MapConfig ModelConfig::saved(const Checkpoint& ck) const {
  MapConfig config = first_object(map_tries("", assets_, ck.dir));
  for (size_t i = 0; config.json.is_null() && assets_.empty() && i < ck.asset_dirs.size(); ++i)
    config = first_object(map_tries("", "", ck.asset_dirs[i]));
  return config;
}

MapConfig ModelConfig::policy(const Checkpoint& ck) const {
  std::vector<std::string> tries;
  if (!config_.empty()) {
    tries.push_back(config_);
  } else {
    if (!assets_.empty()) tries.push_back(join_path(assets_, "config.json"));
    tries.push_back(join_path(ck.dir, "config.json"));
    if (folder_name(ck.dir) == "sharded") tries.push_back(join_path(parent_path(ck.dir), "config.json"));
    for (const auto& d : ck.asset_dirs) tries.push_back(join_path(d, "config.json"));
  }
  for (const auto& p : tries) {
    std::shared_ptr<const ConfigFile> f = file(p);
    if (!f || f->json.is_discarded() || !f->json.is_object()) continue;
    MapConfig c;
    c.path = p;
    c.json = f->json;
    return c;
  }
  return {};
}

std::vector<std::string> ModelConfig::heads_tries(const Checkpoint& ck, const std::string& base_config) const {
  std::vector<std::string> tries;
  if (!config_.empty()) tries.push_back(config_);
  if (!base_config.empty()) tries.push_back(base_config);
  if (!assets_.empty()) tries.push_back(join_path(assets_, "config.json"));
  tries.push_back(join_path(ck.dir, "config.json"));
  tries.push_back(join_path(parent_path(ck.dir), "config.json"));
  return tries;
}

}  // namespace dcpctl
