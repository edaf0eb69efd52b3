// The `torch` format: a torch.save zip that torch.load(weights_only=True) opens. data.pkl nests
// the items as format_utils.dcp_to_torch_save nests them (from planner_data), or flat (--flat);
// then every record in order, streamed where the plan says so, else assembled (write/executor.h);
// a Lightning checkpoint's meta.pt merged in as Lightning's consolidation merges it
// (write/lightning_meta.h). The selected non-tensor values are re-pickled into data.pkl.
// Rank 0 writes it, on one lane.
#include "pickle/pickler.h"
#include "write/executor.h"
#include "write/formats/consolidated.h"
#include "write/output.h"
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

void insert_path(PNode& root, const std::vector<PathElem>& path, PNode::Kind leaf_kind, size_t leaf,
                 const std::string& key) {
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
      if (next->kind != PNode::Empty)
        throw FormatError(Where("", std::nullopt, key), "two items share one planner_data path; use --flat");
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
    each_item(
        [&](const SelectedItem& it, size_t ti) {
          p.str(it.key);
          pickle_tensor(p, plan.tensors[ti].dst, plan.tensors[ti].t->shape, std::to_string(ti));
        },
        [&](const SelectedItem& it, size_t vi) {
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

class TorchFile final : public ConsolidatedWriter, FileSink {
 public:
  using ConsolidatedWriter::ConsolidatedWriter;

  std::string set_up(WriteJob& job) override {
    out_ = std::make_unique<OutputFile>(o_.output, job.uploads);
    return out_->temp_path() + "\n";
  }
  void commit(WriteJob&) override {
    out_->finish_writes();
    if (seal && !out_->remote()) seal(out_->temp_path(), o_.output);  // the manifest beside it, first
    out_->commit();
    if (seal && out_->remote()) seal(o_.output, o_.output);  // an object has no rename: its manifest after it
  }

 protected:
  void plan_files(WriteJob& job, json& summary) override {
    job.plan.files[0].name = o_.output;
    plan_ = &job.plan;
    summary["files"] = json::array({{{"path", o_.output},
                                     {"tensors", job.plan.files[0].records.size()},
                                     {"bytes", job.plan.files[0].data_bytes}}});
  }
  void write_files(WriteJob& job, Executor& ex, const std::string&) override {
    uploads = job.uploads;
    ex.write(job.deal, job.me, *this);
  }

 private:
  OutputFile& file(size_t) override { return *out_; }
  std::string pickle() override { return pt_pickle(*plan_, values_, o_.flat, lightning_.meta.get()); }
  void after_records(TorchSaveWriter& zip, OutputFile& out) override {
    if (lightning_.meta) lightning_.meta->write_storages(zip, out);
  }

  const WritePlan* plan_ = nullptr;
  std::unique_ptr<OutputFile> out_;
};

}  // namespace

const Format formats::torch_file = [] {
  Format f;
  f.name = f.flag = "torch";
  f.writing = Writing::InOrder;
  f.writes_values = true;
  f.suffixes = {".pt", ".pth", ".bin"};
  f.part_buffers = [](size_t files, unsigned, unsigned) { return files == 0 ? PartBuffers{0, 0} : PartBuffers{2, 1}; };
  f.consolidate_writer = [](const ConsolidateOptions& o) -> std::unique_ptr<OutputWriter> {
    return std::make_unique<TorchFile>(o);
  };
  return f;
}();

}  // namespace dcpctl
