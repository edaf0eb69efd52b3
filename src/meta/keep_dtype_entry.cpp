#include "meta/keep_dtype_entry.h"

#include <fnmatch.h>

#include <nlohmann/json.hpp>

namespace dcpctl {

std::string keep_dtype_entry(const std::vector<std::string>& globs) {
  return nlohmann::json(globs).dump();
}

KeepDtypeEntry read_keep_dtype_entry(const std::map<std::string, std::string>& metadata) {
  KeepDtypeEntry out;
  auto it = metadata.find(kKeepDtypeEntry);
  if (it == metadata.end()) return out;
  out.present = true;
  const std::string& text = it->second;
  auto refuse = [&](std::string why) {
    out.globs.clear();
    out.error = std::move(why);
    return out;
  };
  // The caps before parsing: a hostile header is at most 100 MB, this entry far less.
  if (text.size() > kMaxKeepDtypeEntry)
    return refuse(std::to_string(text.size()) + " bytes, over the " + std::to_string(kMaxKeepDtypeEntry) +
                  " an entry may hold");
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return refuse("not JSON");
  if (!j.is_array() || j.empty()) return refuse("not a JSON list of glob strings");
  if (j.size() > kMaxKeepDtypeGlobs)
    return refuse(std::to_string(j.size()) + " globs, over the " + std::to_string(kMaxKeepDtypeGlobs) +
                  " an entry may hold");
  for (const auto& g : j) {
    if (!g.is_string() || g.get_ref<const std::string&>().empty()) return refuse("not a JSON list of glob strings");
    const std::string& s = g.get_ref<const std::string&>();
    if (s.size() > kMaxKeepDtypeGlob || s.find('\0') != std::string::npos)
      return refuse("a glob of " + std::to_string(s.size()) + " bytes (at most " + std::to_string(kMaxKeepDtypeGlob) +
                    ", no NUL)");
    out.globs.push_back(s);
  }
  return out;
}

const std::string* keep_dtype_glob_of(const std::vector<std::string>& globs, const std::string& key) {
  for (const auto& g : globs)
    if (::fnmatch(g.c_str(), key.c_str(), 0) == 0) return &g;
  return nullptr;
}

}  // namespace dcpctl
