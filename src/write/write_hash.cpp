#include "write/write_hash.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <sys/stat.h>

#include "store/file.h"

namespace dcpctl {

namespace {

uint64_t written_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : UINT64_MAX;
}

std::atomic<uint64_t> g_held{0};  // bytes kept by every WriteHash (kHeldBudget)
std::atomic<int> g_hashing{0};

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
};
WrittenDigests& written_digests() {
  static WrittenDigests r;
  return r;
}

}  // namespace

WriteHash::~WriteHash() { g_held -= held_; }

void WriteHash::wrote(const void* data, uint64_t n, uint64_t offset) {
  if (n == 0) return;
  std::unique_lock<std::mutex> lock(mu_);
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
      hashing_ = true;
      next_ += n;
      lock.unlock();
      h_.update(data, n);
      lock.lock();
      drain(lock);
      hashing_ = false;
      idle_.notify_all();
      return;
    }
    return written_twice();  // another thread's write covered it meanwhile
  }
  // Further on: kept while the budget allows, else read back by finish().
  uint64_t held = g_held.load();
  while (held + n <= kHeldBudget && !g_held.compare_exchange_weak(held, held + n)) {
  }
  if (held + n > kHeldBudget) return;
  held_ += n;
  const auto* p = static_cast<const uint8_t*>(data);
  kept_.emplace(offset, std::vector<uint8_t>(p, p + n));
}

void WriteHash::written_twice() {
  rewritten_ = true;
  g_held -= held_;
  held_ = 0;
  kept_.clear();
}

void WriteHash::drain(std::unique_lock<std::mutex>& lock) {
  while (!rewritten_ && !kept_.empty() && kept_.begin()->first == next_) {
    std::vector<uint8_t> piece = std::move(kept_.begin()->second);
    kept_.erase(kept_.begin());
    next_ += piece.size();
    held_ -= piece.size();
    g_held -= piece.size();
    lock.unlock();
    h_.update(piece.data(), piece.size());
    lock.lock();
  }
}

FileDigest WriteHash::finish(const std::string& path) {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return !hashing_; });
  ReadFile f(path);
  const uint64_t size = f.size();
  // A kept piece that overlaps the prefix or the piece before it was written twice (two writes
  // that raced past the check in wrote()).
  uint64_t end = next_;
  for (const auto& [offset, piece] : kept_) {
    if (offset < end) rewritten_ = true;
    end = offset + piece.size();
  }
  if (rewritten_ || next_ > size) {
    Sha256 whole;
    hash_file_range(f, 0, size, whole);
    read_back_ += size;
    return {size, whole.hex()};
  }
  uint64_t at = next_;
  for (auto& [offset, piece] : kept_) {
    if (offset >= size) break;
    hash_file_range(f, at, offset, h_);
    read_back_ += offset - at;
    h_.update(piece.data(), std::min<uint64_t>(piece.size(), size - offset));
    at = offset + piece.size();
  }
  if (at < size) {
    hash_file_range(f, at, size, h_);
    read_back_ += size - at;
  }
  written_twice();  // finished: later writes are not hashed
  return {size, h_.hex()};
}

HashWrites::HashWrites(bool on) : on_(on) {
  if (on_) ++g_hashing;
}
HashWrites::~HashWrites() {
  if (on_) --g_hashing;
}
bool hashing_writes() { return g_hashing.load() > 0; }

void record_written_digest(const std::string& path, const FileDigest& d, uint64_t read_back) {
  const std::optional<WrittenFileId> id = written_file_id(path);
  if (!id) return;
  WrittenDigests& r = written_digests();
  std::lock_guard<std::mutex> lock(r.mu);
  r.digests[*id] = {d, read_back};
}

std::optional<WrittenDigest> written_digest(const std::string& path) {
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
