// Each output tensor's digest (C order, little-endian: the manifest's `tensors`, in its algorithm)
// computed from the bytes as they are written, with the files' digests (write/write_hash.h), so
// that the manifest costs no second read of the output. CRC-32 (the default) needs no order: each
// write hands each part it holds the CRC of its bytes (crc_part_bytes), joined at the end. SHA-256
// (`--manifest sha256`) is sequential, as follows.
//
// A tensor is written as one or more parts (a record of an HF shard or a .pt is the whole tensor;
// a DCP output has one per box), each a contiguous range of one output file. Where the parts in
// order are the tensor in C order (every box whole but along dimension 0, the boxes one after
// another), execute declares the tensor with its parts' lengths (declare_tensor), the writer says
// where each part lies in its file as it starts writing it (OutputFile::hash_part), and each file's
// WriteHash hands the tensor the bytes of its parts as its own hashed prefix passes them: in order
// within a part: claimed in the file's order while the file's prefix is held, then hashed by the
// thread that wrote them once the prefix has moved on (so a file's digest and its tensors' run on
// two threads). A part that comes before the one the tensor waits for is kept (within the budget
// the file hashes share, kHeldBudget); past it, its writer waits for the parts before it where they
// are all being written (rank files written side by side), else it is read back from its file by
// declared_tensor_digest(), which also reads back every part of a tensor one of whose files was
// written twice. A tensor whose boxes
// are not in C order is not declared, and the manifest's `tensors` is then null.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dcpctl {

struct WritePlan;

struct HashPart {
  std::string tensor;  // the output key; empty: not hashed
  uint32_t part = 0;
};

// While a HashWrites is alive (write/write_hash.h): tensor `key` is written as parts of these
// lengths, in C order. Forgets what a previous run declared when the first HashWrites begins.
void declare_tensor(const std::string& key, const std::vector<uint64_t>& part_lengths);

// Declares every planned tensor whose records in order are it in C order; returns each record's
// part (an empty tensor key for the records of one that is not declared), for the writers.
std::vector<HashPart> declare_planned_tensors(const WritePlan& plan);

// From a WriteHash: part `p` lies at `offset` of the file written as `temp_path` (renamed
// `final_path` once committed).
void locate_part(const HashPart& p, const std::string& temp_path, const std::string& final_path, uint64_t offset);
// Bytes [at, at + n) of part `p`, in order within the part: hashed now when they continue what
// the tensor's digest has and was promised (claimed), else kept or read back.
void hash_part_bytes(const HashPart& p, uint64_t at, const uint8_t* data, uint64_t n);
// The same in two steps, so that a file's hash can hand its next bytes to the next thread before
// the tensors have them (write/write_hash.h): claim_part_bytes promises bytes [at, at + n) of part
// `p`, in the order of the claims (false: they do not continue what was claimed; hash_part_bytes
// them instead), and hash_claimed hashes them once every earlier claim is (waiting for it, at
// most kTurnWait, else the tensor is read back).
bool claim_part_bytes(const HashPart& p, uint64_t at, uint64_t n);
void hash_claimed(const HashPart& p, uint64_t at, const uint8_t* data, uint64_t n);
// The part's file was written twice: its bytes are read back.
void part_rewritten(const HashPart& p);
// CRC-32 manifests (write/write_hash.h): bytes [at, at + n) of part `p` have CRC-32 `crc`; said
// in any order, from any thread. The tensor's CRC joins them in its order (crc32_combine); what
// no write showed is read back from the part's file, and a tensor shown a byte twice is read back
// whole.
void crc_part_bytes(const HashPart& p, uint64_t at, uint64_t n, uint32_t crc);

// The first HashWrites of a run: what an earlier run declared is forgotten.
void forget_declared_tensors();

// Declared tensor `key`'s digest once every part is written (nullopt: not declared, or a part
// never written); the bytes read back to finish it are added to `read`.
std::optional<std::string> declared_tensor_digest(const std::string& key, uint64_t& read);

// Every planned tensor's digest, by its key, when each was declared; nullopt otherwise. What was
// not shown to the tensors as written is read back from the files (`read_back` adds it).
std::optional<std::map<std::string, std::string>> written_tensor_digests(const WritePlan& plan,
                                                                         uint64_t* read_back = nullptr);

// The budget kHeldBudget shared with the file hashes: take `n` bytes (false: over it), give back.
bool hold_bytes(uint64_t n);
void release_bytes(uint64_t n);

}  // namespace dcpctl
