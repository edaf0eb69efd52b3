#include "gguf/decoded.h"

#include <map>
#include <memory>
#include <vector>

#include "gguf/bound.h"
#include "meta/derived.h"

namespace dcpctl::gguf {

namespace {

// One block tensor as float32: its stored bytes (the saved tensor read as uint8) decoded whole.
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
    read_part(Where(path_, std::nullopt, saved_.fqn), "chunk " + std::to_string(chunk), saved_.numel() * 4, from, n,
              dst, [&](uint8_t* out) {
                std::vector<uint8_t> stored(static_cast<size_t>(raw_.shape[0]));
                below.read(raw_, 0, 0, stored.size(), stored.data());
                decode_gguf(type_, stored.data(), saved_.numel(), reinterpret_cast<float*>(out));
              });
  }
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
  for (const char* codec : {"mxfp4", "deepseek_v4", "compressed_tensors", "modelopt"}) said[codec] = 0;
  said["gguf"] = decoded;
  said["types"] = types;
  table->views["dequantized"] = said;
  table->output.dequantized = decoded > 0;
  view.derived = std::move(table);
  return view;
}

}  // namespace dcpctl::gguf
