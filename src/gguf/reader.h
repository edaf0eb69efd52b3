// The GGUF module's reader (gguf/reader.cpp, whose header comment gives the format and what is
// checked): the opener register_gguf() installs in the readers' table's gguf row (meta/readers.h).
#pragma once

#include <string>

#include "meta/checkpoint.h"

namespace dcpctl::gguf {

// One GGUF file, or the split its shard belongs to, as one checkpoint of layout gguf.
Checkpoint open_gguf(const std::string& path);

}  // namespace dcpctl::gguf
