// Files: read-only mappings, positioned reads, and outputs that appear only when complete.
#pragma once

#include <cstdint>
#include <string>

#include "util/span_reader.h"

namespace dcpctl {

// A read-only mapping of a whole file (empty files map to an empty span).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ByteSpan span() const { return {static_cast<const uint8_t*>(addr_), size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the resident pages before `offset` from this process (they stay in the page cache and
  // fault back in if read again): a parser streaming through a large file keeps its RSS flat.
  void drop_before(uint64_t offset) const;

 private:
  std::string path_;
  void* addr_ = nullptr;
  size_t size_ = 0;
};

// A file opened for positioned reads; every short read is an error naming file and offset.
class ReadFile {
 public:
  explicit ReadFile(const std::string& path);
  ~ReadFile();
  ReadFile(ReadFile&& o) noexcept;
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly n bytes at offset; throws IoError (OS failure) or FormatError (past EOF).
  void read_at(uint64_t offset, void* buf, size_t n, const std::string& key = {}) const;
  int fd() const { return fd_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

}  // namespace dcpctl
