#include "view/moe_sparsity.h"

#include <regex>

namespace dcpctl {

using nlohmann::json;

const std::vector<std::string> kExpertCountFields = {"n_routed_experts", "num_local_experts", "num_experts",
                                                     "moe_num_experts"};

std::optional<int64_t> MoeSparsity::count(int64_t layer) const {
  return covers(layer) ? num_experts[static_cast<size_t>(layer)] : std::nullopt;
}

std::optional<int64_t> config_expert_count(const json& config) {
  if (!config.is_object()) return std::nullopt;
  const json* text =
      config.contains("text_config") && config["text_config"].is_object() ? &config["text_config"] : nullptr;
  for (const json* j : {text, &config})
    for (const auto& f : kExpertCountFields)
      if (j && j->contains(f) && (*j)[f].is_number_integer()) return (*j)[f].get<int64_t>();
  return std::nullopt;
}

bool MoeSparsity::differs_from(const json& config) const {
  const std::optional<int64_t> own = config_expert_count(config);
  if (!invalid.empty() || !own) return true;
  for (const auto& n : num_experts)
    if (n && *n != *own) return true;
  return false;
}

namespace {

// ExpertSparsityConfig's validation: method one of MoESparsityMethod's values, num_experts a list of
// StrictInt or null (no bool, no float); a count below 0, or one no layer could hold, refused here too.
std::string parse_sparsity(const json& s, MoeSparsity& out) {
  if (!s.is_object()) return "not an object";
  if (!s.contains("method") || !s["method"].is_string()) return "no method (\"prune\" or \"novice\")";
  out.method = s["method"].get<std::string>();
  if (out.method != "prune" && out.method != "novice")
    return "method '" + out.method + "' is neither \"prune\" nor \"novice\"";
  if (!s.contains("num_experts") || !s["num_experts"].is_array()) return "num_experts is not a list";
  const json& list = s["num_experts"];
  if (list.size() > (1u << 20)) return "num_experts lists " + std::to_string(list.size()) + " layers";
  for (size_t i = 0; i < list.size(); ++i) {
    const json& n = list[i];
    if (n.is_null()) {
      out.num_experts.emplace_back();
    } else if (n.is_number_integer() && n.get<int64_t>() >= 0 && n.get<int64_t>() < (int64_t{1} << 32)) {
      out.num_experts.emplace_back(n.get<int64_t>());
    } else {
      return "num_experts[" + std::to_string(i) + "] is " + n.dump() + ", neither null nor a count of experts";
    }
  }
  return "";
}

}  // namespace

std::optional<MoeSparsity> find_moe_sparsity(const json& config) {
  if (!config.is_object()) return std::nullopt;
  const json* text =
      config.contains("text_config") && config["text_config"].is_object() ? &config["text_config"] : nullptr;
  for (const json* j : {&config, text}) {
    if (!j || !j->contains("quantization_config") || !(*j)["quantization_config"].is_object()) continue;
    const json& qc = (*j)["quantization_config"];
    if (!qc.contains("moe_sparsity_config") || qc["moe_sparsity_config"].is_null()) continue;
    MoeSparsity out;
    out.field = std::string(j == text ? "text_config." : "") + "quantization_config.moe_sparsity_config";
    out.invalid = parse_sparsity(qc["moe_sparsity_config"], out);
    if (!out.invalid.empty()) out.num_experts.clear();
    return out;
  }
  return std::nullopt;
}

json config_with_experts(const json& config, int64_t count) {
  json out = config;
  for (const char* sub : {"", "text_config"}) {
    json* j = *sub ? (out.contains(sub) && out[sub].is_object() ? &out[sub] : nullptr) : &out;
    if (!j) continue;
    for (const auto& f : kExpertCountFields)
      if (j->contains(f) && (*j)[f].is_number_integer()) (*j)[f] = count;
  }
  return out;
}

std::optional<int64_t> decoder_layer(const std::string& key) {
  static const std::regex kLayer(R"(^(.*?)layers\.(\d+)\.)");
  std::smatch m;
  if (!std::regex_search(key, m, kLayer) || m[2].length() >= 10) return std::nullopt;
  const std::string prefix = m[1];
  for (const char* w : {"vision", "visual", "audio", "image", "speech", "mtp", "encoder"})
    if (prefix.find(w) != std::string::npos) return std::nullopt;
  return std::stoll(m[2]);
}

}  // namespace dcpctl
