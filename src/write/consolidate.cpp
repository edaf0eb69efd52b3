#include "write/consolidate.h"

#include <algorithm>
#include <cstring>

#include "dist/exchange.h"
#include "dist/group.h"
#include "item/item_reader.h"
#include "write/assets.h"
#include "meta/quantized.h"
#include "write/execute.h"
#include "write/executor.h"
#include "write/lightning_meta.h"
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
// nested by planner_data as dcp_to_torch_save nests, or flat; with `meta`, its top level is
// Lightning's (write/lightning_meta.h).
std::string pt_pickle(const WritePlan& plan, const Values& values, bool flat, const LightningMeta* meta) {
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
    if (meta) {
      meta->emit_checkpoint(p, [&](const std::string& key) {
        for (const auto& [name, child] : root.dict)
          if (name == key) emit(p, *child, plan.tensors, values.trees);
      });
    } else {
      emit(p, root, plan.tensors, values.trees);
    }
  }
  p.stop();
  return p.data();
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

// The consolidated outputs: a safetensors file, an HF directory of shards (and its index), or a
// .pt (data.pkl nested as dcp_to_torch_save nests, then the records).
class ConsolidateWriter final : public OutputWriter {
 public:
  explicit ConsolidateWriter(const ConsolidateOptions& o) : o_(o), to_safetensors_(o.format != OutputFormat::Torch) {}
  const char* name() const override { return "consolidate"; }
  // Under torchrun the ranks read their share of the chunks and push it to the writers.
  bool exchange() const override { return true; }
  // Lanes: the writing threads (under torchrun one exchange lane each; one when the backend
  // ignores tags). A .pt is written in order, on one lane.
  unsigned lanes(const WriteRequest& request, Group* group) const override {
    return to_safetensors_ && (!group || group->tagged()) ? std::max(1u, request.o.threads) : 1;
  }

  // Rank 0: the assets of an HF folder (an --assets folder that is not there is refused here).
  void check(const WriteRequest& request) override {
    // Each rank would complete the s3:// objects of its own shards, before rank 0 knows every
    // rank succeeded; rank 0 writing them all (the exchange) keeps the commit in one place.
    if (o_.parallel_write && is_remote(o_.output))
      throw UnsupportedError(Where(o_.output), "--parallel-write writes into a shared folder; an s3:// output is written by "
                                               "rank 0 from the chunks every rank reads (leave out --parallel-write)");
    if (o_.format == OutputFormat::HfDir && o_.copy_assets) assets_ = find_assets(request.ck, o_.assets_from);
  }

  void planned(WriteJob& job, json& summary) override {
    WritePlan& plan = job.plan;
    if (!to_safetensors_) plan.files[0].name = o_.output;
    headers_ = to_safetensors_ ? safetensors_headers(plan) : std::vector<std::string>{};
    outs_.resize(to_safetensors_ ? plan.files.size() : 1);
    // Non-tensor values: safetensors cannot hold them; a .pt (written by rank 0 alone)
    // re-pickles them, and rank 0 needs every one (--local-files: sent by a rank that sees it).
    if (!to_safetensors_ && job.group && o_.local_files && !o_.dry_run) {
      std::vector<BytesMeta> raw;
      for (const SelectedItem* it : plan.values) raw.push_back(job.request.ck.md.bytes[it->index]);
      gather_raw_items(*job.group, job.visibility, job.reader, raw, 0);
    }
    if (!to_safetensors_ && job.leader) {
      values_ = read_values(plan, job.request.ck.md, job.reader, o_.keep_unsafe_values);
    } else {
      for (const SelectedItem* it : plan.values) values_.skipped.push_back(it->key);
    }
    // A Lightning checkpoint's meta.pt: merged into a .pt as Lightning's consolidation merges it.
    // Rank 0 alone reads it; under torchrun a refusal reaches the others at the plan agreement.
    if (job.leader) {
      try {
        lightning_ = merge_lightning_meta(job.request.ck, plan, values_.kept, o_);
      } catch (const std::exception& e) {
        if (job.group) job.group->announce("agree/plan", std::string("rank 0 failed: ") + e.what(), exit_code_of(e));
        throw;
      }
      if (!lightning_.summary.is_null()) summary["lightning_meta"] = lightning_.summary;
    }
    summary["format"] = o_.format == OutputFormat::Torch ? "torch" : o_.format == OutputFormat::HfDir ? "hf-safetensors" : "safetensors";
    summary["non_tensor_included"] = values_.kept.size();
    summary["non_tensor_skipped"] = values_.skipped;
    json fj = json::array();
    for (size_t f = 0; f < plan.files.size(); ++f) {
      std::string path = o_.format == OutputFormat::HfDir ? join_path(o_.output, plan.files[f].name) : o_.output;
      uint64_t header = headers_.empty() ? 0 : headers_[f].size();
      fj.push_back({{"path", path}, {"tensors", plan.files[f].records.size()}, {"bytes", header + plan.files[f].data_bytes}});
    }
    if (o_.format == OutputFormat::HfDir && plan.files.size() > 1) fj.push_back({{"path", join_path(o_.output, "model.safetensors.index.json")}});
    summary["files"] = fj;
    if (job.leader) assets_summary(plan, summary);
  }

  // Rank 0 creates the outputs under temporary names (their headers written, their space
  // reserved); writers of other shards open them there (a shared filesystem, --parallel-write).
  std::string set_up(WriteJob& job) override {
    const WritePlan& plan = job.plan;
    if (o_.format == OutputFormat::HfDir) dir_ = std::make_unique<OutputDir>(o_.output);
    std::string list;
    for (size_t f = 0; f < outs_.size(); ++f) {
      outs_[f] = std::make_unique<OutputFile>(dir_ ? dir_->path_of(plan.files[f].name) : o_.output);
      if (to_safetensors_) {
        outs_[f]->reserve(headers_[f].size() + plan.files[f].data_bytes);
        outs_[f]->pwrite_all(headers_[f].data(), headers_[f].size(), 0);
      }
      list += outs_[f]->temp_path() + "\n";
    }
    return list;
  }

  void write(WriteJob& job, Executor& ex, const std::string& paths) override {
    if (!job.leader && o_.parallel_write) {
      size_t f = 0;
      for (size_t a = 0, b; (b = paths.find('\n', a)) != std::string::npos; a = b + 1, ++f)
        if (f < outs_.size() && job.deal.writer_of[f] == job.me) outs_[f] = OutputFile::open_shared(paths.substr(a, b - a));
    }
    if (o_.note && !values_.skipped.empty())
      o_.note(std::to_string(values_.skipped.size()) + " non-tensor item(s) left out" +
              (to_safetensors_ ? " (safetensors holds tensors only)" : "") + ": " + values_.skipped.front() +
              (values_.skipped.size() > 1 ? ", ..." : ""));
    if (o_.note && !lightning_.note.empty()) o_.note(lightning_.note);
    if (to_safetensors_) {
      ex.write_safetensors(job.deal.tasks, headers_, job.me, job.deal.lanes, outs_);
    } else if (job.leader) {
      const LightningMeta* meta = lightning_.meta.get();
      ex.write_pt(job.deal.tasks, pt_pickle(job.plan, values_, o_.flat, meta), *outs_[0],
                  meta ? Executor::MoreFn([meta](TorchSaveWriter& w, OutputFile& out) { meta->write_storages(w, out); }) : nullptr);
    }
  }

  // The weights, then the config and tokenizer files, then the index: in an s3:// folder, where
  // each file appears as it is committed, the files from_pretrained looks for first come last.
  void commit(WriteJob& job) override {
    for (auto& f : outs_) f->commit();
    if (dir_) {
      // A dequantized export (meta/quantized.h) is a plain model: its config loses the
      // quantization_config and says the dtype written.
      std::function<std::string(const std::string&)> edit;
      if (!job.request.ck.dequant.empty() && o_.cast) edit = [dtype = *o_.cast](const std::string& text) { return dequantized_config(text, dtype); };
      copy_assets(assets_, [&](const std::string& name) { return dir_->path_of(name); }, edit);
      if (job.plan.files.size() > 1) write_hf_index(job.plan, *dir_);
      dir_->commit();
    }
  }

  void finish(WriteJob& job, json& summary) override {
    if (!job.group) return;
    summary["ranks"] = job.group->size();
    summary["backend"] = job.group->backend_name();
  }

 private:
  // The assets copied (or, with --dry-run, to be copied), those left out, and what config.json
  // says of tied word embeddings against the keys written; notes for what a user must act on.
  void assets_summary(const WritePlan& plan, json& summary) const {
    json copied = json::array(), skipped = json::array();
    for (const Asset& a : assets_.files) copied.push_back(join_path(o_.output, a.name));
    for (const AssetSkip& s : assets_.skipped) {
      skipped.push_back({{"path", s.path}, {"reason", s.reason}});
      if (o_.note) o_.note("not copied beside the weights: " + s.path + ": " + s.reason);
    }
    summary["assets"] = copied;
    summary["assets_skipped"] = skipped;
    std::vector<std::string> keys;
    for (const PlannedTensor& t : plan.tensors) keys.push_back(t.key);
    std::optional<TiedEmbeddings> tied = tied_embeddings(assets_, keys);
    summary["tie_word_embeddings"] = nullptr;
    if (tied) {
      summary["tie_word_embeddings"] = {{"config", tied->config}, {"lm_head_weight", tied->lm_head}};
      if (!tied->note.empty()) {
        summary["tie_word_embeddings"]["note"] = tied->note;
        if (o_.note) o_.note(tied->note);
      }
    }
    bool config = std::any_of(assets_.files.begin(), assets_.files.end(), [](const Asset& a) { return a.name == "config.json"; });
    if (o_.note && o_.format == OutputFormat::HfDir && o_.copy_assets && !config) {
      std::string where;
      for (const auto& d : assets_.searched) where += (where.empty() ? "" : " or ") + d;
      o_.note("no config.json in " + where + ", and from_pretrained needs one: give --assets DIR (the Hugging Face "
              "folder the run started from), or --no-assets to say none is wanted");
    }
  }

  const ConsolidateOptions& o_;
  const bool to_safetensors_;
  std::vector<std::string> headers_;
  Values values_;
  LightningMerge lightning_;
  std::unique_ptr<OutputDir> dir_;
  std::vector<std::unique_ptr<OutputFile>> outs_;
  Assets assets_;  // rank 0's
};

}  // namespace

json consolidate(const Checkpoint& ck, const ConsolidateOptions& o) {
  Target target;
  target.kind = o.format == OutputFormat::Torch ? Target::TorchZip : o.format == OutputFormat::HfDir ? Target::HfDir : Target::Safetensors;
  target.max_shard_size = o.max_shard_size;
  target.threads = std::max(1u, o.threads);
  target.window = o.window;
  target.max_memory = o.max_memory;
  json command = {{"format", static_cast<int>(o.format)}, {"max_shard_size", o.max_shard_size}, {"flat", o.flat},
                  {"keep_unsafe", o.keep_unsafe_values}, {"assets", o.copy_assets}, {"assets_from", o.assets_from},
                  {"lightning_meta", o.lightning_meta}};
  std::optional<Checkpoint> view = dequantized_view(ck, o.cast, o.assets_from);
  const Checkpoint& in = view ? *view : ck;
  std::optional<MappedModel> mapped = map_selection(in, o);
  target.map = mapped ? &*mapped : nullptr;
  ConsolidateWriter writer(o);
  return execute({in, o, target, command, o.parallel_write, o.local_files}, writer);
}

}  // namespace dcpctl
