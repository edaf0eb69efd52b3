// dcpctl's manifest: what an output held when dcpctl wrote it, so that a later reader can tell the
// very bytes from a copy that lost, gained or changed a file (a truncated `.distcp` beside an
// intact `.metadata`, a shard removed from an HF folder, a file written after the save).
//
// `dcpctl-manifest.json`, inside a folder output (a DCP checkpoint, an HF folder) or beside a
// single-file output as `<file>.dcpctl-manifest.json`; written by consolidate, reshard and cast as
// the last file before the output is renamed into place, and by `verify --write-manifest` for an
// existing checkpoint. Its shape follows torchtitan's SHA-256 manifest proposal (pytorch/torchtitan
// #4011: a per-checkpoint list of file digests, written last, checked on load) and megatron-core's
// `integrity.json` (`{"algorithm": "sha256", "files": {name: digest}}`), so that a reader of the
// latter reads the file digests of this one unchanged:
//
//   {"format": "dcpctl-manifest", "version": 2, "algorithm": "crc32",
//    "files":   {"<name>": "<digest hex>"},            every regular file of the folder (names
//                                                       relative to it), the manifest excepted
//    "sizes":   {"<name>": bytes},                      the same files' sizes (a truncation is
//                                                       seen without hashing)
//    "tensors": {"<key>": "<digest hex>"} | null,       each full tensor's bytes, C order,
//                                                       little-endian
//    "written_by": {"tool": "dcpctl", "version", "command"},
//    "source": "<checkpoint read>" | null}
//
// Two algorithms, told apart by `version` and `algorithm`:
// - version 2, "crc32" (the default since 2026-11-27): zip's CRC-32 (IEEE 802.3, the CRC every
//   torch.save record carries, util/crc32.h), 8 lower-case hex digits. A CRC of a file written in
//   pieces, in any order and on any thread, is the pieces' CRCs joined (crc32_combine), so a
//   writer computes it as the bytes pass, at memory speed, with no second pass and no ordering.
//   It catches accidental damage (every burst of up to 32 bits, a flipped bit anywhere, a cut or
//   a swapped file; other random damage slips through with probability 2^-32), not a forger:
//   anyone can make other bytes with the same CRC.
// - version 1, "sha256" (what dcpctl wrote before, and `--manifest sha256` writes): SHA-256, 64
//   hex digits, a cryptographic digest that also holds against deliberate changes (as long as the
//   manifest itself is trusted), at about 2 GB/s a core, computed in the file's order.
// Both are read and checked; verify --checksum compares the tensor digests in the manifest's
// algorithm.
//
// Checked (check_manifest): every listed file there (manifest-missing-file), of its size and
// digest (manifest-mismatch), no file of the folder unlisted (manifest-unlisted-file: nothing
// vouches for it), and the manifest itself readable and of this format (manifest-invalid). A
// name must be relative and stay inside the folder. verify --checksum also compares the tensor
// digests (manifest-tensor-mismatch, report/verify.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "util/finding.h"

namespace dcpctl {

class ReadFile;
class Sha256;

inline constexpr const char* kManifestFile = "dcpctl-manifest.json";

// Where the manifest of `path` is: inside it when a folder, beside it when a file.
std::string manifest_path(const std::string& path);

// The digest a manifest records (above).
enum class ManifestAlgorithm { Crc32, Sha256 };
const char* algorithm_name(ManifestAlgorithm a);                            // "crc32", "sha256"
std::optional<ManifestAlgorithm> algorithm_named(const std::string& name);  // nullopt: neither
// A digest as the manifest spells it: CRC-32 as 8 lower-case hex digits (most significant first).
std::string crc32_hex(uint32_t crc);

struct FileDigest {
  uint64_t size = 0;
  std::string hex;  // in the manifest's algorithm
};

struct Manifest {
  ManifestAlgorithm algorithm = ManifestAlgorithm::Crc32;
  std::map<std::string, FileDigest> files;
  std::optional<std::map<std::string, std::string>> tensors;
  std::string tool_version, command, source;
  nlohmann::json to_json() const;
};

// Adds bytes [from, to) of `f` to `h`, read past the page cache.
void hash_file_range(const ReadFile& f, uint64_t from, uint64_t to, Sha256& h);
// The CRC-32 of bytes [from, to) of `f`, read past the page cache.
uint32_t crc_file_range(const ReadFile& f, uint64_t from, uint64_t to);
// Reads bytes [from, to) of `f` past the page cache, a window at a time, in order: `take(data, n, at)`.
void read_file_range(const ReadFile& f, uint64_t from, uint64_t to,
                     const std::function<void(const uint8_t*, uint64_t, uint64_t)>& take);

// Digest (in `alg`) and size of the regular files of folder `dir` (top level; subfolders are not
// part of a checkpoint dcpctl writes), or of the single file `path`, the manifest itself excepted.
// `known` gives a file's digest by its path where it is known already (hashed as it was written:
// write/write_hash.h); the others are read.
// `read` (when given) gets the bytes read.
std::map<std::string, FileDigest> digest_files(
    const std::string& path, unsigned threads,
    const std::function<std::optional<FileDigest>(const std::string&)>& known = nullptr, uint64_t* read = nullptr,
    ManifestAlgorithm alg = ManifestAlgorithm::Sha256);

// A file a list of digests records (a manifest's `files`, megatron-core's integrity.json).
struct ListedFile {
  std::string path;              // where it should be
  std::string digest;            // lower-case hex, in the list's algorithm
  std::optional<uint64_t> size;  // where the list records one (a different size is seen unhashed)
};
// How a list names its problems: the codes of a missing file and of a changed one, the list in
// messages ("integrity.json"), and what it was made by ("the save").
struct ListedCodes {
  const char* missing;
  const char* mismatch;
  std::string list, made;
};
// The JSON of a list of digests at `path` (a manifest, integrity.json), or null with the problem
// added: more than `max_bytes` (`invalid_code`), or unreadable (io-error). A text that is not JSON
// comes back discarded, for the caller to name what it expected.
std::optional<nlohmann::json> read_listing(const std::string& path, uint64_t max_bytes, const char* invalid_code,
                                           Findings& problems);
// A name a list of a folder's files may hold: relative, no empty or '..' component (a hostile list
// must not make verify read outside the folder).
bool listed_name_inside(const std::string& name);
// Every listed file there, of its size and digest in `alg` (hashed past the page cache, `threads`
// at a time): the problems into `problems`, the bytes hashed added to `bytes_read`.
void check_listed_files(const std::vector<ListedFile>& files, unsigned threads, const ListedCodes& codes,
                        Findings& problems, uint64_t& bytes_read, ManifestAlgorithm alg = ManifestAlgorithm::Sha256);

struct ManifestReport {
  bool present = false;
  std::string path;  // the manifest's
  ManifestAlgorithm algorithm = ManifestAlgorithm::Sha256;
  uint64_t files = 0, bytes_read = 0;
  std::optional<std::map<std::string, std::string>> tensors;  // as listed
  std::string source, tool_version;
  Findings problems;
};

// The algorithm of `path`'s manifest, when there is one of this format (nullopt otherwise): read
// before the tensors are hashed, so that verify --checksum takes their CRC-32s only where a CRC-32
// manifest will compare them.
std::optional<ManifestAlgorithm> manifest_algorithm(const std::string& path);

// Checks `path`'s manifest when there is one (present = false otherwise, nothing read).
ManifestReport check_manifest(const std::string& path, unsigned threads);

// A manifest there and every file it lists as it says (no problem): what ls/latest --verified ask.
bool manifest_verified(const std::string& path, unsigned threads);

}  // namespace dcpctl
