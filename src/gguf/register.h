// The GGUF module (src/gguf/: llama.cpp's model file, read and written; docs/gguf.md) joins the
// core through the tables the core already asks, and nowhere else:
//   - the readers' table's gguf row (meta/readers.h): its opener (gguf/reader.h) and what verify
//     checks beyond the structure (the file's tensors against its architecture: gguf/arch_check.h);
//   - the output formats (plan/format.h): the gguf row (gguf/format.h) with its own options;
//   - diff's input kinds (compare/diff.h DiffKind): a GGUF file against the model it was written
//     from (gguf/diff.h).
// The core names no part of the module. A build without it (-DDCPCTL_WITH_GGUF=OFF) refuses a
// .gguf input with exit 5 saying how to build it (the row's installed_by), and `-o model.gguf`
// as an output name no format takes.
#pragma once

namespace dcpctl {

// Adds the module's rows; once (a second call does nothing). Before the command line is built.
void register_gguf();

}  // namespace dcpctl
