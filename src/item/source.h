// Byte sources an item can be read from: a window of a .distcp file (read in place with pread)
// or a buffer in memory (an item decoded from a stream transform such as zstd).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/file.h"

namespace dcpctl {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly n bytes at pos (pos + n <= size() is the caller's promise, checked anyway).
  virtual void read(uint64_t pos, void* buf, size_t n) const = 0;
};

// [base, base + length) of an open file. Errors name the file and the absolute offset.
class FileWindow final : public ByteSource {
 public:
  FileWindow(const ReadFile& file, uint64_t base, uint64_t length, std::string key)
      : file_(file), base_(base), length_(length), key_(std::move(key)) {}
  uint64_t size() const override { return length_; }
  void read(uint64_t pos, void* buf, size_t n) const override;

 private:
  const ReadFile& file_;
  uint64_t base_, length_;
  std::string key_;
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_.size(); }
  void read(uint64_t pos, void* buf, size_t n) const override;
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace dcpctl
