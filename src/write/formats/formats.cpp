// The table of output formats (plan/format.h): each row is defined by its module.
#include "plan/format.h"

#include <algorithm>

namespace dcpctl::formats {

namespace {

std::vector<const Format*>& rows() {
  static std::vector<const Format*> table{&safetensors, &hf_folder, &torch_file, &dcp, &megatron};
  return table;
}

}  // namespace

const std::vector<const Format*>& all() {
  return rows();
}

void add(const Format* row) {
  std::vector<const Format*>& table = rows();
  if (std::find(table.begin(), table.end(), row) == table.end()) table.push_back(row);
}

const Format* by_name(std::string_view name) {
  for (const Format* f : all())
    if (f->name == name) return f;
  return nullptr;
}

const Format* by_flag(std::string_view word) {
  for (const Format* f : all())
    if (f->consolidate_writer && !f->flag.empty() && f->flag == word) return f;
  return nullptr;
}

namespace {

// "a, b or c"
std::string listed(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i)
    out += std::string(i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
  return out;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::string flags() {
  std::vector<std::string> words;
  for (const Format* f : all())
    if (f->consolidate_writer && !f->flag.empty()) words.emplace_back(f->flag);
  return listed(words);
}

const Format* by_output(std::string_view output, bool directory) {
  for (const Format* f : all())
    if (f->consolidate_writer)
      for (std::string_view suffix : f->suffixes)
        if (suffix == "/" ? directory || ends_with(output, "/") : !directory && ends_with(output, suffix)) return f;
  return nullptr;
}

std::string output_names() {
  std::vector<std::string> names;
  for (const Format* f : all()) {
    if (!f->consolidate_writer || f->suffixes.empty()) continue;
    std::string name;
    for (std::string_view suffix : f->suffixes)
      name += (name.empty() ? "" : "/") + std::string(suffix == "/" ? "DIR/" : suffix);
    names.push_back(std::move(name));
  }
  return listed(names);
}

}  // namespace dcpctl::formats
