#include "bench/host_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "bench/cuda_backend.h"
#include "bench/pattern.h"
#include "bench/sizes.h"
#include "util/parallel.h"

namespace dcpctl::bench {
namespace {

uint64_t page_size() {
  long p = ::sysconf(_SC_PAGESIZE);
  return p > 0 ? static_cast<uint64_t>(p) : 4096;
}

// CAP_IPC_LOCK (bit 14 of the effective capabilities) exempts a process from RLIMIT_MEMLOCK.
bool can_lock_unlimited() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const uint64_t caps = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (caps >> 14) & 1;
  }
  return false;
}

std::string memlock_hint() {
  HostInfo h = host_info();
  if (!h.memlock_limit || h.memlock_exempt) return "";
  return " (RLIMIT_MEMLOCK is " + format_size(*h.memlock_limit) + "; raise it with `ulimit -l unlimited`)";
}

}  // namespace

HostBuffer::~HostBuffer() {
  reset();
}

HostBuffer::HostBuffer(HostBuffer&& o) noexcept {
  *this = std::move(o);
}

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    p_ = o.p_;
    n_ = o.n_;
    kind_ = o.kind_;
    registered_ = o.registered_;
    locked_ = o.locked_;
    o.p_ = nullptr;
    o.n_ = 0;
    o.kind_ = Kind::none;
    o.registered_ = o.locked_ = false;
  }
  return *this;
}

void HostBuffer::reset() {
  if (!p_) return;
  try {
    unpin();
  } catch (...) {
    // Freeing still works after a failed unregister; nothing more to do in a destructor.
  }
  if (kind_ == Kind::cuda_pinned) {
    try {
      cuda_pinned_free(p_);
    } catch (...) {
    }
  } else {
    std::free(p_);
  }
  p_ = nullptr;
  n_ = 0;
  kind_ = Kind::none;
}

HostBuffer HostBuffer::pageable(uint64_t bytes) {
  HostBuffer b;
  void* p = nullptr;
  if (::posix_memalign(&p, page_size(), bytes ? bytes : 1) != 0) throw std::bad_alloc();
  b.p_ = static_cast<uint8_t*>(p);
  b.n_ = bytes;
  b.kind_ = Kind::pageable;
  return b;
}

HostBuffer HostBuffer::cuda_pinned(uint64_t bytes) {
  HostBuffer b;
  b.p_ = static_cast<uint8_t*>(cuda_pinned_alloc(bytes ? bytes : 1));
  b.n_ = bytes;
  b.kind_ = Kind::cuda_pinned;
  return b;
}

HostBuffer HostBuffer::mlocked(uint64_t bytes) {
  HostBuffer b = pageable(bytes);
  b.lock();
  b.kind_ = Kind::mlocked;
  return b;
}

void HostBuffer::register_cuda() {
  cuda_host_register(p_, n_ ? n_ : 1);
  registered_ = true;
}

void HostBuffer::lock() {
  // mlock() faults every page in and keeps it resident, as pinning does.
  if (::mlock(p_, n_ ? n_ : 1) != 0) {
    int err = errno;
    throw LockError(Where(), "mlock(" + format_size(n_) + ") failed: " + errno_text(err) + memlock_hint());
  }
  locked_ = true;
}

void HostBuffer::unpin() {
  if (registered_) {
    registered_ = false;
    cuda_host_unregister(p_);
  }
  if (locked_) {
    locked_ = false;
    ::munlock(p_, n_ ? n_ : 1);
  }
}

double host_copy(uint8_t* dst, const uint8_t* src, const std::vector<Segment>& segs, unsigned threads) {
  const auto t0 = std::chrono::steady_clock::now();
  parallel_for(segs.size(), threads,
               [&](size_t i) { std::memcpy(dst + segs[i].offset, src + segs[i].offset, segs[i].bytes); });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

HostInfo host_info() {
  HostInfo h;
  h.cpu_threads = std::thread::hardware_concurrency();
  h.page_size = page_size();
  long pages = ::sysconf(_SC_PHYS_PAGES);
  if (pages > 0) h.memory_bytes = static_cast<uint64_t>(pages) * h.page_size;
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) h.memlock_limit = rl.rlim_cur;
  h.memlock_exempt = can_lock_unlimited();
  return h;
}

double timed_file_write(const std::string& path, const uint8_t* data, uint64_t bytes, bool do_fsync) {
  const auto t0 = std::chrono::steady_clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    throw IoError(Where(path), "cannot create: " + errno_text(err));
  }
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(path.c_str());
    throw IoError(Where(path), what + ": " + errno_text(err));
  };
  uint64_t done = 0;
  while (done < bytes) {
    // Linux moves at most 0x7ffff000 bytes per write().
    const size_t want = static_cast<size_t>(std::min<uint64_t>(bytes - done, uint64_t(1) << 30));
    ssize_t w = ::write(fd, data + done, want);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("write failed after " + std::to_string(done) + " bytes", errno);
    }
    if (w == 0) fail("write made no progress after " + std::to_string(done) + " bytes", EIO);
    done += static_cast<uint64_t>(w);
  }
  if (do_fsync && ::fsync(fd) != 0) fail("fsync failed", errno);
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(path.c_str());
    throw IoError(Where(path), "close failed: " + errno_text(err));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

uint64_t file_pattern_mismatch(const std::string& path, uint64_t bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw IoError(Where(path), "cannot open to check it: " + errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != bytes) {
    ::close(fd);
    return std::min<uint64_t>(bytes, static_cast<uint64_t>(st.st_size));
  }
  constexpr uint64_t kWindow = uint64_t(16) << 20;
  std::vector<uint8_t> buf(static_cast<size_t>(std::min(bytes, kWindow)));
  uint64_t off = 0;
  while (off < bytes) {
    const size_t want = static_cast<size_t>(std::min(bytes - off, kWindow));
    ssize_t r = ::pread(fd, buf.data(), want, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int err = r < 0 ? errno : EIO;
      ::close(fd);
      throw IoError(Where(path, off), "read back failed: " + errno_text(err));
    }
    const uint64_t m = find_mismatch(buf.data(), off, static_cast<uint64_t>(r));
    if (m < static_cast<uint64_t>(r)) {
      ::close(fd);
      return off + m;
    }
    off += static_cast<uint64_t>(r);
  }
  ::close(fd);
  return bytes;
}

}  // namespace dcpctl::bench
