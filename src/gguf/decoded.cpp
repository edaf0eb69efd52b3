#include "gguf/decoded.h"

#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "gguf/bound.h"
#include "meta/derived.h"
#include "view/codecs/codecs.h"

namespace dcpctl::gguf {

namespace {

// One block tensor as float32: a read decodes the whole blocks that hold the range asked, from the
// stored bytes (the saved tensor read as uint8) of those blocks alone, so that a writer's windows
// over a large tensor each cost their own part.
class BlockTensor final : public DerivedTensor {
 public:
  BlockTensor(std::string path, TensorMeta saved, uint32_t type)
      : path_(std::move(path)), saved_(std::move(saved)), raw_(saved_), type_(type) {
    const int64_t bytes = static_cast<int64_t>(saved_.storage.at(0).length);
    raw_.dtype = DType::UInt8;
    raw_.dtype_name = "uint8";
    raw_.shape = {bytes};
    raw_.chunk_dims = {0, bytes};
  }
  const TensorMeta& follows() const override { return saved_; }
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    n = checked_range(Where(path_, std::nullopt, saved_.fqn), "chunk " + std::to_string(chunk), saved_.numel() * 4,
                      from, n);
    if (n == 0) return;
    const uint64_t block = bound_block(type_), block_bytes = tensor_bytes_of(type_, block);
    const uint64_t first = from / 4 / block, end = ((from + n + 3) / 4 + block - 1) / block;  // blocks [first, end)
    std::vector<uint8_t> stored((end - first) * block_bytes);
    below.read(raw_, 0, first * block_bytes, stored.size(), stored.data());
    std::vector<float> values((end - first) * block);
    decode_gguf(type_, stored.data(), values.size(), values.data());
    std::memcpy(dst, reinterpret_cast<const uint8_t*>(values.data()) + (from - first * block * 4), n);
  }
  // A read of the whole tensor: its stored bytes and their float32 values.
  uint64_t working_bytes(size_t) const override { return static_cast<uint64_t>(raw_.shape[0]) + saved_.numel() * 4; }

 private:
  std::string path_;
  TensorMeta saved_, raw_;
  uint32_t type_;
};

}  // namespace

Checkpoint decoded_view(const Checkpoint& ck) {
  Checkpoint view = ck;
  std::shared_ptr<DerivedTable> table = table_over(ck.derived);
  std::map<std::string, size_t> types;
  size_t decoded = 0;
  for (TensorMeta& t : view.md.tensors) {
    if (t.dtype || t.num_chunks() != 1) continue;
    const std::optional<uint32_t> type = decoded_type(t.dtype_name);
    if (!type) continue;
    ++types[t.dtype_name];
    ++decoded;
    table->tensors[t.fqn] = {std::make_shared<BlockTensor>(ck.metadata_path, t, *type), ck.derived};
    t.dtype = DType::Float32;
    t.dtype_name = "float32";
  }
  // The dequantize view's keys (view/codecs/dequantize.h), none of its codecs' weights, and these.
  nlohmann::json said = {
      {"weights", 0}, {"block", nullptr}, {"config", nullptr}, {"ignored_scales", nlohmann::json::array()}};
  for (const CodecView& v : codec_views())
    if (v.decode && std::strcmp(v.said, "weights") != 0) said[v.said] = 0;
  said["gguf"] = decoded;
  said["types"] = types;
  table->views["dequantized"] = said;
  table->output.dequantized = decoded > 0;
  view.derived = std::move(table);
  return view;
}

}  // namespace dcpctl::gguf
