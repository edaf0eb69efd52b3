#include "check/titan_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "check/megatron_args.h"
#include "meta/checkpoint.h"
#include "util/error.h"
#include "view/maps/keymap.h"

namespace dcpctl {

std::string titan_config_text();  // src/check/titan_config.json, compiled in (src/CMakeLists.txt)

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr uintmax_t kMaxJobConfigBytes = 16u << 20;

// Whether `j` is what Trainer.Config.to_dict() writes: model_spec {name, flavor, model}, checkpoint {folder}.
bool is_job_config(const json& j) {
  if (!j.is_object()) return false;
  auto ms = j.find("model_spec");
  auto ck = j.find("checkpoint");
  return ms != j.end() && ms->is_object() && ms->value("name", json()).is_string() &&
         ms->value("flavor", json()).is_string() && ms->value("model", json()).is_object() && ck != j.end() &&
         ck->is_object() && ck->value("folder", json()).is_string();
}

// A JSON object's text, or null: a file that is not one (a safetensors file, a JSON Lines log).
json read_json_object(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec) || fs::file_size(p, ec) > kMaxJobConfigBytes || ec) return nullptr;
  std::ifstream in(p, std::ios::binary);
  char c = 0;
  while (in.get(c) && std::isspace(static_cast<unsigned char>(c))) {
  }
  if (!in || c != '{') return nullptr;
  std::ostringstream text;
  text << c << in.rdbuf();
  return json::parse(text.str(), nullptr, false);
}

std::string last_component(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  const size_t slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

// A row's PATH into model_spec.model: every (concrete path, value) it names, nulls left out.
void eval_path(const json& at, const std::string& path, size_t pos, const std::string& shown,
               std::vector<std::pair<std::string, json>>& out) {
  if (at.is_null()) return;
  if (pos >= path.size()) {
    out.emplace_back(shown, at);
    return;
  }
  if (path.compare(pos, 3, "[*]") == 0) {
    if (!at.is_array()) return;
    for (size_t i = 0; i < at.size(); ++i) eval_path(at[i], path, pos + 3, shown + "[" + std::to_string(i) + "]", out);
    return;
  }
  if (path[pos] == '.') ++pos;
  size_t end = path.find_first_of(".[", pos);
  if (end == std::string::npos) end = path.size();
  const std::string name = path.substr(pos, end - pos);
  if (!at.is_object() || !at.contains(name)) return;
  eval_path(at[name], path, end, shown + (shown.empty() ? "" : ".") + name, out);
}

std::string shown(const json& v) {
  return v.is_string() ? v.dump() : v.is_null() ? "null" : v.dump();
}

bool same_value(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || std::fabs(x - y) <= 1e-6 * std::max(std::fabs(x), std::fabs(y));
  }
  return a == b;
}

class RowChecker {
 public:
  RowChecker(const json& model, const json& config, std::string model_type, json defaults)
      : model_(model), config_(config), model_type_(std::move(model_type)), defaults_(std::move(defaults)) {}

  std::vector<std::pair<std::string, json>> titan(const json& paths, bool count) const {
    std::vector<std::pair<std::string, json>> out;
    for (const json& p : paths.is_array() ? paths : json::array({paths})) {
      const std::string path = p.get<std::string>();
      std::vector<std::pair<std::string, json>> got;
      eval_path(model_, path, 0, "", got);
      for (auto& [where, v] : got) {
        if (count && v.is_array())
          out.emplace_back(where + " (" + std::to_string(v.size()) + " entries)", json(v.size()));
        else if (!count)
          out.emplace_back(where, v);
      }
    }
    return out;
  }

  // config.json's FIELD (and how it is spelled there), or its class default, or nullopt.
  std::optional<std::pair<json, std::string>> config_value(const std::string& field, std::string* from) const {
    const bool rope = field.rfind("rope:", 0) == 0;
    const std::string name = rope ? field.substr(5) : field;
    auto stated = [&](const json& o, const std::string& k) {
      return o.is_object() && o.contains(k) && !o[k].is_null();
    };
    if (rope) {
      if (auto got = config_rope_field(config_, name)) {
        *from = "config.json";
        return got;
      }
    } else if (stated(config_, name)) {
      *from = "config.json";
      return std::make_pair(config_[name], name);
    }
    if (defaults_.is_object() && defaults_.contains(name)) {
      *from = model_type_ + "'s default";
      return std::make_pair(defaults_[name], (rope ? "rope_parameters." : "") + name);
    }
    return std::nullopt;
  }

  void row(const json& r, const std::string& file) {
    auto bad = [](const std::string& what) {
      throw UsageError(Where("src/check/titan_config.json"),
                       "a row: " + what + " (check/titan_config.h lists the fields)");
    };
    if (!r.is_object() || !(r.value("titan", json()).is_string() || r.value("titan", json()).is_array()))
      bad("no \"titan\"");
    if (r.contains("when")) {
      const json& w = r["when"];
      if (!w.is_object() || !w.value("titan", json()).is_string() || !w.contains("is")) bad("\"when\" is {titan, is}");
      const auto vs = titan(w["titan"], false);
      if (vs.empty() || !std::all_of(vs.begin(), vs.end(), [&](const auto& v) { return v.second == w["is"]; })) return;
    }
    const auto vs = titan(r["titan"], r.value("count", false));
    if (vs.empty()) return;  // the model has no such field: no claim
    std::string titan_fields;
    for (const json& p : r["titan"].is_array() ? r["titan"] : json::array({r["titan"]}))
      titan_fields += (titan_fields.empty() ? "" : ", ") + std::string("model_spec.model.") + p.get<std::string>();
    if (r.contains("fixed")) {
      for (const auto& [where, v] : vs)
        if (!same_value(v, r["fixed"])) {
          problems_.push_back(r.value("what", std::string("the Hugging Face class fixes it")) + ", but " + file +
                              ": model_spec.model." + where + " = " + shown(v) + " (no config.json setting says so)");
          return;
        }
      checked_.push_back({{"config", "(" + r.value("what", std::string()) + ")"},
                          {"titan", titan_fields},
                          {"value", r["fixed"]},
                          {"config_from", "model"}});
      return;
    }
    if (!r.value("config", json()).is_string()) bad("no \"config\" and no \"fixed\"");
    std::string from;
    const auto cv = config_value(r["config"].get<std::string>(), &from);
    if (!cv) return;  // config.json leaves it out and no default is known: not compared
    const json* values = r.contains("values") ? &r["values"] : nullptr;
    for (const auto& [where, raw] : vs) {
      json v = raw;
      if (values) {
        if (!raw.is_string() || !values->contains(raw.get<std::string>())) return;  // a spelling not known: no claim
        v = (*values)[raw.get<std::string>()];
      }
      if (!same_value(v, cv->first)) {
        problems_.push_back(cv->second + " = " + shown(cv->first) + (from == "config.json" ? "" : " (" + from + ")") +
                            ", but " + file + ": model_spec.model." + where + " = " + shown(raw) +
                            (values ? " (" + cv->second + " " + shown(v) + ")" : ""));
        return;
      }
    }
    checked_.push_back({{"config", cv->second}, {"titan", titan_fields}, {"value", cv->first}, {"config_from", from}});
  }

  json checked_ = json::array();
  std::vector<std::string> problems_;

 private:
  const json& model_;
  const json& config_;
  std::string model_type_;
  json defaults_;
};

const json& table() {
  static const json t = json::parse(titan_config_text());
  return t;
}

}  // namespace

json titan_config_rows(const std::string& model_name) {
  const json& models = table()["models"];
  return models.contains(model_name) ? models[model_name] : json();
}

std::optional<TitanJobConfig> find_titan_job_config(const std::string& checkpoint_dir, std::string* note) {
  auto say = [&](const std::string& s) {
    if (note) *note = s;
    return std::nullopt;
  };
  if (checkpoint_dir.find("://") != std::string::npos)
    return say(
        "torchtitan's job config is looked for beside local checkpoints only: nothing compared with config.json");
  std::error_code ec;
  const fs::path step = fs::weakly_canonical(fs::path(checkpoint_dir), ec);
  if (ec || !step.has_parent_path())
    return say("no run folder above " + checkpoint_dir + ": nothing compared with config.json");
  const fs::path run = step.parent_path();
  const fs::path dump = run.parent_path();
  std::vector<TitanJobConfig> found;
  std::vector<std::string> others;
  for (const fs::path& dir : {run, dump}) {
    std::vector<fs::path> files;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) files.push_back(it->path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      json j = read_json_object(f);
      if (!is_job_config(j)) continue;
      const std::string folder = j["checkpoint"]["folder"].get<std::string>();
      if (last_component(folder) != run.filename().string()) {
        others.push_back(f.string() + " (its checkpoint.folder \"" + folder + "\" is not this run folder)");
        continue;
      }
      found.push_back({f.string(), std::move(j)});
    }
    if (dump == run) break;
  }
  if (found.empty()) {
    std::string s = "no torchtitan job config (debug.save_config_file) in " + run.string() + " or " + dump.string();
    if (!others.empty()) s += "; not this run's: " + others[0];
    return say(s + ": nothing compared with config.json");
  }
  for (size_t i = 1; i < found.size(); ++i)
    if (found[i].values["model_spec"] != found[0].values["model_spec"])
      return say("two torchtitan job configs describe different models (" + found[0].path + ", " + found[i].path +
                 "): nothing compared with config.json");
  return std::move(found[0]);
}

json check_titan_job_config(const TitanJobConfig& job, const json& config, const std::string& config_path,
                            const json& rows) {
  static const json kNone = json::object();
  const json& cfg = config.is_object() ? config : kNone;
  const std::string model_type = cfg.value("model_type", std::string());
  const json defaults = rows.value("config_defaults", json::object()).value(model_type, json());
  RowChecker c(job.values["model_spec"]["model"], cfg, model_type, defaults);
  for (const json& r : rows.value("rows", json::array())) c.row(r, job.path);
  if (!c.problems_.empty()) {
    const json& ms = job.values["model_spec"];
    throw_config_contradiction(config_path,
                               "config.json disagrees with the torchtitan job config the run saved (" + job.path +
                                   ": debug.save_config_file, model " + ms["name"].get<std::string>() + " flavor " +
                                   ms["flavor"].get<std::string>() + "):",
                               c.problems_);
  }
  return std::move(c.checked_);
}

void check_titan_map(const Checkpoint& saved, MappedModel& map, const MapConfig& config) {
  if (map.from != "torchtitan" || map.to != "hf") return;
  json out = {
      {"from", nullptr}, {"model", nullptr}, {"flavor", nullptr}, {"checked", json::array()}, {"note", nullptr}};
  std::string note;
  std::optional<TitanJobConfig> job = find_titan_job_config(saved.dir, &note);
  if (!job) {
    out["note"] = note;
    map.trainer_config = std::move(out);
    return;
  }
  const json& ms = job->values["model_spec"];
  out["from"] = job->path;
  out["model"] = ms["name"];
  out["flavor"] = ms["flavor"];
  const json rows = titan_config_rows(ms["name"].get<std::string>());
  if (rows.is_null()) {
    out["note"] = "torchtitan model \"" + ms["name"].get<std::string>() +
                  "\" has no comparison table (src/check/titan_config.json): nothing compared with config.json";
  } else if (!config.json.is_object()) {
    out["note"] = "no config.json to compare with (" + config.path + ")";
  } else {
    out["checked"] = check_titan_job_config(*job, config.json, config.path, rows);
  }
  map.trainer_config = std::move(out);
}

}  // namespace dcpctl
