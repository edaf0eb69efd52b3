// The table of output formats (plan/format.h): each row is defined by its module.
#include "plan/format.h"

namespace dcpctl::formats {

const std::vector<const Format*>& all() {
  static const std::vector<const Format*> rows{&safetensors, &hf_folder, &torch_file, &dcp, &megatron, &peft_adapter};
  return rows;
}

const Format* by_flag(std::string_view word) {
  for (const Format* f : all())
    if (f->consolidate_writer && !f->flag.empty() && f->flag == word) return f;
  return nullptr;
}

std::string flags() {
  std::vector<std::string_view> words;
  for (const Format* f : all())
    if (f->consolidate_writer && !f->flag.empty()) words.push_back(f->flag);
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += std::string(i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + std::string(words[i]);
  return out;
}

}  // namespace dcpctl::formats
