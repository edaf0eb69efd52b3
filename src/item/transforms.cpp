#include "item/transforms.h"

#include <zstd.h>

#include <algorithm>

namespace dcpctl {
namespace {

constexpr size_t kInputBlock = 1 << 20;

[[noreturn]] void too_large(const Where& where, uint64_t max_output) {
  throw FormatError(where,
                    "zstd item decodes to more than " + std::to_string(max_output) +
                        " bytes, more than it can hold (its chunk and the zip's overhead, or a non-tensor item's cap)");
}

std::unique_ptr<MemorySource> zstd_decode(const ByteSource& in, uint64_t max_output, const Where& where) {
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!ctx) throw std::bad_alloc();
  auto out = std::make_unique<MemorySource>();
  std::vector<uint8_t> inbuf(static_cast<size_t>(std::min<uint64_t>(kInputBlock, in.size())));
  uint64_t consumed = 0;  // bytes of `in` handed to the decoder
  ZSTD_inBuffer ib{inbuf.data(), 0, 0};
  size_t hint = 1;  // 0 once a frame is complete
  while (true) {
    if (ib.pos == ib.size && consumed < in.size()) {
      size_t k = static_cast<size_t>(std::min<uint64_t>(inbuf.size(), in.size() - consumed));
      in.read(consumed, inbuf.data(), k);
      consumed += k;
      ib = {inbuf.data(), k, 0};
    }
    if (out->size() > max_output) too_large(where, max_output);
    auto [dst, room] = out->spare();
    ZSTD_outBuffer ob{dst, room, 0};
    const size_t in_before = ib.pos;
    hint = ZSTD_decompressStream(ctx.get(), &ob, &ib);
    out->grow(ob.pos);
    if (ZSTD_isError(hint))
      throw FormatError(where, std::string("zstd stream is corrupt: ") + ZSTD_getErrorName(hint) +
                                   " (near input byte " + std::to_string(consumed - (ib.size - ib.pos)) + ")");
    // All input consumed: done once the last frame is complete and flushed (hint 0), or stuck
    // when a call moves nothing (the frame wants input there is none of). A call that leaves
    // room in the output may still hold a block back (an RLE block of 64 KiB decodes over two
    // calls), so room alone does not end it.
    const bool input_done = consumed == in.size() && ib.pos == ib.size;
    if (input_done && (hint == 0 || (ob.pos == 0 && ib.pos == in_before))) break;
  }
  if (hint != 0) throw FormatError(where, "zstd stream is truncated (its last frame does not end)");
  if (out->size() > max_output) too_large(where, max_output);
  return out;
}

}  // namespace

std::unique_ptr<MemorySource> undo_transforms(const ByteSource& encoded, const std::vector<std::string>& descriptors,
                                              uint64_t max_output, const Where& where) {
  std::unique_ptr<MemorySource> cur;
  for (const std::string& d : descriptors) {
    std::string name = d.substr(0, d.find('/'));
    std::string version = d.find('/') == std::string::npos ? "" : d.substr(d.find('/') + 1);
    if (name == "stream.zstd" && (version == "1" || version.empty())) {
      cur = zstd_decode(cur ? static_cast<const ByteSource&>(*cur) : encoded, max_output, where);
    } else {
      throw UnsupportedError(where, "item uses stream transform '" + d + "', which dcpctl cannot undo");
    }
  }
  if (!cur) {  // no transform at all: the bytes as they are
    cur = std::make_unique<MemorySource>();
    std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(kInputBlock, encoded.size())));
    for (uint64_t pos = 0; pos < encoded.size(); pos += buf.size()) {
      size_t k = static_cast<size_t>(std::min<uint64_t>(buf.size(), encoded.size() - pos));
      encoded.read(pos, buf.data(), k);
      cur->append(buf.data(), k);
    }
  }
  return cur;
}

}  // namespace dcpctl
