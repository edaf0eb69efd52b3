// libFuzzer target: arbitrary bytes as one DCP item, read the way every command reads it:
// ItemReader over the item (handed to it as "provided" bytes, so no file is opened), which undoes
// the zstd transform, opens the torch.save zip (its directory read by dcpctl), reads data.pkl
// with the restricted VM, interprets the tensor rebuild call, checks it against the metadata and
// copies the (possibly strided) view out. Every input must end in success or a dcpctl::Error
// naming the item; a crash, a sanitizer report, a leak, a timeout or an out-of-memory is a bug.
//
// Input: one flags byte, then the item. flags & 1: the item is zstd-framed (stream.zstd/1);
// flags & 2: it is a non-tensor (bytes) item. A tensor item's metadata (dtype, shape, one chunk)
// is taken from its own data.pkl when that parses, so the fuzzer reaches the copy paths instead
// of stopping at the first metadata mismatch; a tensor over 1 MiB is only described.
//
// The zip directory (item/zip_directory.cpp: the end records, zip64, the central directory, the
// version record) is dcpctl's own and instrumented like everything after it: the local-header
// and record-bounds checks of locate(), data.pkl, the copy. Seeds (tests/fuzz/corpus_item): real
// items cut out of the fixtures, zstd ones included.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "item/item_reader.h"
#include "item/torch_zip.h"
#include "item/transforms.h"
#include "pickle/repr.h"
#include "pickle/vm.h"

namespace {

using namespace dcpctl;

constexpr const char* kFile = "fuzz.distcp";
constexpr uint64_t kMaxCopy = 1u << 20;  // larger tensors are only described: speed over size

void check_names_item(const Error& e) {
  if (!std::strstr(e.what(), kFile)) std::abort();
}

Checkpoint make_checkpoint(uint64_t item_len) {
  Checkpoint ck;
  ck.dir = "fuzzdir";
  ck.metadata_path = "fuzzdir/.metadata";
  ck.md.files = {kFile};
  ck.md.transform_sets = {{}, {"stream.zstd/1"}};
  DataFileInfo fi;
  fi.relative_path = kFile;
  fi.size = item_len;
  ck.files.push_back(fi);
  return ck;
}

StorageRef make_ref(uint64_t len, bool zstd) {
  StorageRef r;
  r.file = 0;
  r.offset = 0;
  r.length = len;
  r.transforms = zstd ? 1 : 0;
  return r;
}

// The tensor data.pkl describes, if it does; the fuzzer's metadata follows it.
bool peek_blob(const std::shared_ptr<const ByteSource>& item, bool zstd, TensorBlob& out) {
  try {
    Where w(std::string("fuzzdir/") + kFile, 0, "t");
    std::shared_ptr<const ByteSource> src = item;
    if (zstd) src = undo_transforms(*item, {"stream.zstd/1"}, kMaxCopy + (1u << 20), w);
    TorchZip zip(src, w);
    (void)zip.records();
    std::vector<uint8_t> pkl = zip.read_small("data.pkl", 1u << 20);
    pickle::ParseOptions po;
    po.source = w.file;
    auto tree = pickle::parse(ByteSpan(pkl.data(), pkl.size()), po);
    out = interpret_tensor_pickle(tree->root, w);
    return true;
  } catch (const Error& e) {
    check_names_item(e);
    return false;
  }
}

}  // namespace

// LibTorch's own leak, not dcpctl's: when PyTorchStreamReader's constructor throws after
// mz_zip_reader_init succeeded (a damaged archive it rejects while reading its records), its
// destructor never runs and miniz's central-directory state (a few hundred bytes per item) is not
// freed. Found by this target in its first seconds; suppressed so it can look for ours.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:mz_zip_reader_init\nleak:mz_zip_reader_read_central_dir\n";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  const bool zstd = flags & 1, bytes_item = flags & 2;
  auto item = std::make_shared<MemorySource>();
  item->append(data + 1, size - 1);
  Checkpoint ck = make_checkpoint(size - 1);
  StorageRef ref = make_ref(size - 1, zstd);

  if (bytes_item) {
    BytesMeta bm;
    bm.fqn = "b";
    bm.storage = ref;
    ck.md.bytes.push_back(bm);
    ItemReader reader(ck, ItemLimits{1u << 20, 1u << 20, 16u << 20, 64});
    reader.provide(ref, item);
    try {
      auto tree = reader.read_bytes(ck.md.bytes[0]);
      (void)pickle::repr(tree->root, 4096);
    } catch (const Error& e) {
      check_names_item(e);
    }
    return 0;
  }

  TensorMeta t;
  t.fqn = "t";
  TensorBlob blob;
  if (peek_blob(item, zstd, blob)) {
    t.dtype = blob.dtype;
    t.dtype_name = torch_name(blob.dtype);
    t.shape = blob.size;
  } else {
    t.dtype = DType::Float32;
    t.dtype_name = "float32";
    t.shape = {4};
  }
  t.chunk_dims.assign(t.shape.size(), 0);
  t.chunk_dims.insert(t.chunk_dims.end(), t.shape.begin(), t.shape.end());
  t.storage.push_back(ref);
  ck.md.tensors.push_back(t);
  ItemReader reader(ck, ItemLimits{1u << 20, 1u << 20, 16u << 20, 64});
  reader.provide(ref, item);
  const TensorMeta& tm = ck.md.tensors[0];
  try {
    TensorBlob b = reader.describe_chunk(tm, 0);
    uint64_t bytes = b.numel() * itemsize(b.dtype);
    if (b.numel() > kMaxCopy || bytes > kMaxCopy) return 0;
    std::vector<uint8_t> whole(bytes), part(bytes / 2);
    reader.read_chunk(tm, 0, whole.data());
    if (bytes >= 2) {
      // A window of the dense chunk must equal the same bytes of the whole read.
      uint64_t from = bytes / 4;
      reader.read_chunk_bytes(tm, 0, from, part.size(), part.data());
      if (std::memcmp(part.data(), whole.data() + from, part.size()) != 0) std::abort();
    }
    (void)reader.direct_run(tm, 0);
  } catch (const Error& e) {
    check_names_item(e);
  }
  return 0;
}
