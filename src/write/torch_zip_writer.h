// The zip container of a torch.save archive, written by dcpctl itself: the byte-for-byte layout of
// caffe2's PyTorchStreamWriter over miniz (torch 2.15), which torch.save and DCP's writer use, so
// that reshard, cast and a .pt output need no LibTorch (item/zip_directory.h is the reading side).
// tests/unit/test_torch_zip_writer.cpp compares the two writers' bytes, zip64 cases included.
//
// What the layout is (PKWARE APPNOTE 6.3, as miniz writes it with MZ_ZIP_FLAG_WRITE_ZIP64):
//   - each record "<folder>/<name>" is stored (method 0), flags 0x0808 (UTF-8 names, sizes and
//     CRC in a data descriptor after the bytes; 0x0800 and no descriptor for an empty record),
//     no time or date, version 0;
//   - its local header has CRC and sizes 0 and an extra field: a zip64 one (0x0001) when its size
//     or its header's offset is >= 0xFFFFFFFF (uncompressed size and 0 for the compressed one,
//     then the offset, each only where needed), then torch's padding ("FB", length, 'Z'...) that
//     puts the record's bytes on a 64-byte boundary;
//   - the data descriptor is PK\7\8, CRC, sizes: 64-bit sizes when the local header had a zip64
//     field, 32-bit otherwise;
//   - the central directory repeats each record with its CRC and sizes (saturated to 0xFFFFFFFF,
//     the real values in a zip64 extra field), then a zip64 end record and its locator, always,
//     then the end record (counts and offsets saturated).
// At the end, as PyTorchStreamWriter::writeEndOfFile: a `version` record ("3\n") unless one was
// written, `byteorder` ("little") likewise, and `.data/serialization_id`: 20 digits of a hash
// combined over the record names (iterated as torch's std::unordered_set holds them) and 20 of
// the data descriptors' CRCs combined in the order they were written.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

namespace dcpctl {

class TorchZipWriter {
 public:
  // Appends bytes to the archive; throws on failure (the archive is then abandoned).
  using Put = std::function<void(const void*, size_t)>;

  explicit TorchZipWriter(Put put, std::string folder = "archive");

  // Record `name` (inside the folder) holding [data, data + n).
  void record(const std::string& name, const void* data, size_t n);
  // Record `name` of `n` bytes that `payload()` appends to the same output itself, returning
  // their CRC-32: a record of any size then costs whatever window the payload streams through.
  void record_streamed(const std::string& name, uint64_t n, const std::function<uint32_t()>& payload);
  // The closing records, the central directory and the end records. Nothing may follow.
  void finish();

  uint64_t size() const { return pos_; }  // bytes appended so far

  // Called once, with the record's name and size, when the next record's bytes are about to be
  // appended (its header is out): where a tensor's bytes start (write/tensor_hash.h).
  std::function<void(const std::string&, uint64_t)> at_data;

 private:
  struct Entry {
    std::string name;  // folder included
    uint64_t header_offset, size;
    uint32_t crc;
  };
  // Writes the local header of a record of `n` bytes; returns whether it carries zip64 sizes.
  bool begin(const std::string& name, uint64_t n);
  void end(uint32_t crc, uint64_t n, bool zip64);
  void data_begins(const std::string& name, uint64_t n);  // at_data
  void put(const void* data, size_t n);
  void put(const std::vector<uint8_t>& b) { put(b.data(), b.size()); }

  Put put_;
  std::string folder_;
  uint64_t pos_ = 0;
  std::vector<Entry> entries_;
  std::vector<uint8_t> buf_;                 // a header or descriptor being put together (kept: one per record)
  std::unordered_set<std::string> written_;  // PyTorchStreamWriter's files_written_, same insertion order
  uint64_t combined_crc_ = 0;
  bool finished_ = false;
};

}  // namespace dcpctl
