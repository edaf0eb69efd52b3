#include "item/transforms.h"

#include <zstd.h>

#include <memory>

namespace dcpctl {
namespace {

std::vector<uint8_t> zstd_decode(const std::vector<uint8_t>& in, uint64_t max_output, const Where& where) {
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!ctx) throw std::bad_alloc();
  std::vector<uint8_t> out;
  ZSTD_inBuffer ib{in.data(), in.size(), 0};
  const size_t chunk = ZSTD_DStreamOutSize();
  size_t hint = 1;  // 0 once a frame is complete
  while (true) {
    if (out.size() > max_output)
      throw FormatError(where, "zstd item decodes to more than " + std::to_string(max_output) + " bytes");
    size_t old = out.size();
    out.resize(old + chunk);
    ZSTD_outBuffer ob{out.data() + old, chunk, 0};
    hint = ZSTD_decompressStream(ctx.get(), &ob, &ib);
    out.resize(old + ob.pos);
    if (ZSTD_isError(hint))
      throw FormatError(where, std::string("zstd stream is corrupt: ") + ZSTD_getErrorName(hint) +
                                   " (near input byte " + std::to_string(ib.pos) + ")");
    // All input consumed and the output not full: the decoder holds nothing more back.
    if (ib.pos == ib.size && ob.pos < chunk) break;
  }
  if (hint != 0) throw FormatError(where, "zstd stream is truncated (its last frame does not end)");
  if (out.size() > max_output)
    throw FormatError(where, "zstd item decodes to more than " + std::to_string(max_output) + " bytes");
  return out;
}

}  // namespace

std::vector<uint8_t> undo_transforms(std::vector<uint8_t> data, const std::vector<std::string>& descriptors,
                                     uint64_t max_output, const Where& where) {
  for (const std::string& d : descriptors) {
    std::string name = d.substr(0, d.find('/'));
    std::string version = d.find('/') == std::string::npos ? "" : d.substr(d.find('/') + 1);
    if (name == "stream.zstd" && (version == "1" || version.empty())) {
      data = zstd_decode(data, max_output, where);
    } else {
      throw UnsupportedError(where, "item uses stream transform '" + d + "', which dcpctl cannot undo");
    }
  }
  return data;
}

}  // namespace dcpctl
