// libFuzzer target: arbitrary bytes as an item's data.pkl, through the restricted VM into the
// tensor rebuild interpreter (item/tensor_blob.cpp), then the geometry every reader relies on.
// Every input must end in a TensorBlob that keeps the interpreter's promises or a dcpctl::Error
// naming its source; a crash, a sanitizer report, a leak, a timeout or an out-of-memory is a bug.
// fuzz_item reaches the same code inside a real zip; this one mutates the pickle directly, which
// is where the fuzzer makes progress fastest. Seeds: tests/fuzz/corpus (the fixtures' data.pkl
// files and builtin pickles of every protocol).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "item/tensor_blob.h"
#include "pickle/vm.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dcpctl;
  pickle::ParseOptions opts;
  opts.source = "fuzz/data.pkl";
  opts.base_offset = 64;
  try {
    auto tree = pickle::parse(ByteSpan(data, size), opts);
    TensorBlob b = interpret_tensor_pickle(tree->root, Where("fuzz/data.pkl", 64, "key"));
    // What interpret_tensor_pickle promises its callers.
    if (b.size.size() != b.stride.size() || b.storage_offset < 0) std::abort();
    for (size_t d = 0; d < b.size.size(); ++d)
      if (b.size[d] < 0 || b.stride[d] < 0) std::abort();
    if (itemsize(b.dtype) == 0) std::abort();
    uint64_t n = b.numel(), e = b.extent();
    // extent() covers every element the view touches: at least storage_offset + 1 for a
    // non-empty view, exactly storage_offset + numel for a contiguous one (unless saturated).
    if (n == 0 && e != 0) std::abort();
    if (n != 0 && e != UINT64_MAX && e < static_cast<uint64_t>(b.storage_offset) + 1) std::abort();
    if (n != 0 && n != UINT64_MAX && e != UINT64_MAX && b.contiguous() &&
        e != static_cast<uint64_t>(b.storage_offset) + n)
      std::abort();
  } catch (const Error& e) {
    if (!std::strstr(e.what(), "fuzz/data.pkl")) std::abort();
  }
  return 0;
}
