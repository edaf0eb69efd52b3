// The zip directory of a torch.save archive (PKWARE APPNOTE 6.3: the end of central directory
// record, its zip64 locator and record, the central directory), read by dcpctl itself. torch
// reads it with miniz inside LibTorch (caffe2's PyTorchStreamReader); loading LibTorch to read
// ~1 KiB of directory cost every command that reads data 0.2 s of CPU and, from a cold cache,
// 236 MB of reads and 0.4 s (docs/performance.md). The reader keeps PyTorchStreamReader's rules,
// and tests/unit/test_zip_directory.cpp compares the two on every fixture and on zip64 and
// damaged archives:
//   - every record lies in one top-level folder, named by the first record ("archive/" in DCP);
//     records are looked up by their name inside it, ASCII case-insensitively (as miniz does);
//   - a `.data/version` or `version` record holds a decimal format version in [1, 10];
//   - one disk; a stored record's sizes agree; every record and the directory lie inside the
//     archive, the directory after the records.
// It is stricter where the reader would have to guess: two records whose names differ only in
// case, an end record that is not the archive's last bytes (with its comment). Bounds on hostile
// input: the directory is read in one piece of at most kMaxCentralDirectory bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/source.h"
#include "util/error.h"
#include "util/zip_format.h"

namespace dcpctl {

struct ZipEntry {
  std::string name;            // as stored, folder included ("archive/data.pkl")
  uint64_t header_offset = 0;  // of its local header in the archive
  uint64_t size = 0;           // of its bytes (stored: compressed == uncompressed)
  uint32_t crc = 0;            // the CRC-32 the directory records (what miniz checks on extract)
  uint16_t method = 0;         // 0 = stored
  uint16_t flags = 0;          // general purpose bits (3: a data descriptor follows the bytes)
};

// A record's local file header, the kLocalHeader bytes at its header_offset: signature PK\3\4,
// version(2) flags(2) method(2) time(2) date(2) crc32(4) sizes(4+4) name length(2) extra
// length(2); the record's bytes follow its name and extra field (torch.save's pads them to 64).
struct LocalHeader {
  static constexpr uint64_t kSize = zip::kLocal;
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;          // 0 with flag bit 3 (a data descriptor follows the bytes)
  uint64_t data_offset = 0;  // where the record's bytes begin
};
// The header whose kSize bytes are at `h`, read from `header_offset`; nullopt when its signature
// is wrong.
std::optional<LocalHeader> parse_local_header(const uint8_t* h, uint64_t header_offset);

class ZipDirectory {
 public:
  static constexpr uint64_t kMaxCentralDirectory = 256ull << 20;

  // Reads the end records and the directory of the archive `src`; errors are FormatError naming
  // `where` (with the offset in the file of what is damaged, where the source has one), or the
  // error the source raised.
  ZipDirectory(const ByteSource& src, const Where& where);

  // The records' names inside the folder, in the directory's order (getAllRecords).
  std::vector<std::string> records() const;
  // The record `name` inside the archive's folder ("data.pkl"), or null.
  const ZipEntry* find(const std::string& name) const;
  const std::string& folder() const { return folder_; }

 private:
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, size_t> by_name_;  // ascii_lower(name) -> entries_ index
  std::string folder_;                               // "archive/"
};

}  // namespace dcpctl
