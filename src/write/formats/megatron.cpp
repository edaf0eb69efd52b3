// The `megatron` format (reshard and cast, --format megatron): a checkpoint megatron-core's
// `dist_checkpointing.load` reads (backend torch_dist, megatron-core 0.19.2), into a model of any
// tensor or expert parallelism. It is a DCP checkpoint (the `dcp` format's writer) with:
//
//   metadata.json   {"sharded_backend": "torch_dist", "sharded_backend_version": 1}, as
//                   megatron's save_config writes it; without it megatron refuses the folder;
//   common_state/shard_0_1
//                   the common (non-sharded) state, a ShardedObject: torch.save([state]) with
//                   state = {"iteration": N, "checkpoint_version": 3.0} (what
//                   load_common_state_dict reads; megatron-core 0.19.2 no longer writes common.pt),
//                   and for a Hugging Face model written for a Megatron-LM run (--megatron-args and
//                   the like, check/megatron_vocab.h) "args": the argparse.Namespace Megatron-LM's
//                   load_checkpoint reads (iteration N stays as above);
//   <module>._extra_state/shard_<offsets>_<shape>
//                   one ShardedObject per parallel linear (ColumnParallelLinear, RowParallelLinear:
//                   a `linear_*` module under `decoder.layers.`) and stacked position, which
//                   every such layer asks for when loading: torch.save([None]), the local spec's
//                   empty extra state. The offsets are the layer's (and for SequentialMLP's
//                   `experts.experts.` the expert's) place in the stacked tensor, so they do not
//                   depend on the parallelism; GPTModel drops output_layer's. Layers keyed one by
//                   one (`decoder.layers.<i>.`, a model mixing dense and MoE layers; an MTP
//                   layer's `mtp.layers.<i>.`, its eh_proj too) are not a stacked position: a
//                   dense linear's is `shard_0_1`, an expert's `shard_<e>_<E>`.
//
// A source that has the common state or an extra state keeps its own (a Megatron -> Megatron
// reshard copies them as they are); only what is missing is made. With --iteration N the
// checkpoint is Megatron-LM's `iter_NNNNNNN/` beside `latest_checkpointed_iteration.txt` ("N"),
// which --load / --pretrained-checkpoint find, and its common state says N: a source's own is
// rewritten with N when it holds only the iteration and checkpoint_version (what
// dist_checkpointing.save of a model's state dict writes); one that holds more (Megatron-LM's
// args, the scheduler, ...) is refused rather than cut or left saying another iteration.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string_view>

#include "item/item_reader.h"
#include "meta/derived.h"
#include "pickle/pickler.h"
#include "pickle/repr.h"
#include "pickle/tree.h"
#include "plan/format.h"
#include "util/error.h"
#include "view/maps/keymap.h"
#include "write/execute.h"
#include "write/formats/dcp_checkpoint.h"
#include "write/reshard.h"
#include "write/torch_save.h"

namespace dcpctl {

namespace {

constexpr const char* kExtraState = "._extra_state/shard_";

std::vector<uint8_t> list_of_none() {
  Pickler p(2);
  p.empty_list();
  p.none();
  p.append();
  p.stop();
  return torch_save_object_blob(p.data());
}

// Megatron-LM's args: an argparse.Namespace as CPython pickles it (protocol 2, object's
// __reduce_ex__: copyreg.__newobj__ of the class, then its __dict__ by BUILD).
void pickle_namespace(Pickler& p, const nlohmann::json& fields) {
  p.global("argparse", "Namespace");
  p.empty_tuple();
  p.newobj();
  pickle_json(p, fields);
  p.build();
}

// `args`: the Namespace's fields (check/megatron_vocab.h: a Hugging Face model written for a
// Megatron-LM run, as its save_checkpoint puts them in the common state); null: none.
std::vector<uint8_t> common_state(int64_t iteration, double version = 3.0, const nlohmann::json& args = nullptr) {
  Pickler p(2);
  p.empty_list();
  p.empty_dict();
  p.mark();
  p.str("iteration");
  p.integer(iteration);
  p.str("checkpoint_version");
  p.floating(version);
  if (args.is_object()) {
    p.str("args");
    pickle_namespace(p, args);
  }
  p.setitems();
  p.append();
  p.stop();
  return torch_save_object_blob(p.data());
}

std::string joined(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "." : "") + std::to_string(v[i]);
  return s;
}

// A parallel linear's weight (`decoder.layers.<...>.linear_x.weight`) and its stacked dimensions:
// the layers, unless the key names its layer (`decoder.layers.<i>.`: sharded_state_dict() keys the
// layers one by one when they are not homogeneous, moe_layer_freq; an MTP layer's
// `mtp.layers.<i>.eh_proj` and `mtp.layers.<i>.transformer_layer.<...>.linear_x`), and
// SequentialMLP's experts.
struct Linear {
  bool is = false;
  size_t stacked = 0;
};
// The length of `prefix` followed by a layer number and a dot at the start of `s`; 0 if not so.
size_t numbered(const std::string& s, std::string_view prefix) {
  if (s.compare(0, prefix.size(), prefix) != 0) return 0;
  size_t end = prefix.size();
  while (end < s.size() && s[end] >= '0' && s[end] <= '9') ++end;
  return end > prefix.size() && end < s.size() && s[end] == '.' ? end + 1 : 0;
}
Linear parallel_linear(const std::string& module) {
  const size_t last = module.rfind('.');
  const bool linear = module.compare(last + 1, 7, "linear_") == 0;
  const size_t experts = module.find(".experts.experts.") != std::string::npos ? 1U : 0U;
  if (numbered(module, "mtp.layers.") != 0)
    return {linear || module.compare(last + 1, std::string::npos, "eh_proj") == 0, experts};
  if (!linear || module.rfind("decoder.layers.", 0) != 0) return {};
  return {true, (numbered(module, "decoder.layers.") != 0 ? 0U : 1U) + experts};
}

// The source's common state with --iteration N: {"iteration": N, "checkpoint_version": its own}.
std::vector<uint8_t> renamed_common_state(const WriteJob& job, const SelectedItem& v, int64_t iteration) {
  const BytesMeta& bm = job.request.ck.md.bytes.at(v.index);
  const std::unique_ptr<pickle::Tree> tree = job.reader.read_bytes(bm);
  const pickle::Value& root = tree->root;
  const pickle::Value* state = root.is(pickle::Kind::List) && root.items().size() == 1 ? &root.items()[0] : nullptr;
  std::string held;
  double version = 3.0;
  if (state && state->is(pickle::Kind::Dict)) {
    const pickle::Items kv = state->items();
    for (uint64_t i = 0; i + 1 < kv.size(); i += 2) {
      const std::string key = kv[i].is(pickle::Kind::Str) ? std::string(kv[i].as_str()) : pickle::repr(kv[i], 40);
      if (key == "checkpoint_version" && kv[i + 1].is(pickle::Kind::Float))
        version = kv[i + 1].as_float();
      else if (key != "iteration")
        held += (held.empty() ? "" : ", ") + key;
    }
  } else {
    held = pickle::repr(root, 80);
  }
  if (!held.empty())
    throw UnsupportedError(Where({}, std::nullopt, v.key),
                           "--format megatron --iteration " + std::to_string(iteration) +
                               ": the source's common state holds more than the iteration and checkpoint_version (" +
                               held + "); dcpctl does not rewrite it: leave out --iteration to keep it as it is");
  return common_state(iteration, version);
}

DcpAdditions megatron_additions(const WriteJob& job, std::optional<int64_t> iteration) {
  const WritePlan& plan = job.plan;
  std::set<std::string> have;
  for (const SelectedItem* v : plan.values) have.insert(v->key);
  bool megatron_keys = false;
  std::map<std::string, std::vector<int64_t>> modules;  // a parallel linear -> its stacked shape
  for (const PlannedTensor& pt : plan.tensors) {
    if (pt.key.rfind("decoder.", 0) == 0 || pt.key.rfind("embedding.", 0) == 0) megatron_keys = true;
    // A linear's own `weight` (`linear_fc1.layer_norm_weight` alone is the fused pre-MLP norm, which
    // a MoE layer keeps under that name with no linear_fc1).
    const size_t dot = pt.key.rfind('.');
    if (dot == std::string::npos || pt.key.compare(dot, std::string::npos, ".weight") != 0) continue;
    const std::string module = pt.key.substr(0, dot);
    const Linear linear = parallel_linear(module);
    if (!linear.is) continue;
    const size_t n = linear.stacked;
    const std::vector<int64_t>& shape = pt.t->shape;
    if (shape.size() >= n &&
        std::any_of(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(n), [](int64_t d) { return d <= 0; }))
      continue;  // no layer, no expert: nothing asks for an extra state
    if (shape.size() < n)
      throw UnsupportedError(Where({}, std::nullopt, pt.key),
                             "--format megatron: a parallel linear's tensor of " + std::to_string(shape.size()) +
                                 " dimensions is not stacked over " + (n == 2 ? "layers and experts" : "layers"));
    // One layer's linear, not stacked: one extra state, `shard_0_1` (megatron-core's offsets of an
    // unstacked ShardedObject).
    modules.emplace(module, n == 0
                                ? std::vector<int64_t>{1}
                                : std::vector<int64_t>(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(n)));
  }
  if (!megatron_keys)
    throw UnsupportedError(Where(),
                           "--format megatron: the output has no megatron-core keys (embedding.*, decoder.*); "
                           "name a map that writes them (--map megatron-gpt)");
  DcpAdditions add;
  if (iteration) {
    char dir[32];
    std::snprintf(dir, sizeof dir, "iter_%07lld", static_cast<long long>(*iteration));
    add.subdir = dir;
    add.files.emplace_back("latest_checkpointed_iteration.txt", std::to_string(*iteration));
  }
  add.files.emplace_back(add.subdir.empty() ? "metadata.json" : add.subdir + "/metadata.json",
                         R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1})");
  constexpr const char* kCommon = "common_state/shard_0_1";
  const Checkpoint& ck = job.request.ck;
  const MappedModel* map = ck.derived && ck.derived->output.map ? ck.derived->output.map.get() : nullptr;
  const nlohmann::json args = map && map->megatron_args.is_object() ? map->megatron_args["fields"] : nlohmann::json();
  if (!have.count(kCommon)) {
    add.items.emplace_back(kCommon, common_state(iteration.value_or(0), 3.0, args));
  } else if (iteration) {
    for (const SelectedItem* v : plan.values)
      if (v->key == kCommon) add.replaced.emplace(kCommon, renamed_common_state(job, *v, *iteration));
  }
  const std::vector<uint8_t> none = list_of_none();
  for (const auto& [module, shape] : modules) {
    std::vector<int64_t> at(shape.size(), 0);
    for (;;) {
      std::string key = module + kExtraState + joined(at) + "_" + joined(shape);
      if (!have.count(key)) add.items.emplace_back(std::move(key), none);
      size_t d = at.size();
      while (d > 0 && ++at[d - 1] == shape[d - 1]) at[--d] = 0;
      if (d == 0) break;
    }
  }
  return add;
}

}  // namespace

const Format formats::megatron = [] {
  Format f = dcp_row();
  f.name = "megatron";
  f.flag = "megatron";
  f.reshard_writer = [](const ReshardOptions& o) {
    const std::optional<int64_t> iteration = o.iteration;
    return dcp_writer(o, [iteration](const WriteJob& job) { return megatron_additions(job, iteration); });
  };
  return f;
}();

}  // namespace dcpctl
