// The GGUF module's output format row (plan/format.h): `consolidate -o model.gguf`, written by
// gguf/format.cpp's writer as llama.cpp's converter writes the file (docs/gguf.md); its options
// --outtype, --split-max-size and --split-max-tensors are the row's own. register_gguf() adds it.
#pragma once

#include "plan/format.h"

namespace dcpctl::gguf {

extern const Format output_format;

}  // namespace dcpctl::gguf
