#include "report/verify.h"

#include <algorithm>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "check/hf_checks.h"
#include "item/hash_streams.h"
#include "item/item_reader.h"
#include "item/window.h"
#include "meta/checkpoint.h"
#include "meta/geometry.h"
#include "meta/manifest.h"
#include "meta/readers.h"
#include "meta/shared_records.h"
#include "meta/structure.h"
#include "plan/memory.h"
#include "report/integrity.h"
#include "store/file.h"
#include "util/crc32.h"
#include "util/memory_gate.h"
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
  void note(const std::string& code, const Where& w, const std::string& msg) { add(notes, code, w, msg); }
  void from_error(const Error& e) {
    const char* code = dynamic_cast<const UnsupportedError*>(&e) ? "item-unsupported"
                       : dynamic_cast<const IoError*>(&e)        ? "io-error"
                       : dynamic_cast<const CorruptError*>(&e)   ? "crc-mismatch"
                                                                 : "item-invalid";
    problem(code, e.where(), e.detail());
  }
  std::vector<json> problems, warnings, notes;

 private:
  std::mutex mu_;
};

// Reads run `r` a window at a time and hands each window's bytes to `take` where they landed,
// never copied again: past the page cache (O_DIRECT, where the filesystem allows it) with
// `past_cache`, else through it. The next window is asked of the disk before this one is handed
// over, so the disk reads while `take` hashes: through the cache a read-ahead hint
// (POSIX_FADV_WILLNEED) into the one buffer `buf`; past it, a read on another thread into the
// other buffer, `spare` (a worker that read, then hashed, then read again left the disk idle
// while all hashed at once, and the CPU idle while all read: `verify --checksum` of 2.4 GB took
// the sum of the two, not the larger). Each buffer holds `window` bytes; with no `spare` the
// direct reads take turns with `take`. Both buffers are a worker's (WorkerBuffers: IoBuffers,
// aligned for O_DIRECT). The file's ledger checks the CRC-32 of the run's record as its bytes
// pass. Every read after the first starts on a block, so no block is read twice.
template <typename Take>
void read_run(const DirectRun& r, bool past_cache, const std::string& key, uint8_t* buf, uint8_t* spare,
              uint64_t window, Take&& take) {
  uint8_t* const bufs[2] = {buf, spare};
  const uint64_t step = align_down(window - 2 * kDirectAlign);
  auto length = [&](uint64_t done) {  // the window that starts `done` bytes into the run
    uint64_t at = r.offset + done, k = std::min(step, r.bytes - done);
    return done + k < r.bytes ? align_down(at + k) - at : k;
  };
  if (past_cache && spare) {
    uint64_t k = length(0);
    const uint8_t* p = r.file->read_direct(r.offset, k, buf, key);
    int slot = 0;
    for (uint64_t done = 0; done < r.bytes;) {
      const uint64_t next = done + k, next_k = next < r.bytes ? length(next) : 0;
      std::future<const uint8_t*> ahead;
      if (next_k)
        ahead = std::async(std::launch::async, [&r, &key, at = r.offset + next, next_k, into = bufs[slot ^ 1]] {
          return r.file->read_direct(at, next_k, into, key);
        });
      take(p, k);  // should it throw, `ahead` waits for its read to end before the buffers go
      if (next_k) p = ahead.get();
      done = next, k = next_k, slot ^= 1;
    }
    return;
  }
  for (uint64_t done = 0; done < r.bytes;) {
    uint64_t at = r.offset + done, k = length(done);
    if (past_cache) {
      take(r.file->read_direct(at, k, buf, key), k);
    } else {
      r.file->read_at(at, buf, k, key);
      if (done + k < r.bytes) r.file->prefetch(at + k, std::min(step, r.bytes - done - k));
      take(buf, k);
    }
    done += k;
  }
}

void add_structure(const Checkpoint& ck, Collector& out) {
  StructureReport r = check_structure(ck);
  for (const auto& p : r.problems) out.problem(p.code, p.where, p.message);
  for (const auto& w : r.warnings) out.warning(w.code, w.where, w.message);
  for (const SharedRecord& s : r.shared) {
    const SharedRecord::Place& p = s.places.front();
    out.note("shared-record", Where(ck.path_of(p.file), p.offset, s.keys.front()), shared_text(ck, s));
  }
}

// What the deep read finds: each tensor's SHA-256 (--checksum), its CRC-32 beside it where a
// CRC-32 manifest will compare them (meta/manifest.h), and the bytes read.
struct Digests {
  json checksums = json::object();
  std::map<std::string, std::string> crcs;
  uint64_t bytes_read = 0;
};

// `verify --deep` / `--checksum`: every item read, each tensor's bytes hashed in C order where
// --checksum asks, within --max-memory. A key whose data is another's, byte for byte (a tie), is
// read once: its digest is the other's.
class DeepRead {
 public:
  DeepRead(const Checkpoint& ck, const VerifyOptions& opts, bool want_crcs, Collector& col)
      : md_(ck.md),
        opts_(opts),
        want_crcs_(want_crcs),
        col_(col),
        alias_(same_data_as(md_)),
        reader_(ck),
        direct_(opts.io == VerifyOptions::Io::Direct),
        gate_(opts.max_memory),
        piped_(md_.tensors.size(), 0) {
    std::vector<StorageRef> items;  // every item is read
    for (const auto& t : md_.tensors) items.insert(items.end(), t.storage.begin(), t.storage.end());
    for (const auto& b : md_.bytes) items.push_back(b.storage);
    reader_.expect(items);
    unsigned threads = opts.threads ? opts.threads
                       : direct_    ? std::max(default_threads(), kDirectReaders)
                                    : default_threads();
    threads_ = static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(threads, items_count())));
    // Every buffer a worker holds is charged to the gate: windows of the full tensor (for
    // --checksum, hashed in C order) or of a chunk's dense bytes, at most max_memory / threads
    // each. A zstd item is decoded whole by the reader, so its decoded size is charged too. A
    // single need above the budget runs alone (the gate admits it when nothing else is live).
    per_worker_ = std::max<uint64_t>(opts.max_memory / threads_, 1);
  }

  Digests run() {
    if (opts_.checksum) hash_piped();
    // Largest first: a tensor is hashed by one worker, so the biggest ones start while the
    // rest fill in around them, and no worker is left hashing a large tensor alone at the end.
    auto bytes_of = [&](size_t i) { return i < md_.tensors.size() ? md_.tensors[i].nbytes() : 0; };
    std::vector<size_t> order(items_count());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes_of(a) > bytes_of(b); });
    run_tasks(order.size(), threads_, gate_, [&](size_t k, WorkerBuffers& buf) {
      const size_t i = order[k];
      if (i >= md_.tensors.size())
        read_bytes_item(md_.bytes[i - md_.tensors.size()], buf);
      else if (md_.tensors[i].dtype && !piped_[i] && !alias_[i])
        read_tensor(md_.tensors[i], buf);
    });
    if (opts_.checksum) copy_aliased();
    return std::move(out_);
  }

 private:
  size_t items_count() const { return md_.tensors.size() + md_.bytes.size(); }

  // What the reader allocates itself while reading one chunk: a zstd item is decoded whole; a
  // non-contiguous view (a saved slice) is gathered from its whole storage into a dense copy.
  // (plan/memory.h's reader_need; a view's storage is known from its data.pkl.)
  uint64_t chunk_reader_need(const TensorMeta& t, size_t c) {
    if (!t.storage[c].present() || t.storage[c].transforms != 0) return reader_need(t, c);
    try {
      TensorBlob b = reader_.describe_chunk(t, c);
      if (!b.contiguous()) return reader_need(t, c, b.extent() * itemsize(b.dtype));
    } catch (const Error&) {
      // Reported by the read itself.
    }
    return 0;
  }

  // Where a chunk's bytes lie in place in a local file (untransformed, a contiguous view), and
  // whether to read them past the page cache: --io direct, a run of kDirectMinRun bytes or
  // more not all cached already (a checkpoint just written or read is copied from the cache).
  std::optional<DirectRun> local_run(const TensorMeta& t, size_t c) {
    if (!t.storage[c].present() || t.storage[c].transforms != 0) return std::nullopt;
    std::optional<DirectRun> run = reader_.direct_run(t, c);
    if (run && run->file->remote()) return std::nullopt;
    return run;
  }
  bool past_cache(const DirectRun& r) const { return direct_ && r.file->worth_reading_direct(r.offset, r.bytes); }

  // read_run's buffers within a worker's `window` bytes: reading direct, two halves (one
  // read ahead while the other is hashed) where each still holds a direct read of
  // kDirectMinRun; else the one. Returns each buffer's size.
  uint64_t prepare_run_windows(WorkerBuffers& b, uint64_t window) const {
    if (direct_ && window / 2 >= kDirectMinRun + 2 * kDirectAlign) {
      b.prepare(window / 2, window / 2, 0);
      return window / 2;
    }
    b.prepare(window, 0, 0);
    return window;
  }

  // The runs of a tensor whose chunks, in order along dimension 0, are its bytes in C order
  // (FSDP's dim-0 shards, a whole tensor): every non-empty chunk spans every other dimension
  // and lies in place. Empty otherwise: the tensor is hashed through the window engine.
  std::vector<std::pair<int64_t, DirectRun>> c_order_runs(const TensorMeta& t) {
    std::vector<std::pair<int64_t, DirectRun>> runs;
    if (t.shape.empty()) return runs;
    for (size_t c = 0; c < t.num_chunks(); ++c) {
      if (t.chunk_numel(c) == 0) continue;
      const int64_t* sizes = t.chunk_sizes(c);
      if (!std::equal(sizes + 1, sizes + t.ndim(), t.shape.begin() + 1)) return {};
      std::optional<DirectRun> run = local_run(t, c);
      if (!run) return {};
      runs.emplace_back(t.chunk_offsets(c)[0], *run);
    }
    std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return runs;
  }

  // --checksum of the tensors whose chunks are their bytes in C order in local files, a
  // megabyte or more: through the hash pipeline (item/hash_streams.h), a hasher a core and the
  // reads ahead of them on threads of their own. The rest go through the workers.
  void hash_piped() {
    const unsigned cores = default_threads();
    HashPipeline pipe =
        hash_pipeline(opts_.max_memory, opts_.threads ? std::min(opts_.threads, cores) : cores, kHashReaders);
    pipe.crc = want_crcs_;
    std::vector<std::optional<HashStream>> found(md_.tensors.size());
    if (pipe.slots)
      parallel_for(md_.tensors.size(), threads_, [&](size_t i) {
        const TensorMeta& t = md_.tensors[i];
        if (alias_[i]) return;
        // (The size first: finding the runs opens every chunk's item, which the workers
        // would do again for a tensor left to them.)
        if (!t.dtype || t.nbytes() < kDirectMinRun || !check_coverage(t, 1).exact) return;
        try {
          HashStream s{t.fqn, {}};
          for (const auto& [row, r] : c_order_runs(t)) s.runs.push_back({r, past_cache(r)});
          if (!s.runs.empty()) found[i] = std::move(s);
        } catch (const Error&) {
          // Reported when the workers read it.
        }
      });
    std::vector<HashStream> streams;
    std::vector<size_t> which;
    for (size_t i = 0; i < found.size(); ++i)
      if (found[i]) streams.push_back(std::move(*found[i])), which.push_back(i);
    std::vector<StreamDigest> digests =
        streams.empty() ? std::vector<StreamDigest>{} : hash_streams(streams, pipe, gate_);
    for (size_t k = 0; k < streams.size(); ++k) {
      piped_[which[k]] = 1;
      if (digests[k].error) {
        try {
          std::rethrow_exception(digests[k].error);
        } catch (const Error& e) {
          col_.from_error(e);
        }
        continue;
      }
      out_.checksums[streams[k].key] = digests[k].hex;
      if (want_crcs_) out_.crcs[streams[k].key] = crc32_hex(digests[k].crc);
      out_.bytes_read += streams[k].bytes();
    }
  }

  void read_bytes_item(const BytesMeta& b, WorkerBuffers& buf) {
    if (!b.storage.present()) return;
    try {
      // Decoding a non-tensor item holds its data.pkl and the VM's copy of what it holds
      // (about twice its size), and a zstd item's decoded bytes too (up to the reader's cap).
      buf.prepare(0, 0, bytes_item_need(b.storage));
      reader_.read_bytes(b);
    } catch (const Error& e) {
      col_.from_error(e);
    }
  }

  void read_tensor(const TensorMeta& t, WorkerBuffers& buf) {
    const size_t item = itemsize(*t.dtype);
    bool all_present = true;
    for (size_t c = 0; c < t.num_chunks(); ++c)
      all_present = all_present && (t.storage[c].present() || t.chunk_numel(c) == 0);
    std::vector<uint64_t> needs(t.num_chunks());
    uint64_t decoded = 0, largest = 0;
    for (size_t c = 0; c < t.num_chunks(); ++c) decoded = std::max(decoded, needs[c] = chunk_reader_need(t, c));
    for (size_t c = 0; c < t.num_chunks(); ++c) largest = std::max(largest, t.chunk_numel(c) * item);
    const uint64_t window_bytes = verify_window_bytes(per_worker_, decoded, largest, item);
    if (opts_.checksum && all_present && check_coverage(t, 1).exact) {
      try {
        hash_tensor(t, buf, window_bytes, decoded);
      } catch (const Error& e) {
        col_.from_error(e);
      }
      return;
    }
    for (size_t c = 0; c < t.num_chunks(); ++c) {
      if (!t.storage[c].present()) continue;
      try {
        read_chunk(t, c, needs[c], window_bytes, buf);
      } catch (const Error& e) {
        col_.from_error(e);
      }
    }
  }

  // --checksum of one tensor: its chunks in C order, each hashed where its bytes land (no copy,
  // no assembly), or else window by window, in order: the tensor is never held whole.
  void hash_tensor(const TensorMeta& t, WorkerBuffers& buf, uint64_t window_bytes, uint64_t decoded) {
    Sha256 h;
    uint32_t crc = 0;
    uint64_t done = 0;
    auto take = [&](const uint8_t* p, uint64_t k) {
      h.update(p, k);
      if (want_crcs_) crc = crc32_update(crc, p, k);
      done += k;
    };
    std::vector<std::pair<int64_t, DirectRun>> runs = c_order_runs(t);
    if (!runs.empty() && window_bytes >= kDirectMinRun) {
      const uint64_t w = prepare_run_windows(buf, window_bytes);
      for (const auto& [row, r] : runs) read_run(r, past_cache(r), t.fqn, buf.a(), buf.b(), w, take);
    } else {
      const size_t item = itemsize(*t.dtype);
      WindowReader windows(reader_, nullptr);
      std::vector<Window> plan = plan_windows(t.shape, window_bytes / item);
      windows.expect(t, plan);
      for (const Window& w : plan) {
        uint64_t bytes = w.numel * item;
        buf.prepare(bytes, bytes, decoded);
        windows.fill(t, w, buf.a(), buf.b());
        take(buf.a(), bytes);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    out_.checksums[t.fqn] = h.hex();
    out_.crcs[t.fqn] = crc32_hex(crc);
    out_.bytes_read += done;
  }

  // `verify --deep` of one chunk: its bytes read (the ledger checks their CRC-32), not kept.
  void read_chunk(const TensorMeta& t, size_t c, uint64_t need, uint64_t window_bytes, WorkerBuffers& buf) {
    const size_t item = itemsize(*t.dtype);
    uint64_t chunk_bytes = t.chunk_numel(c) * item;
    std::optional<DirectRun> run;
    if (need != 0) {
      // Decoded or gathered whole by the reader anyway: one read, not one per window.
      buf.prepare(chunk_bytes, 0, need);
      reader_.read_chunk(t, c, buf.a());
    } else if (chunk_bytes >= kDirectMinRun && window_bytes >= kDirectMinRun && (run = local_run(t, c))) {
      // Checked where its bytes land: the ledger takes the CRC-32 as they pass.
      const uint64_t w = prepare_run_windows(buf, window_bytes);
      read_run(*run, past_cache(*run), t.fqn, buf.a(), buf.b(), w, [](const uint8_t*, uint64_t) {});
    } else {
      uint64_t step = std::max<uint64_t>(window_bytes / item, 1) * item;
      if (chunk_bytes == 0) reader_.describe_chunk(t, c);
      for (uint64_t from = 0; from < chunk_bytes; from += step) {
        uint64_t k = std::min(step, chunk_bytes - from);
        buf.prepare(k, 0, 0);
        reader_.read_chunk_bytes(t, c, from, k, buf.a());
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    out_.bytes_read += chunk_bytes;
  }

  // A tie's digest is the tensor's whose data it is.
  void copy_aliased() {
    for (size_t i = 0; i < alias_.size(); ++i)
      if (alias_[i] && out_.checksums.contains(md_.tensors[*alias_[i]].fqn)) {
        out_.checksums[md_.tensors[i].fqn] = out_.checksums[md_.tensors[*alias_[i]].fqn];
        out_.crcs[md_.tensors[i].fqn] = out_.crcs[md_.tensors[*alias_[i]].fqn];
      }
  }

  const Metadata& md_;
  const VerifyOptions& opts_;
  const bool want_crcs_;
  Collector& col_;
  const std::vector<std::optional<size_t>> alias_;
  ItemReader reader_;
  const bool direct_;
  unsigned threads_ = 1;
  uint64_t per_worker_ = 1;
  MemoryGate gate_;
  std::vector<char> piped_;  // hashed by hash_piped
  std::mutex mu_;
  Digests out_;
};

std::unique_ptr<Checkpoint> open_for_verify(const std::string& dir, Collector& col, json& out) {
  try {
    return std::make_unique<Checkpoint>(open_checkpoint(dir));
  } catch (const FormatError& e) {
    col.problem("metadata-invalid", e.where(), e.detail());
  } catch (const UnsupportedError& e) {
    // Valid input this version does not read: not a verdict on the checkpoint (exit 5, not 3).
    col.problem("unsupported", e.where(), e.detail());
    out["unsupported"] = true;
  }
  return nullptr;
}

// The checks that read no tensor data: a Hugging Face folder's or .safetensors file's structure
// and every HF check, merged; else the structure and what the layout's module checks (a GGUF's
// architecture).
void check_layout(const std::string& dir, const VerifyOptions& opts, const Checkpoint& ck, Collector& col, json& out) {
  if (!is_hf_checkpoint(ck)) {
    add_structure(ck, col);
    if (const auto check = layout_reader(ck.layout).check) {
      LayoutFindings g = check(ck);
      for (const auto& p : g.problems) col.problem(p.code, p.where, p.message);
      for (const auto& n : g.notes) col.note(n.code, n.where, n.message);
    }
    return;
  }
  try {
    HfReport hf = check_hf_folder(dir, opts.hf, &ck);
    for (const auto& p : hf.problems) col.problem(p.code, p.where, p.message);
    for (const auto& w : hf.warnings) col.warning(w.code, w.where, w.message);
    for (const auto& n : hf.notes) col.note(n.code, n.where, n.message);
    out["hf"] = hf.summary;
  } catch (const IoError& e) {
    add_structure(ck, col);
    col.problem("io-error", e.where(), e.detail());
  } catch (const UnsupportedError& e) {
    // A layout transformers converts on load that dcpctl does not map (check/hf_schema.h:
    // load_conversions): valid input it does not read (exit 5, not 3).
    add_structure(ck, col);
    col.problem("unsupported", e.where(), e.detail());
    out["unsupported"] = true;
  }
}

json counts(const Metadata& md) {
  uint64_t nchunks = 0;
  for (const auto& t : md.tensors) nchunks += t.num_chunks();
  return {{"files", md.files.size()},
          {"tensors", md.tensors.size()},
          {"chunks", nchunks},
          {"bytes_items", md.bytes.size()},
          {"bytes_read", 0}};
}

// megatron-core's integrity.json, when the directory has one: every file it lists, hashed again.
void add_integrity(const std::string& dir, const VerifyOptions& opts, Collector& col, json& out) {
  IntegrityReport integrity = check_integrity_manifest(dir, opts.threads ? opts.threads : default_threads());
  for (const auto& p : integrity.problems) col.problem(p.code, p.where, p.message);
  for (const auto& w : integrity.warnings) col.warning(w.code, w.where, w.message);
  out["integrity"] = integrity.present ? json{{"manifest", integrity.manifest},
                                              {"algorithm", integrity.algorithm},
                                              {"files", integrity.files},
                                              {"bytes_read", integrity.bytes_read}}
                                       : json(nullptr);
}

// Every tensor's digest against the one dcpctl's manifest records. Returns how many it compared.
uint64_t compare_tensor_digests(const ManifestReport& manifest, Digests& d, Collector& col) {
  const bool crc = manifest.algorithm == ManifestAlgorithm::Crc32;
  uint64_t compared = 0;
  for (const auto& [key, want] : *manifest.tensors) {
    const Where where(manifest.path, std::nullopt, key);
    if (!d.checksums.contains(key)) {
      col.problem("manifest-tensor-mismatch", where,
                  "the manifest lists this tensor and the checkpoint has no such tensor");
    } else if (crc && d.crcs[key] != want) {
      col.problem("manifest-tensor-mismatch", where,
                  "CRC-32 " + d.crcs[key] + " differs from " + want + " the manifest records");
    } else if (!crc && d.checksums[key].get<std::string>() != want) {
      col.problem("manifest-tensor-mismatch", where,
                  "SHA-256 " + d.checksums[key].get<std::string>().substr(0, 16) + "... differs from " +
                      want.substr(0, 16) + "... the manifest records");
    }
    ++compared;
  }
  for (const auto& [key, got] : d.checksums.items())
    if (!manifest.tensors->count(key))
      col.problem("manifest-tensor-mismatch", Where(manifest.path, std::nullopt, key),
                  "a tensor the manifest does not list");
  return compared;
}

// dcpctl's own manifest (meta/manifest.h), when there is one: every file hashed again; with
// --checksum, every tensor's digest compared with the one it records.
void add_manifest(const std::string& dir, const VerifyOptions& opts, Digests& d, Collector& col, json& out) {
  const ManifestReport manifest = check_manifest(dir, opts.threads ? opts.threads : default_threads());
  for (const auto& p : manifest.problems) col.problem(p.code, p.where, p.message);
  uint64_t tensors_compared = 0;
  if (manifest.present && manifest.tensors && opts.checksum)
    tensors_compared = compare_tensor_digests(manifest, d, col);
  out["manifest"] = manifest.present
                        ? json{{"path", manifest.path},
                               {"algorithm", algorithm_name(manifest.algorithm)},
                               {"files", manifest.files},
                               {"bytes_read", manifest.bytes_read},
                               {"tensors", manifest.tensors ? json(manifest.tensors->size()) : json(nullptr)},
                               {"tensors_compared", tensors_compared},
                               {"source", manifest.source.empty() ? json(nullptr) : json(manifest.source)},
                               {"written_by", manifest.tool_version}}
                        : json(nullptr);
}

}  // namespace

json verify_checkpoint(const std::string& dir, const VerifyOptions& opts) {
  json out;
  out["schema_version"] = 1;
  out["checkpoint"] = dir;
  const bool deep = opts.deep || opts.checksum;
  out["deep"] = deep;
  Collector col;
  json checked = {{"files", 0}, {"tensors", 0}, {"chunks", 0}, {"bytes_items", 0}, {"bytes_read", 0}};
  Digests digests;
  if (std::unique_ptr<Checkpoint> ck = open_for_verify(dir, col, out)) {
    out["layout"] = layout_name(ck->layout);
    check_layout(dir, opts, *ck, col, out);
    checked = counts(ck->md);
    if (deep) {
      const bool want_crcs = opts.checksum && manifest_algorithm(dir) == ManifestAlgorithm::Crc32;
      digests = DeepRead(*ck, opts, want_crcs, col).run();
      checked["bytes_read"] = digests.bytes_read;
    }
  }
  add_integrity(dir, opts, col, out);
  add_manifest(dir, opts, digests, col, out);
  auto by_place = [](const json& a, const json& b) {
    return std::tie(a["file"].get_ref<const std::string&>(), a["key"].get_ref<const std::string&>()) <
           std::tie(b["file"].get_ref<const std::string&>(), b["key"].get_ref<const std::string&>());
  };
  std::stable_sort(col.problems.begin(), col.problems.end(), by_place);
  out["ok"] = col.problems.empty();
  out["checked"] = checked;
  out["problems"] = col.problems;
  out["warnings"] = col.warnings;
  out["notes"] = col.notes;
  if (opts.checksum) out["checksums"] = digests.checksums;
  return out;
}

}  // namespace dcpctl
