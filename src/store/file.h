// Files: read-only mappings, positioned reads, and outputs that appear only when complete.
//
// Every read of a checkpoint goes through this header, and a path may be a local file or an
// object (`s3://bucket/key`, `gs://bucket/name`) in the store its scheme names (store/store.h):
// ReadFile reads an object with ranged reads (its read_direct is a plain read, cached() is false,
// fd() is -1), MappedFile holds a downloaded object, list_dir lists a prefix and stat_path tells
// objects ("files") from prefixes ("directories"). So no command knows where its bytes come from.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "store/store.h"
#include "util/crc_ledger.h"
#include "util/io_buffer.h"
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
  std::vector<uint8_t> object_;  // an s3:// object, downloaded whole
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
  // From an s3:// object: one ranged GET of exactly these bytes (or a block read_near kept).
  void read_at(uint64_t offset, void* buf, size_t n, const std::string& key = {}) const;
  // The whole file as text: for small files (a config, an index, a pointer) whose size the caller
  // has bounded as it must.
  std::string read_all() const;
  // read_at, for a reader that will read more bytes near these within [lo, hi) (an item's window,
  // a .pt file): from an s3:// object, a read under kRemoteBlock fetches the aligned block around
  // it, clipped to [lo, hi) (all of [lo, hi) when that is at most kRemoteWholeItem: the zip's
  // header, index and data in one request), and keeps it for the reads that follow, in a cache of
  // kRemoteCacheBytes shared by every object. Parsing a zip or a header is many small reads close
  // together and each GET costs a round trip; clipping to the item means bytes of items nobody
  // asked for are never fetched (`consolidate --select app.model` moves the model's bytes, not the
  // optimizer's).
  void read_near(uint64_t offset, void* buf, size_t n, uint64_t lo, uint64_t hi, const std::string& key = {}) const;
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
  // Whether a bulk read of [offset, offset + n) should go past the page cache (read_direct) when
  // the caller's --io is direct: kDirectMinRun bytes or more, not all cached already.
  bool worth_reading_direct(uint64_t offset, uint64_t n) const;
  // Asks the kernel to start reading [offset, offset + n) into the page cache now, without
  // waiting (POSIX_FADV_WILLNEED): a reader that reads a window, then works on it, keeps the disk
  // busy with the next window meanwhile. A hint only: an s3:// object or a refusal is a no-op.
  void prefetch(uint64_t offset, uint64_t n) const;
  // Turns the kernel's readahead off for this file (POSIX_FADV_RANDOM; a hint: an s3:// object or
  // a refusal is a no-op): a reader whose bulk bytes go past the page cache (read_direct) reads
  // only headers and small runs through it, and readahead behind a small read (up to the device's
  // read_ahead_kb: 8 MiB on this project's VM) would put the bulk bytes that follow in the cache,
  // where worth_reading_direct then finds them and they are copied through it after all.
  void no_readahead() const;
  int fd() const { return fd_; }  // -1 for an s3:// object
  bool remote() const { return remote_; }
  // s3:// only (a local file ignores it): the byte ranges [offset, offset + length) this process
  // is about to read, each whole item it reads. Ranges whose gaps are under kRemoteGap are joined
  // into spans of at most kRemoteSpan; a read inside a span fetches the whole span once (one
  // request for many small items) into the block cache. Bytes outside every range are fetched
  // only as far as a gap under kRemoteGap reaches. Call before the first read.
  void expect(std::vector<std::pair<uint64_t, uint64_t>> ranges);
  CrcLedger& ledger() const { return *ledger_; }

 private:
  void check_range(uint64_t offset, size_t n, const std::string& key) const;  // FormatError past the end
  void read_remote(uint64_t offset, void* buf, size_t n, uint64_t lo, uint64_t hi, const std::string& key) const;
  std::string path_;
  int fd_ = -1;
  bool remote_ = false;
  store::ObjectStore* store_ = nullptr;               // an object's store
  store::Location loc_;                               // and where it is there
  uint64_t remote_id_ = 0;                            // this object's entries in the block cache
  std::vector<std::pair<uint64_t, uint64_t>> spans_;  // expect(): sorted [start, end), disjoint
  uint64_t size_ = 0;
  DirectFd direct_;
  mutable std::atomic<void*> map_{nullptr};  // the file mapped for cached(), on first use
  std::unique_ptr<CrcLedger> ledger_ = std::make_unique<CrcLedger>();
};

// A small text file read whole (a key map, a config.json, an adapter_config.json, a tokenizer's
// files), local or remote: UsageError naming the file when it is larger than `limit` bytes, which
// a file of its kind (`kind`: "a key map or config") never is.
constexpr uint64_t kTextLimit = 64u << 20;
std::string read_text(const std::string& path, uint64_t limit = kTextLimit,
                      const std::string& kind = "a key map or config");

// Reads of s3:// objects (ReadFile::read_at): the block a small read fetches, and the cache of them.
constexpr uint64_t kRemoteBlock = 256 << 10;
constexpr uint64_t kRemoteWholeItem = 8 << 20;  // a window this small is fetched whole on its first read
constexpr uint64_t kRemoteCacheBytes = 64 << 20;
constexpr uint64_t kRemoteSpan = 8 << 20;  // expect(): the most one request fetches for several items
constexpr uint64_t kRemoteGap = 64 << 10;  // expect(): bytes nobody asked for, fetched to save a request

// Alignment of O_DIRECT offsets, lengths and buffers: the page size, a multiple of every common
// logical block size (512, 4096).
constexpr uint64_t kDirectAlign = 4096;
static_assert(kIoBufferAlign % kDirectAlign == 0, "an IoBuffer (util/io_buffer.h) must be aligned for O_DIRECT");
// Runs shorter than this are read through the page cache, not past it: small reads are where the
// cache is cheap and O_DIRECT's latency is not.
constexpr uint64_t kDirectMinRun = 1ull << 20;
// Rounding to kDirectAlign: offsets and lengths down and up, and a buffer's first aligned byte.
inline uint64_t align_down(uint64_t x) {
  return x & ~(kDirectAlign - 1);
}
inline uint64_t align_up(uint64_t x) {
  return align_down(x + kDirectAlign - 1);
}
inline uint8_t* align_up(uint8_t* p) {
  return p + (kDirectAlign - reinterpret_cast<uintptr_t>(p) % kDirectAlign) % kDirectAlign;
}
// Bytes read_direct reads for [offset, offset + n): the aligned blocks around them.
inline uint64_t direct_span(uint64_t offset, uint64_t n) {
  return align_up(offset + n) - align_down(offset);
}

// ReadFile::expect's spans: the ranges [offset, offset + length) within a file of `size` bytes,
// sorted, neighbours less than kRemoteGap apart joined while the span stays within kRemoteSpan;
// a range longer than kRemoteSpan is left out (it is read a window at a time). Disjoint, sorted.
std::vector<std::pair<uint64_t, uint64_t>> join_spans(std::vector<std::pair<uint64_t, uint64_t>> ranges, uint64_t size);

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);
// The folder holding `path` ("." for a bare name) and its last component, trailing slashes
// ignored: parent_path("a/b/") is "a", base_name("a/b/") is "b".
std::string parent_path(const std::string& path);
std::string base_name(const std::string& path);

// Whether a path names object storage (s3://, gs://) rather than the local filesystem.
bool is_remote_path(const std::string& path);

// What a path names (store::PathInfo, store/store.h). Object URLs are answered from the listing
// of the parent prefix, made once and kept (forget_listings() drops them, for a writer that changed
// the store). A missing bucket or a refusal is an IoError naming the URL, never "missing".
using store::PathInfo;
PathInfo stat_path(const std::string& path, bool follow_links = true);
// The names in a directory (or under an object prefix, one level: objects and sub-prefixes),
// sorted, without "." and ".."; empty when it is not a directory.
std::vector<std::string> list_dir(const std::string& dir);
void forget_listings();

}  // namespace dcpctl
