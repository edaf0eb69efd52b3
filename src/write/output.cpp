#include "write/output.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <future>
#include <new>

#include "store/file.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/io_buffer.h"
#include "write/leftovers.h"
#include "write/write_hash.h"

namespace dcpctl {
namespace {

// Temporaries to remove if a signal ends the process. Slots are claimed and released with
// atomics so the handler only ever sees complete paths.
constexpr int kSlots = 64;
struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 claimed (writing path), 2 file, 3 directory
  char path[PATH_MAX];
};
Slot g_slots[kSlots];

int claim(const std::string& path, int kind) {
  for (int i = 0; i < kSlots; ++i) {
    int expect = 0;
    if (g_slots[i].state.compare_exchange_strong(expect, 1)) {
      std::snprintf(g_slots[i].path, sizeof g_slots[i].path, "%s", path.c_str());
      g_slots[i].state.store(kind);
      return i;
    }
  }
  return -1;  // more temporaries than slots: still removed on normal failure paths
}

void release(int slot) {
  if (slot >= 0) g_slots[slot].state.store(0);
}

// The temporary in `slot` is now of another kind (2 file, 3 directory).
void retag(int slot, int kind) {
  if (slot >= 0) g_slots[slot].state.store(kind);
}

// renameat2(RENAME_EXCHANGE): swaps two existing paths atomically. False (nothing changed) where
// the kernel or the filesystem does not offer it; throws on any other failure.
bool rename_exchange(const std::string& a, const std::string& b) {
#ifdef SYS_renameat2
  constexpr unsigned kRenameExchange = 1u << 1;  // RENAME_EXCHANGE, <linux/fs.h>
  if (::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), kRenameExchange) == 0) return true;
  int e = errno;
  if (e == EINVAL || e == ENOSYS || e == EOPNOTSUPP) return false;
  throw IoError(Where(b), "cannot swap " + a + " into place: " + errno_text(e));
#else
  (void)a;
  (void)b;
  return false;
#endif
}

// Async-signal-safe: only system calls, into a static buffer (opendir/readdir allocate, and a
// signal that lands while another thread is inside malloc would corrupt the heap). The entries
// of a temporary directory are read with getdents64 and unlinked, then the directory removed.
struct LinuxDirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};
alignas(8) char g_dirents[16384];

void remove_dir_signal_safe(const char* dir) {
  int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    for (;;) {
      long n = ::syscall(SYS_getdents64, fd, g_dirents, sizeof g_dirents);
      if (n <= 0) break;
      for (long at = 0; at < n;) {
        auto* e = reinterpret_cast<LinuxDirent64*>(g_dirents + at);
        at += e->d_reclen;
        if (e->d_name[0] == '.' && (e->d_name[1] == 0 || (e->d_name[1] == '.' && e->d_name[2] == 0))) continue;
        ::unlinkat(fd, e->d_name, 0);
      }
    }
    ::close(fd);
  }
  ::rmdir(dir);
}

extern "C" void on_signal(int sig) {
  for (int i = 0; i < kSlots; ++i) {
    int s = g_slots[i].state.load();
    if (s == 2) ::unlink(g_slots[i].path);
    if (s == 3) remove_dir_signal_safe(g_slots[i].path);
  }
  // Uploads under way: their own thread aborts them (requests are not async-signal-safe) and
  // then re-raises the signal.
  if (uploads_take_signal(sig)) return;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::string real(const std::string& p) {
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf)) return buf;
  return {};
}

}  // namespace

void install_cleanup_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  // A file-size limit (ulimit -f) must give EFBIG, which we report, not kill us silently.
  ::signal(SIGXFSZ, SIG_IGN);
}

void remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* d = ::opendir(path.c_str())) {
      while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n == "." || n == "..") continue;
        remove_tree(path + "/" + n);
      }
      ::closedir(d);
    }
    ::rmdir(path.c_str());
  } else {
    ::unlink(path.c_str());
  }
}

void check_output_path(const std::string& path_in, bool force, const std::string& protect_dir) {
  if (is_remote(path_in)) return check_remote_output(path_in, force, protect_dir);
  std::string path = path_in;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  std::string parent = parent_path(path);
  struct stat st;
  if (::stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw IoError(Where(path), "output directory " + parent + " does not exist");
  std::string rp = real(parent), rprot = real(protect_dir);
  if (!rprot.empty() && !rp.empty() && (rp == rprot || rp.rfind(rprot + "/", 0) == 0))
    throw UsageError(Where(path), "output would be written inside the checkpoint being read (" + protect_dir + ")");
  if (::lstat(path.c_str(), &st) == 0) {
    std::string rpath = real(path);
    if (!rprot.empty() && rpath == rprot) throw UsageError(Where(path), "output is the checkpoint being read");
    // Replacing a directory that holds the checkpoint would delete the input.
    if (!rprot.empty() && !rpath.empty() && rprot.rfind(rpath + "/", 0) == 0)
      throw UsageError(Where(path),
                       "output contains the checkpoint being read (" + protect_dir + "); choose another path");
    if (!force) throw UsageError(Where(path), "output exists; pass --force to replace it");
  }
}

OutputFile::OutputFile(std::string final_path, UploadSession* uploads) : final_(std::move(final_path)) {
  if (is_remote(final_)) {
    if (!uploads)
      throw IoError(Where(final_), "internal: an object-storage output written outside a write job's upload session");
    tmp_ = final_;
    up_ = std::make_unique<Upload>(final_, *uploads);
    if (hashing_writes()) hash_ = std::make_unique<WriteHash>(tmp_, final_);  // hashed as uploaded
    return;
  }
  tmp_ = temp_name(final_);
  slot_ = claim(tmp_, 2);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    int e = errno;
    release(slot_);
    throw IoError(Where(tmp_), "cannot create: " + errno_text(e));
  }
  failpoint_stop(("created/" + base_name(final_)).c_str());  // tests: killed with only the temporary there
  if (hashing_writes()) hash_ = std::make_unique<WriteHash>(tmp_, final_);
}

std::unique_ptr<OutputFile> OutputFile::open_shared(const std::string& temp_path) {
  if (is_remote(temp_path))
    throw UnsupportedError(Where(temp_path), "several processes cannot write one object in object storage");
  std::unique_ptr<OutputFile> f(new OutputFile());
  f->final_ = f->tmp_ = temp_path;
  f->owner_ = false;
  f->fd_ = ::open(temp_path.c_str(), O_WRONLY | O_CLOEXEC);
  if (f->fd_ < 0) throw IoError(Where(temp_path), "cannot open the shared output: " + errno_text(errno));
  return f;
}

// Appends staged for writes past the page cache (stage_appends).
struct OutputFile::Staging {
  uint64_t block = 0;
  IoBuffer buf[2];  // huge pages where the kernel gives them: see util/io_buffer.h
  int cur = 0;
  uint64_t fill = 0;          // bytes in buf[cur]
  uint64_t base = 0;          // the file offset of buf[cur][0]: aligned
  uint64_t head = 0;          // bytes still written through the cache before `base` (staging began mid-block)
  std::future<void> pending;  // the background write of the other buffer
};

OutputFile::~OutputFile() {
  if (staging_ && staging_->pending.valid()) staging_->pending.wait();  // it writes from our buffers
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && owner_ && !up_) ::unlink(tmp_.c_str());
  release(slot_);
}

void OutputFile::pwrite_all(const void* data, size_t n, uint64_t offset) {
  if (hash_) hash_->wrote(data, n, offset);
  if (up_) return up_->write_at(data, n, offset);
  pwrite_raw(data, n, offset);
  if (hash_) hash_->landed(offset, n);
}

void OutputFile::hash_part(const HashPart& p, uint64_t offset, uint64_t n) {
  if (keep_parts_) parts_.emplace_back(p, offset);
  if (hash_) hash_->add_part(p, offset, n);
}

void OutputFile::take_hash_turns() {
  if (hash_ && !up_) hash_->take_turns();
}

void OutputFile::pwrite_raw(const void* data, size_t n, uint64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw IoError(Where(final_, offset), "write failed: " + errno_text(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

void OutputFile::append(const void* data, size_t n) {
  if (hash_) hash_->wrote(data, n, pos_);
  if (up_) {
    up_->append(data, n);
    pos_ += n;
    return;
  }
  if (!staging_) {
    pwrite_raw(data, n, pos_);
    pos_ += n;
    return;
  }
  Staging& s = *staging_;
  const auto* p = static_cast<const uint8_t*>(data);
  if (s.head) {
    size_t k = std::min<uint64_t>(n, s.head);
    pwrite_raw(p, k, pos_);
    pos_ += k;
    p += k;
    n -= k;
    s.head -= k;
  }
  while (n > 0) {
    size_t k = std::min<uint64_t>(n, s.block - s.fill);
    std::memcpy(s.buf[s.cur].get() + s.fill, p, k);
    s.fill += k;
    pos_ += k;
    p += k;
    n -= k;
    if (s.fill < s.block) break;
    if (s.pending.valid()) s.pending.get();  // rethrows its failure
    int d = direct_fd();
    const uint8_t* b = s.buf[s.cur].get();
    uint64_t at = s.base, len = s.block;
    s.pending = std::async(std::launch::async, [this, d, b, len, at] { write_blocks(d, b, len, at); });
    s.cur ^= 1;
    s.base += s.block;
    s.fill = 0;
  }
}

void OutputFile::write_blocks(int d, const uint8_t* data, uint64_t n, uint64_t offset) {
  while (n > 0 && d >= 0 && !direct_.off()) {
    ssize_t w = ::pwrite(d, data, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno != EINVAL) throw IoError(Where(final_, offset), "write failed: " + errno_text(errno));
      // This filesystem takes O_DIRECT at open but not these alignments: buffered from now on.
      direct_.turn_off();
      break;
    }
    data += w;
    n -= static_cast<uint64_t>(w);
    offset += static_cast<uint64_t>(w);
    if (w % kDirectAlign != 0) break;  // a short write off the block grid: the rest buffered
  }
  pwrite_raw(data, n, offset);
}

void OutputFile::pwrite_direct(const uint8_t* data, size_t n, uint64_t offset) {
  if (hash_) hash_->wrote(data, n, offset);
  if (up_) return up_->write_at(data, n, offset);
  uint64_t a = align_up(offset), b = align_down(offset + n);
  bool placed = reinterpret_cast<uintptr_t>(data) % kDirectAlign == offset % kDirectAlign;
  int d = placed && a < b ? direct_fd() : -1;
  if (d < 0) {
    pwrite_raw(data, n, offset);
  } else {
    if (a > offset) pwrite_raw(data, a - offset, offset);
    write_blocks(d, data + (a - offset), b - a, a);
    if (offset + n > b) pwrite_raw(data + (b - offset), offset + n - b, b);
  }
  if (hash_) hash_->landed(offset, n);
}

void OutputFile::stage_appends(uint64_t block) {
  if (block == 0 || staging_ || up_) return;  // an upload buffers its parts itself
  auto s = std::make_unique<Staging>();
  s->block = align_up(block);
  for (auto& b : s->buf) {
    try {
      b = make_io_buffer(s->block);
    } catch (const std::bad_alloc&) {
      throw IoError(Where(final_),
                    "cannot allocate the write-behind buffers (" + std::to_string(2 * s->block) + " bytes)");
    }
  }
  s->base = align_up(pos_);
  s->head = s->base - pos_;
  staging_ = std::move(s);
}

void OutputFile::flush_staged() {
  if (!staging_) return;
  std::unique_ptr<Staging> s = std::move(staging_);
  if (s->pending.valid()) s->pending.get();
  uint64_t whole = align_down(s->fill);
  if (whole) write_blocks(direct_fd(), s->buf[s->cur].get(), whole, s->base);
  if (s->fill > whole) pwrite_raw(s->buf[s->cur].get() + whole, s->fill - whole, s->base + whole);
}

void OutputFile::finish_writes() {
  flush_staged();
  // An object's digest is finished once it exists (commit): what its uploads did not show is read back.
  if (!hash_ || digested_ || (up_ && !committed_)) return;
  digested_ = true;
  const FileDigest d = hash_->finish(tmp_, up_ ? std::optional<uint64_t>(std::max(pos_, reserved_)) : std::nullopt);
  record_written_digest(tmp_, d, hash_->read_back());
  digest_ = d;
}

void OutputFile::reserve(uint64_t size) {
  if (up_) {
    reserved_ = size;
    return up_->expect_size(size);
  }
  if (size == 0) return;
  int rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(size));
  if (rc == EOPNOTSUPP || rc == EINVAL) {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
      throw IoError(Where(final_), "cannot size output to " + std::to_string(size) + " bytes: " + errno_text(errno));
  } else if (rc != 0) {
    throw IoError(Where(final_), "cannot reserve " + std::to_string(size) + " bytes: " + errno_text(rc));
  }
}

void OutputFile::commit() {
  if (committed_ && !up_) return;
  if (up_) {
    up_->commit();
    committed_ = true;
    finish_writes();
    return;
  }
  finish_writes();
  if (!owner_) {
    if (::fsync(fd_) != 0) throw IoError(Where(final_), "fsync failed: " + errno_text(errno));
    return;
  }
  if (::fsync(fd_) != 0) throw IoError(Where(final_), "fsync failed: " + errno_text(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw IoError(Where(final_), "close failed: " + errno_text(errno));
  }
  fd_ = -1;
  // tests: killed with the whole output under its temporary name
  failpoint_stop(("rename/" + base_name(final_)).c_str());
  if (::rename(tmp_.c_str(), final_.c_str()) != 0)
    throw IoError(Where(final_), "cannot rename " + tmp_ + " into place: " + errno_text(errno));
  committed_ = true;
}

OutputDir::OutputDir(std::string final_path, UploadSession* uploads, const std::string& adopt)
    : final_(std::move(final_path)), uploads_(uploads) {
  while (final_.size() > 1 && final_.back() == '/') final_.pop_back();
  if (is_remote(final_)) {
    // No temporary prefix (objects cannot be renamed): the files go straight under the final one,
    // each appearing when complete, the one that makes the folder complete last. What was there
    // (only with --force: the output check refused otherwise) is deleted first, so that an old
    // .metadata or index never names the new files while they are written.
    remote_ = true;
    tmp_ = final_;
    clear_remote_prefix(final_);
    return;
  }
  tmp_ = temp_name(final_);
  slot_ = claim(tmp_, 3);
  if (!adopt.empty() && ::rename(adopt.c_str(), tmp_.c_str()) != 0) {
    int e = errno;
    release(slot_);
    throw IoError(Where(adopt), "cannot take over the stopped run's folder as " + tmp_ + ": " + errno_text(e));
  }
  if (adopt.empty() && ::mkdir(tmp_.c_str(), 0755) != 0) {
    int e = errno;
    release(slot_);
    throw IoError(Where(tmp_), "cannot create directory: " + errno_text(e));
  }
  failpoint_stop(("created/" + base_name(final_)).c_str());
}

OutputDir::~OutputDir() {
  if (!committed_ && !remote_ && !keep_) remove_tree(tmp_);
  release(slot_);
}

void OutputDir::keep_when_stopped() {
  if (remote_ || keep_.exchange(true)) return;  // once, whichever lane comes first
  release(slot_);
  slot_ = -1;
}

void OutputDir::dissolve() {
  if (remote_) return;
  if (::rmdir(tmp_.c_str()) != 0) throw IoError(Where(tmp_), "cannot remove the staging folder: " + errno_text(errno));
  committed_ = true;
}

std::string OutputDir::path_of(const std::string& name) const {
  return tmp_ + "/" + name;
}

void OutputDir::commit() {
  if (remote_) {  // every file was completed by its own commit, the last one last
    committed_ = true;
    return;
  }
  if (int fd = ::open(tmp_.c_str(), O_RDONLY | O_DIRECTORY); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  failpoint_stop(("rename/" + base_name(final_)).c_str());
  struct stat st;
  if (::lstat(final_.c_str(), &st) == 0) {
    // Replacing an existing output: one atomic swap, so that the final name always names a
    // complete output (the old one, then the new one); the old one, now under the temporary name
    // (still claimed for the signal handler), is removed after. Filesystems without
    // RENAME_EXCHANGE take the two renames below, with their window.
    if (rename_exchange(tmp_, final_)) {
      committed_ = true;
      if (::lstat(tmp_.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) retag(slot_, 2);  // a file was replaced
      failpoint("output-dir-commit", 0);  // tests: killed here, the new output is in place
      remove_tree(tmp_);
      return;
    }
  }
  std::string aside;
  if (::lstat(final_.c_str(), &st) == 0) {
    aside = aside_name(final_);
    if (::rename(final_.c_str(), aside.c_str()) != 0)
      throw IoError(Where(final_), "cannot move the old output aside: " + errno_text(errno));
    failpoint("output-dir-commit", 0);  // the window: no output under the final name
  }
  if (::rename(tmp_.c_str(), final_.c_str()) != 0) {
    int e = errno;
    if (!aside.empty()) ::rename(aside.c_str(), final_.c_str());
    throw IoError(Where(final_), "cannot rename " + tmp_ + " into place: " + errno_text(e));
  }
  committed_ = true;
  if (!aside.empty()) remove_tree(aside);
}

// Copies [off, off+n) of `in` to `out` at out_off. copy_file_range lets the kernel move (or
// reflink) the bytes; when it is unavailable (another filesystem, an old kernel) it returns with
// use_cfr false and the caller repeats the copy with a buffer.
void copy_range(const ReadFile& in, uint64_t off, OutputFile& out, uint64_t out_off, uint64_t n, uint8_t* buf,
                uint64_t window, bool& use_cfr, int out_fd) {
  if (in.remote()) use_cfr = false;  // an s3:// object has no descriptor: the caller takes a buffer
  if (!use_cfr && !buf) return;
  while (n > 0 && use_cfr) {
    loff_t io = static_cast<loff_t>(off), oo = static_cast<loff_t>(out_off);
    ssize_t w = ::copy_file_range(in.fd(), &io, out_fd, &oo, n, 0);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP || errno == EBADF) {
        use_cfr = false;  // the caller copies the whole range again through a buffer
        return;
      }
      throw IoError(Where(out.final_path(), out_off), "copy failed: " + errno_text(errno));
    }
    if (w == 0) throw IoError(Where(in.path(), off), "file shrank while reading");
    off += static_cast<uint64_t>(w);
    out_off += static_cast<uint64_t>(w);
    n -= static_cast<uint64_t>(w);
  }
  while (n > 0) {
    uint64_t k = std::min(n, window);
    in.read_at(off, buf, k);
    out.pwrite_all(buf, k, out_off);
    off += k;
    out_off += k;
    n -= k;
  }
}

}  // namespace dcpctl
