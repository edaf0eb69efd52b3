#include "report/verify.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "item/item_reader.h"
#include "meta/checkpoint.h"
#include "meta/structure.h"
#include "plan/assemble.h"
#include "plan/geometry.h"
#include "util/parallel.h"
#include "util/sha256.h"

namespace dcpctl {

using nlohmann::json;

namespace {

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

void add_structure(const Checkpoint& ck, Collector& out) {
  StructureReport r = check_structure(ck);
  for (const auto& p : r.problems) out.problem(p.code, p.where, p.message);
  for (const auto& w : r.warnings) out.warning(w.code, w.where, w.message);
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
    // Valid input this version does not read: not a verdict on the checkpoint (exit 5, not 3).
    col.problem("unsupported", e.where(), e.detail());
    out["unsupported"] = true;
  }
  if (ck) {
    out["layout"] = layout_name(ck->layout);
    add_structure(*ck, col);
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
