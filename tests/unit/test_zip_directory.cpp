// item/zip_directory: dcpctl's own reading of a torch.save archive's zip directory, against the
// reader torch uses (caffe2's PyTorchStreamReader over miniz, linked into this binary through the
// plugin's objects: torchlib::api()). On every torch.save archive the fixtures hold (each DCP item
// torch, torchtitan, Lightning... wrote, and the .pt files of the layouts) both readers must list
// the same records at the same places; on damaged copies, dcpctl must refuse every archive torch's
// reader refuses.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include "fixture_archives.h"
#include "item/torch_zip.h"
#include "item/zip_directory.h"
#include "meta/checkpoint.h"
#include "torchlib/torchlib.h"
#include "util/le.h"

using namespace dcpctl;
namespace fs = std::filesystem;

namespace {

using Archive = FixtureArchive;

struct Listing {
  std::vector<std::string> records;
  std::vector<uint64_t> sizes, offsets, headers;
  bool operator==(const Listing& o) const {
    return records == o.records && sizes == o.sizes && offsets == o.offsets && headers == o.headers;
  }
};

// torch's reader: nullopt where it refuses the archive.
std::optional<Listing> torch_listing(const std::vector<uint8_t>& bytes) {
  try {
    auto src = std::make_shared<MemorySource>(bytes);
    std::unique_ptr<torchlib::ZipIndex> z = torchlib::api().open_zip(src, Where("torch"));
    Listing l;
    l.records = z->records();
    for (const std::string& r : l.records) {
      l.sizes.push_back(z->size(r));
      l.offsets.push_back(z->offset(r));
      l.headers.push_back(z->header_offset(r));
    }
    return l;
  } catch (const Error&) {
    return std::nullopt;
  }
}

// dcpctl's: the directory, and where TorchZip places each record's bytes.
std::optional<Listing> own_listing(const std::vector<uint8_t>& bytes, std::string* why = nullptr) {
  try {
    auto src = std::make_shared<MemorySource>(bytes);
    ZipDirectory dir(*src, Where("dcpctl"));
    TorchZip zip(src, Where("dcpctl"));
    Listing l;
    l.records = zip.records();
    for (const std::string& r : l.records) {
      RecordLocation loc = zip.locate(r);
      l.sizes.push_back(loc.size);
      l.offsets.push_back(loc.offset);
      l.headers.push_back(dir.find(r)->header_offset);
    }
    return l;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return std::nullopt;
  }
}

// An archive written by torch's own zip writer (caffe2's PyTorchStreamWriter, the torch.save
// container), with records of the given sizes.
std::vector<uint8_t> torch_written(const std::vector<std::pair<std::string, size_t>>& records) {
  std::vector<uint8_t> out;
  auto w = torchlib::api().zip_writer(
      [&](const void* p, size_t n) {
        out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
        return n;
      },
      Where("writer"));
  for (const auto& [name, n] : records) {
    std::vector<uint8_t> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(i * 7 + name.size());
    w->record(name, data.data(), n);
  }
  w->finish();
  return out;
}

// `a` (written by torch's writer: records, central directory, zip64 end record, locator, end
// record) with every directory entry's sizes and header offset moved into a zip64 extra field, as
// a writer does for records past 4 GiB, and the end record's directory size and offset saturated.
std::vector<uint8_t> widened(const std::vector<uint8_t>& a) {
  const uint64_t end = a.size() - 22;
  REQUIRE(le32(a.data() + end) == 0x06054b50);
  const uint64_t count = le16(a.data() + end + 10), dir = le32(a.data() + end + 16);
  std::vector<uint8_t> out(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(dir));
  uint64_t p = dir;
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* c = a.data() + p;
    REQUIRE(le32(c) == 0x02014b50);
    uint16_t name = le16(c + 28), extra = le16(c + 30), comment = le16(c + 32);
    std::vector<uint8_t> h(c, c + 46);
    for (int k : {20, 24, 42}) std::fill_n(h.begin() + k, 4, 0xFF);
    h[30] = static_cast<uint8_t>((extra + 28) & 0xFF);
    h[31] = static_cast<uint8_t>((extra + 28) >> 8);
    out.insert(out.end(), h.begin(), h.end());
    out.insert(out.end(), c + 46, c + 46 + name + extra);
    put_le16(out, 1);
    put_le16(out, 24);
    put_le64(out, le32(c + 24));  // uncompressed, compressed, local header offset: APPNOTE's order
    put_le64(out, le32(c + 20));
    put_le64(out, le32(c + 42));
    out.insert(out.end(), c + 46 + name + extra, c + 46 + name + extra + comment);
    p += 46u + name + extra + comment;
  }
  const uint64_t dir_size = out.size() - dir, end64 = out.size();
  put_le32(out, 0x06064b50);
  put_le64(out, 44);
  put_le16(out, 45);
  put_le16(out, 45);
  put_le32(out, 0);
  put_le32(out, 0);
  put_le64(out, count);
  put_le64(out, count);
  put_le64(out, dir_size);
  put_le64(out, dir);
  put_le32(out, 0x07064b50);
  put_le32(out, 0);
  put_le64(out, end64);
  put_le32(out, 1);
  put_le32(out, 0x06054b50);
  put_le32(out, 0);
  put_le16(out, static_cast<uint16_t>(count));
  put_le16(out, static_cast<uint16_t>(count));
  put_le32(out, 0xFFFFFFFF);
  put_le32(out, 0xFFFFFFFF);
  put_le16(out, 0);
  return out;
}

}  // namespace

TEST_CASE("zip directory: every torch.save archive of the fixtures, as torch's reader lists it") {
  std::vector<Archive> archives = fixture_archives();
  REQUIRE(archives.size() > 200);  // the fixtures hold hundreds of items: an empty walk is a bug here
  size_t pt = 0;
  for (const Archive& a : archives) {
    INFO(a.what);
    std::optional<Listing> theirs = torch_listing(a.bytes);
    REQUIRE(theirs);
    std::string why;
    std::optional<Listing> ours = own_listing(a.bytes, &why);
    INFO(why);
    REQUIRE(ours);
    CHECK(*ours == *theirs);
    pt += a.what.size() > 3 && a.what.compare(a.what.size() - 3, 3, ".pt") == 0;
  }
  CHECK(pt > 5);
}

TEST_CASE("zip directory: archives torch's writer makes, zip64 fields included") {
  for (const auto& records : std::vector<std::vector<std::pair<std::string, size_t>>>{
           {{"data.pkl", 40}},
           {{"data.pkl", 100}, {"byteorder", 6}, {"data/0", 1 << 16}, {"data/1", 0}, {".data/serialization_id", 40}},
           {{"data.pkl", 10}, {"data/0", 5000}, {"Data/00", 3}}}) {
    std::vector<uint8_t> a = torch_written(records);
    for (const std::vector<uint8_t>& bytes : {a, widened(a)}) {
      std::optional<Listing> theirs = torch_listing(bytes);
      REQUIRE(theirs);
      std::string why;
      std::optional<Listing> ours = own_listing(bytes, &why);
      INFO(why);
      REQUIRE(ours);
      CHECK(*ours == *theirs);
      for (const auto& [name, n] : records)  // and the writer's own version record
        CHECK(std::count(ours->records.begin(), ours->records.end(), name) == 1);
    }
  }
}

TEST_CASE("zip directory: a damaged directory torch's reader refuses is refused") {
  // Every byte of the directory, its end records and the version record of a real item, and of
  // its zip64-widened copy, flipped two ways: where torch's reader refuses the copy dcpctl must
  // too (with an error naming the item), and where both read it they must agree.
  std::vector<Archive> archives = fixture_archives();
  REQUIRE(!archives.empty());
  std::vector<std::vector<uint8_t>> bases = {archives.front().bytes, widened(archives.front().bytes)};
  size_t refused = 0, stricter = 0, flips = 0;
  for (const std::vector<uint8_t>& base : bases) {
    const uint64_t end = base.size() - 22;
    const uint64_t dir = le32(base.data() + end + 16) == 0xFFFFFFFF
                             ? le64(base.data() + base.size() - 22 - 20 - 56 + 48)
                             : le32(base.data() + end + 16);
    // From the last record's header (the version record's neighbourhood) to the end.
    const uint64_t from = dir > 200 ? dir - 200 : 0;
    for (uint64_t pos = from; pos < base.size(); ++pos) {
      for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}}) {
        std::vector<uint8_t> bad = base;
        bad[pos] ^= mask;
        ++flips;
        std::optional<Listing> theirs = torch_listing(bad);
        std::string why;
        std::optional<Listing> ours = own_listing(bad, &why);
        INFO("byte " << pos << " ^ " << int(mask) << ": " << why);
        if (!theirs) {
          ++refused;
          CHECK(!ours);
          if (!ours) CHECK(why.find("dcpctl") != std::string::npos);
        } else if (ours) {
          CHECK(*ours == *theirs);
        } else {
          ++stricter;
        }
      }
    }
  }
  CHECK(refused > flips / 4);  // the sweep reaches what torch's reader checks
  UNSCOPED_INFO("zip directory sweep: " << flips << " flips, torch refused " << refused << ", dcpctl also refused "
                                        << stricter << " torch read");
}

TEST_CASE("zip directory: hostile ends are refused within bounds") {
  std::vector<uint8_t> a = torch_written({{"data.pkl", 10}});
  auto refused = [](const std::vector<uint8_t>& b) {
    MemorySource src(b);
    try {
      ZipDirectory d(src, Where("x.distcp", 123, "k"));
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // Cut anywhere: no end record at the end.
  for (size_t n : {size_t{0}, size_t{21}, a.size() / 2, a.size() - 1})
    CHECK(refused(std::vector<uint8_t>(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n))).find("x.distcp") !=
          std::string::npos);
  // A directory claimed larger than the archive (the zip64 end record's size, which torch's writer
  // always adds and both readers take): refused before any allocation.
  for (uint64_t claim : {uint64_t{1} << 40, uint64_t{ZipDirectory::kMaxCentralDirectory} + 1, ~uint64_t{0}}) {
    std::vector<uint8_t> big = a;
    const size_t size_at = big.size() - 22 - 20 - 56 + 40;
    for (int k = 0; k < 8; ++k) big[size_at + k] = static_cast<uint8_t>(claim >> (8 * k));
    CHECK(refused(big).find("central directory") != std::string::npos);
  }
  // Two records whose names differ only in case: which one torch's reader finds is a guess.
  std::vector<uint8_t> twins = torch_written({{"data.pkl", 10}, {"DATA.pkl", 10}});
  CHECK(refused(twins).find("two records") != std::string::npos);
}
