#include "util/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace dcpctl {

void MappedFile::drop_before(uint64_t offset) const {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t n = std::min<uint64_t>(offset, size_) / page * page;
  if (addr_ && n) ::madvise(addr_, n, MADV_DONTNEED);  // advisory: failure only costs memory
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
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
  if (addr_) ::munmap(addr_, size_);
}

ReadFile::ReadFile(const std::string& path) : path_(path) {
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
      size_(o.size_),
      direct_(std::move(o.direct_)),
      map_(o.map_.exchange(nullptr)),
      ledger_(std::move(o.ledger_)) {
  o.fd_ = -1;
}

ReadFile::~ReadFile() {
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

bool ReadFile::cached(uint64_t offset, uint64_t n) const {
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
  uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t start = offset / page * page, end = offset + n;
  std::vector<unsigned char> vec((end - start + page - 1) / page);
  if (::mincore(static_cast<uint8_t*>(m) + start, end - start, vec.data()) != 0) return false;
  for (unsigned char v : vec)
    if (!(v & 1)) return false;
  return true;
}

const uint8_t* ReadFile::read_direct(uint64_t offset, size_t n, uint8_t* buf, const std::string& key) const {
  check_range(offset, n, key);
  int d = n ? direct_.get(path_, O_RDONLY) : -1;
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
    throw FormatError(Where(path_, offset, key), std::to_string(n) + " bytes run past the end of the file (" +
                                                     std::to_string(size_) + " bytes)");
}

void ReadFile::read_at(uint64_t offset, void* buf, size_t n, const std::string& key) const {
  check_range(offset, n, key);
  const uint64_t at = offset, total = n;
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
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

}  // namespace dcpctl
