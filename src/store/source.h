// Byte sources an item can be read from: a window of a .distcp file (read in place with pread)
// or blocks in memory (an item decoded from a stream transform such as zstd).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/file.h"

namespace dcpctl {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly n bytes at pos (pos + n <= size() is the caller's promise, checked anyway).
  virtual void read(uint64_t pos, void* buf, size_t n) const = 0;
  // Bytes [pos, pos + n) are a zip record (`record`, of `key`) whose CRC-32 is `crc`: checked as
  // they are read, whoever reads them (a file's ledger, util/crc_ledger.h), or here and now by
  // default (bytes in memory: one pass). A mismatch is a CorruptError naming `where`.
  virtual void watch_crc(uint64_t pos, uint64_t n, uint32_t crc, const Where& where, const std::string& record) const;
  // Where byte `pos` lies in the file, for errors; nullopt for bytes in memory (a decoded item).
  virtual std::optional<uint64_t> file_offset(uint64_t) const { return std::nullopt; }
};

// [base, base + length) of an open file. Errors name the file and the absolute offset.
class FileWindow final : public ByteSource {
 public:
  FileWindow(const ReadFile& file, uint64_t base, uint64_t length, std::string key)
      : file_(file), base_(base), length_(length), key_(std::move(key)) {}
  uint64_t size() const override { return length_; }
  void read(uint64_t pos, void* buf, size_t n) const override;
  void watch_crc(uint64_t pos, uint64_t n, uint32_t crc, const Where& where, const std::string& record) const override;
  std::optional<uint64_t> file_offset(uint64_t pos) const override { return base_ + pos; }

 private:
  const ReadFile& file_;
  uint64_t base_, length_;
  std::string key_;
};

// Bytes in memory, grown block by block: a decoder appends without ever reallocating what it
// already wrote, so an item of N bytes costs N bytes (plus under one block), never the 2-3x of a
// doubling vector being copied. Blocks grow from 64 KiB to 8 MiB, so small items stay small.
class MemorySource final : public ByteSource {
 public:
  MemorySource() = default;
  explicit MemorySource(const std::vector<uint8_t>& bytes) { append(bytes.data(), bytes.size()); }
  uint64_t size() const override { return size_; }
  void read(uint64_t pos, void* buf, size_t n) const override;

  // Room for at least one byte at the end; the caller writes into it and then calls grow().
  std::pair<uint8_t*, size_t> spare();
  void grow(size_t n) { size_ += n; }
  void append(const uint8_t* p, size_t n);

 private:
  static constexpr size_t kFirstBlock = 64 << 10, kMaxBlock = 8 << 20;
  struct Block {
    std::unique_ptr<uint8_t[]> data;
    uint64_t start;  // offset of data[0] in the whole
    size_t capacity;
  };
  std::vector<Block> blocks_;
  uint64_t size_ = 0;
};

}  // namespace dcpctl
