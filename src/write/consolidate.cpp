#include "write/consolidate.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "dist/commit.h"
#include "dist/exchange.h"
#include "dist/group.h"
#include "item/chunk_source.h"
#include "item/item_reader.h"
#include "plan/plan.h"
#include "util/failpoint.h"
#include "util/memory_gate.h"
#include "util/numeric.h"
#include "util/parallel.h"
#include "util/sha256.h"
#include "write/executor.h"
#include "write/output.h"
#include "write/pickler.h"
#include "write/run.h"
#include "write/safetensors.h"
#include "write/torch_save.h"

namespace dcpctl {

using nlohmann::json;

namespace {

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

void emit(Pickler& p, const PNode& n, const std::vector<PlannedTensor>& tensors,
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
      const PlannedTensor& t = tensors[n.leaf];
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

// Under torchrun every rank must be running the same command on the same checkpoint before
// anything else (the directory itself may differ: --local-files).
void agree_on_command(Group& group, const Checkpoint& ck, const ConsolidateOptions& o) {
  const Metadata& md = ck.md;
  json cmd = {{"format", static_cast<int>(o.format)}, {"output", o.output}, {"max_shard_size", o.max_shard_size},
              {"include", o.selection.include}, {"exclude", o.selection.exclude}, {"select", o.selection.prefix},
              {"cast", o.cast ? static_cast<int>(*o.cast) : -1}, {"flat", o.flat}, {"keep_unsafe", o.keep_unsafe_values},
              {"force", o.force}, {"dry_run", o.dry_run}, {"parallel_write", o.parallel_write},
              {"local_files", o.local_files}, {"max_memory", o.max_memory},
              {"metadata_bytes", ck.metadata_bytes},
              {"save_id", md.storage_meta && md.storage_meta->save_id ? *md.storage_meta->save_id : ""}};
  group.agree("command", Sha256::of(cmd.dump()));
}

// The header of each planned safetensors file (its records' keys, dtypes, shapes and offsets).
std::vector<std::string> safetensors_headers(const WritePlan& plan) {
  std::vector<std::string> headers(plan.files.size());
  for (size_t f = 0; f < headers.size(); ++f) {
    std::vector<SafetensorsEntry> entries;
    for (size_t ri : plan.files[f].records) {
      const Record& r = plan.records[ri];
      const PlannedTensor& pt = plan.tensors[r.tensor];
      entries.push_back({pt.key, pt.dst, pt.t->shape, r.offset, r.offset + r.out_bytes});
    }
    headers[f] = safetensors_header(entries, {{"format", "pt"}});
  }
  return headers;
}

// The selected non-tensor values: those a .pt keeps (decoded, re-picklable, and accepted by
// torch.load(weights_only=True) unless --keep-unsafe-values), and the keys of those left out.
struct Values {
  std::vector<std::unique_ptr<pickle::Tree>> trees;
  std::vector<const SelectedItem*> kept;  // trees[i] is kept[i]'s
  std::vector<std::string> skipped;
};

Values read_values(const WritePlan& plan, const Metadata& md, ItemReader& reader, bool keep_unsafe) {
  Values v;
  for (const SelectedItem* it : plan.values) {
    std::unique_ptr<pickle::Tree> tree = reader.read_bytes(md.bytes[it->index]);
    std::string bad;
    if (!keep_unsafe && !tree_weights_only(*tree, bad)) {
      v.skipped.push_back(it->key + " (holds " + bad + ", which torch.load(weights_only=True) refuses)");
      continue;
    }
    Pickler trial(2);
    if (!trial.value(tree->root)) {
      v.skipped.push_back(it->key + " (holds tensors or nesting dcpctl cannot re-pickle)");
      continue;
    }
    v.trees.push_back(std::move(tree));
    v.kept.push_back(it);
  }
  return v;
}

// data.pkl of a .pt: the structure and the tensor references (storage key: the tensor's index),
// nested by planner_data as dcp_to_torch_save nests, or flat.
std::string pt_pickle(const WritePlan& plan, const Values& values, bool flat) {
  Pickler p(2);
  // The items in .metadata order, each a tensor the plan kept or a value read_values kept.
  auto each_item = [&](const auto& tensor, const auto& value) {
    size_t ti = 0, vi = 0;
    for (const auto& it : plan.items) {
      if (it.tensor) {
        if (ti < plan.tensors.size() && plan.tensors[ti].key == it.key) tensor(it, ti++);
      } else if (vi < values.kept.size() && values.kept[vi] == &it) {
        value(it, vi++);
      }
    }
  };
  if (flat) {
    p.empty_dict();
    p.mark();
    each_item([&](const SelectedItem& it, size_t ti) {
      p.str(it.key);
      pickle_tensor(p, plan.tensors[ti].dst, plan.tensors[ti].t->shape, std::to_string(ti));
    }, [&](const SelectedItem& it, size_t vi) {
      p.str(it.key);
      p.value(values.trees[vi]->root);
    });
    p.setitems();
  } else {
    PNode root;
    root.kind = PNode::Dict;
    each_item([&](const SelectedItem& it, size_t ti) { insert_path(root, it.path, PNode::Tensor, ti, it.key); },
              [&](const SelectedItem& it, size_t vi) { insert_path(root, it.path, PNode::Value, vi, it.key); });
    emit(p, root, plan.tensors, values.trees);
  }
  p.stop();
  return p.data();
}

// The summary (README: "consolidate --json") as far as the plan tells it; the run adds its times.
json describe(const Checkpoint& ck, const ConsolidateOptions& o, const WritePlan& plan, const std::vector<std::string>& headers,
              const Values& values) {
  json summary;
  summary["schema_version"] = 1;
  summary["checkpoint"] = ck.dir;
  summary["output"] = o.output;
  summary["format"] = o.format == OutputFormat::Torch ? "torch" : o.format == OutputFormat::HfDir ? "hf-safetensors" : "safetensors";
  summary["tensors"] = plan.tensors.size();
  summary["tensor_bytes"] = plan.total_bytes;
  summary["non_tensor_included"] = values.kept.size();
  summary["non_tensor_skipped"] = values.skipped;
  summary["cast"] = plan.cast.summary();
  summary["max_memory"] = plan.budget;
  json fj = json::array();
  for (size_t f = 0; f < plan.files.size(); ++f) {
    std::string path = o.format == OutputFormat::HfDir ? o.output + "/" + plan.files[f].name : o.output;
    uint64_t header = headers.empty() ? 0 : headers[f].size();
    fj.push_back({{"path", path}, {"tensors", plan.files[f].records.size()}, {"bytes", header + plan.files[f].data_bytes}});
  }
  if (o.format == OutputFormat::HfDir && plan.files.size() > 1) fj.push_back({{"path", o.output + "/model.safetensors.index.json"}});
  summary["files"] = fj;
  summary["dry_run"] = o.dry_run;
  return summary;
}

// The HF index: every tensor's shard.
void write_hf_index(const WritePlan& plan, OutputDir& dir) {
  nlohmann::ordered_json idx;
  idx["metadata"] = {{"total_size", plan.total_bytes}};
  nlohmann::ordered_json wm = nlohmann::ordered_json::object();
  for (const Record& r : plan.records) wm[plan.tensors[r.tensor].key] = plan.files[r.dest].name;
  idx["weight_map"] = wm;
  std::string text = idx.dump(2) + "\n";
  OutputFile f(dir.path_of("model.safetensors.index.json"));
  f.append(text.data(), text.size());
  f.commit();
}

// Who writes each planned file: rank 0 all of them, or with --parallel-write each the rank it is
// dealt to (by bytes, least loaded first).
std::vector<int> deal_writers(const WritePlan& plan, int world, bool parallel) {
  std::vector<int> writer_of(plan.files.size(), 0);
  if (!parallel) return writer_of;
  std::vector<uint64_t> load(static_cast<size_t>(world), 0);
  for (size_t f = 0; f < plan.files.size(); ++f) {
    size_t r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    writer_of[f] = static_cast<int>(r);
    load[r] += plan.files[f].data_bytes;
  }
  return writer_of;
}

// Under torchrun: every chunk a task needs, from the rank that reads it to the rank that writes
// it, and the budget that leaves. An owner decodes a zstd chunk it pushes whole, one per pushing
// lane at a time; that memory is set aside from its budget up front, and its lanes share the rest
// (dist/exchange.h says why pushers do not wait on the gate). Every rank computes every rank's
// set-aside from the same plan, so a budget too small is refused alike everywhere, before any
// transfer.
struct TransferPlan {
  std::vector<Transfer> transfers;
  uint64_t budget;     // this rank's --max-memory (raised to the need when it was not given)
  uint64_t set_aside;  // this rank's share of it for the chunks it pushes whole
};

TransferPlan plan_transfers(const WritePlan& plan, const Checkpoint& ck, const std::vector<Task>& tasks, ChunkOwners& owners,
                            const Group& group, unsigned lanes, const ConsolidateOptions& o) {
  const Metadata& md = ck.md;
  const int me = group.rank(), world = group.size();
  TransferPlan tp{{}, plan.budget, 0};
  for (const Task& task : tasks) {
    const Record& r = plan.records[task.record];
    for (uint32_t c : task.chunks)
      tp.transfers.push_back({static_cast<uint32_t>(&plan.meta(r) - md.tensors.data()), c,
                              owners.owner(plan.meta(r), c, task.writer, o.parallel_write), task.writer, task.lane});
  }
  std::vector<std::vector<uint64_t>> per_lane(static_cast<size_t>(world), std::vector<uint64_t>(lanes, 0));
  for (const Transfer& tr : tp.transfers) {
    const TensorMeta& t = md.tensors[tr.tensor];
    if (tr.owner == tr.writer || t.storage[tr.chunk].transforms == 0) continue;
    uint64_t& m = per_lane[static_cast<size_t>(tr.owner)][tr.lane];
    m = std::max(m, whole_chunk_need(t, tr.chunk));
  }
  // A rank's need: its set-aside, plus the largest writer buffer if it writes anything.
  std::vector<bool> writes(static_cast<size_t>(world), false);
  for (const Task& task : tasks) writes[static_cast<size_t>(task.writer)] = true;
  uint64_t most = 0, most_set_aside = 0;
  int most_rank = 0;
  for (int r = 0; r < world; ++r) {
    uint64_t sum = 0;
    for (uint64_t m : per_lane[static_cast<size_t>(r)]) sum += m;
    if (r == me) tp.set_aside = sum;
    uint64_t need = sum + (writes[static_cast<size_t>(r)] ? plan.largest_need : 0);
    if (need > most) most = need, most_rank = r, most_set_aside = sum;
  }
  if (!o.max_memory) tp.budget = std::max(tp.budget, most);
  if (most > tp.budget)
    throw UsageError(Where(ck.metadata_path), "under torchrun, rank " + std::to_string(most_rank) + " decodes the zstd chunks it sends whole, " +
                                                  std::to_string(lanes) + " lane(s) at once: it needs " + std::to_string(most_set_aside) +
                                                  " bytes for them" + (writes[static_cast<size_t>(most_rank)] ? " beside its largest buffer (" + std::to_string(plan.largest_need) + ")" : std::string()) +
                                                  ", more than --max-memory " + std::to_string(tp.budget) + "; raise --max-memory or lower --threads");
  return tp;
}

}  // namespace

json consolidate(const Checkpoint& ck, const ConsolidateOptions& o) {
  require_complete(ck);
  auto t0 = std::chrono::steady_clock::now();
  Group* group = o.group;
  const bool leader = !group || group->rank() == 0;
  const int me = group ? group->rank() : 0, world = group ? group->size() : 1;
  // The output is checked first (exists without --force, inside the checkpoint): a dry run that
  // says OK must mean the real run would not refuse it. Under torchrun rank 0 checks it before
  // any rank connects, and the others learn of a refusal at the command agreement, with its exit
  // code (had they started connecting to a rank 0 that is gone, they would end with an I/O error).
  if (leader) {
    try {
      check_output_path(o.output, o.force, ck.dir);
    } catch (const std::exception& e) {
      if (group) group->announce("agree/command", std::string("rank 0 failed: ") + e.what(), exit_code_of(e));
      throw;
    }
  }
  if (group) agree_on_command(*group, ck, o);

  // ---- plan: validate everything before writing anything ----
  const bool to_safetensors = o.format != OutputFormat::Torch;
  Target target;
  target.kind = o.format == OutputFormat::Torch ? Target::TorchZip : o.format == OutputFormat::HfDir ? Target::HfDir : Target::Safetensors;
  target.max_shard_size = o.max_shard_size;
  target.threads = std::max(1u, o.threads);
  target.window = o.window;
  target.max_memory = o.max_memory;
  // Under torchrun the ranks must plan alike, and a rank may not see every item (--local-files):
  // there, a streamed .pt record counts as assembled.
  ItemReader reader(ck);
  auto in_place = [&](const TensorMeta& t, size_t c) { return reader.readable_in_place(t, c); };
  WritePlan plan = plan_write(ck, o.selection, o.cast, target, group ? nullptr : std::function<bool(const TensorMeta&, size_t)>(in_place));
  if (!to_safetensors) plan.files[0].name = o.output;
  const std::vector<std::string> headers = to_safetensors ? safetensors_headers(plan) : std::vector<std::string>{};

  // Under torchrun the bytes move through the process group; which rank sees which file.
  std::unique_ptr<ChunkOwners> owners;
  if (group && !o.dry_run) {
    group->connect_transport();
    owners = std::make_unique<ChunkOwners>(*group, ck, o.local_files);
    if (!to_safetensors && o.local_files) {  // rank 0 needs every value it re-pickles
      std::vector<BytesMeta> raw;
      for (const SelectedItem* it : plan.values) raw.push_back(ck.md.bytes[it->index]);
      gather_raw_items(*group, *owners, reader, raw, 0);
    }
  }
  // Non-tensor values: safetensors cannot hold them; a .pt (written by rank 0 alone) re-pickles them.
  Values values;
  if (!to_safetensors && leader) {
    values = read_values(plan, ck.md, reader, o.keep_unsafe_values);
  } else {
    for (const SelectedItem* it : plan.values) values.skipped.push_back(it->key);
  }

  json summary = describe(ck, o, plan, headers, values);
  if (o.dry_run) {
    summary["plan"] = plan.describe();
    return summary;
  }
  if (o.note && !values.skipped.empty())
    o.note(std::to_string(values.skipped.size()) + " non-tensor item(s) left out" +
           (to_safetensors ? " (safetensors holds tensors only)" : "") + ": " + values.skipped.front() +
           (values.skipped.size() > 1 ? ", ..." : ""));

  // ---- write ----
  // Tasks are listed writer by writer: under torchrun the lowest writer with work left then
  // always has every owner at its next transfer, so a lane waiting on its rank's memory budget
  // waits only for lanes that are moving (dist/exchange.h). Lanes: the writing threads (under
  // torchrun one exchange lane each; one when the backend ignores tags). A .pt is written in
  // order, on one lane.
  const unsigned threads = std::max(1u, o.threads);
  const unsigned lanes = to_safetensors && (!group || group->tagged()) ? threads : 1;
  const std::vector<int> writer_of = deal_writers(plan, world, o.parallel_write);
  std::vector<Task> tasks;
  for (int w = 0; w < (to_safetensors ? world : 1); ++w) {
    unsigned next = 0;
    for (size_t ri = 0; ri < plan.records.size(); ++ri)
      if (!to_safetensors || writer_of[plan.records[ri].dest] == w) add_tasks(plan, ri, !to_safetensors, w, lanes, next, tasks);
  }
  TransferPlan tp{{}, plan.budget, 0};
  if (group) {
    tp = plan_transfers(plan, ck, tasks, *owners, *group, lanes, o);
    summary["max_memory"] = tp.budget;
    // The same plan on every rank (the command was agreed on at the start; this catches two
    // .metadata of one size and save id that differ), less what only rank 0 reads (the
    // non-tensor values) and the directory, which --local-files lets differ.
    json digest = summary;
    for (const char* k : {"checkpoint", "non_tensor_included", "non_tensor_skipped"}) digest.erase(k);
    group->agree("plan", Sha256::of(digest.dump()));
  }
  MemoryGate gate(tp.budget - tp.set_aside);
  WriteProgress prog(plan.total_bytes, o.progress);

  // Rank 0 creates the outputs under temporary names; under torchrun, writers of other shards open
  // them there (a shared filesystem, --parallel-write only).
  std::unique_ptr<OutputDir> dir;
  std::vector<std::unique_ptr<OutputFile>> outs(to_safetensors ? plan.files.size() : 1);
  const std::string paths = set_up_on_leader(group, [&] {
    if (o.format == OutputFormat::HfDir) dir = std::make_unique<OutputDir>(o.output);
    std::string list;
    for (size_t f = 0; f < outs.size(); ++f) {
      outs[f] = std::make_unique<OutputFile>(dir ? dir->path_of(plan.files[f].name) : o.output);
      if (to_safetensors) {
        outs[f]->reserve(headers[f].size() + plan.files[f].data_bytes);
        outs[f]->pwrite_all(headers[f].data(), headers[f].size(), 0);
      }
      list += outs[f]->temp_path() + "\n";
    }
    return list;
  });

  bool committed = write_then_commit(group, [&] {
    if (!leader && o.parallel_write) {
      size_t f = 0;
      for (size_t a = 0, b; (b = paths.find('\n', a)) != std::string::npos; a = b + 1, ++f)
        if (f < outs.size() && writer_of[f] == me) outs[f] = OutputFile::open_shared(paths.substr(a, b - a));
    }
    if (group) failpoint("consolidate-write", me);
    LocalChunks local(reader);
    std::unique_ptr<ChunkExchange> ex;
    if (group) {
      ex = std::make_unique<ChunkExchange>(*group, reader, std::move(tp.transfers), lanes, kTransferWindow, gate);
      ex->start_pushing();
    }
    Executor run{plan, ex ? static_cast<ChunkSource&>(*ex) : local, gate, prog, threads};
    run.direct_io = o.direct_io;
    try {
      if (to_safetensors)
        run.write_safetensors(tasks, headers, me, lanes, outs);
      else if (leader)
        run.write_pt(tasks, pt_pickle(plan, values, o.flat), *outs[0]);
    } catch (...) {
      if (!ex) throw;
      ex->fail(std::current_exception());
      std::rethrow_exception(ex->first_error());
    }
    if (ex) ex->finish_pushing();
  }, [&] {
    for (auto& f : outs) f->commit();
    if (dir) {
      if (plan.files.size() > 1) write_hf_index(plan, *dir);
      dir->commit();
    }
  });
  if (!committed) {
    summary["rank"] = me;
    return summary;
  }
  if (group) {
    summary["ranks"] = world;
    summary["backend"] = group->backend_name();
  }

  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  summary["seconds"] = secs;
  summary["gb_per_s"] = secs > 0 ? static_cast<double>(plan.total_bytes) / secs / 1e9 : 0.0;
  summary["peak_rss_bytes"] = peak_rss_bytes();
  return summary;
}

}  // namespace dcpctl
