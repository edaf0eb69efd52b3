// dcpctl maps: the built-in key maps (view/maps/keymap.h) that --map takes by name.
#include <iostream>

#include "cmd/subcommands.h"
#include "view/maps/keymap.h"

namespace dcpctl::cli {

using nlohmann::json;

struct MapsCliOptions {
  bool json = false;
};

int run_maps(const MapsCliOptions& o) {
  std::vector<KeyMap> maps = builtin_key_maps();
  if (o.json) {
    json list = json::array();
    for (const auto& m : maps) {
      json params = json::object();
      for (const auto& [k, v] : m.params.items()) params[k] = v;
      json model = json::object();
      for (int s = 0; s < 2 && m.has_model; ++s) model[m.sides[s]] = m.model[s];
      json variants = json::array();
      for (const auto& v : m.variants)
        variants.push_back({{"name", v.name},
                            {"model_types", v.model_types},
                            {"default", v.is_default},
                            {"description", v.description}});
      list.push_back({{"name", m.name},
                      {"sides", {m.sides[0], m.sides[1]}},
                      {"description", m.description},
                      {"models", m.models},
                      {"model", m.has_model ? model : json()},
                      {"rule_kinds", rule_kinds(m)},
                      {"rules", m.rules.size()},
                      {"params", params},
                      {"family", m.family.empty() ? json() : json(m.family)},
                      {"variants", variants}});
    }
    std::cout << json{{"schema_version", 1}, {"maps", list}}.dump(2) << "\n";
    return 0;
  }
  size_t w = 4;
  for (const auto& m : maps) w = std::max(w, m.name.size());
  for (const auto& m : maps) {
    std::cout << m.name << std::string(w + 2 - m.name.size(), ' ') << m.sides[0] << " <-> " << m.sides[1] << "  "
              << m.description << "\n";
    std::string pad(w + 2, ' '), models, kinds;
    for (const auto& x : m.models) models += (models.empty() ? "" : "; ") + x;
    for (const auto& x : rule_kinds(m)) kinds += (kinds.empty() ? "" : ", ") + x;
    if (!models.empty()) std::cout << pad << "models: " << models << "\n";
    std::cout << pad << "rule kinds: " << kinds << "\n";
    if (!m.family.empty()) {
      std::string vs;
      for (const auto& v : m.variants) {
        std::string types;
        for (const auto& t : v.model_types) types += (types.empty() ? "" : " ") + t;
        vs += (vs.empty() ? "" : "; ") + v.name + (v.is_default ? " (default)" : "") + ": " + types;
      }
      std::cout << pad << "family " << m.family << ", variants by model_type: " << vs << "\n";
    }
    for (int s = 0; s < 2 && m.has_model; ++s) {
      std::string ns;
      for (const auto& x : m.model[s]) ns += (ns.empty() ? "" : " ") + x;
      std::cout << pad << m.sides[s] << " model keys: " << ns << "\n";
    }
  }
  return 0;
}

void setup_maps(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<MapsCliOptions>();
  auto* sub = parent.add_subcommand("maps",
                                    "List the built-in key maps that --map takes (torchtitan and Megatron <-> Hugging "
                                    "Face names and layouts): sides, models, rule kinds");
  sub->add_flag("--json", o->json, "Print the maps as JSON (schema_version 1)");
  sub->callback([&run, o] { run = [o] { return run_maps(*o); }; });
}

}  // namespace dcpctl::cli
