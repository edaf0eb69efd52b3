// GGUF, llama.cpp's model file (version 3), as gguf-py's GGUFWriter lays it out, and the
// arithmetic of the tensor types dcpctl writes into it.
//
// Byte layout, all little-endian:
//
//   "GGUF" u32 version (3) u64 tensor_count u64 kv_count
//   kv_count times:     string key, u32 value_type, value
//   tensor_count times: string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset
//   zero padding to `general.alignment` (32 unless the key says otherwise)
//   the tensors' data, each at its offset from here, each padded with zeros to the alignment
//
// A string is u64 length + bytes (UTF-8, no terminator). A value is one of the types below; an
// array is u32 element type, u64 count, the elements. `ne` is ggml's order, the reverse of
// torch's shape (ne[0] is the length of a row, the innermost dimension). A tensor's offset is
// counted from the start of the data section, a multiple of the alignment; gguf-py pads each
// tensor's bytes (the last one's too), so the file ends on the alignment.
//
// The header is a pure function of the keys and the tensor infos: the sizes of every tensor are
// known from its type and shape before the first byte of data, so a writer lays out the whole file
// from the plan and then streams each tensor to its place.
//
// Tensor types (ggml's `ggml_type` numbers): F32 (0) and F16 (1) are plain IEEE, BF16 (30) is
// gguf-py's conversion (round to nearest even, a NaN made quiet: quants.py's BF16, ggml's
// ggml_compute_fp32_to_bf16); Q8_0 (8) is blocks of 32 elements along a row, each 34 bytes: an
// fp16 scale d = amax / 127 then 32 int8 q = round(x / d) (half away from zero), with x / d
// computed as x * (1 / d) in float32 (ggml-quants.c's quantize_row_q8_0_ref, and gguf-py's Q8_0
// "with bit-exact same results"); a row whose length is not a multiple of 32 cannot be Q8_0
// (the converter falls back to F16 for such a tensor). Q4_0 (2), Q5_0 (6), Q5_1 (7) in blocks of
// 32 and Q4_K (12), Q5_K (13), Q6_K (14) in super-blocks of 256 are ggml's reference quantizers
// (gguf/quants.h), what llama-quantize writes without an importance matrix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dcpctl::gguf {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;

enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30,
  MXFP4 = 39,  // ggml's block_mxfp4: an E8M0 byte, then 16 bytes of E2M1 pairs (value j low, j + 16 high); copied,
               // never computed
  NVFP4 = 40,  // ggml's block_nvfp4: 64 values, 4 UE4M3 scales then 4 x 8 bytes of E2M1 pairs (j low, j + 8 high);
               // copied, never computed
};

// "F32", "F16", "BF16", "Q8_0", "Q4_K", ...: gguf-py's GGMLQuantizationType names.
const char* type_name(TensorType t);
// Elements per block of `t` (1 for F32, F16, BF16; 32 for Q4_0, Q5_0, Q5_1, Q8_0; 256 for the K-quants).
uint64_t block_size(TensorType t);
// Bytes of a tensor of `t` whose rows hold `row` elements, `elements` in all (row divides it, and
// the block size divides row).
uint64_t tensor_bytes(TensorType t, uint64_t elements, uint64_t row);
// Whether a tensor whose rows hold `row` elements can be written as `t`.
bool fits(TensorType t, uint64_t row);
// The type a weight of rows of `row` elements gets for an output type `t`: `t` when its blocks fit
// the row, else llama-quantize's fallback (tensor_type_fallback: Q4_K -> Q5_0, Q5_K -> Q5_1,
// Q6_K -> Q8_0) when that fits, else F16 (the converter's Q8_0 rule too).
TensorType row_type(TensorType t, uint64_t row);

// The header of a GGUF file: the keys and the tensor infos, in the order they are added.
class Header {
 public:
  void add_u16(std::string_view key, uint16_t v);
  void add_u32(std::string_view key, uint32_t v);
  void add_i32(std::string_view key, int32_t v);
  void add_u64(std::string_view key, uint64_t v);
  void add_f32(std::string_view key, float v);
  void add_bool(std::string_view key, bool v);
  void add_string(std::string_view key, std::string_view v);
  void add_strings(std::string_view key, const std::vector<std::string>& v);
  void add_i32s(std::string_view key, const std::vector<int32_t>& v);
  void add_f32s(std::string_view key, const std::vector<float>& v);
  void add_bools(std::string_view key, const std::vector<bool>& v);
  // A tensor of torch shape `shape` (written reversed, as ggml's ne); its data offset is the next
  // free, aligned one. Returns that offset (from the start of the data section).
  uint64_t add_tensor(std::string_view name, const std::vector<int64_t>& shape, TensorType type);

  // The bytes before the data section (padding included), and the data section's size (each
  // tensor padded to the alignment).
  std::vector<uint8_t> bytes() const;
  uint64_t data_bytes() const { return next_offset_; }
  size_t tensors() const { return tensor_count_; }

 private:
  void key(std::string_view k, ValueType t);
  std::vector<uint8_t> kv_, infos_;
  uint64_t kv_count_ = 0, tensor_count_ = 0, next_offset_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
};

// Split files (gguf-py's GGUFWriter with split_max_tensors / split_max_size, what the converter's
// --split-max-tensors / --split-max-size give it; llama.cpp's loader reads the set as one model):
// tensors go, in order, into the current shard unless it already holds one and either holds
// `max_tensors` (0: no limit) or would pass `max_size` bytes of tensor data (0: no limit; the
// tensors' unpadded bytes, the header not counted) with this one; then a new shard starts. The
// first shard has every key and then split.no (u16, 0), split.count (u16, N) and
// split.tensors.count (i32, all tensors); every other shard has only those three keys (its own
// split.no). Each shard is a whole GGUF file (its own header, its tensors' offsets from its own
// data section), named `<stem>-00001-of-0000N.gguf` beside the output's name; when the limits
// give one shard, the file is the plain one with no split keys (gguf-py: "not splitting").

// The shard of each tensor of `bytes[i]` bytes, from 0.
std::vector<size_t> split_shards(const std::vector<uint64_t>& bytes, uint64_t max_tensors, uint64_t max_size);
// Shard i (from 0) of n of `path`: "dir/tiny.gguf" -> "dir/tiny-00001-of-00003.gguf" (gguf-py's
// SHARD_NAME_FORMAT on Path.stem; llama.cpp's llama_split_path).
std::string shard_path(const std::string& path, size_t i, size_t n);
// The converter's --split-max-size: a number of bytes, optionally followed by K, M or G (powers of
// 1000); 0 is no limit. UsageError otherwise.
uint64_t split_size(const std::string& text);

// Encodes n float32 elements (n a multiple of the block size) into `t`'s bytes at `out`
// (tensor_bytes(t, n, n) of them), with gguf-py's arithmetic (ggml's for the quantized types).
void encode(TensorType t, const float* x, size_t n, uint8_t* out);

}  // namespace dcpctl::gguf
