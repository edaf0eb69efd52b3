#include "view/lora/lora_torchtune.h"

#include <regex>

#include "meta/checkpoint.h"
#include "store/file.h"
#include "view/model_config.h"

namespace dcpctl {

using nlohmann::json;

std::string torchtune_hf_module(const std::string& module) {
  static const std::regex layer(R"(^layers\.(\d+)\.(attn|mlp)\.(\w+)$)");
  std::smatch m;
  if (module == "output") return "lm_head";
  if (!std::regex_match(module, m, layer)) return "";
  static const std::pair<const char*, const char*> kNames[] = {
      {"q_proj", "self_attn.q_proj"}, {"k_proj", "self_attn.k_proj"},
      {"v_proj", "self_attn.v_proj"}, {"output_proj", "self_attn.o_proj"},
      {"w1", "mlp.gate_proj"},        {"w2", "mlp.down_proj"},
      {"w3", "mlp.up_proj"}};
  for (const auto& [tune, hf] : kNames)
    if (m[3] == tune && (m[2] == "attn") == (std::string(hf).rfind("self_attn", 0) == 0))
      return "model.layers." + m[1].str() + "." + hf;
  return "";
}

std::optional<TorchtuneHeads> torchtune_heads(const Checkpoint& ck, const LoraConfig& config, const ModelConfig& model,
                                              std::string* looked) {
  std::string base_config;
  const json base = config.json.value("base_model_name_or_path", json());
  if (base.is_string() && !base.get<std::string>().empty()) {
    const std::string b = base.get<std::string>();
    const std::string dir = b[0] == '/' || config.path.empty() ? b : join_path(parent_path(config.path), b);
    base_config = join_path(dir, "config.json");
  }
  for (const std::string& p : model.heads_tries(ck, base_config)) {
    if (looked) *looked += (looked->empty() ? "" : ", ") + p;
    std::shared_ptr<const ConfigFile> f = model.file(p);
    if (!f) continue;
    const json& c = f->json;
    if (!c.is_object() || !c.value("num_attention_heads", json()).is_number_integer() ||
        !c.value("hidden_size", json()).is_number_integer())
      continue;
    TorchtuneHeads h;
    h.heads = c["num_attention_heads"].get<int64_t>();
    h.kv_heads =
        c.value("num_key_value_heads", json()).is_number_integer() ? c["num_key_value_heads"].get<int64_t>() : h.heads;
    h.head_dim = c.value("head_dim", json()).is_number_integer() ? c["head_dim"].get<int64_t>()
                                                                 : c["hidden_size"].get<int64_t>() / h.heads;
    if (h.heads > 0 && h.kv_heads > 0 && h.head_dim > 0 && h.head_dim % 2 == 0) return h;
  }
  return std::nullopt;
}

std::vector<int64_t> torchtune_rope_rows(int64_t heads, int64_t head_dim) {
  std::vector<int64_t> rows(static_cast<size_t>(heads * head_dim));
  const int64_t half = head_dim / 2;
  // out[h, j, i] = in[h, i, j] for j < 2, i < half (view(heads, half, 2, r).transpose(1, 2)).
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < half; ++i)
        rows[static_cast<size_t>(h * head_dim + j * half + i)] = h * head_dim + i * 2 + j;
  return rows;
}

}  // namespace dcpctl
