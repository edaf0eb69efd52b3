// The `dcpctl.keep_dtype` entry of a safetensors header's `__metadata__`: the user's
// `--keep-dtype` globs, recorded by an export to a Hugging Face folder so that a later `verify`
// knows what the user chose (write/formats/hf_folder.cpp writes it, check/hf_checks.h reads it).
//
// Written into every `.safetensors` file of a Hugging Face folder exported with `--dtype` and
// `--keep-dtype GLOB` (not `--cast-all`, which keeps nothing): `"dcpctl.keep_dtype":
// "[\"*.bias\",\"model.norm.*\"]"`, the globs in the order given, as JSON text (safetensors'
// metadata values are strings). A glob matches a tensor's key in that file as `--keep-dtype` did
// (fnmatch, no flags: `*` crosses dots). The globs, not the kept keys: they are what the user
// decided, as short as the command line whatever the model's size, and the same in every file.
// Readers that do not know the entry ignore it (transformers reads only `format`; safetensors
// returns it from `metadata()`).
//
// What is tolerated on reading: nothing but a JSON array of 1 to kMaxKeepDtypeGlobs non-empty
// strings, each at most kMaxKeepDtypeGlob bytes, the whole text at most kMaxKeepDtypeEntry bytes;
// anything else is reported (`error`) and the entry ignored, never trusted in part.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace dcpctl {

inline constexpr const char* kKeepDtypeEntry = "dcpctl.keep_dtype";
inline constexpr size_t kMaxKeepDtypeEntry = 64 * 1024;
inline constexpr size_t kMaxKeepDtypeGlobs = 1024;
inline constexpr size_t kMaxKeepDtypeGlob = 1024;

// The entry's value for `globs` (a JSON array of strings).
std::string keep_dtype_entry(const std::vector<std::string>& globs);

struct KeepDtypeEntry {
  bool present = false;            // the metadata holds the entry
  std::vector<std::string> globs;  // when present and valid
  std::string error;               // when present and not valid: why (then `globs` is empty)
};

// The entry of header metadata `metadata` (a safetensors `__metadata__`), read under the caps above.
KeepDtypeEntry read_keep_dtype_entry(const std::map<std::string, std::string>& metadata);

// The first of `globs` that matches `key` (fnmatch, as --keep-dtype), or nullptr.
const std::string* keep_dtype_glob_of(const std::vector<std::string>& globs, const std::string& key);

}  // namespace dcpctl
