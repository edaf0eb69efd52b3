#include "write/write_hash.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <sys/stat.h>

#include "store/file.h"
#include "store/upload.h"
#include "util/crc32.h"
#include "util/crc_ledger.h"

namespace dcpctl {

namespace {

uint64_t written_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : UINT64_MAX;
}

std::atomic<int> g_hashing{0};
std::atomic<ManifestAlgorithm> g_algorithm{ManifestAlgorithm::Crc32};

// By the file itself (device and inode), whatever name it has or is reached by.
using WrittenFileId = std::pair<uint64_t, uint64_t>;
std::optional<WrittenFileId> written_file_id(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return WrittenFileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

struct WrittenDigests {
  std::mutex mu;
  std::map<WrittenFileId, WrittenDigest> digests;
  std::map<std::string, WrittenDigest> objects;  // an object-storage output's, by its URL
};
WrittenDigests& written_digests() {
  static WrittenDigests r;
  return r;
}

// The written file, opened only when some of it is read back (an object: only then is a request
// made, its listing, taken before it was written, forgotten first).
class ReadBack {
 public:
  explicit ReadBack(const std::string& path) : path_(path) {}
  const ReadFile& operator()() {
    if (!file_) {
      if (is_remote(path_)) forget_listings();
      file_.emplace(path_);
    }
    return *file_;
  }

 private:
  const std::string& path_;
  std::optional<ReadFile> file_;
};

}  // namespace

WriteHash::WriteHash(std::string temp_path, std::string final_path)
    : temp_(std::move(temp_path)),
      final_(std::move(final_path)),
      crc_(hashing_algorithm() == ManifestAlgorithm::Crc32) {}

WriteHash::~WriteHash() {
  release_bytes(held_);
}

void WriteHash::add_part(const HashPart& p, uint64_t offset, uint64_t n) {
  if (p.tensor.empty()) return;
  locate_part(p, temp_, final_, offset);
  bool again;
  {
    std::lock_guard<std::mutex> lock(seg_mu_);
    auto [it, fresh] = segs_.emplace(offset, Segment{p, n});
    again = !fresh && (it->second.part.tensor != p.tensor || it->second.part.part != p.part || it->second.n != n);
    if (!fresh && !again) return;  // said again (each window of a record's run): as it was
  }
  if (crc_) {  // a CRC is taken of whatever comes, in any order: only a second place matters
    if (again) part_rewritten(p);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (again || rewritten_ || offset < next_) part_rewritten(p);  // its bytes are read back
}

uint32_t WriteHash::crc_through(const uint8_t* data, uint64_t n, uint64_t offset) {
  std::vector<std::pair<uint64_t, Segment>> over;
  {
    std::lock_guard<std::mutex> lock(seg_mu_);
    auto it = segs_.upper_bound(offset);
    if (it != segs_.begin()) --it;
    for (; it != segs_.end() && it->first < offset + n; ++it)
      if (it->first + it->second.n > offset) over.emplace_back(*it);
  }
  // One pass: the CRC of each stretch between part boundaries, joined for the file.
  uint32_t crc = 0;
  uint64_t at = offset;
  auto stretch = [&](uint64_t to) -> uint32_t {
    const uint32_t c = crc32_update(0, data + (at - offset), to - at);
    crc = at == offset ? c : crc32_combine(crc, c, to - at);
    at = to;
    return c;
  };
  for (const auto& [seg_at, seg] : over) {
    const uint64_t from = std::max(seg_at, offset), to = std::min(seg_at + seg.n, offset + n);
    if (from > at) stretch(from);
    const uint32_t c = stretch(to);
    crc_part_bytes(seg.part, from - seg_at, to - from, c);
  }
  if (at < offset + n) stretch(offset + n);
  return crc;
}

void WriteHash::crc_wrote(const uint8_t* data, uint64_t n, uint64_t offset) {
  const uint32_t crc = crc_through(data, n, offset);
  std::lock_guard<std::mutex> lock(mu_);
  // A write that continues the one before it (appends, a lane's consecutive windows) joins it.
  if (!crcs_.empty() && crcs_.back().at + crcs_.back().n == offset) {
    crcs_.back().crc = crc32_combine(crcs_.back().crc, crc, n);
    crcs_.back().n += n;
    return;
  }
  crcs_.push_back({offset, n, crc});
}

FileDigest WriteHash::crc_finish(const std::string& path, std::optional<uint64_t> known_size) {
  std::lock_guard<std::mutex> lock(mu_);
  ReadBack f(path);
  const uint64_t size = known_size ? *known_size : f().size();
  std::sort(crcs_.begin(), crcs_.end(), [](const CrcPiece& a, const CrcPiece& b) { return a.at < b.at; });
  uint64_t end = 0;
  bool twice = false;
  for (const CrcPiece& p : crcs_) {
    twice = twice || p.at < end;
    end = std::max(end, p.at + p.n);
  }
  // What the writes did not show is read back (the tensors' parts among it take their CRCs too).
  auto read_back = [&](uint64_t from, uint64_t to) -> uint32_t {
    uint32_t crc = 0;
    read_file_range(f(), from, to, [&](const uint8_t* p, uint64_t n, uint64_t at) {
      const uint32_t c = crc_through(p, n, at);
      crc = at == from ? c : crc32_combine(crc, c, n);
    });
    read_back_ += to - from;
    return crc;
  };
  if (twice || end > size) {  // a range written twice: the whole file as it is now, its parts too
    {
      std::lock_guard<std::mutex> seg_lock(seg_mu_);
      for (const auto& [offset, seg] : segs_) part_rewritten(seg.part);
      segs_.clear();
    }
    crcs_.clear();
    const uint32_t whole = size ? read_back(0, size) : 0;
    rewritten_ = true;
    return {size, crc32_hex(whole)};
  }
  uint32_t crc = 0;
  uint64_t at = 0;
  auto join = [&](uint32_t c, uint64_t n) {
    crc = at == 0 ? c : crc32_combine(crc, c, n);
    at += n;
  };
  for (const CrcPiece& p : crcs_) {
    if (p.n == 0) continue;
    if (p.at > at) join(read_back(at, p.at), p.at - at);
    join(p.crc, p.n);
  }
  if (at < size) join(read_back(at, size), size - at);
  crcs_.clear();
  rewritten_ = true;  // finished: later writes are not hashed
  return {size, crc32_hex(crc)};
}

std::vector<WriteHash::Claim> WriteHash::claim(const uint8_t* data, uint64_t n, uint64_t at) {
  std::vector<std::pair<uint64_t, Segment>> over;
  {
    std::lock_guard<std::mutex> lock(seg_mu_);
    auto it = segs_.upper_bound(at);
    if (it != segs_.begin()) --it;
    for (; it != segs_.end() && it->first < at + n; ++it)
      if (it->first + it->second.n > at) over.emplace_back(*it);
  }
  std::vector<Claim> claims;
  for (const auto& [offset, seg] : over) {
    const uint64_t from = std::max(offset, at), to = std::min(offset + seg.n, at + n);
    if (claim_part_bytes(seg.part, from - offset, to - from))
      claims.push_back({seg.part, from - offset, data + (from - at), to - from});
    else
      hash_part_bytes(seg.part, from - offset, data + (from - at), to - from);  // kept, or read back
  }
  return claims;
}

void WriteHash::hash_claims(const std::vector<Claim>& claims) {
  for (const Claim& c : claims) hash_claimed(c.part, c.at, c.data, c.n);
}

void WriteHash::hashed(const uint8_t* data, uint64_t n, uint64_t at) {
  h_.update(data, n);
  hash_claims(claim(data, n, at));
}

void WriteHash::take_turns() {
  if (crc_) return;  // a CRC needs no order
  std::lock_guard<std::mutex> lock(mu_);
  turns_ = true;
}

void WriteHash::wrote(const void* data, uint64_t n, uint64_t offset) {
  if (n == 0) return;
  if (crc_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (rewritten_) return;
    }
    return crc_wrote(static_cast<const uint8_t*>(data), n, offset);
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (turns_ && offset > next_)
    idle_.wait_for(lock, kTurnWait, [&] { return rewritten_ || (next_ >= offset && !hashing_); });
  if (rewritten_) return;
  // Written before? The prefix, or a kept piece this range overlaps.
  auto after = kept_.lower_bound(offset);
  bool again = offset < next_ || (after != kept_.end() && after->first < offset + n);
  if (!again && after != kept_.begin()) {
    auto before = std::prev(after);
    again = before->first + before->second.size() > offset;
  }
  if (again) return written_twice();
  if (offset == next_) {
    idle_.wait(lock, [&] { return !hashing_ || next_ != offset; });
    if (offset == next_ && !rewritten_) {
      // The file's digest takes these bytes and the tensors' are promised them (claimed, in file
      // order); the next write in order may then go on with the file's while this thread hashes
      // them into the tensors': the two digests on two cores, from this thread's buffer.
      hashing_ = true;
      next_ += n;
      lock.unlock();
      const auto* p = static_cast<const uint8_t*>(data);
      h_.update(p, n);
      std::vector<Claim> claims = claim(p, n, offset);
      lock.lock();
      if (continues()) {  // kept or let-go writes continue the prefix: hashed here, after these
        lock.unlock();
        hash_claims(claims);
        claims.clear();
        lock.lock();
        drain(lock);
      }
      hashing_ = false;
      idle_.notify_all();
      lock.unlock();
      hash_claims(claims);
      return;
    }
    return written_twice();  // another thread's write covered it meanwhile
  }
  // Further on: kept while the budget allows, else let go: read back once it is in the file and
  // the prefix reaches it (landed()), or by finish().
  if (!hold_bytes(n)) {
    if (!is_remote(temp_)) let_go_.emplace(offset, LetGo{n, false});
    return;
  }
  held_ += n;
  const auto* p = static_cast<const uint8_t*>(data);
  kept_.emplace(offset, std::vector<uint8_t>(p, p + n));
}

void WriteHash::landed(uint64_t offset, uint64_t n) {
  if (crc_) return;  // nothing is let go
  std::unique_lock<std::mutex> lock(mu_);
  auto it = let_go_.find(offset);
  if (it == let_go_.end() || it->second.n != n) return;
  it->second.landed = true;
  if (hashing_ || rewritten_ || offset != next_) return;  // the thread hashing the prefix reads it
  hashing_ = true;
  drain(lock);
  hashing_ = false;
  idle_.notify_all();
}

void WriteHash::stop() {
  rewritten_ = true;
  idle_.notify_all();  // writes waiting their turn
  release_bytes(held_);
  held_ = 0;
  kept_.clear();
  let_go_.clear();
}

void WriteHash::written_twice() {
  stop();
  std::lock_guard<std::mutex> lock(seg_mu_);
  for (const auto& [offset, seg] : segs_) part_rewritten(seg.part);
}

bool WriteHash::continues() const {
  return (!kept_.empty() && kept_.begin()->first <= next_) || (!let_go_.empty() && let_go_.begin()->first <= next_);
}

void WriteHash::drain(std::unique_lock<std::mutex>& lock) {
  while (!rewritten_) {
    if (!let_go_.empty() && let_go_.begin()->first < next_) return written_twice();  // the prefix passed it
    if (!kept_.empty() && kept_.begin()->first == next_) {
      std::vector<uint8_t> piece = std::move(kept_.begin()->second);
      const uint64_t at = kept_.begin()->first;
      kept_.erase(kept_.begin());
      next_ += piece.size();
      held_ -= piece.size();
      release_bytes(piece.size());
      lock.unlock();
      hashed(piece.data(), piece.size(), at);
      lock.lock();
      continue;
    }
    if (let_go_.empty() || let_go_.begin()->first != next_ || !let_go_.begin()->second.landed) return;
    // A write let go, in the file now and next: read back at once, so the prefix goes on (else
    // it would stop here until finish(), and every later write past the budget be let go too).
    const uint64_t at = next_, n = let_go_.begin()->second.n;
    let_go_.erase(let_go_.begin());
    next_ += n;
    read_back_ += n;
    lock.unlock();
    if (!reader_ || reader_->size() < at + n) reader_.emplace(temp_);  // (opened when the file was shorter)
    read_file_range(*reader_, at, at + n, [&](const uint8_t* p, uint64_t k, uint64_t off) { hashed(p, k, off); });
    lock.lock();
  }
}

FileDigest WriteHash::finish(const std::string& path, std::optional<uint64_t> known_size) {
  if (crc_) return crc_finish(path, known_size);
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return !hashing_; });
  ReadBack f(path);
  const uint64_t size = known_size ? *known_size : f().size();
  // A kept piece that overlaps the prefix or the piece before it was written twice (two writes
  // that raced past the check in wrote()).
  uint64_t end = next_;
  for (const auto& [offset, piece] : kept_) {
    if (offset < end) rewritten_ = true;
    end = offset + piece.size();
  }
  if (rewritten_ || next_ > size) {
    written_twice();  // the tensors' parts too are read back
    Sha256 whole;
    hash_file_range(f(), 0, size, whole);
    read_back_ += size;
    return {size, whole.hex()};
  }
  // What the writes did not show, read back in order (the tensors' parts take it too).
  auto read_back = [&](uint64_t from, uint64_t to) {
    if (from >= to) return;
    read_file_range(f(), from, to, [&](const uint8_t* p, uint64_t n, uint64_t at) { hashed(p, n, at); });
    read_back_ += to - from;
  };
  uint64_t at = next_;
  for (auto& [offset, piece] : kept_) {
    if (offset >= size) break;
    read_back(at, offset);
    hashed(piece.data(), std::min<uint64_t>(piece.size(), size - offset), offset);
    at = offset + piece.size();
  }
  read_back(at, size);
  stop();  // finished: later writes are not hashed
  return {size, h_.hex()};
}

HashWrites::HashWrites(bool on, ManifestAlgorithm alg) : on_(on) {
  if (on_ && g_hashing++ == 0) {  // a run begins: what an earlier one recorded by name is forgotten
    g_algorithm = alg;
    forget_declared_tensors();
    WrittenDigests& r = written_digests();
    std::lock_guard<std::mutex> lock(r.mu);
    r.objects.clear();
  }
}
HashWrites::~HashWrites() {
  if (on_) --g_hashing;
}
bool hashing_writes() {
  return g_hashing.load() > 0;
}
ManifestAlgorithm hashing_algorithm() {
  return g_algorithm.load();
}

void record_written_digest(const std::string& path, const FileDigest& d, uint64_t read_back) {
  if (is_remote(path)) {
    WrittenDigests& r = written_digests();
    std::lock_guard<std::mutex> lock(r.mu);
    r.objects[path] = {d, read_back};
    return;
  }
  const std::optional<WrittenFileId> id = written_file_id(path);
  if (!id) return;
  WrittenDigests& r = written_digests();
  std::lock_guard<std::mutex> lock(r.mu);
  r.digests[*id] = {d, read_back};
}

std::optional<WrittenDigest> written_digest(const std::string& path) {
  if (is_remote(path)) {  // no inode: by the URL this process uploaded it to
    WrittenDigests& r = written_digests();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.objects.find(path);
    if (it == r.objects.end()) return std::nullopt;
    return it->second;
  }
  const std::optional<WrittenFileId> id = written_file_id(path);
  if (!id) return std::nullopt;
  WrittenDigests& r = written_digests();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.digests.find(*id);
  if (it == r.digests.end()) return std::nullopt;
  // A file of another size is not the one hashed (its inode reused, or changed since).
  if (written_size(path) != it->second.digest.size) return std::nullopt;
  return it->second;
}

}  // namespace dcpctl
