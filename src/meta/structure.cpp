#include "meta/structure.h"

#include <algorithm>

#include "meta/geometry.h"
#include "meta/lora_keys.h"
#include "meta/shared_records.h"

namespace dcpctl {

namespace {

// Globals no DCP writer emits and that would run code under pickle.load.
bool dangerous(const std::string& path) {
  static const char* kPrefixes[] = {"os.",
                                    "posix.",
                                    "nt.",
                                    "subprocess.",
                                    "builtins.",
                                    "__builtin__.",
                                    "sys.",
                                    "shutil.",
                                    "socket.",
                                    "importlib.",
                                    "runpy.",
                                    "pty.",
                                    "ctypes.",
                                    "code.",
                                    "pickle.",
                                    "marshal.",
                                    "webbrowser.",
                                    "commands.",
                                    "operator.attrgetter",
                                    "functools.partial"};
  for (const char* p : kPrefixes)
    if (path.rfind(p, 0) == 0) return true;
  return false;
}

}  // namespace

StructureReport check_structure(const Checkpoint& ck) {
  StructureReport out;
  auto problem = [&](const std::string& code, Where w, std::string msg) {
    out.problems.push_back({code, std::move(w), std::move(msg)});
  };
  const Metadata& md = ck.md;
  for (const auto& p : md.problems) out.problems.push_back(p);
  for (const auto& p : ck.incomplete) out.problems.push_back(p);
  for (const auto& g : md.globals)
    if (dangerous(g))
      problem("dangerous-global", Where(ck.metadata_path),
              ".metadata names " + g + ", which a Python pickle.load would call (dcpctl never does)");
  for (const auto& g : md.unknown_globals)
    if (!dangerous(g))
      out.warnings.push_back({"unknown-global", Where(ck.metadata_path), ".metadata names unknown class " + g});

  for (const auto& t : md.tensors) {
    if (!t.dtype && !opaque_type(ck, t))
      problem("unknown-dtype", Where(ck.metadata_path, std::nullopt, t.fqn),
              "dtype " + t.dtype_name + " is unknown to dcpctl");
    Coverage cov = check_coverage(t, 8);
    Where w(ck.metadata_path, std::nullopt, t.fqn);
    if (cov.missing_elements) {
      std::string holes;
      for (const auto& h : cov.holes) holes += (holes.empty() ? "" : ", ") + h.text();
      problem("chunk-gap", w,
              std::to_string(cov.missing_elements) + " of " + std::to_string(t.numel()) +
                  " elements are in no chunk; holes: " + holes);
    }
    if (cov.overlap_elements) {
      std::string pairs;
      for (const auto& [a, b] : cov.overlaps)
        pairs += (pairs.empty() ? "" : ", ") + std::to_string(a) + "&" + std::to_string(b);
      problem("chunk-overlap", w,
              std::to_string(cov.overlap_elements) + " elements are in more than one chunk" +
                  (pairs.empty() ? "" : " (chunks " + pairs + ")"));
    }
    for (size_t c : cov.out_of_bounds)
      problem("chunk-out-of-bounds", w, "chunk " + std::to_string(c) + " reaches outside shape");
    for (size_t c = 0; c < t.num_chunks(); ++c)
      if (!t.storage[c].present() && t.chunk_numel(c) > 0)
        problem("missing-storage", w, "chunk " + std::to_string(c) + " has no storage_data entry");
  }
  for (const auto& b : md.bytes) {
    if (!b.storage.present())
      problem("missing-storage", Where(ck.metadata_path, std::nullopt, b.fqn), "bytes item has no storage_data entry");
  }
  WindowReport windows = check_windows(ck);
  for (size_t f = 0; f < md.files.size(); ++f)
    if (!ck.files[f].size)
      problem("missing-file", Where(ck.path_of(static_cast<uint32_t>(f))),
              "referenced by " + std::to_string(windows.per_file[f]) + " item(s): " + ck.files[f].error);
  for (auto& p : windows.problems) out.problems.push_back(std::move(p));
  out.shared = std::move(windows.shared);
  // LoRA adapters whose shapes cannot be right (accelerate #4206: one rank's slice of each).
  for (auto& f : check_lora(md, find_lora(md))) out.problems.push_back(std::move(f));
  return out;
}

}  // namespace dcpctl
