// Files: read-only mappings, positioned reads, and outputs that appear only when complete.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "util/crc_ledger.h"
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

// A file's O_DIRECT descriptor, opened on first use by whichever thread asks first and closed with
// this object. get() is -1 where the filesystem refuses O_DIRECT, and after turn_off() (it took
// O_DIRECT at open but refused an alignment): the caller then goes through the page cache. The
// descriptor stays open until the end: another thread may still be using it.
class DirectFd {
 public:
  DirectFd() = default;
  DirectFd(DirectFd&& o) noexcept : fd_(o.fd_.exchange(kUnopened)), off_(o.off_.load()) {}
  ~DirectFd();
  int get(const std::string& path, int flags) const;  // flags: O_RDONLY or O_WRONLY
  void turn_off() const { off_ = true; }
  bool off() const { return off_.load(); }

 private:
  static constexpr int kUnopened = -2;  // not yet opened
  mutable std::atomic<int> fd_{kUnopened};
  mutable std::atomic<bool> off_{false};
};

// A file opened for positioned reads; every short read is an error naming file and offset.
// Every byte read (read_at, read_direct) passes its ledger, which checks the CRC-32 of each
// watched record once its bytes are all in (util/crc_ledger.h).
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
  // Reads the same bytes past the page cache (O_DIRECT), where the filesystem allows it: the
  // kDirectAlign-aligned blocks around them land in `buf` (kDirectAlign-aligned, with room for
  // direct_span(offset, n) bytes), and the return value points at byte `offset` there. Where
  // O_DIRECT is refused (tmpfs, some FUSE filesystems; decided once per file) it is read_at into
  // `buf`. A bulk copy reads each byte once: through the page cache that costs the kernel more than
  // the disk does (bench/consolidate.sh; see docs/performance.md).
  const uint8_t* read_direct(uint64_t offset, size_t n, uint8_t* buf, const std::string& key = {}) const;
  // Whether every page of [offset, offset + n) is in the page cache now (mincore over a read-only
  // mapping, which faults nothing in): a bulk copy then copies from the cache in the kernel
  // (copy_file_range) instead of reading the disk again.
  bool cached(uint64_t offset, uint64_t n) const;
  int fd() const { return fd_; }
  CrcLedger& ledger() const { return *ledger_; }

 private:
  void check_range(uint64_t offset, size_t n, const std::string& key) const;  // FormatError past the end
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  DirectFd direct_;
  mutable std::atomic<void*> map_{nullptr};  // the file mapped for cached(), on first use
  std::unique_ptr<CrcLedger> ledger_ = std::make_unique<CrcLedger>();
};

// Alignment of O_DIRECT offsets, lengths and buffers: the page size, a multiple of every common
// logical block size (512, 4096).
constexpr uint64_t kDirectAlign = 4096;
// Rounding to kDirectAlign: offsets and lengths down and up, and a buffer's first aligned byte.
inline uint64_t align_down(uint64_t x) { return x & ~(kDirectAlign - 1); }
inline uint64_t align_up(uint64_t x) { return align_down(x + kDirectAlign - 1); }
inline uint8_t* align_up(uint8_t* p) { return p + (kDirectAlign - reinterpret_cast<uintptr_t>(p) % kDirectAlign) % kDirectAlign; }
// Bytes read_direct reads for [offset, offset + n): the aligned blocks around them.
inline uint64_t direct_span(uint64_t offset, uint64_t n) {
  return align_up(offset + n) - align_down(offset);
}

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

}  // namespace dcpctl
