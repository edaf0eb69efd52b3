// Outputs that appear only when complete.
//
// Every output is written under a temporary name next to its final place (same filesystem) and
// renamed when complete; a failed run removes its temporaries, and so do SIGINT/SIGTERM/SIGHUP
// (install_cleanup_handlers). Only SIGKILL or a power cut can leave a temporary behind, and it is
// named `.<name>.dcpctl-tmp-<pid>-<start>@<host>` (write/leftovers.h), never the final name; the
// next run to the same output removes it once its process is gone from this host. An existing
// output is replaced only with `force`; a directory output replaces the old one by an atomic swap
// (renameat2 RENAME_EXCHANGE) and the old one is removed after, so the final name never goes
// missing; where the filesystem cannot swap, the old one is renamed aside first (a window in
// which a signal leaves no output under the final name, the old one under
// `.<name>.dcpctl-tmp-<pid>-<start>-old@<host>`).
//
// An `s3://bucket/key` output is the same object over an upload instead of a file (store/upload.h):
// no temporary name (the object appears when commit() completes its upload), no descriptor
// (fd() is -1: copies go through a buffer), and reserve() fixes its size, so that writes at
// offsets fill fixed parts; an OutputDir there is a prefix whose files are completed one by one.
#pragma once

#include <fcntl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "store/file.h"
#include "store/upload.h"
#include "write/write_hash.h"

namespace dcpctl {

void install_cleanup_handlers();

// Refuses (UsageError) when `path` exists and !force, or when it lies inside `protect_dir`
// (outputs never go into the checkpoint being read). Either may be an s3:// URL.
void check_output_path(const std::string& path, bool force, const std::string& protect_dir);

class OutputFile {
 public:
  // Creates the temporary file. `final_path`'s directory must exist. An object-storage output
  // uploads through `uploads`, the job's session (store/upload.h); a local one ignores it.
  explicit OutputFile(std::string final_path, UploadSession* uploads = nullptr);
  // Opens a temporary file another process created (distributed runs): this object writes into
  // it but neither removes nor commits it; its creator does.
  static std::unique_ptr<OutputFile> open_shared(const std::string& temp_path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void pwrite_all(const void* data, size_t n, uint64_t offset);
  void append(const void* data, size_t n);  // at the running end (sequential writers)
  // Writes [offset, offset + n) with the kDirectAlign blocks wholly inside it past the page cache
  // (O_DIRECT, where the filesystem allows it) and the partial blocks at its two edges through it,
  // so writers of neighbouring ranges (other lanes, other processes) never write one block both
  // ways. The direct part needs `data` placed as in the file, data % kDirectAlign == offset %
  // kDirectAlign (direct_place()); otherwise, or where O_DIRECT is refused, this is pwrite_all.
  void pwrite_direct(const uint8_t* data, size_t n, uint64_t offset);
  // From now on append() collects into two kDirectAlign-aligned buffers of `block` bytes (a
  // multiple of kDirectAlign); each full one is written past the page cache (buffered where O_DIRECT
  // is refused) in the background while the other fills, and commit() writes what is left. A
  // sequential writer (a .pt, a DCP rank file) then reads while its last block is written, and the
  // kernel copies nothing into the page cache. Only append() may write the file after this.
  void stage_appends(uint64_t block);
  // Reserves `size` bytes so a full disk shows up before any work is done.
  void reserve(uint64_t size);
  uint64_t appended() const { return pos_; }
  // While writes are hashed: bytes [offset, offset + n), about to be written, are part `p` of a
  // tensor whose digest the manifest records (write/tensor_hash.h).
  void hash_part(const HashPart& p, uint64_t offset, uint64_t n);
  // From now on the parts hash_part locates are kept (one thread writes the file: a DCP rank file),
  // for located_parts(): a journaled file kept by a later run locates them again (write/resume.h).
  void keep_located_parts() { keep_parts_ = true; }
  const std::vector<std::pair<HashPart, uint64_t>>& located_parts() const { return parts_; }
  // From now on a write past the hashed prefix waits its turn (WriteHash::take_turns).
  void take_hash_turns();
  // Every write done: staged appends written, and, while writes are hashed (write/write_hash.h),
  // the file's digest recorded (a single-file output's manifest is written before the file is
  // renamed). commit() calls it.
  void finish_writes();
  // fsync + rename onto the final name (replacing an existing file); once committed, nothing.
  void commit();
  // The file's digest as written (write/write_hash.h), once finish_writes() took it; nullopt
  // where writes are not hashed.
  std::optional<FileDigest> digest() const { return digested_ ? std::optional<FileDigest>(digest_) : std::nullopt; }
  const std::string& final_path() const { return final_; }
  const std::string& temp_path() const { return tmp_; }
  int fd() const { return fd_; }
  bool remote() const { return up_ != nullptr; }

 private:
  struct Staging;
  int direct_fd() { return direct_.get(tmp_, O_WRONLY); }
  // Writes aligned [offset, offset + n) from aligned `data` through O_DIRECT descriptor `d`, or
  // buffered from the first refusal on.
  void write_blocks(int d, const uint8_t* data, uint64_t n, uint64_t offset);
  void flush_staged();  // waits for the background write, then writes what is staged
  void pwrite_raw(const void* data, size_t n, uint64_t offset);  // pwrite_all, not hashed

  std::string final_, tmp_;
  int fd_ = -1;
  uint64_t pos_ = 0;
  uint64_t reserved_ = 0;  // an object's size, fixed by reserve()
  bool committed_ = false;
  bool owner_ = true;
  int slot_ = -1;
  DirectFd direct_;
  std::unique_ptr<Staging> staging_;
  std::unique_ptr<Upload> up_;       // an object-storage output
  std::unique_ptr<WriteHash> hash_;  // the file's SHA-256 as written (write/write_hash.h)
  bool digested_ = false;
  FileDigest digest_;
  bool keep_parts_ = false;
  std::vector<std::pair<HashPart, uint64_t>> parts_;  // part, offset

  OutputFile() = default;
};

// Where to put the bytes for output offset `offset` in a kDirectAlign-aligned buffer so that
// pwrite_direct can write them past the page cache: `buf` + offset % kDirectAlign.
inline uint8_t* direct_place(uint8_t* aligned_buf, uint64_t offset) {
  return aligned_buf + offset % kDirectAlign;
}

// A directory output: files are created inside a temporary directory, which replaces the final
// directory on commit.
class OutputDir {
 public:
  // An object-storage folder's files upload through `uploads`, the job's session. `adopt`: a stopped
  // run's temporary folder (write/resume.h), renamed to this one's instead of a new one made.
  explicit OutputDir(std::string final_path, UploadSession* uploads = nullptr, const std::string& adopt = "");
  ~OutputDir();
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;
  std::string path_of(const std::string& name) const;  // inside the temporary directory
  void commit();
  // From now on the temporary folder outlives a failure and SIGINT/SIGTERM (it holds finished
  // files a --resume keeps: write/resume.h).
  void keep_when_stopped();
  // The folder is only a place to stage files that went elsewhere (a split GGUF's shards): it is
  // removed, empty, and is no output of its own.
  void dissolve();
  const std::string& final_path() const { return final_; }
  const std::string& temp_path() const { return tmp_; }
  bool remote() const { return remote_; }
  UploadSession* uploads() const { return uploads_; }

 private:
  std::string final_, tmp_;
  bool committed_ = false;
  bool remote_ = false;
  std::atomic<bool> keep_{false};  // set by the lanes that finish files
  UploadSession* uploads_ = nullptr;
  int slot_ = -1;
};

// Removes a directory tree (used for cleanup); ignores errors.
void remove_tree(const std::string& path);

// Copies [off, off+n) of `in` to `out` at out_off. copy_file_range lets the kernel move (or
// reflink) the bytes; when it is unavailable (another filesystem, an old kernel) it returns with
// use_cfr false and the caller repeats the copy with a buffer (`buf`, `window` bytes).
void copy_range(const ReadFile& in, uint64_t off, OutputFile& out, uint64_t out_off, uint64_t n, uint8_t* buf,
                uint64_t window, bool& use_cfr, int out_fd);

}  // namespace dcpctl
