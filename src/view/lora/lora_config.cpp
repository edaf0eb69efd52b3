#include "view/lora/lora_config.h"

#include <regex>

#include "meta/checkpoint.h"
#include "store/file.h"
#include "util/error.h"

namespace dcpctl {

using nlohmann::json;

bool pattern_matches(const std::string& pattern, const std::string& key) {
  if (pattern == key) return true;
  try {
    return std::regex_match(key, std::regex("(.*\\.)?(" + pattern + ")"));
  } catch (const std::regex_error&) {
    return false;
  }
}

double LoraConfig::alpha(const std::string& module) const {
  for (const auto& [pattern, value] : alpha_patterns)
    if (pattern_matches(pattern, module)) return value;
  return json.at("lora_alpha").get<double>();  // find_config made sure it is a number
}
bool LoraConfig::rslora() const {
  return json.value("use_rslora", false);
}
std::string LoraConfig::variant() const {
  static const std::pair<const char*, const char*> kVariants[] = {{"use_dora", "DoRA"},
                                                                  {"use_qalora", "QA-LoRA"},
                                                                  {"alora_invocation_tokens", "aLoRA"},
                                                                  {"velora_config", "VeLoRA"},
                                                                  {"monteclora_config", "MonteCLoRA"},
                                                                  {"use_bdlora", "BD-LoRA"},
                                                                  {"arrow_config", "Arrow"},
                                                                  {"kasa_config", "KaSA"},
                                                                  {"lora_bias", "a LoRA bias"},
                                                                  {"trainable_token_indices", "trainable tokens"},
                                                                  {"layer_replication", "layer replication"}};
  for (const auto& [field, name] : kVariants) {
    auto it = json.find(field);
    if (it == json.end() || it->is_null() || *it == false || (it->is_structured() && it->empty())) continue;
    return std::string(name) + " (" + field + ")";
  }
  auto init = json.find("init_lora_weights");
  if (init != json.end() && init->is_string() && init->get<std::string>().rfind("mica", 0) == 0)
    return "MiCA (init_lora_weights)";
  return "";
}
bool LoraConfig::fan_in_fan_out() const {
  return json.value("fan_in_fan_out", false);
}

// The adapter's config: --lora-config FILE, else an adapter_config.json beside the checkpoint (its
// folder, the folder above, the trainer's asset folders), else built from --lora-alpha; with
// --lora-alpha its lora_alpha wins. UsageError naming where dcpctl looked when none says alpha.
LoraConfig find_lora_config(const Checkpoint& ck, const LoraRequest& rq, const std::string& adapter) {
  LoraConfig c;
  std::vector<std::string> tries;
  if (!rq.config_file.empty()) {
    if (!path_exists(rq.config_file) || is_directory(rq.config_file))
      throw UsageError(Where(rq.config_file), "--lora-config: no such file");
    tries.push_back(rq.config_file);
  } else {
    std::vector<std::string> dirs{ck.dir, parent_path(ck.dir)};
    if (!ck.step_dir.empty()) dirs.push_back(ck.step_dir);
    dirs.insert(dirs.end(), ck.asset_dirs.begin(), ck.asset_dirs.end());
    for (const std::string& d : dirs) {
      if (d.empty()) continue;
      // PEFT saves an adapter other than "default" in a subfolder of its name; the adapter_config.json
      // above it is the default adapter's, whose alpha is not this one's.
      if (!adapter.empty() && adapter != "default")
        tries.push_back(join_path(join_path(d, adapter), "adapter_config.json"));
      else
        tries.push_back(join_path(d, "adapter_config.json"));
    }
  }
  for (const std::string& p : tries) {
    if (!path_exists(p) || is_directory(p)) continue;
    const std::string text = read_text(p);
    c.json = json::parse(text, nullptr, false);
    if (c.json.is_discarded() || !c.json.is_object())
      throw UsageError(Where(p), "not a JSON object: not PEFT's adapter_config.json");
    const nlohmann::ordered_json in_order = nlohmann::ordered_json::parse(text, nullptr, false);
    if (in_order.contains("alpha_pattern") && in_order["alpha_pattern"].is_object())
      for (const auto& [pattern, value] : in_order["alpha_pattern"].items())
        if (value.is_number()) c.alpha_patterns.emplace_back(pattern, value.get<double>());
    if (c.json.contains("peft_type") && c.json["peft_type"] != "LORA")
      throw UnsupportedError(Where(p),
                             "peft_type " + c.json["peft_type"].dump() + ": dcpctl exports and merges LoRA adapters");
    c.path = p;
    break;
  }
  if (rq.alpha) {
    if (!c.json.is_object()) c.json = json::object();
    c.json["lora_alpha"] = *rq.alpha;
  }
  if (!c.json.is_object() || !c.json.contains("lora_alpha") || !c.json["lora_alpha"].is_number()) {
    std::string where;
    for (size_t i = 0; i < tries.size(); ++i) where += (i ? ", " : "") + tries[i];
    throw UsageError(
        Where(c.path.empty() ? ck.dir : c.path),
        "the LoRA scaling of adapter '" + (adapter.empty() ? std::string("(unnamed)") : adapter) +
            "' is not in the checkpoint (lora_alpha, with the rank, gives alpha / r): give --lora-config "
            "adapter_config.json or "
            "--lora-alpha N" +
            (c.path.empty() ? " (no adapter_config.json in " + where + ")" : " (" + c.path + " has no lora_alpha)"));
  }
  return c;
}

}  // namespace dcpctl
