// libFuzzer target: arbitrary bytes as a safetensors file (or a DCP safetensors blob): the
// header reader, then DCP_SHARDING_INFO. Every input must end in success or a dcpctl::Error
// naming its source; a crash, a sanitizer report, a leak, a timeout or an out-of-memory is a bug.
// Seeds (tests/fuzz/corpus_safetensors): the layout fixtures' .safetensors files.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "meta/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dcpctl;
  try {
    SafetensorsHeader h = parse_safetensors_header(ByteSpan(data, size), "fuzz.safetensors");
    for (const auto& t : h.tensors)
      if (t.begin > t.end || t.end > h.data_bytes) std::abort();  // the reader promised these
    dcp_sharding_info(h, "fuzz.safetensors");
  } catch (const Error& e) {
    if (!std::strstr(e.what(), "fuzz.safetensors")) std::abort();
  }
  return 0;
}
