#include "write/safetensors.h"

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace dcpctl {

std::string safetensors_header(const std::vector<SafetensorsEntry>& entries,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h;
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  for (const auto& e : entries) {
    if (e.name == "__metadata__")
      throw UnsupportedError(Where("", std::nullopt, e.name),
                             "a tensor named __metadata__ collides with the safetensors header's metadata entry; "
                             "exclude or rename it (--select), or write a .pt");
    const char* st = info(e.dtype).safetensors_name;
    if (!*st)
      throw UnsupportedError(Where("", std::nullopt, e.name),
                             std::string("safetensors has no type for torch.") + torch_name(e.dtype) +
                                 " (exclude it, cast it with --dtype, or write a .pt)");
    std::vector<int64_t> shape = e.shape;
    if (e.dtype == DType::Float4_E2M1FN_X2) {
      // F4 counts the 4-bit values: the last dimension twice torch's bytes (safetensors' own way).
      if (shape.empty())
        throw UnsupportedError(Where("", std::nullopt, e.name),
                               "a 0-d float4_e2m1fn_x2 has no safetensors F4 shape; write a .pt");
      shape.back() *= 2;
    }
    h[e.name] = {{"dtype", st}, {"shape", shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string json = h.dump();
  if (json.size() > 100'000'000)
    throw UnsupportedError(Where(), "safetensors header of " + std::to_string(json.size()) +
                                        " bytes exceeds the 100 MB readers accept; use --max-shard-size");
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + json;
}

}  // namespace dcpctl
