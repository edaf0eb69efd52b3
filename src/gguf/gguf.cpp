// GGUF v3 headers and tensor encodings (gguf/gguf.h).
#include "gguf/gguf.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "gguf/quants.h"
#include "gguf/simd.h"
#include "util/error.h"
#include "util/le.h"
#include "util/numeric.h"
#include "util/parallel.h"

namespace dcpctl::gguf {

namespace {

constexpr uint64_t kQ8Block = 32, kQ8BlockBytes = 34;

uint64_t padded(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

void put_string(std::vector<uint8_t>& b, std::string_view s) {
  put_le64(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

// gguf-py's BF16 (quants.py): a NaN made quiet in its top half, then round to nearest even.
uint16_t bf16_of(float f) {
  uint32_t n = f32_bits(f);
  if ((n & 0x7fffffffu) > 0x7f800000u) n = (n & 0xffff0000u) | (64u << 16);
  return static_cast<uint16_t>((uint64_t{n} + (0x7fffu + ((n >> 16) & 1u))) >> 16);
}

// np_roundf: half away from zero.
float round_away(float x) {
  const float a = std::fabs(x), floored = std::floor(a);
  const float b = floored + std::floor(2 * (a - floored));
  return x < 0 ? -b : b;
}

}  // namespace

const char* type_name(TensorType t) {
  switch (t) {
    case TensorType::F32: return "F32";
    case TensorType::F16: return "F16";
    case TensorType::BF16: return "BF16";
    case TensorType::Q8_0: return "Q8_0";
    case TensorType::Q4_0: return "Q4_0";
    case TensorType::Q5_0: return "Q5_0";
    case TensorType::Q5_1: return "Q5_1";
    case TensorType::Q4_K: return "Q4_K";
    case TensorType::Q5_K: return "Q5_K";
    case TensorType::Q6_K: return "Q6_K";
    case TensorType::MXFP4: return "MXFP4";
    case TensorType::NVFP4: return "NVFP4";
  }
  return "?";
}

uint64_t block_size(TensorType t) {
  switch (t) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16: return 1;
    case TensorType::Q4_0:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::MXFP4: return kQ8Block;
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K: return 256;
    case TensorType::NVFP4: return 64;
  }
  return 1;
}

bool fits(TensorType t, uint64_t row) {
  return row % block_size(t) == 0;
}

TensorType row_type(TensorType t, uint64_t row) {
  if (fits(t, row)) return t;
  TensorType f = t == TensorType::Q4_K   ? TensorType::Q5_0
                 : t == TensorType::Q5_K ? TensorType::Q5_1
                 : t == TensorType::Q6_K ? TensorType::Q8_0
                                         : t;
  return fits(f, row) ? f : TensorType::F16;
}

uint64_t tensor_bytes(TensorType t, uint64_t elements, uint64_t row) {
  (void)row;
  switch (t) {
    case TensorType::F32: return elements * 4;
    case TensorType::F16:
    case TensorType::BF16: return elements * 2;
    case TensorType::Q8_0: return elements / kQ8Block * kQ8BlockBytes;
    case TensorType::Q4_0: return elements / 32 * 18;
    case TensorType::Q5_0: return elements / 32 * 22;
    case TensorType::Q5_1: return elements / 32 * 24;
    case TensorType::Q4_K: return elements / 256 * 144;
    case TensorType::Q5_K: return elements / 256 * 176;
    case TensorType::Q6_K: return elements / 256 * 210;
    case TensorType::MXFP4: return elements / 32 * 17;
    case TensorType::NVFP4: return elements / 64 * 36;
  }
  return 0;
}

void Header::key(std::string_view k, ValueType t) {
  put_string(kv_, k);
  put_le32(kv_, static_cast<uint32_t>(t));
  ++kv_count_;
}

void Header::add_u16(std::string_view k, uint16_t v) {
  key(k, ValueType::U16);
  put_le16(kv_, v);
}
void Header::add_u32(std::string_view k, uint32_t v) {
  key(k, ValueType::U32);
  put_le32(kv_, v);
  if (k == "general.alignment") {
    if (v == 0 || (v & (v - 1)) != 0 || tensor_count_ != 0)
      throw std::logic_error("gguf: general.alignment must be a power of two, set first");
    alignment_ = v;
  }
}
void Header::add_i32(std::string_view k, int32_t v) {
  key(k, ValueType::I32);
  put_le32(kv_, static_cast<uint32_t>(v));
}
void Header::add_u64(std::string_view k, uint64_t v) {
  key(k, ValueType::U64);
  put_le64(kv_, v);
}
void Header::add_f32(std::string_view k, float v) {
  key(k, ValueType::F32);
  put_le32(kv_, f32_bits(v));
}
void Header::add_bool(std::string_view k, bool v) {
  key(k, ValueType::Bool);
  kv_.push_back(v ? 1 : 0);
}
void Header::add_string(std::string_view k, std::string_view v) {
  key(k, ValueType::String);
  put_string(kv_, v);
}
void Header::add_strings(std::string_view k, const std::vector<std::string>& v) {
  key(k, ValueType::Array);
  put_le32(kv_, static_cast<uint32_t>(ValueType::String));
  put_le64(kv_, v.size());
  for (const std::string& s : v) put_string(kv_, s);
}
void Header::add_i32s(std::string_view k, const std::vector<int32_t>& v) {
  key(k, ValueType::Array);
  put_le32(kv_, static_cast<uint32_t>(ValueType::I32));
  put_le64(kv_, v.size());
  for (int32_t x : v) put_le32(kv_, static_cast<uint32_t>(x));
}
void Header::add_bools(std::string_view k, const std::vector<bool>& v) {
  key(k, ValueType::Array);
  put_le32(kv_, static_cast<uint32_t>(ValueType::Bool));
  put_le64(kv_, v.size());
  for (bool x : v) kv_.push_back(x ? 1 : 0);
}
void Header::add_f32s(std::string_view k, const std::vector<float>& v) {
  key(k, ValueType::Array);
  put_le32(kv_, static_cast<uint32_t>(ValueType::F32));
  put_le64(kv_, v.size());
  for (float x : v) put_le32(kv_, f32_bits(x));
}

uint64_t Header::add_tensor(std::string_view name, const std::vector<int64_t>& shape, TensorType type) {
  uint64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::logic_error("gguf: negative dimension");
    elements *= static_cast<uint64_t>(d);
  }
  const uint64_t row = shape.empty() ? 1 : static_cast<uint64_t>(shape.back());
  if (!fits(type, row))
    throw std::logic_error(std::string("gguf: a ") + type_name(type) + " row must hold whole blocks");
  put_string(infos_, name);
  put_le32(infos_, static_cast<uint32_t>(shape.size()));
  for (size_t i = shape.size(); i-- > 0;) put_le64(infos_, static_cast<uint64_t>(shape[i]));
  put_le32(infos_, static_cast<uint32_t>(type));
  const uint64_t offset = next_offset_;
  put_le64(infos_, offset);
  next_offset_ += padded(tensor_bytes(type, elements, row), alignment_);
  ++tensor_count_;
  return offset;
}

std::vector<uint8_t> Header::bytes() const {
  std::vector<uint8_t> b{'G', 'G', 'U', 'F'};
  put_le32(b, kVersion);
  put_le64(b, tensor_count_);
  put_le64(b, kv_count_);
  b.insert(b.end(), kv_.begin(), kv_.end());
  b.insert(b.end(), infos_.begin(), infos_.end());
  b.resize(padded(b.size(), alignment_), 0);
  return b;
}

std::vector<size_t> split_shards(const std::vector<uint64_t>& bytes, uint64_t max_tensors, uint64_t max_size) {
  std::vector<size_t> shard(bytes.size());
  size_t at = 0;
  uint64_t count = 0, size = 0;  // the current shard's
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (count > 0 && ((max_tensors != 0 && count >= max_tensors) || (max_size != 0 && size + bytes[i] > max_size))) {
      ++at;
      count = size = 0;
    }
    shard[i] = at;
    ++count;
    size += bytes[i];
  }
  return shard;
}

std::string shard_path(const std::string& path, size_t i, size_t n) {
  const size_t slash = path.find_last_of('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || dot <= base) dot = path.size();  // Path.stem keeps a leading dot's name whole
  char tail[64];
  std::snprintf(tail, sizeof tail, "-%05zu-of-%05zu.gguf", i + 1, n);
  return path.substr(0, dot) + tail;
}

uint64_t split_size(const std::string& text) {
  std::string digits = text;
  uint64_t unit = 1;
  if (!digits.empty() && (digits.back() == 'K' || digits.back() == 'M' || digits.back() == 'G')) {
    unit = digits.back() == 'K' ? 1000 : digits.back() == 'M' ? 1000 * 1000 : 1000 * 1000 * 1000;
    digits.pop_back();
  }
  const bool ok = !digits.empty() && digits.size() <= 18 && digits.find_first_not_of("0123456789") == std::string::npos;
  const uint64_t n = ok ? std::stoull(digits) : 0;
  if (!ok || n > std::numeric_limits<uint64_t>::max() / unit)
    throw UsageError(Where(),
                     "--split-max-size must be a number of bytes, optionally followed by K, M or G (as the "
                     "converter's: 500M, 2G), not '" +
                         text + "'");
  return n * unit;
}

void encode(TensorType t, const float* x, size_t n, uint8_t* out) {
  encode_via(best_encode_isa(), t, x, n, out);
}

void encode_via(EncodeIsa isa, TensorType t, const float* x, size_t n, uint8_t* out) {
  if (n % block_size(t) != 0) throw std::logic_error(std::string("gguf: ") + type_name(t) + " takes whole blocks");
  if (isa != EncodeIsa::Scalar && !encode_isa_available(isa))
    throw std::logic_error("gguf: an encoding this CPU cannot run");
  if (isa == EncodeIsa::Avx2 && encode_avx2(t, x, n, out)) return;
  switch (t) {
    case TensorType::Q4_0: quants::q4_0(x, n, out); return;
    case TensorType::Q5_0: quants::q5_0(x, n, out); return;
    case TensorType::Q5_1: quants::q5_1(x, n, out); return;
    case TensorType::Q4_K: quants::q4_k(x, n, out, isa == EncodeIsa::Avx2); return;
    case TensorType::Q5_K: quants::q5_k(x, n, out, isa == EncodeIsa::Avx2); return;
    case TensorType::Q6_K: quants::q6_k(x, n, out, isa == EncodeIsa::Avx2); return;
    case TensorType::MXFP4: throw std::logic_error("gguf: MXFP4 is copied from MXFP4 (mxfp4_repack), not encoded");
    case TensorType::NVFP4: throw std::logic_error("gguf: NVFP4 is copied from NVFP4 (nvfp4_pack), not encoded");
    case TensorType::F32: std::memcpy(out, x, n * 4); return;
    case TensorType::F16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case TensorType::BF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = bf16_of(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case TensorType::Q8_0:
      if (n % kQ8Block != 0) throw std::logic_error("gguf: Q8_0 takes whole blocks of 32");
      for (size_t b = 0; b < n / kQ8Block; ++b) {
        const float* v = x + b * kQ8Block;
        uint8_t* o = out + b * kQ8BlockBytes;
        // gguf-py's abs(blocks).max(): a NaN anywhere in the block makes it NaN (then d, and
        // every code 0). ggml's reference MAX() keeps the values after the last NaN instead:
        // llama-quantize's Q8_0 of such a block differs from the converter's.
        float amax = 0.0f;
        bool nan = false;
        for (size_t j = 0; j < kQ8Block; ++j) amax = std::fmax(amax, std::fabs(v[j])), nan = nan || v[j] != v[j];
        if (nan) amax = std::numeric_limits<float>::quiet_NaN();
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t h = f32_to_f16(d);
        std::memcpy(o, &h, 2);
        for (size_t j = 0; j < kQ8Block; ++j) o[2 + j] = quants::low_byte(round_away(v[j] * id));
      }
      return;
  }
}

void encode_parallel(TensorType t, const float* x, size_t n, uint64_t row, uint8_t* out, unsigned threads) {
  // Whole rows a part (a block never crosses one), about kPartElems elements or more.
  constexpr uint64_t kPartElems = 256 << 10;
  row = std::max<uint64_t>(row, 1);
  const uint64_t rows = n / row, per = std::max<uint64_t>(1, kPartElems / row), parts = (rows + per - 1) / per;
  const EncodeIsa isa = best_encode_isa();
  if (parts <= 1 || threads <= 1 || rows * row != n) return encode_via(isa, t, x, n, out);
  const uint64_t part_bytes = tensor_bytes(t, per * row, row);
  parallel_for(parts, threads, [&](size_t p) {
    const uint64_t first = p * per, m = std::min(per, rows - first);
    encode_via(isa, t, x + first * row, m * row, out + p * part_bytes);
  });
}

void cast_encode_parallel(TensorType t, DType from, const uint8_t* src, size_t n, uint64_t row, uint8_t* out,
                          unsigned threads) {
  // The parts of encode_parallel, each cast and encoded kCastElems elements (whole rows, at least
  // one) at a time: the float32 buffer of 64 KiB stays in the core's cache.
  constexpr uint64_t kPartElems = 256 << 10, kCastElems = 16 << 10;
  row = std::max<uint64_t>(row, 1);
  const uint64_t rows = n / row, per = std::max<uint64_t>(1, kPartElems / row);
  if (rows * row != n) {  // not whole rows (a logic error of the caller's): the whole cast, then encoded
    std::vector<float> x(n);
    cast_elements(from, DType::Float32, src, reinterpret_cast<uint8_t*>(x.data()), n);
    return encode_via(best_encode_isa(), t, x.data(), n, out);
  }
  const uint64_t parts = (rows + per - 1) / per, step = std::max<uint64_t>(1, kCastElems / row);
  const uint64_t item = itemsize(from), part_bytes = tensor_bytes(t, per * row, row);
  const EncodeIsa isa = best_encode_isa();
  parallel_for(parts, std::max(threads, 1u), [&](size_t p) {
    const uint64_t first = p * per, m = std::min(per, rows - first);
    std::vector<float> x(std::min(step, m) * row);
    uint8_t* dst = out + p * part_bytes;
    for (uint64_t r = 0; r < m; r += step) {
      const uint64_t k = std::min(step, m - r), elems = k * row;
      cast_elements(from, DType::Float32, src + (first + r) * row * item, reinterpret_cast<uint8_t*>(x.data()), elems);
      encode_via(isa, t, x.data(), elems, dst);
      dst += tensor_bytes(t, elems, row);
    }
  });
}

}  // namespace dcpctl::gguf
