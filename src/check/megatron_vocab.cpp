#include "check/megatron_vocab.h"

#include <algorithm>
#include <set>
#include <string>

#include "check/megatron_args.h"
#include "meta/checkpoint.h"
#include "store/file.h"
#include "util/error.h"
#include "view/maps/keymap.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// Megatron-LM's vocab_size_with_padding.
int64_t padded_of(int64_t vocab, int64_t multiple) {
  return (vocab + multiple - 1) / multiple * multiple;
}

// The Hugging Face names of the vocabulary's rows (Megatron-Bridge's _is_vocab_export_task: the
// token embedding and the language-model head).
bool is_vocab_output(const std::string& key) {
  return key == "model.embed_tokens.weight" || key == "lm_head.weight";
}
// Their megatron-core names (torch_dist): GPTModel's embedding and untied output layer.
bool is_megatron_vocab(const std::string& key) {
  return key == "embedding.word_embeddings.weight" || key == "output_layer.weight";
}

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
  int64_t padded = 0;    // the rows Megatron-LM pads vocab_size to
  int64_t multiple = 0;  // divisible_by x TP (0: the args give padded_vocab_size alone)
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
    if (is_vocab_output(mt.meta.fqn) && !mt.zeros && mt.meta.ndim() == 2 && mt.meta.shape[0] > vocab)
      cut.push_back(&mt);
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
              "for cannot be told: nothing written. A config.json whose vocab_size is the rows' count exports them "
              "all");
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
                         std::to_string(mt->meta.shape[0]) + " rows, but " + rule.text + " pads " +
                         std::to_string(vocab) + " to " + std::to_string(rule.padded));
  if (!problems.empty()) {
    std::string text = "map " + map.name + ": config.json's vocab_size is " + std::to_string(vocab) + " (" +
                       config.path + ") and the checkpoint's vocabulary has " + std::to_string(rows) +
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
      if (p.rows || p.transpose || p.drop >= 0 || p.add >= 0 || p.units != 1 || p.to.empty() ||
          p.from.sizes.size() != 2)
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
  map.vocab = {{"vocab_size", vocab}, {"rows", rows},      {"rows_dropped", rows - vocab},
               {"tensors", keys},     {"rule", rule.text}, {"rule_from", rule.from}};
}

namespace {

// A positive integer field of the args file, or 0 when it has none (null: Megatron-LM's "not set").
int64_t file_int(const json& file, const char* name, const std::string& path) {
  if (!file.contains(name) || file[name].is_null()) return 0;
  if (!file[name].is_number_integer() || file[name].get<int64_t>() <= 0)
    throw UsageError(Where(path), std::string("--megatron-args: ") + name + " = " + file[name].dump() +
                                      " is not a positive integer");
  return file[name].get<int64_t>();
}

}  // namespace

namespace {

json read_megatron_args_file(const std::string& path) {
  json file = json::object();
  if (path.empty()) return file;
  try {
    file = json::parse(read_text(path));
  } catch (const json::exception& e) {
    throw UsageError(Where(path), std::string("--megatron-args: not JSON: ") + e.what());
  }
  if (!file.is_object())
    throw UsageError(Where(path),
                     "--megatron-args: want a JSON object of Megatron-LM's argument names (json.dump(vars(args)))");
  return file;
}

// The tensors padded (the word embeddings and an untied output layer) and the vocabulary's rows,
// which must agree with each other, config.json and the args file.
std::vector<MappedTensor*> vocab_tensors(MappedModel& map, const MapConfig& config, const json& file,
                                         const std::string& path) {
  std::vector<MappedTensor*> pad;
  for (MappedTensor& mt : map.tensors)
    if (is_megatron_vocab(mt.meta.fqn) && !mt.zeros && mt.meta.ndim() == 2) pad.push_back(&mt);
  if (pad.empty())
    throw UnsupportedError(Where(), "map " + map.name +
                                        ": the output has no embedding.word_embeddings.weight to pad "
                                        "for Megatron-LM; leave out --megatron-args / --make-vocab-size-divisible-by / "
                                        "--tensor-model-parallel-size");
  const int64_t rows = pad[0]->meta.shape[0];
  for (const MappedTensor* mt : pad)
    if (mt->meta.shape[0] != rows)
      throw FormatError(Where(), "map " + map.name + ": " + pad[0]->meta.fqn + " has " + std::to_string(rows) +
                                     " rows but " + mt->meta.fqn + " " + std::to_string(mt->meta.shape[0]));
  const json cv = config.json.is_object() ? config.json.value("vocab_size", json()) : json();
  if (cv.is_number_integer() && cv.get<int64_t>() != rows)
    throw FormatError(Where(config.path), "config.json's vocab_size is " + cv.dump() + " but " + pad[0]->inputs.at(0) +
                                              " has " + std::to_string(rows) + " rows");
  const int64_t tokens = file_int(file, "vocab_size", path);
  if (tokens > 0 && tokens != rows)
    throw UsageError(Where(path), "--megatron-args says vocab_size (the tokenizer's) = " + std::to_string(tokens) +
                                      ", but the model's vocabulary has " + std::to_string(rows) + " rows (" +
                                      pad[0]->inputs.at(0) + "; " + config.path + ")");
  return pad;
}

// The Namespace: the file's fields, else what load_checkpoint compares from config.json; then
// what this checkpoint is, whatever the file said (`set` lists each field written over it).
void megatron_namespace(const MegatronTarget& target, MappedModel& map, const MapConfig& config, const json& file,
                        int64_t vocab, int64_t padded, int64_t by, int64_t tp) {
  json fields = file;
  json set = json::object();
  auto put = [&](const std::string& name, const json& v) {
    if (fields.contains(name) && fields[name] != v) set[name] = {{"was", fields[name]}, {"now", v}};
    fields[name] = v;
  };
  if (target.args_file.empty()) {
    const json& c = config.json;
    for (const auto& [arg, key] : {std::pair<const char*, const char*>{"num_layers", "num_hidden_layers"},
                                   {"hidden_size", "hidden_size"},
                                   {"num_attention_heads", "num_attention_heads"},
                                   {"max_position_embeddings", "max_position_embeddings"}})
      if (c.is_object() && c.contains(key) && c[key].is_number_integer()) fields[arg] = c[key];
  }
  put("vocab_size", vocab);
  put("padded_vocab_size", padded);
  put("make_vocab_size_divisible_by", by);
  put("tensor_model_parallel_size", tp);
  bool untied = false;
  for (const MappedTensor& mt : map.tensors) untied = untied || mt.meta.fqn == "output_layer.weight";
  put("untie_embeddings_and_output_weights", untied);
  put("ckpt_format", "torch_dist");
  put("no_save_optim", true);
  put("no_save_rng", true);
  const std::string& path = target.args_file;
  map.megatron_args = {
      {"from", path.empty() ? json("config.json and the command line") : json(path)}, {"fields", fields}, {"set", set}};
}

}  // namespace

void pad_megatron_vocab(const MegatronTarget& target, MappedModel& map, const MapConfig& config) {
  if (!target.given()) return;
  if (map.from != "hf" || map.to != "megatron")
    throw UsageError(Where(),
                     "--megatron-args, --make-vocab-size-divisible-by and --tensor-model-parallel-size say "
                     "the Megatron-LM run a Hugging Face model is written for: they go with --map megatron "
                     "from a Hugging Face checkpoint (this map goes " +
                         map.from + " -> " + map.to + ")");
  const json file = read_megatron_args_file(target.args_file);
  const std::string& path = target.args_file;
  // Each setting from its flag, else the file, else Megatron-LM's default; a flag and the file
  // disagreeing is a usage error naming both.
  auto pick = [&](const char* name, const char* flag, int64_t given, int64_t dflt, std::string* from) {
    const int64_t in_file = file_int(file, name, path);
    if (given > 0 && in_file > 0 && given != in_file)
      throw UsageError(Where(path), std::string(flag) + " " + std::to_string(given) + ", but --megatron-args says " +
                                        name + " = " + std::to_string(in_file));
    *from = given > 0 ? std::string(flag) : in_file > 0 ? path : "Megatron-LM's default";
    return given > 0 ? given : in_file > 0 ? in_file : dflt;
  };
  std::string by_from, tp_from;
  const int64_t padded_file = file_int(file, "padded_vocab_size", path);
  const bool by_stated = target.divisible_by > 0 || file_int(file, "make_vocab_size_divisible_by", path) > 0;
  const int64_t by =
      pick("make_vocab_size_divisible_by", "--make-vocab-size-divisible-by", target.divisible_by, 128, &by_from);
  const int64_t tp = pick("tensor_model_parallel_size", "--tensor-model-parallel-size", target.tp, 1, &tp_from);
  const std::vector<MappedTensor*> pad = vocab_tensors(map, config, file, path);
  const int64_t vocab = pad[0]->meta.shape[0];
  // Megatron-LM's _set_padded_vocab_size: a padded_vocab_size already set is kept; else the rule.
  Rule rule;
  rule.multiple = by * tp;
  rule.padded = padded_of(vocab, rule.multiple);
  rule.text = "Megatron-LM's padding to a multiple of make_vocab_size_divisible_by " + std::to_string(by) + " (" +
              by_from + ") x tensor_model_parallel_size " + std::to_string(tp) + " (" + tp_from +
              ") = " + std::to_string(rule.multiple);
  rule.from = path.empty() ? "the command line" : path;
  if (padded_file > 0 && !by_stated && target.tp == 0) {
    rule.padded = padded_file;
    rule.multiple = 0;
    rule.text = "--megatron-args' padded_vocab_size = " + std::to_string(padded_file);
  } else if (padded_file > 0 && padded_file != rule.padded) {
    throw UsageError(Where(path), "--megatron-args says padded_vocab_size = " + std::to_string(padded_file) + ", but " +
                                      rule.text + " pads " + std::to_string(vocab) + " to " +
                                      std::to_string(rule.padded));
  }
  if (rule.padded < vocab)
    throw UsageError(Where(path), "--megatron-args says padded_vocab_size = " + std::to_string(rule.padded) +
                                      ", fewer than the vocabulary's " + std::to_string(vocab) + " rows");
  json keys = json::array();
  for (MappedTensor* mt : pad) {
    if (rule.padded == vocab) break;
    mt->pad_rows = rule.padded - vocab;
    mt->meta.shape[0] = rule.padded;
    mt->transforms.push_back("pad");
    keys.push_back(mt->meta.fqn);
  }
  map.vocab = {{"vocab_size", vocab},
               {"rows", rule.padded},
               {"rows_added", rule.padded - vocab},
               {"tensors", keys},
               {"rule", rule.text},
               {"rule_from", rule.from},
               {"padding", "zero rows at the end (Megatron-Bridge's _pad_right_dim0)"}};
  megatron_namespace(target, map, config, file, vocab, rule.padded, by, tp);
}

}  // namespace dcpctl
