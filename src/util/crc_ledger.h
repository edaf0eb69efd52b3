// The CRC-32s a checkpoint's records carry, checked as their bytes are read.
//
// Every record torch.save writes into a zip (a DCP item, a .pt file) carries the CRC-32 of its
// bytes (in the central directory, and in its local header or with flag bit 3 in the data
// descriptor after them; dcpctl takes the directory's, item/zip_directory.h); torch's own
// reader never checks them (its miniz is built with MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS), so a
// flipped bit in tensor data loads silently. The item reader tells a file's ledger which records
// it is about to read (watch); every read of the file then hands the ledger the bytes it read
// (saw), in whatever pieces, order and threads the engine reads them: the CRC of each piece is
// taken as it passes, and when a record's pieces cover it, they are combined in order (zlib's
// crc32_combine) and compared. A mismatch is a CorruptError naming the file, the record's offset
// and its key. Bytes read twice are counted once; a record's entry goes once it is checked, so the
// ledger holds only the records being read.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace dcpctl {

class CrcLedger {
 public:
  // Record [offset, offset + n) of `path` must have CRC-32 `crc`. `key` (the tensor or value) and
  // `record` (the zip record's name) are what an error names. Watching a record already watched
  // is a no-op; one overlapping another watched record is a FormatError (a zip's records never
  // overlap).
  void watch(const std::string& path, uint64_t offset, uint64_t n, uint32_t crc, const std::string& key,
             const std::string& record);
  // Bytes [offset, offset + n) of the file, just read into `data`. Throws CorruptError when they
  // complete a record whose CRC does not match.
  void saw(const std::string& path, uint64_t offset, const uint8_t* data, uint64_t n);
  // Whether a watched record overlaps [offset, offset + n): the bytes must pass through saw()
  // (no copy_file_range).
  bool watching(uint64_t offset, uint64_t n) const;
  // Records checked so far.
  uint64_t checked() const { return checked_.load(); }

 private:
  struct Piece {
    uint64_t from, n;  // within the record
    uint32_t crc;
  };
  struct Record {
    uint64_t n;
    uint32_t crc;
    std::string key, record;
    std::vector<std::pair<uint64_t, uint64_t>> claimed;  // [from, to), sorted, merged: being or been CRC'd
    std::vector<Piece> pieces;                           // CRC'd so far
    uint64_t done = 0;                                   // bytes in pieces
  };
  void finish(const std::string& path, uint64_t offset, Record& r);  // all pieces in: compare

  mutable std::mutex mu_;
  std::map<uint64_t, Record> records_;  // by offset in the file
  std::atomic<size_t> live_{0};         // records_.size(), read without the lock
  std::atomic<uint64_t> checked_{0};
};

// The CRC-32 of `a` followed by `b` (`nb` bytes), from the CRCs of each.
uint32_t crc32_combine(uint32_t a, uint32_t b, uint64_t nb);

struct Where;
// The CorruptError of record `record` (`n` bytes, at `where`) whose bytes give `got`, not `stored`.
[[noreturn]] void throw_crc_mismatch(const Where& where, const std::string& record, uint64_t n, uint32_t stored,
                                     uint32_t got);

}  // namespace dcpctl
