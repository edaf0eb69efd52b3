// A GGUF's tensors against its architecture's table (gguf/arch_check.h).
#include "gguf/arch_check.h"

#include <map>
#include <set>

#include "gguf/model.h"

namespace dcpctl {

namespace {

std::string arch_shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
  return t + "]";
}

// A key's value as the reader keeps it (gguf/reader.cpp): an integer's decimal text; an
// array of more than 8 elements "[N type]", of fewer its elements.
std::optional<int64_t> key_integer(const std::map<std::string, std::string>& values, const std::string& key,
                                   bool length) {
  auto it = values.find(key);
  if (it == values.end()) return std::nullopt;
  const std::string& v = it->second;
  if (length) {
    if (v.size() < 3 || v.front() != '[') return std::nullopt;
    size_t digits = v.find_first_not_of("0123456789", 1);
    if (digits != std::string::npos && digits > 1 && v[digits] == ' ') return std::stoll(v.substr(1, digits - 1));
    return std::nullopt;  // eight or fewer elements listed: not a vocabulary
  }
  if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(v);
}

}  // namespace

GgufArchReport check_gguf_arch(const Checkpoint& ck) {
  GgufArchReport r;
  std::string arch = ck.values.count("general.architecture") ? ck.values.at("general.architecture") : "";
  if (arch.size() >= 2 && arch.front() == '\'' && arch.back() == '\'') arch = arch.substr(1, arch.size() - 2);
  const std::string first = ck.metadata_path;
  // The table has a row per tensor of every layer: a block_count the file's tensors cannot hold
  // (every layer of every architecture has tensors of its own) is one finding, not a table of
  // block_count layers built to list them (a damaged or hostile count would make it any size).
  const std::string block_count = arch + ".block_count";
  if (std::optional<int64_t> layers = key_integer(ck.values, block_count, false);
      layers && static_cast<uint64_t>(*layers) > ck.md.tensors.size()) {
    r.problems.push_back({"gguf-tensor-missing", Where(first, std::nullopt, block_count),
                          block_count + " is " + std::to_string(*layers) + ", more layers than the file's " +
                              std::to_string(ck.md.tensors.size()) + " tensors can hold (llama.cpp: missing tensor)"});
    return r;
  }
  auto table = gguf::expected_tensors(
      arch, [&](const std::string& key) { return key_integer(ck.values, key, key == "tokenizer.ggml.tokens"); });
  if (!table) {
    r.notes.push_back(
        {"gguf-arch-not-checked", Where(first, std::nullopt, "general.architecture"),
         "architecture '" + arch +
             "': its tensors are not checked against a table (dcpctl has llama's, qwen2's, qwen3's, "
             "qwen3moe's, deepseek2's, glm4moe's, gpt-oss's, gemma2's, gemma3's, phi3's, granite's, olmo2's, "
             "starcoder2's, command-r's, falcon's, mistral3's and mpt's; llama.cpp has many more)"});
    return r;
  }
  std::map<std::string, const gguf::ExpectedTensor*> by_name;
  for (const auto& e : *table) by_name[e.name] = &e;
  std::set<std::string> present;
  for (const auto& t : ck.md.tensors) present.insert(t.fqn);
  for (const auto& t : ck.md.tensors) {
    const StorageRef* s = t.storage.empty() ? nullptr : &t.storage.front();
    Where where(s ? ck.path_of(s->file) : first, s ? std::optional<uint64_t>(s->offset) : std::nullopt, t.fqn);
    auto it = by_name.find(t.fqn);
    if (it == by_name.end()) {
      r.problems.push_back({"gguf-tensor-unexpected", where,
                            "'" + t.fqn + "' is not a tensor of llama.cpp's " + arch +
                                " with these keys (llama.cpp: wrong number of tensors)"});
      continue;
    }
    const std::vector<int64_t>& want = it->second->shape;
    bool same = want.size() == t.shape.size();
    for (size_t d = 0; same && d < want.size(); ++d) same = want[d] < 0 || want[d] == t.shape[d];
    if (!same)
      r.problems.push_back({"gguf-shape-mismatch", where,
                            "'" + t.fqn + "' is " + arch_shape_text(t.shape) + "; the keys of " + arch + " give " +
                                arch_shape_text(want) + " (llama.cpp: tensor has wrong shape)"});
  }
  for (const auto& e : *table)
    if (e.required && !present.count(e.name) && (e.unless.empty() || !present.count(e.unless)))
      r.problems.push_back({"gguf-tensor-missing", Where(first, std::nullopt, e.name),
                            "'" + e.name + "' of shape " + arch_shape_text(e.shape) +
                                " is not in the file; llama.cpp's " + arch + " needs it (missing tensor)"});
  return r;
}

}  // namespace dcpctl
