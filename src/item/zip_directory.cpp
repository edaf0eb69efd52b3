#include "item/zip_directory.h"

#include <algorithm>
#include <cstring>

#include "util/crc32.h"
#include "util/crc_ledger.h"
#include "util/le.h"
#include "util/text.h"
#include "util/zip_format.h"

namespace dcpctl {

namespace {

using namespace zip;  // the records' signatures and fixed sizes
constexpr uint64_t kMaxComment = 0xFFFF;
// The end records and, for a DCP item, the whole directory and its version record: one read.
constexpr uint64_t kFirstTail = 4096;
// caffe2/serialize/versions.h (torch 2.15): the format versions PyTorchStreamReader accepts.
constexpr uint64_t kMinVersion = 1, kMaxVersion = 10;
constexpr uint64_t kMaxVersionRecord = 64;

// The archive's bytes as read so far: its tail, held, and anything else read on demand.
class Bytes {
 public:
  Bytes(const ByteSource& src, const Where& where) : src_(src), where_(where), size_(src.size()) {}
  uint64_t size() const { return size_; }

  // The archive's place, with the offset in the file of byte `pos` where the source has one.
  Where where(uint64_t pos) const {
    Where w = where_;
    if (std::optional<uint64_t> o = src_.file_offset(pos)) w.offset = o;
    return w;
  }
  FormatError error(uint64_t pos, const std::string& msg) const {
    return FormatError(where(pos), "zip directory: " + msg);
  }

  // Holds the last `n` bytes.
  void hold_tail(uint64_t n) {
    tail_from_ = size_ - std::min(n, size_);
    tail_.resize(size_ - tail_from_);
    src_.read(tail_from_, tail_.data(), tail_.size());
  }
  uint64_t tail_from() const { return tail_from_; }
  const std::vector<uint8_t>& tail() const { return tail_; }

  // [pos, pos + n), which the caller has checked lies inside the archive: from the tail where it
  // is held, else read (valid until the next call).
  const uint8_t* at(uint64_t pos, uint64_t n) {
    if (pos >= tail_from_) return tail_.data() + (pos - tail_from_);
    scratch_.resize(n);
    src_.read(pos, scratch_.data(), n);
    return scratch_.data();
  }

 private:
  const ByteSource& src_;
  const Where& where_;
  uint64_t size_;
  uint64_t tail_from_ = 0;
  std::vector<uint8_t> tail_, scratch_;
};

// Where the end of central directory record starts: the last signature whose record, with its
// comment, ends exactly at the archive's end.
std::optional<uint64_t> find_end(const Bytes& b) {
  const std::vector<uint8_t>& t = b.tail();
  if (t.size() < kEnd) return std::nullopt;
  for (uint64_t p = t.size() - kEnd + 1; p-- > 0;)
    if (le32(t.data() + p) == kEndSig && p + kEnd + le16(t.data() + p + 20) == t.size()) return b.tail_from() + p;
  return std::nullopt;
}

// std::stoull's reading of a version record (leading space, an optional '+', decimal digits up
// to the first other byte), as PyTorchStreamReader reads it; nullopt where it would throw.
std::optional<uint64_t> parse_version(const uint8_t* p, size_t n) {
  size_t i = 0;
  while (i < n && (p[i] == ' ' || (p[i] >= '\t' && p[i] <= '\r'))) ++i;
  if (i < n && p[i] == '+') ++i;
  if (i == n || p[i] < '0' || p[i] > '9') return std::nullopt;
  uint64_t v = 0;
  for (; i < n && p[i] >= '0' && p[i] <= '9'; ++i) {
    if (v > (UINT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + (p[i] - '0');
  }
  return v;
}

std::string record_name(const std::string& name) {
  return "'" + name + "'";
}

// What the end records say of the central directory: `count` records in [offset, offset + size),
// the end of central directory record at `end`.
struct DirectoryEnd {
  uint64_t end = 0;
  uint64_t disk = 0, dir_disk = 0, on_disk = 0, count = 0;
  uint64_t size = 0, offset = 0;
  uint64_t limit = 0;  // the directory ends where the end records begin
};

// Where the end of central directory record is, from the tail: first a short one, then, for a
// comment longer than that, as long as the longest comment allows.
uint64_t locate_end(Bytes& b) {
  const uint64_t size = b.size();
  if (size < kEnd)
    throw b.error(0, "the archive is " + std::to_string(size) + " bytes, too short for a zip end record");
  b.hold_tail(kFirstTail);
  std::optional<uint64_t> end = find_end(b);
  if (!end && b.tail_from() > 0) {  // a comment longer than the first tail
    b.hold_tail(kEnd + kMaxComment);
    end = find_end(b);
  }
  if (!end)
    throw b.error(size - kEnd,
                  "no end of central directory record at the archive's end (not a zip archive, or cut short)");
  return *end;
}

// Zip64 (torch.save's writer always adds it): a locator just before the end record points at
// the zip64 end record, whose fields then stand for the end record's (as miniz reads them).
void read_zip64_end(Bytes& b, DirectoryEnd& d) {
  const uint64_t end = d.end;
  const uint8_t* l = b.at(end - kLocator64, kLocator64);
  uint64_t end64 = le64(l + 8);
  if (le32(l + 4) != 0 || le32(l + 16) != 1) throw b.error(end - kLocator64, "the archive spans more than one disk");
  if (end64 > end - kLocator64 || end - kLocator64 - end64 < kEnd64)
    throw b.error(end - kLocator64,
                  "the zip64 end record (at " + std::to_string(end64) + ") is not inside the archive");
  const uint8_t* z = b.at(end64, kEnd64);
  if (le32(z) != kEnd64Sig || le64(z + 4) < kEnd64 - 12)
    throw b.error(end64, "damaged zip64 end of central directory record");
  d.disk = le32(z + 16);
  d.dir_disk = le32(z + 20);
  d.on_disk = le64(z + 24);
  d.count = le64(z + 32);
  d.size = le64(z + 40);
  d.offset = le64(z + 48);
  d.limit = end64;
}

// The end records, checked: one disk, some records, a directory inside the archive before them.
DirectoryEnd read_directory_end(Bytes& b) {
  DirectoryEnd d;
  d.end = locate_end(b);
  const uint64_t end = d.end;
  // End of central directory: signature, disk, directory's disk, records on this disk, records,
  // directory size, directory offset, comment length.
  const uint8_t* e = b.at(end, kEnd);
  d.disk = le16(e + 4), d.dir_disk = le16(e + 6), d.on_disk = le16(e + 8), d.count = le16(e + 10);
  d.size = le32(e + 12), d.offset = le32(e + 16);
  d.limit = end;
  if (end >= kLocator64 && le32(b.at(end - kLocator64, kLocator64)) == kLocator64Sig) read_zip64_end(b, d);
  if (d.disk != 0 || d.dir_disk != 0 || d.on_disk != d.count)
    throw b.error(end, "the archive spans more than one disk");
  if (d.count == 0) throw b.error(end, "the archive holds no records");
  if (d.offset > d.limit || d.size > d.limit - d.offset)
    throw b.error(end, "the central directory (" + std::to_string(d.size) + " bytes at " + std::to_string(d.offset) +
                           ") is not inside the archive, before its end records");
  if (d.size > ZipDirectory::kMaxCentralDirectory)
    throw b.error(d.offset, "the central directory is " + std::to_string(d.size) + " bytes, more than the " +
                                std::to_string(ZipDirectory::kMaxCentralDirectory) + " dcpctl reads");
  if (d.count > d.size / kCentral)
    throw b.error(end, std::to_string(d.count) + " records cannot fit in a central directory of " +
                           std::to_string(d.size) + " bytes");
  return d;
}

// A central directory header's saturated fields, as wide: the Zip64 extended information (extra
// field 0x0001, extra_len bytes at x) holds their 64-bit values, in this order.
struct RecordFields {
  uint64_t packed, unpacked, start_disk;
};
void widen_zip64(const Bytes& b, uint64_t at, ZipEntry& z, RecordFields& r, const uint8_t* x, uint64_t extra_len) {
  bool wide =
      r.unpacked == 0xFFFFFFFF || r.packed == 0xFFFFFFFF || z.header_offset == 0xFFFFFFFF || r.start_disk == 0xFFFF;
  for (uint64_t k = 0; wide && k + 4 <= extra_len;) {
    uint64_t id = le16(x + k), n = le16(x + k + 2);
    if (n > extra_len - k - 4) break;
    if (id == 1) {
      const uint8_t* f = x + k + 4;
      uint64_t left = n;
      auto take = [&](uint64_t& v, uint64_t saturated, uint64_t width) {
        if (v != saturated) return;
        if (left < width)
          throw b.error(at, "record " + record_name(z.name) + " has a zip64 field too short for its sizes");
        v = width == 8 ? le64(f) : le32(f);
        f += width;
        left -= width;
      };
      take(r.unpacked, 0xFFFFFFFF, 8);
      take(r.packed, 0xFFFFFFFF, 8);
      take(z.header_offset, 0xFFFFFFFF, 8);
      take(r.start_disk, 0xFFFF, 4);
      wide = false;
    }
    k += 4 + n;
  }
  if (wide) throw b.error(at, "record " + record_name(z.name) + " has saturated sizes and no zip64 field");
}

// Central directory header i, at `pos` of the directory's bytes, into z: its length.
uint64_t read_central(const Bytes& b, const std::vector<uint8_t>& dir, const DirectoryEnd& d, uint64_t pos, uint64_t i,
                      ZipEntry& z) {
  // Central directory header: signature, versions (2+2), flags, method, time, date, crc-32,
  // compressed and uncompressed sizes, name/extra/comment lengths, disk, attributes (2+4),
  // local header offset; then the name, the extra field and the comment.
  const uint64_t at = d.offset + pos, dir_size = d.size, dir_offset = d.offset;
  if (dir_size - pos < kCentral || le32(dir.data() + pos) != kCentralSig)
    throw b.error(at, "damaged central directory header for record " + std::to_string(i));
  const uint8_t* c = dir.data() + pos;
  uint64_t name_len = le16(c + 28), extra_len = le16(c + 30), comment_len = le16(c + 32);
  if (dir_size - pos - kCentral < name_len + extra_len + comment_len)
    throw b.error(at, "central directory header " + std::to_string(i) + " runs past the directory's end");
  z.flags = le16(c + 8);
  z.method = le16(c + 10);
  z.crc = le32(c + 16);
  RecordFields r{le32(c + 20), le32(c + 24), le16(c + 34)};
  z.header_offset = le32(c + 42);
  z.name.assign(reinterpret_cast<const char*>(c + kCentral), name_len);
  widen_zip64(b, at, z, r, c + kCentral + name_len, extra_len);
  if (r.start_disk != 0) throw b.error(at, "record " + record_name(z.name) + " is on another disk");
  if (z.method == 0 && r.packed != r.unpacked)
    throw b.error(at, "stored record " + record_name(z.name) + " has two sizes (" + std::to_string(r.packed) + " and " +
                          std::to_string(r.unpacked) + ")");
  z.size = r.packed;
  if (z.header_offset > dir_offset || dir_offset - z.header_offset < kLocal ||
      z.size > dir_offset - z.header_offset - kLocal)
    throw b.error(at, "record " + record_name(z.name) + " (" + std::to_string(z.size) + " bytes, header at " +
                          std::to_string(z.header_offset) + ") is not inside the archive, before its directory");
  return kCentral + name_len + extra_len + comment_len;
}

// Every record in one folder, named by the first (PyTorchStreamReader's archive name): the folder.
std::string archive_folder(const Bytes& b, const std::vector<ZipEntry>& entries, uint64_t dir_offset) {
  size_t slash = entries[0].name.find('/');
  if (slash == std::string::npos)
    throw b.error(dir_offset, "record " + record_name(entries[0].name) +
                                  " is not in a folder (torch.save puts every record in one)");
  std::string folder = entries[0].name.substr(0, slash + 1);
  for (const ZipEntry& z : entries)
    if (z.name.compare(0, folder.size(), folder) != 0)
      throw b.error(dir_offset,
                    "record " + record_name(z.name) + " is not in the archive's folder " + record_name(folder));
  return folder;
}

// The format version, checked as PyTorchStreamReader checks it before any other read (v: its
// record, or null).
void check_version(Bytes& b, const ZipEntry* v, const std::string& folder, uint64_t dir_offset) {
  const uint64_t size = b.size();
  if (!v) throw b.error(dir_offset, "the archive has no version record (" + folder + "version)");
  if (v->method != 0 || v->size > kMaxVersionRecord)
    throw b.error(dir_offset, "the version record " + record_name(v->name) + " is not a short stored record");
  std::optional<LocalHeader> local = parse_local_header(b.at(v->header_offset, kLocal), v->header_offset);
  if (!local) throw b.error(v->header_offset, "damaged zip local header for record " + record_name(v->name));
  const uint64_t data = local->data_offset;
  if (data > size || v->size > size - data)
    throw b.error(v->header_offset, "record " + record_name(v->name) + " runs past the archive's end");
  const uint8_t* bytes = b.at(data, v->size);
  if (uint32_t got = crc32_update(0, bytes, v->size); got != v->crc)
    throw_crc_mismatch(b.where(data), v->name, v->size, v->crc, got);
  std::optional<uint64_t> version = parse_version(bytes, v->size);
  std::string text(reinterpret_cast<const char*>(bytes), v->size);
  if (!version) throw b.error(data, "the version record holds '" + text + "', not a number");
  if (*version < kMinVersion || *version > kMaxVersion)
    throw b.error(data, "format version " + std::to_string(*version) + " is outside the " +
                            std::to_string(kMinVersion) + "-" + std::to_string(kMaxVersion) + " torch reads");
}

}  // namespace

ZipDirectory::ZipDirectory(const ByteSource& src, const Where& where) {
  Bytes b(src, where);
  const DirectoryEnd d = read_directory_end(b);
  const uint8_t* bytes = b.at(d.offset, d.size);
  std::vector<uint8_t> dir(bytes, bytes + d.size);  // held: reading the version record may reuse the scratch
  uint64_t pos = 0;
  for (uint64_t i = 0; i < d.count; ++i) {
    ZipEntry z;
    const uint64_t at = d.offset + pos;
    pos += read_central(b, dir, d, pos, i, z);
    if (!by_name_.emplace(ascii_lower(z.name), entries_.size()).second)
      throw b.error(at, "two records are named " + record_name(z.name) + " (names compare without case)");
    entries_.push_back(std::move(z));
  }
  folder_ = archive_folder(b, entries_, d.offset);
  const ZipEntry* v = find(".data/version");
  if (!v) v = find("version");
  check_version(b, v, folder_, d.offset);
}

std::optional<LocalHeader> parse_local_header(const uint8_t* h, uint64_t header_offset) {
  if (le32(h) != kLocalSig) return std::nullopt;
  LocalHeader l;
  l.flags = le16(h + 6);
  l.method = le16(h + 8);
  l.crc = le32(h + 14);
  l.data_offset = header_offset + kLocal + le16(h + 26) + le16(h + 28);
  return l;
}

std::vector<std::string> ZipDirectory::records() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const ZipEntry& e : entries_) out.push_back(e.name.substr(folder_.size()));
  return out;
}

const ZipEntry* ZipDirectory::find(const std::string& name) const {
  auto it = by_name_.find(ascii_lower(folder_ + name));
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

}  // namespace dcpctl
