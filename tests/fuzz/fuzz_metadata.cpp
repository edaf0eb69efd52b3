// libFuzzer target: arbitrary bytes through the restricted pickle VM and the `.metadata` model,
// then through what consumes their results (repr, JSON, the tensor-pickle interpreter, the
// inspect report). Every input must end in success or a dcpctl::Error naming its source; any
// other exception, a crash, a sanitizer report, a leak, a timeout or an out-of-memory is a bug.
//
// Seeds (tests/fuzz/corpus): the fixtures' `.metadata` files and some items' data.pkl.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "item/tensor_blob.h"
#include "meta/checkpoint.h"
#include "meta/metadata.h"
#include "pickle/repr.h"
#include "pickle/vm.h"
#include "report/inspect.h"

namespace {

// An error that does not say where it happened is a bug too.
void check_names_source(const dcpctl::Error& e, const char* source) {
  if (!std::strstr(e.what(), source)) std::abort();
}

void fuzz_pickle(dcpctl::ByteSpan data) {
  dcpctl::pickle::ParseOptions opts;
  opts.source = "fuzz.pkl";
  opts.base_offset = 1000;
  try {
    std::unique_ptr<dcpctl::pickle::Tree> tree = dcpctl::pickle::parse(data, opts);
    (void)dcpctl::pickle::repr(tree->root, 4096);
    nlohmann::json j;
    if (dcpctl::pickle::to_json(tree->root, j)) (void)j.dump();
    try {
      dcpctl::TensorBlob b = dcpctl::interpret_tensor_pickle(tree->root, dcpctl::Where("fuzz.pkl", 1000, "key"));
      (void)b.contiguous();
      (void)b.numel();
      (void)b.extent();
    } catch (const dcpctl::Error& e) {
      check_names_source(e, "fuzz.pkl");
    }
  } catch (const dcpctl::Error& e) {
    check_names_source(e, "fuzz.pkl");
  }
}

// The inspect report of the input, or its error; `templates`: the VM's byte templates of flat
// objects (pickle/vm.cpp) on or off.
std::string metadata_outcome(dcpctl::ByteSpan data, bool templates) {
  try {
    dcpctl::Checkpoint ck;
    ck.dir = "fuzzdir";
    ck.metadata_path = "fuzzdir/.metadata";
    ck.metadata_bytes = data.size;
    dcpctl::MetadataParseOptions po;
    po.byte_templates = templates;
    ck.md = dcpctl::parse_metadata(data, ck.metadata_path, po);
    for (const auto& rel : ck.md.files) {
      dcpctl::DataFileInfo fi;
      fi.relative_path = rel;
      fi.size = 1u << 20;
      ck.files.push_back(fi);
    }
    (void)ck.md.writer_releases();
    dcpctl::InspectOptions io;
    io.chunks = true;
    return dcpctl::inspect_report(ck, io).dump();
  } catch (const dcpctl::Error& e) {
    check_names_source(e, "fuzzdir/.metadata");
    return std::string("error: ") + e.what();
  }
}

// The byte templates only replace the flat path's opcode walk: with and without them, the same
// report or the same error.
void fuzz_metadata(dcpctl::ByteSpan data) {
  if (metadata_outcome(data, true) != metadata_outcome(data, false)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dcpctl::ByteSpan span(data, size);
  fuzz_pickle(span);
  fuzz_metadata(span);
  return 0;
}
