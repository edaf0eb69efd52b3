#include "check/megatron_vocab.h"

#include <algorithm>
#include <set>
#include <string>

#include "check/megatron_args.h"
#include "meta/checkpoint.h"
#include "util/error.h"
#include "view/keymap.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// Megatron-LM's vocab_size_with_padding.
int64_t padded_of(int64_t vocab, int64_t multiple) { return (vocab + multiple - 1) / multiple * multiple; }

// The Hugging Face names of the vocabulary's rows (Megatron-Bridge's _is_vocab_export_task: the
// token embedding and the language-model head).
bool is_vocab_output(const std::string& key) { return key == "model.embed_tokens.weight" || key == "lm_head.weight"; }

// The number of row blocks a saved 2-d tensor is in, when they are equal, full width and tile it
// (torch_dist: one per TP rank, DP replicas deduplicated by the planner); 0 otherwise.
int64_t row_blocks(const TensorMeta& t) {
  if (t.ndim() != 2 || t.num_chunks() == 0) return 0;
  std::set<int64_t> starts;
  int64_t rows = -1;
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    const int64_t *off = t.chunk_offsets(c), *size = t.chunk_sizes(c);
    if (off[1] != 0 || size[1] != t.shape[1]) return 0;
    if (rows >= 0 && size[0] != rows) return 0;
    rows = size[0];
    if (off[0] % rows != 0) return 0;
    starts.insert(off[0]);
  }
  const int64_t n = static_cast<int64_t>(starts.size());
  return n * rows == t.shape[0] ? n : 0;
}

struct Rule {
  int64_t padded = 0;     // the rows Megatron-LM pads vocab_size to
  int64_t multiple = 0;   // divisible_by x TP (0: the args give padded_vocab_size alone)
  std::string text, from;
};

json integer_arg(const MegatronArgs* args, const char* name) {
  if (!args || !args->values.contains(name) || !args->values[name].is_number_integer()) return nullptr;
  return args->values[name];
}

}  // namespace

void fit_megatron_vocab(const Checkpoint& saved, MappedModel& map, const MapConfig& config) {
  if (map.from != "megatron" || map.to != "hf" || !config.json.is_object()) return;
  const json v = config.json.value("vocab_size", json());
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) return;
  const int64_t vocab = v.get<int64_t>();
  std::vector<MappedTensor*> cut;
  for (MappedTensor& mt : map.tensors)
    if (is_vocab_output(mt.meta.fqn) && !mt.zeros && mt.meta.ndim() == 2 && mt.meta.shape[0] > vocab) cut.push_back(&mt);
  if (cut.empty()) return;
  const int64_t rows = cut[0]->meta.shape[0];

  std::string note;
  const std::optional<MegatronArgs> args = read_megatron_args(saved, &note);
  const MegatronArgs* a = args ? &*args : nullptr;
  Rule rule;
  const json padded_arg = integer_arg(a, "padded_vocab_size"), by = integer_arg(a, "make_vocab_size_divisible_by"),
             tp = integer_arg(a, "tensor_model_parallel_size"), tokens = integer_arg(a, "vocab_size");
  if (by.is_number_integer() && tp.is_number_integer() && by.get<int64_t>() > 0 && tp.get<int64_t>() > 0) {
    rule.multiple = by.get<int64_t>() * tp.get<int64_t>();
    rule.padded = padded_of(vocab, rule.multiple);
    rule.text = "Megatron-LM's padding to a multiple of make_vocab_size_divisible_by " + by.dump() +
                " x tensor_model_parallel_size " + tp.dump() + " = " + std::to_string(rule.multiple);
    rule.from = a->from;
  } else if (padded_arg.is_number_integer()) {
    rule.padded = padded_arg.get<int64_t>();
    rule.text = "args.padded_vocab_size = " + padded_arg.dump();
    rule.from = a->from;
  } else {
    const Metadata& md = saved.md;
    const MapPart& p = cut[0]->parts.empty() ? MapPart() : cut[0]->parts[0];
    const int64_t blocks = cut[0]->parts.size() == 1 ? row_blocks(md.tensors[p.tensor]) : 0;
    if (blocks == 0)
      throw UnsupportedError(
          Where(saved.dir, std::nullopt, cut[0]->inputs.empty() ? cut[0]->meta.fqn : cut[0]->inputs[0]),
          "map " + map.name + ": " + cut[0]->meta.fqn + " has " + std::to_string(rows) +
              " rows but config.json's vocab_size is " + std::to_string(vocab) + " (" + config.path +
              "); the checkpoint carries no Megatron-LM args (" + note +
              ") and its embedding is not saved in equal row blocks, so the tensor-parallel size Megatron-LM padded "
              "for cannot be told: nothing written. A config.json whose vocab_size is the rows' count exports them all");
    rule.multiple = 128 * blocks;
    rule.padded = padded_of(vocab, rule.multiple);
    rule.text = "Megatron-LM's default padding to a multiple of make_vocab_size_divisible_by 128 x TP " +
                std::to_string(blocks) + " = " + std::to_string(rule.multiple) +
                " (the checkpoint carries no args; TP is the " + std::to_string(blocks) + " row blocks of " +
                md.tensors[p.tensor].fqn + ")";
    rule.from = saved.dir + "/.metadata";
  }
  std::vector<std::string> problems;
  if (padded_arg.is_number_integer() && padded_arg.get<int64_t>() != rule.padded)
    problems.push_back("args.padded_vocab_size = " + padded_arg.dump() + ", but " + rule.text + " pads " +
                       std::to_string(vocab) + " to " + std::to_string(rule.padded));
  if (tokens.is_number_integer() && tokens.get<int64_t>() != vocab)
    problems.push_back("args.vocab_size (the tokenizer's) = " + tokens.dump() + ", not " + std::to_string(vocab));
  for (MappedTensor* mt : cut)
    if (mt->meta.shape[0] != rule.padded)
      problems.push_back(mt->meta.fqn + " (" + (mt->inputs.empty() ? std::string("?") : mt->inputs[0]) + ") has " +
                         std::to_string(mt->meta.shape[0]) + " rows, but " + rule.text + " pads " + std::to_string(vocab) +
                         " to " + std::to_string(rule.padded));
  if (!problems.empty()) {
    std::string text = "map " + map.name + ": config.json's vocab_size is " + std::to_string(vocab) + " (" + config.path +
                       ") and the checkpoint's vocabulary has " + std::to_string(rows) +
                       " rows; the extra rows are not Megatron's padding of it (" + rule.from + "):";
    for (const std::string& p : problems) text += "\n  " + p;
    if (tokens.is_number_integer() && tokens.get<int64_t>() != vocab)
      text += "\n  they would be with config.json's vocab_size = " + tokens.dump() + " (the tokenizer's, in the args)";
    else if (rule.multiple > 0 && rows % rule.multiple == 0)
      text += "\n  they would be with a vocab_size from " + std::to_string(rows - rule.multiple + 1) + " to " +
              std::to_string(rows) + " (each padded to " + std::to_string(rows) + ")";
    else if (rule.multiple > 0)
      text += "\n  no vocab_size pads to " + std::to_string(rows) + " rows under that rule (not a multiple of " +
              std::to_string(rule.multiple) + ")";
    text += "; nothing written";
    throw UnsupportedError(Where(config.path), text);
  }
  json keys = json::array();
  for (MappedTensor* mt : cut) {
    for (const MapPart& p : mt->parts)
      if (p.rows || p.transpose || p.drop >= 0 || p.add >= 0 || p.units != 1 || p.to.empty() || p.from.sizes.size() != 2)
        throw UnsupportedError(Where(saved.dir, std::nullopt, mt->meta.fqn),
                               "map " + map.name + ": " + mt->meta.fqn +
                                   " is not one saved tensor renamed, so its padding rows cannot be cut here");
    std::vector<MapPart> kept;
    for (MapPart p : mt->parts) {
      if (p.to[0] >= vocab) continue;
      p.from.sizes[0] = std::min(p.from.sizes[0], vocab - p.to[0]);
      kept.push_back(std::move(p));
    }
    mt->parts = std::move(kept);
    mt->meta.shape[0] = vocab;
    mt->transforms.push_back("trim");
    keys.push_back(mt->meta.fqn);
  }
  map.vocab = {{"vocab_size", vocab},
               {"rows", rows},
               {"rows_dropped", rows - vocab},
               {"tensors", keys},
               {"rule", rule.text},
               {"rule_from", rule.from}};
}

}  // namespace dcpctl
