// item/transforms: a zstd stream decodes to what libzstd decodes, whatever the decoder's calls
// hold back. Hand-made frames (the hostile-input kind of test; real ones come from torch's
// ZStandard extension in the fixtures and tests/fuzz's corpus).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "item/transforms.h"
#include "store/source.h"
#include "util/error.h"

using namespace dcpctl;

TEST_CASE("transforms: a zstd frame whose RLE block of 64 KiB decodes over two calls is complete, not truncated") {
  // Found by fuzz_zstd: frame magic, a header with no content size (window 2 MiB), and one last
  // RLE block of 65,536 bytes of 0x8f. libzstd's decoder flushes it over two calls, the first
  // leaving room in the output; the stream ends there and is whole.
  const std::vector<uint8_t> frame{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58, 0x03, 0x00, 0x08, 0x8f};
  MemorySource in(frame);
  Where where("x.distcp", 0, "k");
  auto out = undo_transforms(in, {"stream.zstd/1"}, 1 << 20, where);
  REQUIRE(out->size() == 65536);
  std::vector<uint8_t> got(65536);
  out->read(0, got.data(), got.size());
  CHECK(got == std::vector<uint8_t>(65536, 0x8f));
  // The same frame cut short is still refused as truncated, and one past the output cap too.
  MemorySource cut(std::vector<uint8_t>(frame.begin(), frame.end() - 1));
  CHECK_THROWS_WITH(undo_transforms(cut, {"stream.zstd/1"}, 1 << 20, where), Catch::Contains("truncated"));
  CHECK_THROWS_AS(undo_transforms(in, {"stream.zstd/1"}, 1000, where), FormatError);
}
