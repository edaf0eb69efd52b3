// A bounds-checked reader over a byte span with explicit little-endian decoding.
// Every read first compares the requested length with what remains, so no offset arithmetic can
// overflow and no read can leave the span. Failures throw FormatError naming the source and the
// absolute offset (base + position) of the read that did not fit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "util/error.h"

namespace dcpctl {

struct ByteSpan {
  const uint8_t* data = nullptr;
  size_t size = 0;

  ByteSpan() = default;
  ByteSpan(const uint8_t* d, size_t n) : data(d), size(n) {}
  ByteSpan(const char* d, size_t n) : data(reinterpret_cast<const uint8_t*>(d)), size(n) {}
  explicit ByteSpan(std::string_view s) : ByteSpan(s.data(), s.size()) {}
  std::string_view view() const { return {reinterpret_cast<const char*>(data), size}; }
};

class SpanReader {
 public:
  // `source` names the file (or file + item) for error messages; `base` is the span's absolute
  // offset in that file.
  SpanReader(ByteSpan span, std::string source, uint64_t base = 0)
      : span_(span), source_(std::move(source)), base_(base) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return span_.size - pos_; }
  bool at_end() const { return pos_ == span_.size; }
  const uint8_t* data() const { return span_.data; }
  size_t size() const { return span_.size; }
  // Moves to `pos`, which a caller has already checked against the span (a fast path that read
  // the bytes in between itself); anything beyond the end is clamped to it.
  void seek(size_t pos) { pos_ = pos < span_.size ? pos : span_.size; }
  uint64_t abs_pos() const { return base_ + pos_; }
  const std::string& source() const { return source_; }

  void need(size_t n, const char* what) const {
    if (n > remaining()) fail_short(n, what);
  }

  uint8_t u8() {
    need(1, "1 byte");
    return span_.data[pos_++];
  }
  uint16_t u16le() { return static_cast<uint16_t>(uint_le(2, "2-byte integer")); }
  uint32_t u32le() { return static_cast<uint32_t>(uint_le(4, "4-byte integer")); }
  uint64_t u64le() { return uint_le(8, "8-byte integer"); }
  int32_t i32le() { return static_cast<int32_t>(u32le()); }

  double f64be() {
    need(8, "8-byte float");
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | span_.data[pos_ + i];
    pos_ += 8;
    double d;
    std::memcpy(&d, &v, 8);
    return d;
  }

  // A view of the next n bytes (no copy); n is checked against what remains first.
  ByteSpan take(uint64_t n, const char* what) {
    if (n > remaining()) fail_short(n, what);
    ByteSpan s(span_.data + pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

  // Bytes up to (not including) the next '\n', which is consumed. Used by text opcodes.
  std::string_view line(const char* what);

  [[noreturn]] void fail(const std::string& msg) const { fail_at(pos_, msg); }
  [[noreturn]] void fail_at(size_t pos, const std::string& msg) const {
    throw FormatError(Where(source_, base_ + pos), msg);
  }

 private:
  uint64_t uint_le(int n, const char* what) {
    need(static_cast<size_t>(n), what);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | span_.data[pos_ + i];
    pos_ += static_cast<size_t>(n);
    return v;
  }
  [[noreturn]] void fail_short(uint64_t n, const char* what) const;

  ByteSpan span_;
  std::string source_;
  uint64_t base_;
  size_t pos_ = 0;
};

}  // namespace dcpctl
