#include "check/safetensors_audit.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

#include "meta/safetensors_header.h"
#include "store/file.h"

namespace dcpctl {

using nlohmann::json;

unsigned safetensors_dtype_bits(const std::string& name) {
  static const std::map<std::string, unsigned> kBits = {
      {"BOOL", 8}, {"U8", 8},   {"I8", 8},    {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16},
      {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32},    {"U32", 32},    {"F32", 32},    {"I64", 64},
      {"U64", 64}, {"F64", 64}, {"C64", 64},  {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6},
  };
  auto it = kBits.find(name);
  return it == kBits.end() ? 0 : it->second;
}

namespace safetensors_audit_impl {

// Bytes of `t` by dtype x shape; nullopt when the dtype is unknown, the count overflows, or the
// bits are not whole bytes (`why` says which).
std::optional<uint64_t> expected_bytes(const AuditedTensor& t, std::string& why) {
  const unsigned bits = safetensors_dtype_bits(t.dtype_name);
  if (!bits) return std::nullopt;
  uint64_t numel = 1;
  for (int64_t d : t.shape) {
    if (d != 0 && numel > UINT64_MAX / static_cast<uint64_t>(d)) return why = "its shape overflows", std::nullopt;
    numel *= static_cast<uint64_t>(d);
  }
  if (numel > UINT64_MAX / bits) return why = "its shape overflows", std::nullopt;
  if (numel * bits % 8)
    return why = std::to_string(numel) + " elements of " + t.dtype_name + " are not whole bytes", std::nullopt;
  return numel * bits / 8;
}

}  // namespace safetensors_audit_impl

using namespace safetensors_audit_impl;

SafetensorsAudit audit_safetensors_header(std::string_view text, uint64_t data_start, uint64_t data_bytes,
                                          const std::string& source) {
  SafetensorsAudit a;
  a.header_bytes = text.size();
  a.data_start = data_start;
  a.data_bytes = data_bytes;
  SafetensorsEntries entries = decode_safetensors_json(text, true);
  const uint64_t header_at = data_start - text.size();
  if (!entries.error.empty()) {
    a.problems.push_back({"header-invalid", Where(source, header_at), "safetensors header: " + entries.error});
    return a;
  }
  a.decoded = true;
  a.tensors = std::move(entries.tensors);
  a.metadata = std::move(entries.metadata);
  for (const auto& k : entries.duplicates)
    a.problems.push_back(
        {"duplicate-key", Where(source, header_at, k),
         "the header names this key more than once: a JSON reader keeps one entry and the other tensor is lost"});
  struct Span {
    uint64_t begin, end;
    const std::string* key;
  };
  std::vector<Span> spans;
  for (const auto& t : a.tensors) {
    Where w(source, data_start + t.begin, t.key);
    if (t.begin > t.end || t.end > data_bytes) {
      a.problems.push_back({"window-out-of-file", w,
                            "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                                ") run outside the data section (" + std::to_string(data_bytes) + " bytes)"});
      continue;
    }
    std::string why;
    std::optional<uint64_t> want = expected_bytes(t, why);
    if (!why.empty())
      a.problems.push_back({"size-mismatch", w, why});
    else if (want && *want != t.end - t.begin)
      a.problems.push_back({"size-mismatch", w,
                            "data_offsets span " + std::to_string(t.end - t.begin) + " bytes but " + t.dtype_name +
                                " of its shape needs " + std::to_string(*want)});
    spans.push_back({t.begin, t.end, &t.key});
  }
  std::stable_sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.begin < y.begin; });
  uint64_t covered = 0;  // the data section's bytes [0, covered) are some tensor's or reported
  const Span* reach = nullptr;
  for (const Span& s : spans) {
    if (s.end == s.begin) continue;  // an empty tensor occupies no byte
    Where w(source, data_start + s.begin, *s.key);
    if (reach && s.begin < reach->end)
      a.problems.push_back(
          {"window-overlap", w,
           "its bytes overlap those of '" + *reach->key + "' at data offset " + std::to_string(reach->begin)});
    else if (s.begin > covered)
      a.problems.push_back(
          {"offsets-gap", w,
           std::to_string(s.begin - covered) + " bytes of the data section before it belong to no tensor"});
    if (!reach || s.end > reach->end) reach = &s;
    covered = std::max(covered, s.end);
  }
  if (covered < data_bytes && spans.size() == a.tensors.size())
    a.problems.push_back({"offsets-gap", Where(source, data_start + covered),
                          std::to_string(data_bytes - covered) + " bytes after the last tensor belong to no tensor"});
  return a;
}

SafetensorsAudit audit_safetensors_file(const std::string& path) {
  ReadFile f(path);
  uint64_t limit = f.size();
  std::string text;
  try {
    text = read_safetensors_header_text(f, 0, limit);
  } catch (const FormatError& e) {
    SafetensorsAudit a;
    a.problems.push_back({"header-invalid", e.where(), e.detail()});
    return a;
  }
  return audit_safetensors_header(text, 8 + text.size(), limit - 8 - text.size(), path);
}

}  // namespace dcpctl
