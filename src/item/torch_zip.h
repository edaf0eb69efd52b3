// The torch.save zip inside each DCP item, read in place over a ByteSource without copying the
// window: its directory by item/zip_directory.h (PyTorchStreamReader's rules, no LibTorch), each
// record's local header and CRC-32 here.
//
// Layout written by torch.save (checked against real files; see tests/fixtures/FORMAT_NOTES.md):
// records under one archive folder ("archive/" in DCP items): data.pkl (pickle protocol 2),
// .format_version, .storage_alignment ("64"), byteorder ("little"), data/<key> (raw storage bytes),
// version ("3"), .data/serialization_id. Records are STORED (never deflated) and data records are
// 64-byte aligned relative to the start of the blob, which is what lets us read tensor bytes
// directly at their offset. A compressed record is refused rather than mis-read.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "store/source.h"
#include "util/error.h"

namespace dcpctl {

struct RecordLocation {
  uint64_t offset = 0;  // of the record's bytes within the source
  uint64_t size = 0;
  uint32_t crc = 0;  // the CRC-32 the zip directory records for it
};

class TorchZip {
 public:
  // `where` names the item for errors (file, item offset, key).
  TorchZip(std::shared_ptr<const ByteSource> src, Where where);
  ~TorchZip();
  TorchZip(const TorchZip&) = delete;
  TorchZip& operator=(const TorchZip&) = delete;

  std::vector<std::string> records();
  bool has(const std::string& name);
  // A small record's bytes (data.pkl, byteorder), their CRC-32 checked; refuses records larger
  // than max_bytes.
  std::vector<uint8_t> read_small(const std::string& name, uint64_t max_bytes);
  // Where a record's bytes lie in the source, and their CRC-32; checks the record is stored
  // uncompressed.
  RecordLocation locate(const std::string& name);
  // locate(), and the record's CRC-32 checked as its bytes are read (ByteSource::watch_crc):
  // for a reader about to read them. A small record (64 KiB at most) is read here, with its
  // local header in one read, and checked at once; the reader's own read of it then
  // comes from the same page cache.
  RecordLocation watch(const std::string& name);
  const std::shared_ptr<const ByteSource>& source() const { return src_; }
  const Where& where() const { return where_; }

 private:
  // watch(); a small record's bytes, read and checked there, land in `bytes`.
  RecordLocation watch(const std::string& name, std::vector<uint8_t>* bytes);
  // Where record `name` lies; with `bytes`, a small record's bytes are read into it and checked
  // (left empty for a large one).
  RecordLocation place(const std::string& name, std::vector<uint8_t>* bytes);
  struct Impl;
  std::shared_ptr<const ByteSource> src_;
  Where where_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dcpctl
