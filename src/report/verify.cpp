#include "report/verify.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "item/item_reader.h"
#include "meta/checkpoint.h"
#include "plan/assemble.h"
#include "plan/geometry.h"
#include "util/parallel.h"
#include "util/sha256.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// Globals no DCP writer emits and that would run code under pickle.load.
bool dangerous(const std::string& path) {
  static const char* kPrefixes[] = {"os.", "posix.", "nt.", "subprocess.", "builtins.", "__builtin__.", "sys.",
                                    "shutil.", "socket.", "importlib.", "runpy.", "pty.", "ctypes.", "code.",
                                    "pickle.", "marshal.", "webbrowser.", "commands.", "operator.attrgetter",
                                    "functools.partial"};
  for (const char* p : kPrefixes)
    if (path.rfind(p, 0) == 0) return true;
  return false;
}

class Collector {
 public:
  void add(std::vector<json>& list, const std::string& code, const Where& w, const std::string& msg) {
    std::lock_guard<std::mutex> lock(mu_);
    list.push_back({{"code", code},
                    {"file", w.file},
                    {"offset", w.offset ? json(*w.offset) : json(nullptr)},
                    {"key", w.key},
                    {"message", msg}});
  }
  void problem(const std::string& code, const Where& w, const std::string& msg) { add(problems, code, w, msg); }
  void warning(const std::string& code, const Where& w, const std::string& msg) { add(warnings, code, w, msg); }
  void from_error(const Error& e) {
    const char* code = dynamic_cast<const UnsupportedError*>(&e) ? "item-unsupported"
                       : dynamic_cast<const IoError*>(&e)        ? "io-error"
                                                                 : "item-invalid";
    problem(code, e.where(), e.detail());
  }
  std::vector<json> problems, warnings;

 private:
  std::mutex mu_;
};

struct Window {
  uint64_t offset, length;
  std::string key;
};

void check_structure(const Checkpoint& ck, Collector& out) {
  const Metadata& md = ck.md;
  for (const auto& p : md.problems) out.problem(p.code, p.where, p.message);
  for (const auto& g : md.globals)
    if (dangerous(g))
      out.problem("dangerous-global", Where(ck.metadata_path),
                  ".metadata names " + g + ", which a Python pickle.load would call (dcpctl never does)");
  for (const auto& g : md.unknown_globals)
    if (!dangerous(g)) out.warning("unknown-global", Where(ck.metadata_path), ".metadata names unknown class " + g);

  std::vector<std::vector<Window>> windows(md.files.size());
  auto window = [&](const StorageRef& r, const std::string& key) {
    if (r.present()) windows[r.file].push_back({r.offset, r.length, key});
  };
  for (const auto& t : md.tensors) {
    for (const auto& r : t.storage) window(r, t.fqn);
    if (!t.dtype) out.problem("unknown-dtype", Where(ck.metadata_path, std::nullopt, t.fqn), "dtype " + t.dtype_name + " is unknown to dcpctl");
    Coverage cov = check_coverage(t, 8);
    Where w(ck.metadata_path, std::nullopt, t.fqn);
    if (cov.missing_elements) {
      std::string holes;
      for (const auto& h : cov.holes) holes += (holes.empty() ? "" : ", ") + h.text();
      out.problem("chunk-gap", w, std::to_string(cov.missing_elements) + " of " + std::to_string(t.numel()) +
                                      " elements are in no chunk; holes: " + holes);
    }
    if (cov.overlap_elements) {
      std::string pairs;
      for (const auto& [a, b] : cov.overlaps) pairs += (pairs.empty() ? "" : ", ") + std::to_string(a) + "&" + std::to_string(b);
      out.problem("chunk-overlap", w, std::to_string(cov.overlap_elements) + " elements are in more than one chunk" +
                                          (pairs.empty() ? "" : " (chunks " + pairs + ")"));
    }
    for (size_t c : cov.out_of_bounds)
      out.problem("chunk-out-of-bounds", w, "chunk " + std::to_string(c) + " reaches outside shape");
    for (size_t c = 0; c < t.num_chunks(); ++c)
      if (!t.storage[c].present() && t.chunk_numel(c) > 0)
        out.problem("missing-storage", w, "chunk " + std::to_string(c) + " has no storage_data entry");
  }
  for (const auto& b : md.bytes) {
    window(b.storage, b.fqn);
    if (!b.storage.present()) out.problem("missing-storage", Where(ck.metadata_path, std::nullopt, b.fqn), "bytes item has no storage_data entry");
  }
  for (size_t f = 0; f < md.files.size(); ++f) {
    std::string path = ck.path_of(static_cast<uint32_t>(f));
    if (!ck.files[f].size) {
      out.problem("missing-file", Where(path), "referenced by " + std::to_string(windows[f].size()) + " item(s): " + ck.files[f].error);
      continue;
    }
    uint64_t size = *ck.files[f].size;
    auto& ws = windows[f];
    std::sort(ws.begin(), ws.end(), [](const Window& a, const Window& b) { return a.offset < b.offset; });
    for (size_t i = 0; i < ws.size(); ++i) {
      if (ws[i].offset > size || ws[i].length > size - ws[i].offset)
        out.problem("window-out-of-file", Where(path, ws[i].offset, ws[i].key),
                    "item of " + std::to_string(ws[i].length) + " bytes runs past the end of the file (" + std::to_string(size) + " bytes)");
      if (i > 0 && ws[i].offset < ws[i - 1].offset + ws[i - 1].length)
        out.problem("window-overlap", Where(path, ws[i].offset, ws[i].key),
                    "item overlaps the item of '" + ws[i - 1].key + "' at offset " + std::to_string(ws[i - 1].offset));
    }
  }
}

}  // namespace

json verify_checkpoint(const std::string& dir, const VerifyOptions& opts) {
  json out;
  out["schema_version"] = 1;
  out["checkpoint"] = dir;
  bool deep = opts.deep || opts.checksum;
  out["deep"] = deep;
  Collector col;
  json checked = {{"files", 0}, {"tensors", 0}, {"chunks", 0}, {"bytes_items", 0}, {"bytes_read", 0}};
  json checksums = json::object();

  std::unique_ptr<Checkpoint> ck;
  try {
    ck = std::make_unique<Checkpoint>(open_checkpoint(dir));
  } catch (const FormatError& e) {
    col.problem("metadata-invalid", e.where(), e.detail());
  } catch (const UnsupportedError& e) {
    col.problem("metadata-invalid", e.where(), e.detail());
  }
  if (ck) {
    check_structure(*ck, col);
    const Metadata& md = ck->md;
    uint64_t nchunks = 0;
    for (const auto& t : md.tensors) nchunks += t.num_chunks();
    checked = {{"files", md.files.size()}, {"tensors", md.tensors.size()}, {"chunks", nchunks},
               {"bytes_items", md.bytes.size()}, {"bytes_read", 0}};
    if (deep) {
      ItemReader reader(*ck);
      std::mutex mu;
      uint64_t bytes_read = 0;
      unsigned threads = opts.threads ? opts.threads : default_threads();
      size_t n = md.tensors.size() + md.bytes.size();
      parallel_for(n, threads, [&](size_t i) {
        if (i >= md.tensors.size()) {
          const BytesMeta& b = md.bytes[i - md.tensors.size()];
          if (!b.storage.present()) return;
          try {
            reader.read_bytes(b);
          } catch (const Error& e) {
            col.from_error(e);
          }
          return;
        }
        const TensorMeta& t = md.tensors[i];
        if (!t.dtype) return;
        size_t item = itemsize(*t.dtype);
        bool all_present = true;
        for (size_t c = 0; c < t.num_chunks(); ++c) all_present = all_present && (t.storage[c].present() || t.chunk_numel(c) == 0);
        if (opts.checksum && all_present && check_coverage(t, 1).exact) {
          try {
            std::vector<uint8_t> full(t.nbytes());
            read_full_tensor(reader, t, full.data());
            Sha256 h;
            h.update(full.data(), full.size());
            std::lock_guard<std::mutex> lock(mu);
            checksums[t.fqn] = h.hex();
            bytes_read += full.size();
          } catch (const Error& e) {
            col.from_error(e);
          }
          return;
        }
        std::vector<uint8_t> scratch;
        for (size_t c = 0; c < t.num_chunks(); ++c) {
          if (!t.storage[c].present()) continue;
          try {
            scratch.resize(t.chunk_numel(c) * item);
            reader.read_chunk(t, c, scratch.data());
            std::lock_guard<std::mutex> lock(mu);
            bytes_read += scratch.size();
          } catch (const Error& e) {
            col.from_error(e);
          }
        }
      });
      checked["bytes_read"] = bytes_read;
    }
  }
  auto by_place = [](const json& a, const json& b) {
    return std::tie(a["file"].get_ref<const std::string&>(), a["key"].get_ref<const std::string&>()) <
           std::tie(b["file"].get_ref<const std::string&>(), b["key"].get_ref<const std::string&>());
  };
  std::stable_sort(col.problems.begin(), col.problems.end(), by_place);
  out["ok"] = col.problems.empty();
  out["checked"] = checked;
  out["problems"] = col.problems;
  out["warnings"] = col.warnings;
  if (opts.checksum) out["checksums"] = checksums;
  return out;
}

}  // namespace dcpctl
