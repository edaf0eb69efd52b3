#include "meta/frameworks.h"

#include "store/file.h"
#include "util/error.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// megatron writes a one-line object; anything this large is not its metadata.json.
constexpr uint64_t kMaxConfigBytes = 1ull << 20;

}  // namespace

std::optional<MegatronConfig> read_megatron_config(const std::string& dir) {
  std::string path = join_path(dir, kMegatronConfigFile);
  if (!is_directory(dir) || !path_exists(path) || is_directory(path)) return std::nullopt;
  std::string text;
  try {
    ReadFile f(path);
    if (f.size() > kMaxConfigBytes) return std::nullopt;
    text.resize(f.size());
    f.read_at(0, text.data(), text.size());
  } catch (const Error&) {
    return std::nullopt;  // unreadable: not something we can attribute to megatron
  }
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("sharded_backend") || !j["sharded_backend"].is_string())
    return std::nullopt;
  MegatronConfig c;
  c.sharded_backend = j["sharded_backend"].get<std::string>();
  if (j.contains("sharded_backend_version") && j["sharded_backend_version"].is_number_integer())
    c.sharded_backend_version = j["sharded_backend_version"].get<int64_t>();
  c.fields = std::move(j);
  return c;
}

json describe_framework(const std::string& dir) {
  if (std::optional<MegatronConfig> c = read_megatron_config(dir)) {
    json files = json::array({kMegatronConfigFile});
    if (path_exists(join_path(dir, kIntegrityManifestFile))) files.push_back(kIntegrityManifestFile);
    return {{"name", "megatron-core"},
            {"files", files},
            {"backend", c->sharded_backend},
            {"backend_version", c->sharded_backend_version ? json(*c->sharded_backend_version) : json(nullptr)},
            {"config", c->fields}};
  }
  std::string meta = join_path(dir, kLightningMetaFile);
  if (is_directory(dir) && path_exists(meta) && !is_directory(meta))
    return {{"name", "lightning"}, {"files", {kLightningMetaFile}}};
  return nullptr;
}

}  // namespace dcpctl
