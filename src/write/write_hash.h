// The digest of an output file computed as it is written, so that the manifest (meta/manifest.h)
// costs no second read of the output.
//
// CRC-32 (the default manifest): every write's CRC is taken as it passes, by the thread that wrote
// it, split where tensor parts begin and end (write/tensor_hash.h: each part gets the CRC of its
// bytes), and kept as (offset, length, CRC); finish() sorts them and joins them in the file's order
// (crc32_combine). No write waits for another and nothing is copied or held: order does not
// matter to a CRC. What no write showed (ranges the kernel copied) is read back, and a range
// written twice makes finish() read the whole file, as below.
//
// SHA-256 (`--manifest sha256`) is computed in the file's order, so:
//
// A file is hashed in order, and writers write it out of order: lanes write records at their
// offsets, the executor copies some ranges in the kernel (copy_file_range) where no byte passes
// through the process. A WriteHash takes every write the process sees: the one that continues the
// hashed prefix is hashed at once (by the thread that wrote it, outside the lock; a write that
// continues it while another thread hashes waits for it), one further on is kept, copied, until
// the prefix reaches it, within a byte budget shared by every file of the process (kHeldBudget);
// what the budget cannot keep and what no write showed are read back from the file when its digest
// is asked for, as the manifest of an existing output reads it. A byte written twice (a range
// hashed or kept already written again) makes finish() hash the whole file as it then is. So the
// digest is always the file's; the writes only decide how much of it is read back.
//
// Hashing writes is on only while a HashWrites is alive (write/execute.cpp: single-process runs
// writing local files; under torchrun other processes write into the leader's files).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "meta/manifest.h"
#include "store/file.h"
#include "util/sha256.h"
#include "write/tensor_hash.h"

namespace dcpctl {

// What all WriteHashes of a process may hold, copied, at once.
constexpr uint64_t kHeldBudget = 64ull << 20;
// How long a write waits for its turn (WriteHash::take_turns) before it is kept instead: a lane
// that never gets its turn (the one before it waits on memory it holds) goes on after this.
constexpr std::chrono::milliseconds kTurnWait{1000};

class WriteHash {
 public:
  // The file written as `temp_path`, renamed `final_path` once committed.
  WriteHash(std::string temp_path, std::string final_path);
  // Bytes [offset, offset + n) of the file are part `p` of a tensor (write/tensor_hash.h): its
  // bytes go to the tensor's digest too as the hashed prefix passes them. Said before they are written.
  void add_part(const HashPart& p, uint64_t offset, uint64_t n);
  // Bytes [offset, offset + n) were written (any thread): said before they go to the file, and
  // landed() once they are there (a write too far ahead to keep is read back then, when the
  // prefix has reached it).
  void wrote(const void* data, uint64_t n, uint64_t offset);
  void landed(uint64_t offset, uint64_t n);
  // Writers that each write in order, near the prefix (the executor's lanes, dealt consecutive
  // windows: plan/deal.h): from now on a write past the prefix waits until the prefix reaches it,
  // so the thread that wrote it hashes it from its own buffer, and nothing is kept or read back.
  // The wait is bounded (kTurnWait): a write whose turn does not come is kept or let go as before.
  void take_turns();
  // The digest of the file at `path` once every write is done: what the writes did not show is
  // read from it (read_back() says how much). Later writes are not hashed. `size`: the file's,
  // where the writer knows it (an object: then nothing is asked of the store unless read back).
  FileDigest finish(const std::string& path, std::optional<uint64_t> size = std::nullopt);
  uint64_t read_back() const { return read_back_; }
  ~WriteHash();

 private:
  // CRC-32 (above): the CRC of bytes [offset, offset + n), the tensor parts among them given theirs.
  uint32_t crc_through(const uint8_t* data, uint64_t n, uint64_t offset);
  void crc_wrote(const uint8_t* data, uint64_t n, uint64_t offset);
  FileDigest crc_finish(const std::string& path, std::optional<uint64_t> size);
  struct CrcPiece {
    uint64_t at = 0, n = 0;
    uint32_t crc = 0;
  };

  void drain(std::unique_lock<std::mutex>& lock);             // hashes the kept pieces that continue the prefix
  void written_twice();                                       // finish() hashes the whole file
  void stop();                                                // no write is hashed any more
  void hashed(const uint8_t* data, uint64_t n, uint64_t at);  // the prefix grew: to h_ and the parts
  struct Claim {  // bytes of a tensor's part claimed (write/tensor_hash.h), still to be hashed
    HashPart part;
    uint64_t at = 0;
    const uint8_t* data = nullptr;
    uint64_t n = 0;
  };
  // The parts' bytes among the prefix's [at, at + n), claimed in the file's order (those that
  // cannot be are kept or read back); hash_claims hashes them.
  std::vector<Claim> claim(const uint8_t* data, uint64_t n, uint64_t at);
  static void hash_claims(const std::vector<Claim>& claims);
  bool continues() const;  // a kept or let-go write begins at (or before) the prefix's end

  std::string temp_, final_;
  const bool crc_;              // the manifest's algorithm is CRC-32
  std::vector<CrcPiece> crcs_;  // CRC-32: every write's, in the order they came (mu_)
  std::mutex mu_;
  std::condition_variable idle_;
  Sha256 h_;
  uint64_t next_ = 0;     // the hashed prefix [0, next_)
  bool hashing_ = false;  // a thread updates h_ outside the lock
  bool rewritten_ = false;
  bool turns_ = false;                             // take_turns()
  std::map<uint64_t, std::vector<uint8_t>> kept_;  // by offset, past the prefix
  uint64_t held_ = 0;                              // bytes in kept_
  uint64_t read_back_ = 0;
  struct Segment {
    HashPart part;
    uint64_t n = 0;
  };
  struct LetGo {
    uint64_t n = 0;
    bool landed = false;
  };
  std::map<uint64_t, LetGo> let_go_;  // writes past the budget, by offset: read back when next
  std::optional<ReadFile> reader_;    // the file, to read them (the thread hashing the prefix)
  std::mutex seg_mu_;                 // segs_ (read by the hashing thread outside mu_)
  std::map<uint64_t, Segment> segs_;  // the tensor parts, by offset
};

// While one is alive, OutputFiles opened for local files hash what they write (OutputFile::digest),
// in `alg`.
class HashWrites {
 public:
  explicit HashWrites(bool on, ManifestAlgorithm alg = ManifestAlgorithm::Crc32);
  ~HashWrites();
  HashWrites(const HashWrites&) = delete;
  HashWrites& operator=(const HashWrites&) = delete;

 private:
  bool on_;
};
bool hashing_writes();
// The algorithm of the HashWrites alive (CRC-32 when none is).
ManifestAlgorithm hashing_algorithm();

// The digests OutputFiles computed, by the file (device and inode: the same under its temporary
// name and once renamed; a file of another size than hashed has none): what make_manifest takes
// instead of reading the file. `read_back`: the bytes finish() read from the file.
struct WrittenDigest {
  FileDigest digest;
  uint64_t read_back = 0;
};
void record_written_digest(const std::string& path, const FileDigest& d, uint64_t read_back);
std::optional<WrittenDigest> written_digest(const std::string& path);

}  // namespace dcpctl
