#include "gguf/register.h"

#include "compare/diff.h"
#include "gguf/arch_check.h"
#include "gguf/decoded.h"
#include "gguf/diff.h"
#include "gguf/format.h"
#include "gguf/reader.h"
#include "meta/readers.h"

namespace dcpctl {

namespace {

Checkpoint open_row(const Probe& p) {
  return gguf::open_gguf(p.path);
}

}  // namespace

void register_gguf() {
  static const bool registered = [] {
    install_reader(CheckpointLayout::Gguf, open_row, check_gguf_arch);
    install_opaque_decoder(CheckpointLayout::Gguf, gguf::decoded_view);
    formats::add(&gguf::output_format);
    DiffKind kind;
    kind.claims = is_gguf;
    kind.diff = diff_gguf;
    kind.assets_use = "--assets names a GGUF's source's config.json: it applies when one side is a .gguf file";
    register_diff_kind(kind);
    return true;
  }();
  (void)registered;
}

}  // namespace dcpctl
