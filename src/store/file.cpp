#include "store/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <vector>

namespace dcpctl {

namespace {

// The blocks small reads of s3:// objects fetched (ReadFile::read_at), least recently used first
// out once they pass kRemoteCacheBytes. Keyed by (object, first byte).
class BlockCache {
 public:
  using Block = std::shared_ptr<const std::vector<uint8_t>>;
  // A block of object `id` holding [off, off + n), and its first byte's offset.
  Block find(uint64_t id, uint64_t off, uint64_t n, uint64_t& start) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.upper_bound({id, off});
    if (it == entries_.begin()) return nullptr;
    --it;
    if (it->first.first != id || it->first.second + it->second.data->size() < off + n) return nullptr;
    lru_.splice(lru_.end(), lru_, it->second.lru);
    start = it->first.second;
    return it->second.data;
  }
  // Whether the caller is to fetch the block of `id` at `start`: false once another thread has
  // fetched it or failed to (after waiting for it to finish); true otherwise, and then the caller
  // must release() it, with the block or nullptr.
  bool claim(uint64_t id, uint64_t start) {
    std::unique_lock<std::mutex> lock(mu_);
    Key k{id, start};
    if (!pending_.count(k)) {
      if (entries_.count(k)) return false;
      pending_.insert(k);
      return true;
    }
    done_.wait(lock, [&] { return !pending_.count(k); });
    return false;
  }
  void release(uint64_t id, uint64_t start, Block b) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.erase({id, start});
      if (b) put_locked(id, start, std::move(b));
    }
    done_.notify_all();
  }
  void put_locked(uint64_t id, uint64_t start, Block b) {
    Key k{id, start};
    if (entries_.count(k)) return;
    bytes_ += b->size();
    lru_.push_back(k);
    entries_[k] = {std::move(b), std::prev(lru_.end())};
    while (bytes_ > kRemoteCacheBytes && !lru_.empty()) {
      auto e = entries_.find(lru_.front());
      bytes_ -= e->second.data->size();
      entries_.erase(e);
      lru_.pop_front();
    }
  }
  void forget(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = entries_.lower_bound({id, 0}); it != entries_.end() && it->first.first == id;) {
      bytes_ -= it->second.data->size();
      lru_.erase(it->second.lru);
      it = entries_.erase(it);
    }
  }

 private:
  using Key = std::pair<uint64_t, uint64_t>;
  struct Entry {
    Block data;
    std::list<Key>::iterator lru;
  };
  std::mutex mu_;
  std::condition_variable done_;
  std::set<Key> pending_;
  std::map<Key, Entry> entries_;
  std::list<Key> lru_;
  uint64_t bytes_ = 0;
};

BlockCache& block_cache() {
  static BlockCache c;
  return c;
}
std::atomic<uint64_t> g_next_remote_id{1};

}  // namespace

bool is_remote_path(const std::string& path) {
  return store::is_url(path);
}

void forget_listings() {
  store::forget_listings();
}

PathInfo stat_path(const std::string& path, bool follow_links) {
  return store::for_path(path).stat(path, follow_links);
}

std::vector<std::string> list_dir(const std::string& dir) {
  return store::for_path(dir).list(dir);
}

void MappedFile::drop_before(uint64_t offset) const {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t n = std::min<uint64_t>(offset, size_) / page * page;
  // Never on a downloaded object: MADV_DONTNEED zeroes private anonymous memory.
  if (addr_ && n && object_.empty()) ::madvise(addr_, n, MADV_DONTNEED);  // advisory: failure only costs memory
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  if (is_remote_path(path)) {
    PathInfo st = stat_path(path);
    if (st.kind == PathInfo::directory) throw IoError(Where(path), "is a prefix (a folder), expected an object");
    if (st.kind != PathInfo::file) throw IoError(Where(path), "cannot open: no such object");
    // One GET of the size the listing gave, straight into place (`.metadata` of millions of chunks
    // is hundreds of MB: no second copy).
    object_.resize(st.size);
    store::of_url(path).get_range(store::parse_url(path), 0, st.size, object_.data());
    size_ = object_.size();
    addr_ = object_.empty() ? nullptr : object_.data();
    return;
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(Where(path), "cannot open: " + errno_text(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw IoError(Where(path), "cannot stat: " + errno_text(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw IoError(Where(path), "is a directory, expected a file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    addr_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr_ == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      addr_ = nullptr;
      throw IoError(Where(path), "cannot map: " + errno_text(e));
    }
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (addr_ && object_.empty()) ::munmap(addr_, size_);
}

ReadFile::ReadFile(const std::string& path) : path_(path) {
  if (is_remote_path(path)) {
    PathInfo st = stat_path(path);
    if (st.kind == PathInfo::directory) throw IoError(Where(path), "is a prefix (a folder), expected an object");
    if (st.kind != PathInfo::file) throw IoError(Where(path), "cannot open: no such object");
    remote_ = true;
    loc_ = store::parse_url(path);
    store_ = &store::of(loc_);
    remote_id_ = g_next_remote_id.fetch_add(1);
    size_ = st.size;
    return;
  }
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw IoError(Where(path), "cannot open: " + errno_text(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    int e = errno;
    ::close(fd_);
    throw IoError(Where(path), "cannot stat: " + errno_text(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd_);
    throw IoError(Where(path), "is a directory, expected a file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

ReadFile::ReadFile(ReadFile&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(o.fd_),
      remote_(o.remote_),
      store_(o.store_),
      loc_(std::move(o.loc_)),
      remote_id_(o.remote_id_),
      spans_(std::move(o.spans_)),
      size_(o.size_),
      direct_(std::move(o.direct_)),
      map_(o.map_.exchange(nullptr)),
      ledger_(std::move(o.ledger_)) {
  o.fd_ = -1;
  o.remote_id_ = 0;
}

ReadFile::~ReadFile() {
  if (remote_ && remote_id_) block_cache().forget(remote_id_);
  if (void* m = map_.load()) ::munmap(m, size_);
  if (fd_ >= 0) ::close(fd_);
}

DirectFd::~DirectFd() {
  if (int d = fd_.load(); d >= 0) ::close(d);
}

int DirectFd::get(const std::string& path, int flags) const {
  if (off_.load()) return -1;
  int d = fd_.load();
  if (d != kUnopened) return d;
  int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_DIRECT);
  if (fd < 0) fd = -1;  // refused (EINVAL: no O_DIRECT here): through the page cache
  int expected = kUnopened;
  if (!fd_.compare_exchange_strong(expected, fd)) {  // another thread opened it first
    if (fd >= 0) ::close(fd);
    return expected;
  }
  return fd;
}

bool ReadFile::worth_reading_direct(uint64_t offset, uint64_t n) const {
  return n >= kDirectMinRun && !cached(offset, n);
}

void ReadFile::no_readahead() const {
  if (!remote_ && fd_ >= 0) (void)::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
}

void ReadFile::prefetch(uint64_t offset, uint64_t n) const {
  if (remote_ || n == 0 || offset >= size_) return;
  (void)::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(std::min(n, size_ - offset)),
                        POSIX_FADV_WILLNEED);
}

bool ReadFile::cached(uint64_t offset, uint64_t n) const {
  if (remote_) return false;
  if (n == 0 || offset > size_ || n > size_ - offset) return false;
  void* m = map_.load();
  if (!m) {
    void* fresh = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
    if (fresh == MAP_FAILED) return false;
    if (map_.compare_exchange_strong(m, fresh))
      m = fresh;
    else
      ::munmap(fresh, size_);  // another thread mapped it first: m is its mapping
  }
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page, end = offset + n;
  // Whether every page of [from, to) (page-aligned `from`) is in the cache.
  std::vector<unsigned char> vec;
  auto all_in = [&](uint64_t from, uint64_t to) {
    vec.resize((to - from + page - 1) / page);
    if (::mincore(static_cast<uint8_t*>(m) + from, to - from, vec.data()) != 0) return false;
    for (unsigned char v : vec)
      if (!(v & 1)) return false;
    return true;
  };
  // The first and the last page first: a file not read since the cache was dropped answers in two
  // calls. Then 4 MiB at a time, up to the first page missing: the kernel walks every page it is
  // asked about, about 1 ms per 100 MB, which verify once paid for each tensor of a cold checkpoint.
  const uint64_t last = (end - 1) / page * page;
  if (!all_in(start, start + page) || !all_in(last, last + page)) return false;
  constexpr uint64_t kStep = 4ull << 20;
  for (uint64_t from = start; from < end; from += kStep)
    if (!all_in(from, std::min(end, from + kStep))) return false;
  return true;
}

const uint8_t* ReadFile::read_direct(uint64_t offset, size_t n, uint8_t* buf, const std::string& key) const {
  check_range(offset, n, key);
  int d = n && !remote_ ? direct_.get(path_, O_RDONLY) : -1;
  if (d < 0) {
    read_at(offset, buf, n, key);
    return buf;
  }
  uint64_t start = align_down(offset), want = offset + n, pos = start;
  uint64_t span = direct_span(offset, n);
  while (pos < want) {
    ssize_t got = ::pread(d, buf + (pos - start), static_cast<size_t>(start + span - pos), static_cast<off_t>(pos));
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EINVAL && pos == start) {
        // This filesystem takes O_DIRECT at open but not these alignments: buffered from now on
        // (the descriptor stays open until the file closes: another thread may be reading).
        direct_.turn_off();
        read_at(offset, buf, n, key);
        return buf;
      }
      throw IoError(Where(path_, pos, key), "read failed: " + errno_text(errno));
    }
    if (got == 0) throw IoError(Where(path_, pos, key), "file shrank while reading");
    pos += static_cast<uint64_t>(got);
  }
  ledger_->saw(path_, offset, buf + (offset - start), n);
  return buf + (offset - start);
}

void ReadFile::check_range(uint64_t offset, size_t n, const std::string& key) const {
  if (offset > size_ || n > size_ - offset)
    throw FormatError(Where(path_, offset, key),
                      std::to_string(n) + " bytes run past the end of the file (" + std::to_string(size_) + " bytes)");
}

void ReadFile::read_near(uint64_t offset, void* buf, size_t n, uint64_t lo, uint64_t hi, const std::string& key) const {
  if (!remote_) return read_at(offset, buf, n, key);
  check_range(offset, n, key);
  read_remote(offset, buf, n, std::min(lo, offset), std::min(std::max(hi, offset + n), size_), key);
  ledger_->saw(path_, offset, static_cast<const uint8_t*>(buf), n);
}

std::vector<std::pair<uint64_t, uint64_t>> join_spans(std::vector<std::pair<uint64_t, uint64_t>> ranges,
                                                      uint64_t size) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (auto [off, len] : ranges) {
    if (len == 0 || off >= size) continue;
    const uint64_t end = off + std::min(len, size - off);
    if (end - off > kRemoteSpan) continue;  // a large item is read a window at a time, not as a span
    if (!spans.empty()) {
      auto& last = spans.back();
      if (off <= last.second + kRemoteGap && std::max(end, last.second) - last.first <= kRemoteSpan) {
        last.second = std::max(last.second, end);
        continue;
      }
      if (end <= last.second) continue;  // inside the last span already
      off = std::max(off, last.second);
    }
    spans.emplace_back(off, end);
  }
  return spans;
}

void ReadFile::expect(std::vector<std::pair<uint64_t, uint64_t>> ranges) {
  if (remote_) spans_ = join_spans(std::move(ranges), size_);
}

void ReadFile::read_remote(uint64_t offset, void* buf, size_t n, uint64_t lo, uint64_t hi,
                           const std::string& key) const {
  if (n == 0) return;
  try {
    store::ObjectStore& c = *store_;
    BlockCache& cache = block_cache();
    uint64_t start = 0;
    // Inside an expected span (expect()): the whole span, fetched once by whichever reader needs
    // it first.
    auto span = std::upper_bound(spans_.begin(), spans_.end(), std::make_pair(offset, UINT64_MAX));
    const bool in_span = span != spans_.begin() && std::prev(span)->second >= offset + n;
    if (in_span) {
      lo = std::prev(span)->first;
      hi = std::prev(span)->second;
    } else if (n < kRemoteBlock) {
      if (auto b = cache.find(remote_id_, offset, n, start)) {  // a block read_near kept
        std::memcpy(buf, b->data() + (offset - start), n);
        return;
      }
    }
    if (!in_span && (n >= kRemoteBlock || hi - lo <= n)) {
      // A large read (a tensor's data) often begins in the block its item's header was read
      // with and ends in the one its zip index was: those bytes are here already.
      uint64_t a = offset, b = offset + n;
      auto* out = static_cast<uint8_t*>(buf);
      if (auto head = cache.find(remote_id_, a, 1, start)) {
        uint64_t end = std::min<uint64_t>(b, start + head->size());
        std::memcpy(out, head->data() + (a - start), end - a);
        a = end;
      }
      if (a < b) {
        if (auto tail = cache.find(remote_id_, b - 1, 1, start); tail && start > a) {
          std::memcpy(out + (start - offset), tail->data(), b - start);
          b = start;
        }
      }
      if (a < b) c.get_range(loc_, a, b - a, out + (a - offset));
      return;
    }
    // The aligned block(s) around the read, within [lo, hi); one thread fetches a block while
    // others that want it wait (lanes reading neighbouring records of one item).
    uint64_t from = std::max(lo, offset / kRemoteBlock * kRemoteBlock);
    uint64_t to = std::min(hi, (offset + n + kRemoteBlock - 1) / kRemoteBlock * kRemoteBlock);
    if (in_span || hi - lo <= kRemoteWholeItem) from = lo, to = hi;  // the whole item (or span): its data is read next
    if (!cache.claim(remote_id_, from)) {
      if (auto b = cache.find(remote_id_, offset, n, start)) {
        std::memcpy(buf, b->data() + (offset - start), n);
        return;
      }
      return c.get_range(loc_, offset, n, buf);  // the other fetch failed, or it was a narrower block
    }
    std::shared_ptr<std::vector<uint8_t>> block;
    try {
      block = std::make_shared<std::vector<uint8_t>>(to - from);
      c.get_range(loc_, from, to - from, block->data());
    } catch (...) {
      cache.release(remote_id_, from, nullptr);
      throw;
    }
    std::memcpy(buf, block->data() + (offset - from), n);
    cache.release(remote_id_, from, std::move(block));
  } catch (const store::NotFound& e) {
    throw IoError(Where(path_, offset, key), "gone while reading: " + e.detail());
  } catch (const IoError& e) {
    throw IoError(Where(path_, offset, key), e.detail());
  }
}

std::string read_text(const std::string& path, uint64_t limit, const std::string& kind) {
  ReadFile f(path);
  if (f.size() > limit)
    throw UsageError(Where(path), "larger than " + std::to_string(limit >> 20) + " MiB: not " + kind);
  return f.read_all();
}

std::string ReadFile::read_all() const {
  std::string text(size_, '\0');
  read_at(0, text.data(), text.size());
  return text;
}

void ReadFile::read_at(uint64_t offset, void* buf, size_t n, const std::string& key) const {
  check_range(offset, n, key);
  const uint64_t at = offset, total = n;
  if (remote_) {
    read_remote(offset, buf, n, offset, offset + n, key);
    ledger_->saw(path_, at, static_cast<const uint8_t*>(buf), total);
    return;
  }
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw IoError(Where(path_, offset, key), "read failed: " + errno_text(errno));
    }
    if (got == 0) throw IoError(Where(path_, offset, key), "file shrank while reading");
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  ledger_->saw(path_, at, static_cast<const uint8_t*>(buf), total);
}

bool path_exists(const std::string& path) {
  return stat_path(path).kind != PathInfo::missing;
}

bool is_directory(const std::string& path) {
  return stat_path(path).kind == PathInfo::directory;
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string parent_path(const std::string& path) {
  std::string d = path;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  size_t slash = d.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : d.substr(0, slash);
}

std::string base_name(const std::string& path) {
  std::string d = path;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  size_t slash = d.find_last_of('/');
  return slash == std::string::npos ? d : d.substr(slash + 1);
}

}  // namespace dcpctl
