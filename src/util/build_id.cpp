#include "util/build_id.h"

#include <elf.h>
#include <link.h>

#include <cstring>

namespace dcpctl {

namespace {

// The NT_GNU_BUILD_ID note in one PT_NOTE segment of a loaded object, as hex, or "".
std::string note_build_id(const char* p, const char* end) {
  static const char kHex[] = "0123456789abcdef";
  while (p + sizeof(ElfW(Nhdr)) <= end) {
    const auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
    const char* name = p + sizeof(ElfW(Nhdr));
    const char* desc = name + ((n->n_namesz + 3) & ~3u);
    const char* next = desc + ((n->n_descsz + 3) & ~3u);
    if (next > end) break;
    if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
      std::string hex;
      for (size_t i = 0; i < n->n_descsz; ++i) {
        const auto b = static_cast<unsigned char>(desc[i]);
        hex += kHex[b >> 4];
        hex += kHex[b & 15];
      }
      return hex;
    }
    p = next;
  }
  return "";
}

}  // namespace

std::string build_id() {
  static const std::string id = [] {
    std::string out;
    // The first object dl_iterate_phdr reports is the program itself.
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) -> int {
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const ElfW(Phdr)& ph = info->dlpi_phdr[i];
            if (ph.p_type != PT_NOTE) continue;
            const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
            std::string id = note_build_id(p, p + ph.p_memsz);
            if (!id.empty()) {
              *static_cast<std::string*>(data) = id;
              break;
            }
          }
          return 1;
        },
        &out);
    return out;
  }();
  return id;
}

}  // namespace dcpctl
