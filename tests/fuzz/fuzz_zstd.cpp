// libFuzzer target: arbitrary bytes as a zstd-framed item (stream.zstd/1, item/transforms.cpp),
// decoded under a cap taken from the input, against two references from libzstd:
// - its streaming decoder run over the whole input into one buffer of `cap` bytes: dcpctl's
//   block-by-block decoder (MemorySource blocks, input read in pieces) must succeed exactly when
//   it does, with the same bytes, and never beyond the cap;
// - its one-shot ZSTD_decompress: where both it and dcpctl decode, the bytes must agree. It is not
//   a verdict on validity: it accepts frames the streaming decoder (and the format: blocks are at
//   most 128 KiB) refuses, e.g. a 378 KB RLE block (tests/fuzz/corpus_zstd/oneshot_rle_block,
//   the first campaign's finding, which was this target's oracle being too strict).
// Every refusal must be a dcpctl::Error naming the item. A crash, a sanitizer report, a leak, a
// timeout or an out-of-memory (a zstd bomb past the cap) is a bug.
// Input: 2 bytes of cap (in KiB, 1..4096: the low 12 bits), then the encoded item. Seeds
// (tests/fuzz/corpus_zstd): the zstd fixture's encoded items.
#include <zstd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "item/transforms.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dcpctl;
  if (size < 2) return 0;
  uint64_t cap = (uint64_t((data[0] | (data[1] << 8)) & 0xFFF) + 1) << 10;
  MemorySource in;
  in.append(data + 2, size - 2);
  Where where("fuzz.distcp", 7, "key");
  // Not zero-filled: a fresh 4 MiB memset per input would be most of the fuzzer's time.
  std::unique_ptr<uint8_t[]> ref(new uint8_t[cap]), one(new uint8_t[cap]);
  bool ref_ok = false;
  uint64_t ref_size = 0;
  {
    std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> d(ZSTD_createDCtx(), ZSTD_freeDCtx);
    ZSTD_inBuffer ib{data + 2, size - 2, 0};
    ZSTD_outBuffer ob{ref.get(), cap, 0};
    size_t r = 1;
    while (true) {
      size_t in0 = ib.pos, out0 = ob.pos;
      r = ZSTD_decompressStream(d.get(), &ob, &ib);
      if (ZSTD_isError(r)) break;
      if (ib.pos == ib.size && (r == 0 || ob.pos < ob.size)) break;  // done, or wants more input
      if (ib.pos == in0 && ob.pos == out0) break;                    // stuck: more than the cap
    }
    ref_ok = size > 2 && !ZSTD_isError(r) && r == 0 && ib.pos == ib.size;
    ref_size = ob.pos;
  }
  size_t one_shot = ZSTD_decompress(one.get(), cap, data + 2, size - 2);
  bool one_ok = !ZSTD_isError(one_shot) && size > 2;
  std::unique_ptr<MemorySource> out;
  try {
    out = undo_transforms(in, {"stream.zstd/1"}, cap, where);
  } catch (const Error& e) {
    if (ref_ok) {  // libzstd's streaming decoder decoded it within the cap: so must we
      std::fprintf(stderr, "libzstd decodes %llu bytes (cap %llu) but dcpctl refused: %s\n",
                   static_cast<unsigned long long>(ref_size), static_cast<unsigned long long>(cap), e.what());
      std::abort();
    }
    if (!std::strstr(e.what(), "fuzz.distcp")) std::abort();
    return 0;
  }
  if (!ref_ok || out->size() > cap || out->size() != ref_size) {
    std::fprintf(stderr, "dcpctl decoded %llu bytes; libzstd streaming: %s, %llu bytes (cap %llu)\n",
                 static_cast<unsigned long long>(out->size()), ref_ok ? "ok" : "refused",
                 static_cast<unsigned long long>(ref_size), static_cast<unsigned long long>(cap));
    std::abort();
  }
  std::vector<uint8_t> got(out->size());
  if (!got.empty()) out->read(0, got.data(), got.size());
  if (!got.empty() && std::memcmp(got.data(), ref.get(), got.size()) != 0) std::abort();
  if (one_ok && (one_shot != got.size() || (!got.empty() && std::memcmp(got.data(), one.get(), got.size()) != 0)))
    std::abort();
  return 0;
}
