// The item format ItemFormat::Raw (meta/checkpoint.h): a non-tensor item stored as the value's own
// bytes, no torch.save zip, as torch_checkpointing's JSON and raw-bytes items are
// (JsonSerialization, RawSerialization; listed by the torch_checkpointing module, each the whole
// file of its lowest rank). The item reader decodes it here into the Python value the library's
// load returns: a `.json` file's JSON value (json.loads), any other file's bytes. FormatError
// (damage) for JSON that does not parse; UnsupportedError for JSON only Python's json reads (NaN,
// Infinity, a lone surrogate). Needs only the pickler and the VM: the fuzz tree's item target
// compiles it with those alone (tests/fuzz/CMakeLists.txt).
#pragma once

#include <memory>
#include <string>

#include "pickle/tree.h"
#include "util/error.h"

namespace dcpctl::raw {

// Whether a raw item's file holds JSON (its name ends in `.json`).
bool json_file(const std::string& path);
// The value of a raw item's bytes, as a pickle tree (the reader's values are pickles).
std::unique_ptr<pickle::Tree> value_tree(const std::string& bytes, bool json, const Where& where);

}  // namespace dcpctl::raw
