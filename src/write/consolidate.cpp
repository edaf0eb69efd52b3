#include "write/consolidate.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "item/item_reader.h"
#include "plan/assemble.h"
#include "plan/checks.h"
#include "plan/geometry.h"
#include "util/numeric.h"
#include "dist/group.h"
#include "util/failpoint.h"
#include "util/memory_gate.h"
#include "util/sha256.h"
#include "util/parallel.h"
#include "util/crc32.h"
#include "dist/exchange.h"
#include "write/output.h"
#include "write/stream.h"
#include "write/pickler.h"
#include "write/safetensors.h"
#include "write/torch_save.h"

namespace dcpctl {

using nlohmann::json;

namespace {

struct OutTensor {
  const TensorMeta* t;
  std::string key;
  DType src, dst;
  uint64_t out_bytes;
  int file = 0;          // safetensors: output file index
  uint64_t begin = 0;    // safetensors: offset in the data section
  bool all_runs = true;  // every non-empty chunk is a contiguous run of the tensor
  bool transformed = false;
  uint64_t need = 0;     // bytes of buffers this tensor needs at once
};

// A safetensors output file: its tensors (indices into the plan), data size and header.
struct OutFile {
  std::string name;
  std::vector<size_t> tensors;
  uint64_t data_bytes = 0;
  std::string header;
};

// Whether a .pt record streams (every non-empty chunk an untransformed run of the tensor, the runs
// tiling it) rather than being assembled in a buffer, and the order of its chunks. The one rule for
// both launchers: the zip record of a streamed storage differs from an assembled one (its CRC
// comes after the data), so single-process and torchrun .pt files are byte-identical only because
// both decide here, from .metadata alone (every rank agrees without reading an item).
std::vector<uint32_t> streamed_order(const TensorMeta& t) {
  if (!t.dtype || t.nbytes() == 0) return {};
  std::vector<std::pair<uint64_t, uint32_t>> runs;
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    if (t.chunk_numel(c) == 0) continue;
    if (!chunk_is_run(t, c) || t.storage[c].transforms != 0) return {};
    runs.emplace_back(chunk_start(t, c), static_cast<uint32_t>(c));
  }
  std::sort(runs.begin(), runs.end());
  uint64_t at = 0, item = itemsize(*t.dtype);
  std::vector<uint32_t> order;
  for (const auto& [start, c] : runs) {
    if (start != at) return {};
    at += t.chunk_numel(c) * item;
    order.push_back(c);
  }
  if (at != t.nbytes()) return {};
  return order;
}

struct Progress {
  std::atomic<uint64_t> done{0};
  uint64_t total = 0;
  const ConsolidateOptions* o = nullptr;
  void add(uint64_t n) {
    uint64_t d = done.fetch_add(n) + n;
    if (o->progress) o->progress(d, total);
  }
};

// ---- torch output structure (format_utils.dcp_to_torch_save's set_element) ----
struct PNode {
  enum Kind { Empty, Dict, List, Tensor, Value } kind = Empty;
  std::vector<std::pair<std::string, std::unique_ptr<PNode>>> dict;
  std::vector<std::unique_ptr<PNode>> list;
  size_t leaf = 0;  // index into tensors (Tensor) or values (Value)

  PNode* dict_child(const std::string& k) {
    for (auto& [name, n] : dict)
      if (name == k) return n.get();
    dict.emplace_back(k, std::make_unique<PNode>());
    return dict.back().second.get();
  }
  PNode* list_child(size_t i) {
    while (list.size() <= i) list.push_back(std::make_unique<PNode>());
    return list[i].get();
  }
};

void insert_path(PNode& root, const std::vector<PathElem>& path, PNode::Kind leaf_kind, size_t leaf, const std::string& key) {
  PNode* cur = &root;
  if (cur->kind == PNode::Empty) cur->kind = PNode::Dict;
  for (size_t i = 0; i < path.size(); ++i) {
    const PathElem& e = path[i];
    PNode* next;
    if (cur->kind == PNode::Dict) {
      next = cur->dict_child(e.is_index ? std::to_string(e.index) : e.key);
    } else if (cur->kind == PNode::List && e.is_index && e.index >= 0 && e.index < (1 << 24)) {
      next = cur->list_child(static_cast<size_t>(e.index));
    } else {
      throw UnsupportedError(Where("", std::nullopt, key), "planner_data paths conflict; use --flat");
    }
    if (i + 1 == path.size()) {
      if (next->kind != PNode::Empty) throw FormatError(Where("", std::nullopt, key), "two items share one planner_data path; use --flat");
      next->kind = leaf_kind;
      next->leaf = leaf;
    } else if (next->kind == PNode::Empty) {
      next->kind = path[i + 1].is_index ? PNode::List : PNode::Dict;
    } else if (next->kind == PNode::Tensor || next->kind == PNode::Value) {
      throw FormatError(Where("", std::nullopt, key), "an item sits where another item's path continues; use --flat");
    }
    cur = next;
  }
}

void emit(Pickler& p, const PNode& n, const std::vector<OutTensor>& tensors,
          const std::vector<std::unique_ptr<pickle::Tree>>& values) {
  switch (n.kind) {
    case PNode::Empty: p.none(); break;
    case PNode::Dict:
      p.empty_dict();
      if (!n.dict.empty()) {
        p.mark();
        for (const auto& [k, c] : n.dict) {
          p.str(k);
          emit(p, *c, tensors, values);
        }
        p.setitems();
      }
      break;
    case PNode::List:
      p.empty_list();
      if (!n.list.empty()) {
        p.mark();
        for (const auto& c : n.list) emit(p, *c, tensors, values);
        p.appends();
      }
      break;
    case PNode::Tensor: {
      const OutTensor& t = tensors[n.leaf];
      pickle_tensor(p, t.dst, t.t->shape, std::to_string(n.leaf));
      break;
    }
    case PNode::Value: p.value(values[n.leaf]->root); break;
  }
}

// Globals torch.load(weights_only=True) accepts in plain values (torch/_weights_only_unpickler.py).
bool weights_only_global(std::string_view m, std::string_view n) {
  if (m == "collections" && n == "OrderedDict") return true;
  if (m == "torch" && (n == "Size" || dtype_from_torch_name(n))) return true;
  if ((m == "builtins" || m == "__builtin__") && (n == "set" || n == "frozenset" || n == "bytearray" || n == "complex")) return true;
  if (m == "_codecs" && n == "encode") return true;
  return false;
}

bool tree_weights_only(const pickle::Tree& tree, std::string& bad) {
  for (const auto* g : tree.globals())
    if (!weights_only_global(g->module, g->name)) {
      bad = std::string(g->module) + "." + std::string(g->name);
      return false;
    }
  return true;
}

// Several processes (torchrun): the ranks that can read each chunk push it to the rank that
// writes it (rank 0, or with --parallel-write the rank a shard was dealt to), which writes exactly
// what the single-process run writes. See dist/exchange.h for the transfer protocol.
struct DistributedWrite {
  static constexpr uint64_t kTransferWindow = 16ull << 20;

  const Checkpoint& ck;
  const ConsolidateOptions& o;
  const std::vector<OutTensor>& tensors;
  const std::vector<OutFile>& files;
  uint64_t budget;   // --max-memory, or the automatic one (raised here for set-aside decodes)
  uint64_t largest;  // the largest buffer any writer task takes
  Progress& prog;
  const ItemReader& reader;
  ChunkOwners& owners;
  std::unique_ptr<MemoryGate> gate_ptr;  // made in run(), once the set-aside is known

  struct Item {
    size_t tensor;                // index into tensors
    std::vector<uint32_t> chunks;  // in the order the writer consumes them
    bool whole;                   // assembled in a buffer (else each chunk goes straight out)
    bool streamed;                // .pt: a record streamed chunk by chunk
    int writer;
    unsigned lane;
  };

  MemoryGate& gate() const { return *gate_ptr; }
  size_t meta_index(const OutTensor& ot) const { return static_cast<size_t>(ot.t - ck.md.tensors.data()); }

  // Receives the chunks of a whole tensor into `full` (its dense bytes, source dtype).
  void assemble(ChunkExchange& ex, unsigned lane, const Item& it, uint8_t* full) const {
    const TensorMeta& t = *tensors[it.tensor].t;
    size_t item = itemsize(*t.dtype);
    std::vector<uint8_t> tmp;
    for (uint32_t c : it.chunks) {
      if (chunk_is_run(t, c)) {
        uint8_t* at = full + chunk_start(t, c);
        ex.receive(lane, meta_index(tensors[it.tensor]), c, [&](const uint8_t* p, uint64_t off, uint64_t n) { std::memcpy(at + off, p, n); });
      } else {
        tmp.resize(t.chunk_numel(c) * item);
        ex.receive(lane, meta_index(tensors[it.tensor]), c, [&](const uint8_t* p, uint64_t off, uint64_t n) { std::memcpy(tmp.data() + off, p, n); });
        place_chunk(t, c, item, tmp.data(), full);
      }
    }
  }

  // Window `p` (n source bytes) cast when needed; returns what to write.
  static const uint8_t* cast_window(const OutTensor& ot, const uint8_t* p, uint64_t n, std::vector<uint8_t>& conv) {
    if (ot.src == ot.dst) return p;
    uint64_t elems = n / itemsize(ot.src);
    conv.resize(elems * itemsize(ot.dst));
    cast_elements(ot.src, ot.dst, p, conv.data(), elems);
    return conv.data();
  }

  void write_safetensors_item(ChunkExchange& ex, const Item& it, OutputFile& out) const {
    const OutTensor& ot = tensors[it.tensor];
    uint64_t base = files[static_cast<size_t>(ot.file)].header.size() + ot.begin;
    size_t si = itemsize(ot.src), di = itemsize(ot.dst);
    std::vector<uint8_t> conv;
    if (it.whole) {
      GateReservation hold(gate(), ot.need);
      std::vector<uint8_t> full(ot.t->nbytes());
      assemble(ex, it.lane, it, full.data());
      const uint8_t* data = cast_window(ot, full.data(), full.size(), conv);
      out.pwrite_all(data, ot.out_bytes, base);
      prog.add(ot.out_bytes);
      return;
    }
    uint32_t c = it.chunks.front();
    uint64_t out_off = base + chunk_start(*ot.t, c) / si * di;
    // A chunk read on this rank that must be decoded whole (zstd, a non-contiguous view) takes
    // its memory from the gate; the lane holds nothing else.
    ex.receive(it.lane, meta_index(ot), c, [&](const uint8_t* p, uint64_t off, uint64_t n) {
      out.pwrite_all(cast_window(ot, p, n, conv), n / si * di, out_off + off / si * di);
      prog.add(n / si * di);
    }, &gate());
  }

  void write_pt(ChunkExchange& ex, const std::vector<Item>& items, const std::string& pickle, OutputFile& out) const {
    TorchSaveWriter zw(out);
    zw.write_pickle(pickle);
    std::vector<uint8_t> conv;
    for (const Item& it : items) {
      const OutTensor& ot = tensors[it.tensor];
      std::string key = std::to_string(it.tensor);
      if (it.streamed) {
        zw.write_storage_streamed(key, ot.out_bytes, [&] {
          uint32_t crc = 0;
          for (uint32_t c : it.chunks)
            ex.receive(0, meta_index(ot), c, [&](const uint8_t* p, uint64_t, uint64_t n) {
              const uint8_t* data = cast_window(ot, p, n, conv);
              uint64_t m = n / itemsize(ot.src) * itemsize(ot.dst);
              crc = crc32_update(crc, data, m);
              out.append(data, m);
            }, &gate());
          return crc;
        });
      } else {
        GateReservation hold(gate(), ot.need);
        std::vector<uint8_t> full(ot.t->nbytes());
        assemble(ex, 0, it, full.data());
        zw.write_storage(key, cast_window(ot, full.data(), full.size(), conv), ot.out_bytes);
      }
      prog.add(ot.out_bytes);
    }
    zw.finish();
  }

  void run(const std::function<std::string()>& pt_pickle, const std::function<void(OutputDir&)>& write_index, json& summary) {
    Group& g = *o.group;
    const int me = g.rank(), world = g.size();
    const bool leader = me == 0, to_st = o.format != OutputFormat::Torch;

    // Who writes which file, and in what order each writer's lanes take their items.
    std::vector<int> writer_of(files.size(), 0);
    if (o.parallel_write) {
      std::vector<uint64_t> load(static_cast<size_t>(world), 0);
      for (size_t f = 0; f < files.size(); ++f) {
        size_t r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        writer_of[f] = static_cast<int>(r);
        load[r] += files[f].data_bytes;
      }
    }
    const unsigned lanes = to_st && g.tagged() ? std::max(1u, o.threads) : 1;
    // Items are listed writer by writer: the lowest writer with work left then always has every
    // owner at its next transfer, so a lane waiting on its rank's memory budget waits only for
    // lanes that are moving (dist/exchange.h).
    std::vector<Item> items;
    for (int w = 0; w < (to_st ? world : 1); ++w) {
      unsigned next = 0;
      for (size_t i = 0; i < tensors.size(); ++i) {
        const TensorMeta& t = *tensors[i].t;
        if (to_st && writer_of[static_cast<size_t>(tensors[i].file)] != w) continue;
        std::vector<uint32_t> nonempty;
        for (size_t c = 0; c < t.num_chunks(); ++c)
          if (t.chunk_numel(c) > 0) nonempty.push_back(static_cast<uint32_t>(c));
        if (!to_st) {
          std::vector<uint32_t> order = streamed_order(t);
          bool streamed = !order.empty();
          items.push_back({i, streamed ? order : nonempty, !streamed, streamed, 0, 0});
        } else if (tensors[i].all_runs) {
          for (uint32_t c : nonempty) items.push_back({i, {c}, false, false, w, next++ % lanes});
        } else {
          items.push_back({i, nonempty, true, false, w, next++ % lanes});
        }
      }
    }
    std::vector<Transfer> plan;
    for (const Item& it : items)
      for (uint32_t c : it.chunks)
        plan.push_back({static_cast<uint32_t>(meta_index(tensors[it.tensor])), c,
                        owners.owner(*tensors[it.tensor].t, c, it.writer, o.parallel_write), it.writer, it.lane});

    // An owner decodes a zstd chunk it pushes whole, one per pushing lane at a time. That memory
    // is set aside from its budget up front, and its lanes share the rest (dist/exchange.h says
    // why pushers do not wait on the gate). Every rank computes every rank's set-aside from the
    // same plan, so a budget too small is refused alike everywhere, before any transfer.
    std::vector<std::vector<uint64_t>> per_lane(static_cast<size_t>(world), std::vector<uint64_t>(lanes, 0));
    for (const Transfer& tr : plan) {
      const TensorMeta& t = ck.md.tensors[tr.tensor];
      if (tr.owner == tr.writer || t.storage[tr.chunk].transforms == 0) continue;
      uint64_t& m = per_lane[static_cast<size_t>(tr.owner)][tr.lane];
      m = std::max(m, ChunkExchange::whole_chunk_need(t, tr.chunk));
    }
    // A rank's need: its set-aside, plus the largest writer buffer if it writes anything.
    std::vector<bool> writes(static_cast<size_t>(world), false);
    for (const Item& it : items) writes[static_cast<size_t>(it.writer)] = true;
    uint64_t set_aside = 0, most = 0, most_set_aside = 0;
    int most_rank = 0;
    for (int r = 0; r < world; ++r) {
      uint64_t sum = 0;
      for (uint64_t m : per_lane[static_cast<size_t>(r)]) sum += m;
      if (r == me) set_aside = sum;
      uint64_t need = sum + (writes[static_cast<size_t>(r)] ? largest : 0);
      if (need > most) most = need, most_rank = r, most_set_aside = sum;
    }
    if (!o.max_memory) budget = std::max(budget, most);
    if (most > budget)
      throw UsageError(Where(ck.metadata_path), "under torchrun, rank " + std::to_string(most_rank) + " decodes the zstd chunks it sends whole, " +
                                                    std::to_string(lanes) + " lane(s) at once: it needs " + std::to_string(most_set_aside) +
                                                    " bytes for them" + (writes[static_cast<size_t>(most_rank)] ? " beside its largest buffer (" + std::to_string(largest) + ")" : std::string()) +
                                                    ", more than --max-memory " + std::to_string(budget) + "; raise --max-memory or lower --threads");
    summary["max_memory"] = budget;
    gate_ptr = std::make_unique<MemoryGate>(budget - set_aside);

    // The same plan on every rank (the command was agreed on at the start; this catches two
    // .metadata of one size and save id that differ), less what only rank 0 reads (the
    // non-tensor values) and the directory, which --local-files lets differ.
    json digest = summary;
    for (const char* k : {"checkpoint", "non_tensor_included", "non_tensor_skipped"}) digest.erase(k);
    g.agree("plan", Sha256::of(digest.dump()));

    // Rank 0 creates the outputs under temporary names; writers of other shards open them there
    // (a shared filesystem, --parallel-write only).
    std::unique_ptr<OutputDir> dir;
    std::vector<std::unique_ptr<OutputFile>> outs(to_st ? files.size() : 1);
    if (leader) {
      std::exception_ptr failed;
      std::string error;
      ExitCode code = ExitCode::ok;
      try {
        if (o.format == OutputFormat::HfDir) dir = std::make_unique<OutputDir>(o.output);
        std::string paths;
        for (size_t f = 0; f < outs.size(); ++f) {
          outs[f] = std::make_unique<OutputFile>(dir ? dir->path_of(files[f].name) : o.output);
          if (to_st) {
            outs[f]->reserve(files[f].header.size() + files[f].data_bytes);
            outs[f]->pwrite_all(files[f].header.data(), files[f].header.size(), 0);
          }
          paths += outs[f]->temp_path() + "\n";
        }
        g.publish("outputs", paths);
      } catch (const std::exception& e) {
        error = e.what();
        code = exit_code_of(e);
        failed = std::current_exception();
      }
      g.announce("setup", error, code);
      if (failed) std::rethrow_exception(failed);
    }
    g.await("setup");

    try {
      if (!leader && o.parallel_write) {
        std::string paths = g.fetch("outputs");
        size_t f = 0;
        for (size_t a = 0, b; (b = paths.find('\n', a)) != std::string::npos; a = b + 1, ++f)
          if (f < outs.size() && writer_of[f] == me) outs[f] = OutputFile::open_shared(paths.substr(a, b - a));
      }
      failpoint("consolidate-write", me);
      ChunkExchange ex(g, reader, std::move(plan), lanes, kTransferWindow, gate());
      ex.start_pushing();
      try {
        if (to_st) {
          parallel_for(lanes, lanes, [&](size_t lane) {
            try {
              for (const Item& it : items)
                if (it.writer == me && it.lane == lane) write_safetensors_item(ex, it, *outs[static_cast<size_t>(tensors[it.tensor].file)]);
            } catch (...) {
              ex.fail(std::current_exception());
              throw;
            }
          });
        } else if (leader) {
          write_pt(ex, items, pt_pickle(), *outs[0]);
        }
      } catch (...) {
        ex.fail(std::current_exception());
        std::rethrow_exception(ex.first_error());
      }
      ex.finish_pushing();
    } catch (const std::exception& e) {
      g.report("write", e.what(), exit_code_of(e));
      if (leader) g.announce("commit", std::string("rank 0 failed: ") + e.what(), exit_code_of(e));
      throw;
    }
    g.report("write", "", ExitCode::ok);
    if (!leader) {
      g.await("commit");
      summary["rank"] = me;
      return;
    }
    try {
      g.collect("write");
      for (auto& f : outs) f->commit();
      if (dir) {
        if (files.size() > 1) write_index(*dir);
        dir->commit();
      }
    } catch (const std::exception& e) {
      g.announce("commit", e.what(), exit_code_of(e));
      throw;
    }
    g.announce("commit", "", ExitCode::ok);
    summary["ranks"] = world;
    summary["backend"] = g.backend_name();
  }
};

}  // namespace

json consolidate(const Checkpoint& ck, const ConsolidateOptions& o) {
  require_complete(ck);
  auto t0 = std::chrono::steady_clock::now();
  const Metadata& md = ck.md;
  if (o.group) {
    // Every rank must be running the same command on the same checkpoint before anything else
    // (the directory itself may differ: --local-files).
    json cmd = {{"format", static_cast<int>(o.format)}, {"output", o.output}, {"max_shard_size", o.max_shard_size},
                {"include", o.selection.include}, {"exclude", o.selection.exclude}, {"select", o.selection.prefix},
                {"cast", o.cast ? static_cast<int>(*o.cast) : -1}, {"flat", o.flat}, {"keep_unsafe", o.keep_unsafe_values},
                {"force", o.force}, {"dry_run", o.dry_run}, {"parallel_write", o.parallel_write},
                {"local_files", o.local_files}, {"max_memory", o.max_memory},
                {"metadata_bytes", ck.metadata_bytes},
                {"save_id", md.storage_meta && md.storage_meta->save_id ? *md.storage_meta->save_id : ""}};
    o.group->agree("command", Sha256::of(cmd.dump()));
  }
  std::vector<SelectedItem> items = select_items(md, o.selection);

  // ---- plan: validate everything before writing anything ----
  std::vector<OutTensor> tensors;
  std::vector<const SelectedItem*> value_items;
  std::vector<std::string> skipped_values;
  CoverageCheck coverage;
  CastChoice cast(o.cast);
  for (const auto& it : items) {
    if (!it.tensor) {
      value_items.push_back(&it);
      continue;
    }
    const TensorMeta& t = md.tensors[it.index];
    if (!t.dtype) throw UnsupportedError(Where(ck.metadata_path, std::nullopt, t.fqn), "dtype " + t.dtype_name + " is unknown to dcpctl");
    if (!coverage.covered(t)) continue;
    OutTensor ot;
    ot.t = &t;
    ot.key = it.key;
    ot.src = *t.dtype;
    ot.dst = cast.target(ot.src, it.key);
    ot.out_bytes = t.numel() * itemsize(ot.dst);
    uint64_t max_chunk = 0;
    for (size_t c = 0; c < t.num_chunks(); ++c) {
      if (t.chunk_numel(c) == 0) continue;
      ot.all_runs = ot.all_runs && chunk_is_run(t, c);
      ot.transformed = ot.transformed || t.storage[c].transforms != 0;
      max_chunk = std::max(max_chunk, t.chunk_numel(c) * itemsize(ot.src));
    }
    uint64_t cast_extra = ot.dst != ot.src;
    if (o.format == OutputFormat::Torch || !ot.all_runs) {
      // The whole tensor (and its cast), plus per chunk read in flight the decoded item (zstd)
      // and the dense copy a chunk that is not a run is placed from; the .pt writer reads its
      // chunks on all threads at once.
      uint64_t reads = o.format == OutputFormat::Torch ? std::min<uint64_t>(std::max(1u, o.threads), t.num_chunks()) : 1;
      uint64_t copies = (ot.transformed ? 1 : 0) + (ot.all_runs ? 0 : 1);
      ot.need = t.nbytes() + cast_extra * ot.out_bytes + reads * copies * max_chunk;
    } else if (ot.transformed) {
      ot.need = max_chunk * (2 + cast_extra);  // the decoded item, the chunk, its cast
    } else {
      ot.need = std::min(max_chunk, o.window) * (1 + cast_extra);
    }
    tensors.push_back(ot);
  }
  coverage.refuse_if_incomplete(Where(ck.dir), "write a partial model");

  bool to_safetensors = o.format != OutputFormat::Torch;
  if (to_safetensors)
    for (const auto& t : tensors)
      if (!*info(t.dst).safetensors_name)
        throw UnsupportedError(Where(ck.metadata_path, std::nullopt, t.t->fqn),
                               std::string("safetensors has no type for torch.") + torch_name(t.dst) +
                                   "; exclude it (--exclude), cast it (--dtype) or write a .pt");
  if (tensors.empty() && to_safetensors) throw UsageError(Where(ck.dir), "the selection holds no tensors; safetensors holds tensors only");

  uint64_t largest = 0;
  for (const auto& t : tensors) largest = std::max(largest, t.need);
  uint64_t budget = memory_budget(o.max_memory, largest);
  if (largest > budget) {
    const OutTensor* worst = nullptr;
    for (const auto& t : tensors)
      if (t.need == largest) worst = &t;
    throw UsageError(Where(ck.metadata_path, std::nullopt, worst->t->fqn),
                     "needs a buffer of " + std::to_string(largest) + " bytes, more than --max-memory " + std::to_string(budget));
  }

  // Layout.
  std::vector<OutFile> files;
  uint64_t total_bytes = 0;
  for (const auto& t : tensors) total_bytes += t.out_bytes;
  if (to_safetensors) {
    uint64_t cap = o.format == OutputFormat::HfDir ? o.max_shard_size : UINT64_MAX;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (files.empty() || (files.back().data_bytes + tensors[i].out_bytes > cap && !files.back().tensors.empty()))
        files.emplace_back();
      OutFile& f = files.back();
      tensors[i].file = static_cast<int>(files.size() - 1);
      tensors[i].begin = f.data_bytes;
      f.data_bytes += tensors[i].out_bytes;
      f.tensors.push_back(i);
    }
    for (size_t f = 0; f < files.size(); ++f) {
      char name[64];
      if (o.format == OutputFormat::HfDir && files.size() > 1)
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", f + 1, files.size());
      else
        std::snprintf(name, sizeof name, "model.safetensors");
      files[f].name = name;
      std::vector<SafetensorsEntry> entries;
      for (size_t i : files[f].tensors)
        entries.push_back({tensors[i].key, tensors[i].dst, tensors[i].t->shape, tensors[i].begin, tensors[i].begin + tensors[i].out_bytes});
      files[f].header = safetensors_header(entries, {{"format", "pt"}});
    }
  } else {
    files.push_back({"", {}, total_bytes, {}});
  }

  // Non-tensor values: safetensors cannot hold them; .pt re-pickles them.
  ItemReader reader(ck);
  std::vector<std::unique_ptr<pickle::Tree>> values;
  std::vector<const SelectedItem*> kept_values;
  // Under torchrun the bytes move through the process group; which rank sees which file.
  std::unique_ptr<ChunkOwners> owners;
  if (o.group && !o.dry_run) {
    o.group->connect_transport();
    owners = std::make_unique<ChunkOwners>(*o.group, ck, o.local_files);
    if (!to_safetensors && o.local_files) {
      std::vector<BytesMeta> raw;
      for (const SelectedItem* it : value_items) raw.push_back(md.bytes[it->index]);
      gather_raw_items(*o.group, *owners, reader, raw, 0);
    }
  }
  if (!to_safetensors && (!o.group || o.group->rank() == 0)) {  // under torchrun, rank 0 alone writes
    for (const SelectedItem* it : value_items) {
      const BytesMeta& b = md.bytes[it->index];
      std::unique_ptr<pickle::Tree> tree = reader.read_bytes(b);
      std::string bad;
      if (!o.keep_unsafe_values && !tree_weights_only(*tree, bad)) {
        skipped_values.push_back(it->key + " (holds " + bad + ", which torch.load(weights_only=True) refuses)");
        continue;
      }
      Pickler trial(2);
      if (!trial.value(tree->root)) {
        skipped_values.push_back(it->key + " (holds tensors or nesting dcpctl cannot re-pickle)");
        continue;
      }
      values.push_back(std::move(tree));
      kept_values.push_back(it);
    }
  } else {
    for (const SelectedItem* it : value_items) skipped_values.push_back(it->key);
  }

  json summary;
  summary["schema_version"] = 1;
  summary["checkpoint"] = ck.dir;
  summary["output"] = o.output;
  summary["format"] = o.format == OutputFormat::Torch ? "torch" : o.format == OutputFormat::HfDir ? "hf-safetensors" : "safetensors";
  summary["tensors"] = tensors.size();
  summary["tensor_bytes"] = total_bytes;
  summary["non_tensor_included"] = kept_values.size();
  summary["non_tensor_skipped"] = skipped_values;
  summary["cast"] = cast.summary();
  summary["max_memory"] = budget;
  json fj = json::array();
  for (const auto& f : files) {
    std::string path = o.format == OutputFormat::HfDir ? o.output + "/" + f.name : o.output;
    fj.push_back({{"path", path}, {"tensors", f.tensors.size()}, {"bytes", f.header.size() + f.data_bytes}});
  }
  if (o.format == OutputFormat::HfDir && files.size() > 1) fj.push_back({{"path", o.output + "/model.safetensors.index.json"}});
  summary["files"] = fj;
  summary["dry_run"] = o.dry_run;
  // The output checks come before the plan is printed: a dry run that says OK must mean the
  // real run would not refuse the output (exists without --force, inside the checkpoint).
  Group* group = o.group;
  bool leader = !group || group->rank() == 0;
  if (leader) {
    try {
      check_output_path(o.output, o.force, ck.dir);
    } catch (const std::exception& e) {
      // The other ranks are about to agree on the plan (run()): they learn of this refusal
      // there, with its exit code, instead of waiting for a rank 0 that is gone.
      if (group && !o.dry_run) group->announce("agree/plan", std::string("rank 0 failed: ") + e.what(), exit_code_of(e));
      throw;
    }
  }
  if (o.dry_run) {
    json keys = json::array();
    for (const auto& t : tensors)
      keys.push_back({{"key", t.key}, {"dtype", torch_name(t.dst)}, {"shape", t.t->shape}, {"bytes", t.out_bytes},
                      {"file", to_safetensors ? files[static_cast<size_t>(t.file)].name : o.output}});
    summary["plan"] = keys;
    return summary;
  }
  if (o.note && !skipped_values.empty())
    o.note(std::to_string(skipped_values.size()) + " non-tensor item(s) left out" +
           (to_safetensors ? " (safetensors holds tensors only)" : "") + ": " + skipped_values.front() +
           (skipped_values.size() > 1 ? ", ..." : ""));

  // ---- write ----
  MemoryGate gate(budget);
  Progress prog;
  prog.total = total_bytes;
  prog.o = &o;
  unsigned threads = std::max(1u, o.threads);

  // data.pkl of a .pt: the structure and the tensor references.
  auto pt_pickle = [&] {
    Pickler p(2);
    if (o.flat) {
      p.empty_dict();
      p.mark();
      size_t ti = 0, vi = 0;
      for (const auto& it : items) {
        if (it.tensor) {
          if (ti < tensors.size() && tensors[ti].key == it.key) {
            p.str(it.key);
            pickle_tensor(p, tensors[ti].dst, tensors[ti].t->shape, std::to_string(ti));
            ++ti;
          }
        } else if (vi < kept_values.size() && kept_values[vi] == &it) {
          p.str(it.key);
          p.value(values[vi]->root);
          ++vi;
        }
      }
      p.setitems();
    } else {
      PNode root;
      root.kind = PNode::Dict;
      size_t ti = 0, vi = 0;
      for (const auto& it : items) {
        if (it.tensor) {
          if (ti < tensors.size() && tensors[ti].key == it.key) {
            insert_path(root, it.path, PNode::Tensor, ti, it.key);
            ++ti;
          }
        } else if (vi < kept_values.size() && kept_values[vi] == &it) {
          insert_path(root, it.path, PNode::Value, vi, it.key);
          ++vi;
        }
      }
      emit(p, root, tensors, values);
    }
    p.stop();
    return p.data();
  };
  // The HF index names every tensor's shard.
  auto write_index = [&](OutputDir& dir) {
    nlohmann::ordered_json idx;
    idx["metadata"] = {{"total_size", total_bytes}};
    nlohmann::ordered_json wm = nlohmann::ordered_json::object();
    for (const auto& t : tensors) wm[t.key] = files[static_cast<size_t>(t.file)].name;
    idx["weight_map"] = wm;
    std::string text = idx.dump(2) + "\n";
    OutputFile f(dir.path_of("model.safetensors.index.json"));
    f.append(text.data(), text.size());
    f.commit();
  };

  if (group) {
    DistributedWrite dw{ck, o, tensors, files, budget, largest, prog, reader, *owners, nullptr};
    dw.run(pt_pickle, write_index, summary);
    if (!leader) return summary;
  } else if (to_safetensors) {
    std::unique_ptr<OutputDir> dir;
    std::vector<std::unique_ptr<OutputFile>> outs;
    if (o.format == OutputFormat::HfDir) dir = std::make_unique<OutputDir>(o.output);
    for (auto& f : files) {
      outs.push_back(std::make_unique<OutputFile>(dir ? dir->path_of(f.name) : o.output));
      outs.back()->reserve(f.header.size() + f.data_bytes);
      outs.back()->pwrite_all(f.header.data(), f.header.size(), 0);
    }
    // Work items: (tensor, chunk) for tensors whose chunks are runs, (tensor, all) otherwise.
    struct Work {
      size_t tensor;
      size_t chunk;  // SIZE_MAX: the whole tensor through a buffer
    };
    std::vector<Work> work;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].all_runs) {
        for (size_t c = 0; c < tensors[i].t->num_chunks(); ++c)
          if (tensors[i].t->chunk_numel(c) > 0) work.push_back({i, c});
      } else {
        work.push_back({i, SIZE_MAX});
      }
    }
    std::atomic<bool> cfr_ok{true};
    parallel_for(work.size(), threads, [&](size_t w) {
      const OutTensor& ot = tensors[work[w].tensor];
      const TensorMeta& t = *ot.t;
      OutputFile& out = *outs[static_cast<size_t>(ot.file)];
      uint64_t base = files[static_cast<size_t>(ot.file)].header.size() + ot.begin;
      size_t si = itemsize(ot.src), di = itemsize(ot.dst);
      bool cast = ot.src != ot.dst;
      if (work[w].chunk == SIZE_MAX) {
        GateReservation hold(gate, ot.need);
        std::vector<uint8_t> full(t.nbytes());
        read_full_tensor(reader, t, full.data(), 1);
        if (cast) {
          std::vector<uint8_t> conv(ot.out_bytes);
          cast_elements(ot.src, ot.dst, full.data(), conv.data(), t.numel());
          out.pwrite_all(conv.data(), ot.out_bytes, base);
        } else {
          out.pwrite_all(full.data(), ot.out_bytes, base);
        }
        prog.add(ot.out_bytes);
        return;
      }
      size_t c = work[w].chunk;
      uint64_t n = t.chunk_numel(c);
      uint64_t out_off = base + chunk_start(t, c) / si * di;
      std::optional<DirectRun> run = reader.direct_run(t, c);
      if (run && !cast) {
        uint64_t win = std::min(run->bytes, o.window);
        bool use_cfr = cfr_ok.load();
        if (use_cfr) {
          // copy_file_range needs no buffer; take one only if it turns out unavailable.
          copy_range(*run->file, run->offset, out, out_off, run->bytes, nullptr, win, use_cfr, out.fd());
          if (!use_cfr) cfr_ok = false;
          else {
            prog.add(run->bytes);
            return;
          }
        }
        GatedBuffer buf(gate, win);
        bool no = false;
        copy_range(*run->file, run->offset, out, out_off, run->bytes, buf.data(), win, no, -1);
        prog.add(run->bytes);
      } else if (run) {
        uint64_t elems = std::max<uint64_t>(1, std::min(n, o.window / si));
        GateReservation hold(gate, elems * (si + di));
        std::vector<uint8_t> in(elems * si), conv(elems * di);
        for (uint64_t e = 0; e < n; e += elems) {
          uint64_t k = std::min(elems, n - e);
          run->file->read_at(run->offset + e * si, in.data(), k * si, t.fqn);
          cast_elements(ot.src, ot.dst, in.data(), conv.data(), k);
          out.pwrite_all(conv.data(), k * di, out_off + e * di);
          prog.add(k * di);
        }
      } else {
        // The decoded item (when transformed) is held while the chunk is read out of it.
        GateReservation hold(gate, n * si * (ot.transformed ? 2 : 1) + (cast ? n * di : 0));
        std::vector<uint8_t> in(n * si);
        reader.read_chunk(t, c, in.data());
        if (cast) {
          std::vector<uint8_t> conv(n * di);
          cast_elements(ot.src, ot.dst, in.data(), conv.data(), n);
          out.pwrite_all(conv.data(), n * di, out_off);
        } else {
          out.pwrite_all(in.data(), n * si, out_off);
        }
        prog.add(n * di);
      }
    });
    for (auto& f : outs) f->commit();
    if (dir) {
      if (files.size() > 1) write_index(*dir);
      dir->commit();
    }
  } else {
    // .pt: data.pkl first, then each storage in order.
    OutputFile out(o.output);
    TorchSaveWriter zw(out);
    zw.write_pickle(pt_pickle());
    // Windows for streamed tensors: 1 MiB of source elements (and their cast), outside the budget.
    constexpr uint64_t kWindowBytes = 1 << 20;
    std::unique_ptr<uint8_t[]> win_in(new uint8_t[kWindowBytes]), win_out(new uint8_t[kWindowBytes * 16]);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const OutTensor& ot = tensors[i];
      // Dim-0 shards stream straight into the record, chunk by chunk: read in place a window at a
      // time, or (a saved view that is not contiguous) decoded whole, inside the budget.
      if (std::vector<uint32_t> order = streamed_order(*ot.t); !order.empty()) {
        const TensorMeta& t = *ot.t;
        size_t si = itemsize(ot.src), di = itemsize(ot.dst);
        zw.write_storage_streamed(std::to_string(i), ot.out_bytes, [&] {
          uint32_t crc = 0;
          for (uint32_t c : order) {
            if (std::optional<DirectRun> run = reader.direct_run(t, c)) {
              crc = stream_pieces(out, {{run->file, run->offset, run->bytes, 0}}, ot.src, ot.dst, win_in.get(),
                                  win_out.get(), kWindowBytes / si, crc);
              continue;
            }
            uint64_t n = t.chunk_numel(c);
            GateReservation hold(gate, ChunkExchange::whole_chunk_need(t, c) + (ot.src != ot.dst ? n * di : 0));
            std::vector<uint8_t> in(n * si), conv;
            reader.read_chunk(t, c, in.data());
            const uint8_t* data = in.data();
            if (ot.src != ot.dst) {
              conv.resize(n * di);
              cast_elements(ot.src, ot.dst, in.data(), conv.data(), n);
              data = conv.data();
            }
            crc = crc32_update(crc, data, n * di);
            out.append(data, n * di);
          }
          return crc;
        });
        prog.add(ot.out_bytes);
        continue;
      }
      GateReservation hold(gate, ot.need);
      std::vector<uint8_t> full(ot.t->nbytes());
      read_full_tensor(reader, *ot.t, full.data(), threads);
      if (ot.src != ot.dst) {
        std::vector<uint8_t> conv(ot.out_bytes);
        cast_elements(ot.src, ot.dst, full.data(), conv.data(), ot.t->numel());
        zw.write_storage(std::to_string(i), conv.data(), ot.out_bytes);
      } else {
        zw.write_storage(std::to_string(i), full.data(), ot.out_bytes);
      }
      prog.add(ot.out_bytes);
    }
    zw.finish();
    out.commit();
  }

  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  summary["seconds"] = secs;
  summary["gb_per_s"] = secs > 0 ? static_cast<double>(total_bytes) / secs / 1e9 : 0.0;
  summary["peak_rss_bytes"] = peak_rss_bytes();
  return summary;
}

}  // namespace dcpctl
