// Writing dcpctl's manifest (meta/manifest.h has the format): the SHA-256 and size of every file
// of an output (hashed as it was written, write/write_hash.h, or read from the output in its
// temporary place), and for verify --write-manifest the SHA-256 of every full tensor (C order,
// little-endian: the digest `verify --checksum` prints), just before it is renamed into place.
#pragma once

#include <string>

#include "meta/manifest.h"

namespace dcpctl {

class UploadSession;

// The version every manifest records: the program's, which it sets once at start (cmd/main.cpp).
void set_manifest_tool_version(const std::string& version);
const std::string& manifest_tool_version();

// The manifest of `staged` (a folder, or a single file under a temporary name that will be
// `final_path`), naming `command` and `source`. With `tensors`, the digest of every tensor of the
// output opened as a checkpoint (DCP, HF safetensors, a file): verify --write-manifest. A write
// leaves them out here and sets those hashed as it wrote (write/tensor_hash.h). The files' digests are those computed
// as they were written (write/write_hash.h) where there are some, else read; `read_back` (when given) gets the bytes
// read to hash them. `alg`: the digest (meta/manifest.h); the written digests a write recorded are in the same one.
Manifest make_manifest(const std::string& staged, const std::string& final_path, const std::string& command,
                       const std::string& source, unsigned threads, bool tensors = false, uint64_t* read_back = nullptr,
                       ManifestAlgorithm alg = ManifestAlgorithm::Crc32);

// Writes `m` as manifest_path(path): into a folder, or beside a file as `<file>.dcpctl-manifest.json`
// (`beside`: the file's final path, when `path` is its temporary name). Under a temporary name, then
// renamed; in object storage an object uploaded through `uploads`, the job's session.
void write_manifest_file(const std::string& path, const Manifest& m, const std::string& beside = "",
                         UploadSession* uploads = nullptr);

}  // namespace dcpctl
