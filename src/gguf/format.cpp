// The `gguf` format (consolidate -o model.gguf): llama.cpp's model file, as its converter
// (convert_hf_to_gguf.py) writes it for the same model: one file, a whole model, its config and
// tokenizer from beside the checkpoint or --assets (issue 71 item 1; docs/gguf.md); or, with
// --split-max-size / --split-max-tensors, the converter's split files (gguf/gguf.h), each shard
// a file of its own under a temporary name, renamed only once every shard is complete.
//
// The header (gguf/gguf.h) is a function of config.json, the tokenizer files and the plan's
// tensors (gguf/model.h: names, types, the converter's key order), so it is laid out before
// the first byte: rank 0 creates the file under a temporary name with its header and its space,
// then converts one GGUF tensor at a time, a window of whole rows of its inputs at a time
// (gguf/rows.h: a row, a head or an expert per unit, so that memory is a window's, not the
// tensor's; each window read in its saved dtype, float32, the Llama Q/K row permutation, a layer's experts stacked,
// DeepSeek's kv_b split, GPT-OSS's fused experts split, or the values the converter computes (rope_freqs); the output
// type: F32, F16, BF16, Q8_0 or ggml's quantizers) into its place, inside
// --max-memory, and renames it. Tensors go in the order of their Hugging Face keys (the converter reads a
// safetensors file's sorted keys). Low-bit sources (gguf/lowbit.h) as the converter reads them: FP8
// weights dequantized with their scales in the window's read, NVFP4 (and compressed-tensors'
// MXFP4) weights' bytes repacked, first in the file. Refused (exit 5, before anything is written):
// an architecture, tensor, config setting or tokenizer gguf/model.h does not write, a
// non-floating tensor no low-bit source explains,
// and a run under torchrun (the exchange serves chunks in the deal's order, which this one-pass
// writer does not follow yet).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <stdexcept>

#include "gguf/format.h"
#include "gguf/gguf.h"
#include "gguf/lowbit.h"
#include "gguf/model.h"
#include "gguf/rows.h"
#include "gguf/simd.h"
#include "gguf/spm.h"
#include "gguf/tiktoken.h"
#include "item/chunk_source.h"
#include "item/item_reader.h"
#include "meta/derived.h"
#include "meta/pieces.h"
#include "plan/memory.h"
#include "store/file.h"
#include "util/failpoint.h"
#include "util/numeric.h"
#include "util/parallel.h"
#include "util/sha256.h"
#include "view/kernels.h"
#include "write/executor.h"
#include "write/formats/consolidated.h"
#include "write/output.h"
#include "write/resume.h"
#include "write/run.h"
#include "write/write_hash.h"

namespace dcpctl {

namespace {

using nlohmann::json;

// The model's own files beside the weights (config.json, tokenizer.json, tokenizer.model, ...),
// read whole: the largest released tokenizer.json is about 35 MB (Gemma 3's 262,144 tokens).
std::string read_asset(const std::string& path) {
  return read_text(path, 256u << 20, "a model's config or tokenizer file");
}

json parse(const std::string& text, const std::string& path) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw FormatError(Where(path), "not a JSON object");
  return j;
}

// A tensor's bytes, a window of its rows at a time: a saved tensor (or one a map renames whole)
// from its chunks; any other key map output (a layer of Megatron's stacked tensors, q/k/v split
// out of linear_qkv, the vocabulary's first rows, a permuted q) from the pieces of the saved
// tensors it is made of that fall in the window: its synthetic TensorMeta has no chunks of its own
// (read as such it would be zeros).
bool assembled(const PlannedTensor& pt) {
  return pt.mapped && !pt.renamed;
}

// Indices [first, first + rows) of the first dimension of a tensor of `shape`, every other
// dimension whole; the whole tensor for one of no dimension.
Box rows_box(const std::vector<int64_t>& shape, int64_t first, int64_t rows) {
  Box b{std::vector<int64_t>(shape.size(), 0), shape};
  if (!shape.empty()) b.offsets[0] = first, b.sizes[0] = rows;
  return b;
}

std::vector<Piece> rows_pieces(const Metadata& md, const PlannedTensor& pt, const Box& box) {
  return assembled(pt) ? plan_mapped_pieces(md, *pt.mapped, box) : plan_pieces(*pt.t, box);
}

// The window's bytes into `dst`; `scratch` (as many bytes) holds the pieces that are runs of their
// chunk but not of the window (a chunk split along a later dimension).
void read_rows(ChunkSource& src, const Metadata& md, const PlannedTensor& pt, int64_t first, int64_t rows, uint8_t* dst,
               uint8_t* scratch) {
  const Box box = rows_box(pt.t->shape, first, rows);
  assemble_box(src, *pt.t, box, rows_pieces(md, pt, box), dst, scratch);
}

// What reading a window of `pt` holds beside the window and its scratch, at most (plan/memory.h's
// terms, over the whole tensor's pieces, which every window's lie in): a key map output's piece
// that is not a run is placed from a copy of its whole chunk (several pieces of one chunk, a row
// each, come so: item/chunk_source.h's assemble_box); a zstd chunk is decoded whole for the part a
// window reads; a view's read works beside its chunk (view_read_need). A saved tensor's piece that
// is not a run is, in a window of whole rows, one run of its chunk: read alone into the scratch.
uint64_t rows_read_extra(const WritePlan& plan, const PlannedTensor& pt, const DerivedTable* derived) {
  uint64_t copy = 0, decode = 0, view = 0;
  for (size_t ri : pt.records) {
    const std::vector<Piece>& pieces = plan.records[ri].pieces;
    for (const Piece& p : pieces) {
      if (assembled(pt) && !p.run) copy = std::max(copy, chunk_bytes(*p.source, p.chunk));
      if (p.chunk < p.source->storage.size() && p.source->storage[p.chunk].transforms != 0)
        decode = std::max(decode, whole_chunk_need(*p.source, p.chunk));
    }
    view = std::max(view, view_read_need(derived, pieces));
  }
  return copy + decode + view;
}

// cast_elements of `n` elements to float32 on `threads` workers, in parts of whole kCastPart elements.
void cast_parallel(DType from, const uint8_t* src, float* dst, size_t n, unsigned threads) {
  constexpr size_t kCastPart = 256 << 10;
  const size_t item = itemsize(from);
  parallel_for((n + kCastPart - 1) / kCastPart, threads, [&](size_t p) {
    const size_t first = p * kCastPart, m = std::min(kCastPart, n - first);
    cast_elements(from, DType::Float32, src + first * item, reinterpret_cast<uint8_t*>(dst + first), m);
  });
}

// The value of the format's option `flag` (FormatOption), "" when not given.
std::string option(const FormatOptionValues& values, std::string_view flag) {
  auto it = values.find(flag);
  return it == values.end() ? std::string() : it->second;
}

// --outtype, "f16" (the converter's default) when not given.
std::string outtype(const ConsolidateOptions& o) {
  std::string t = option(o.format_options, "--outtype");
  return t.empty() ? "f16" : t;
}

// --split-max-tensors: a whole number, 0 (no limit) when not given.
uint64_t split_tensors(const std::string& text) {
  if (text.empty()) return 0;
  if (text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos)
    throw UsageError(Where(), "--split-max-tensors must be a whole number, not '" + text + "'");
  return std::stoull(text);
}

// The options' values refused before anything is read (the type: when the writer is made).
void check_options(const FormatOptionValues& values) {
  if (std::string size = option(values, "--split-max-size"); !size.empty()) gguf::split_size(size);
  split_tensors(option(values, "--split-max-tensors"));
}

// "tiny-llama" of ".../tiny-llama.gguf".
std::string stem(const std::string& output) {
  std::string base = output.substr(output.find_last_of('/') + 1);
  return base.size() > 5 ? base.substr(0, base.size() - 5) : base;
}

class GgufFile final : public ConsolidatedWriter, protected FileSink {
 public:
  using ConsolidatedWriter::ConsolidatedWriter;

  void check(const WriteRequest& request) override {
    ConsolidatedWriter::check(request);
    if (o_.cast)
      throw UsageError(Where(o_.output),
                       "--dtype does not apply to a GGUF output: --outtype (f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, "
                       "q6_k) says its type");
    out_ = gguf::out_type(outtype(o_));
    Assets assets = find_assets(request.ck, o_.assets_from, &request.model.config());
    std::string tokenizer_config, jinja;
    for (const Asset& a : assets.files) {
      if (a.name == "config.json") config_ = parse(a.text ? *a.text : read_asset(a.source), a.source);
      if (a.name == "tokenizer.json") tokenizer_ = parse(read_asset(a.source), a.source);
      if (a.name == "tokenizer_config.json") tokenizer_config_ = parse(read_asset(a.source), a.source);
      if (a.name == "chat_template.jinja") jinja_ = read_asset(a.source);
      if (a.name == "tiktoken.model") tiktoken_ = read_asset(a.source);
      if (a.name == "tokenizer.model") spm_model_ = read_asset(a.source), spm_path_ = a.source;
      if (a.name == "added_tokens.json") added_tokens_ = parse(read_asset(a.source), a.source);
    }
    std::string where = assets.searched.empty() ? o_.output : assets.searched.front();
    if (!option(o_.format_options, "--mmproj").empty()) refuse_mmproj(where);
    if (!config_.is_null()) {
      config_ = gguf::converter_hparams(config_);  // a vision-language model's text_config at the root
      arch_ = gguf::arch_of(config_, where);
      gguf::refuse_per_layer_experts(config_, where);  // before the tokenizer and quantization_config are asked
    }
    // The converter's set_vocab: a SentencePiece tokenizer.model first where the architecture's
    // tries one (gguf/spm.h), else tokenizer.json, else (DeepseekV2Model.set_vocab's kimi-k2
    // branch) Kimi K2's tiktoken.model.
    // Phi3MiniModel.set_vocab: a GPT2Tokenizer (Phi-4's) is _set_vocab_gpt2's, anything else tokenizer.model's.
    const bool phi3_gpt2 = arch_.vocab == gguf::Arch::Vocab::Phi3 && tokenizer_config_.is_object() &&
                           tokenizer_config_.value("tokenizer_class", json()) == "GPT2Tokenizer";
    spm_ = spm_model_ && arch_.vocab != gguf::Arch::Vocab::Gpt2 && !phi3_gpt2;
    if (!config_.is_null() && !spm_model_ && !phi3_gpt2 &&
        (arch_.vocab == gguf::Arch::Vocab::Spm || arch_.vocab == gguf::Arch::Vocab::Phi3))
      throw UnsupportedError(
          Where(o_.output),
          "a GGUF of " + arch_.name +
              " needs the model's tokenizer.model (beside the checkpoint, or --assets DIR): "
              "the converter's set_vocab reads SentencePiece's model only (_set_vocab_sentencepiece)");
    const bool kimi = !spm_ && tokenizer_.is_null() && tiktoken_ && gguf::is_kimi_tokenizer(tokenizer_config_);
    if (config_.is_null() || (tokenizer_.is_null() && !kimi && !spm_))
      throw UnsupportedError(Where(o_.output),
                             std::string("a GGUF output needs the model's config.json and tokenizer.json (beside the "
                                         "checkpoint, or --assets DIR); ") +
                                 (config_.is_null() ? "config.json" : "tokenizer.json") + " was not found" +
                                 (!config_.is_null() && tiktoken_
                                      ? " (a tiktoken.model is written only as Kimi K2's, tokenizer_config.json's "
                                        "auto_map naming tokenization_kimi.TikTokenTokenizer)"
                                      : "") +
                                 (!config_.is_null() && spm_model_
                                      ? " (a tokenizer.model is read only for the architectures whose converter reads "
                                        "it: llama, granite, qwen2, qwen3, gemma2, gemma3, phi3)"
                                      : ""));
    where_ = where;
    if (!spm_ && arch_.llama_model && gguf::is_llama_hf_tokenizer(tokenizer_))
      throw UnsupportedError(
          Where(where_),
          "a tokenizer.json of a byte-fallback BPE without tokenizer.model: llama.cpp's converter writes it through "
          "transformers (_set_vocab_llama_hf), which dcpctl does not yet; put the model's tokenizer.model beside it");
    if (kimi && arch_.name != "deepseek2")
      throw UnsupportedError(Where(where_),
                             "Kimi's tiktoken tokenizer is written into a GGUF of deepseek2 only (the converter's "
                             "DeepseekV2Model reads it)");
  }

  // The converter's --mmproj (MmprojModel: the vision tower and projector as a clip GGUF, Kimi
  // K2.5's KimiK25Model) is not written: refused, naming the model's class.
  [[noreturn]] void refuse_mmproj(const std::string& where) const {
    const json arch = config_.is_object() ? config_.value("architectures", json()) : json();
    const std::string cls = arch.is_array() && !arch.empty() && arch[0].is_string()
                                ? arch[0].get<std::string>()
                                : "(no architectures in config.json)";
    throw UnsupportedError(Where(where),
                           "--mmproj (the vision tower and projector as llama.cpp's converter writes them, a clip "
                           "GGUF) is not written by dcpctl, for " +
                               cls +
                               " or any model: an HF folder export (-o DIR/) keeps the tower, which "
                               "convert_hf_to_gguf.py --mmproj reads; without --mmproj the GGUF is the text model");
  }

  // A split written by one process to local files is staged in one folder and journaled
  // (write/resume.h): each shard renamed to its name there once complete, those a stopped run
  // finished kept.
  std::string set_up(WriteJob& job) override {
    std::string list;
    if (job.journal) {
      staging_ = std::make_unique<OutputDir>(o_.output, nullptr, job.journal->from());
      job.journal->start(staging_->temp_path());
    }
    for (size_t f = 0; f < headers_.size(); ++f) {
      const std::string path = staging_ ? staging_->path_of(base_name(paths_[f])) : paths_[f];
      if (staging_ && job.journal->kept(base_name(paths_[f]))) {
        staging_->keep_when_stopped();
        record_written_digest(path, *job.journal->kept_digest(base_name(paths_[f])), 0);
        outs_.push_back(nullptr);
        continue;
      }
      outs_.push_back(std::make_unique<OutputFile>(path, job.uploads));
      outs_[f]->reserve(headers_[f].size() + data_bytes_[f]);
      outs_[f]->append(headers_[f].data(), headers_[f].size());
      list += outs_[f]->temp_path() + "\n";
    }
    return list;
  }

  json journal_files(const WriteJob& job) const override {
    (void)job;
    if (paths_.size() < 2) return nullptr;
    json files = json::object(), options = json::object();
    for (size_t f = 0; f < paths_.size(); ++f)
      files[base_name(paths_[f])] = Sha256::of(std::string(headers_[f].begin(), headers_[f].end()));
    for (const auto& [flag, value] : o_.format_options) options[flag] = value;
    return {{"files", files}, {"options", options}};
  }

  // Every shard complete before the first is renamed: each one's manifest beside it, then the
  // renames, in order; should one fail, the shards already renamed are removed again, so that no
  // incomplete set is left under the final names (the rest are removed as temporaries).
  void commit(WriteJob& job) override {
    if (staging_) return commit_staged(job);
    for (auto& out : outs_)
      if (seal && !out->remote()) {
        out->finish_writes();
        seal(out->temp_path(), out->final_path());
      }
    size_t done = 0;
    try {
      for (; done < outs_.size(); ++done) outs_[done]->commit();
    } catch (...) {
      for (size_t f = 0; f < done && outs_.size() > 1; ++f)
        if (!outs_[f]->remote()) ::unlink(outs_[f]->final_path().c_str());
      throw;
    }
    for (auto& out : outs_)
      if (seal && out->remote()) seal(out->final_path(), out->final_path());
  }

 protected:
  void plan_files(WriteJob& job, json& summary) override {
    const WritePlan& plan = job.plan;
    if (job.group)
      throw UnsupportedError(Where(o_.output),
                             "a GGUF output is written by one process: run consolidate without torchrun");
    // The keys as the converter's filter_tensors passes them (gguf::converter_key): a vision
    // tower's and projector's tensors left out (never read), `language_model.` taken out.
    names_.clear();
    order_.clear();
    std::vector<std::string> keys;
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
      names_.push_back(gguf::converter_key(plan.tensors[i].key));
      keys.push_back(gguf::sort_key(arch_, names_.back()));
      if (!names_.back().empty()) order_.push_back(i);
    }
    std::sort(order_.begin(), order_.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
    // The converter's dequant_model (gguf/lowbit.h): FP8 weights dequantized with their scales,
    // which leave the inputs with the activation scales it drops.
    fp8_.clear();
    packed_.clear();
    std::vector<gguf::SourceTensor> sources;
    for (size_t i : order_) sources.push_back({names_[i], plan.tensors[i].src, plan.tensors[i].t->shape});
    const gguf::LowBitSources low = gguf::converter_dequant(config_, sources, where_);
    std::vector<size_t> kept;
    for (size_t k = 0; k < order_.size(); ++k)
      if (!low.dropped[k]) kept.push_back(order_[k]);
    for (const auto& [w, f] : low.fp8) {
      gguf::Fp8Source s = f;
      s.scale = order_[f.scale];
      fp8_[order_[w]] = s;
    }
    // Packed FP4 weights passed through: NVFP4's factors read now (whether the converter writes
    // them depends on their values), the key their weight's (compressed-tensors' weight_packed renamed).
    std::map<size_t, gguf::Input> packed_inputs;
    for (const auto& [w, n] : low.fp4) {
      const PlannedTensor& pt = plan.tensors[order_[w]];
      gguf::Input in{names_[order_[w]],
                     {pt.t->shape.at(0), pt.t->shape.at(1) * 2},
                     n.mxfp4 ? gguf::TensorType::MXFP4 : gguf::TensorType::NVFP4};
      const std::string tail = ".weight_packed";
      if (in.key.size() > tail.size() && in.key.compare(in.key.size() - tail.size(), tail.size(), tail) == 0)
        in.key = in.key.substr(0, in.key.size() - tail.size()) + ".weight";
      // (the flag copied: a lambda may not capture a structured binding before C++20, which clang enforces)
      const bool reciprocal = n.reciprocal;
      auto factor = [&](std::optional<size_t> at) {
        if (!at) return 1.0f;
        const float v = read_one(job.request.ck, plan.tensors[order_[*at]]);
        return reciprocal ? 1.0f / v : v;  // compressed-tensors' global scale: torch's 1.0 / scale (float32)
      };
      in.scale2 = factor(n.scale2), in.input_scale = factor(n.input_scale);
      packed_inputs[order_[w]] = std::move(in);
      packed_[order_[w]] = order_[n.scale];
    }
    order_ = std::move(kept);
    std::vector<gguf::Input> inputs;
    for (size_t i : order_) {
      const PlannedTensor& pt = plan.tensors[i];
      if (auto n = packed_inputs.find(i); n != packed_inputs.end()) {
        if (assembled(pt) || assembled(plan.tensors[packed_.at(i)]))
          throw UnsupportedError(
              Where(where_, std::nullopt, pt.key),
              "'" + pt.key + "' is packed FP4 made by a key map: its bytes are not passed into a GGUF");
        inputs.push_back(n->second);
        continue;
      }
      const bool mxfp4 = pt.key.size() > 7 && (pt.key.compare(pt.key.size() - 7, 7, "_blocks") == 0 ||
                                               pt.key.compare(pt.key.size() - 7, 7, "_scales") == 0);
      // GPT-OSS's MXFP4 experts are copied as bytes (gguf::mxfp4_repack): uint8 blocks and scales
      // only, as the converter's repack_mxfp4 asserts.
      if (mxfp4 && arch_.experts == gguf::Arch::Experts::GptOss && pt.src != DType::UInt8)
        throw UnsupportedError(Where(where_, std::nullopt, pt.key),
                               "'" + pt.key + "' is " + torch_name(pt.src) +
                                   ": the converter repacks MXFP4 blocks and scales of uint8 only");
      if (mxfp4 && arch_.experts == gguf::Arch::Experts::GptOss) {
        inputs.push_back({names_[i], pt.t->shape});
        continue;
      }
      if (!info(pt.src).floating || pt.src == DType::Float4_E2M1FN_X2)
        throw UnsupportedError(Where(where_, std::nullopt, pt.key),
                               "'" + pt.key + "' is " + torch_name(pt.src) + ": a GGUF output holds floating tensors");
      inputs.push_back({names_[i], pt.t->shape});
    }
    plans_ = gguf::plan_tensors(arch_, config_, inputs, out_, where_);
    // Each tensor converted a window of whole rows at a time (gguf/rows.h): the smallest window of
    // each (one unit: a row, a head, an expert) must fit; the automatic budget rises to the
    // largest of them (the largest tensor's need, at least 1 GiB: --max-memory's promise).
    const DerivedTable* derived = job.request.ck.derived.get();
    uint64_t most = 0;
    size_t neediest = 0;
    for (size_t k = 0; k < plans_.size(); ++k)
      if (uint64_t n = window_need(plan, plans_[k], derived, 1); n > most) most = n, neediest = k;
    if (!o_.max_memory && most > job.plan.budget) {
      job.deal.budget += most - job.plan.budget;
      job.plan.budget = most;
      summary["max_memory"] = job.deal.budget;
    }
    if (most > plan.budget)
      throw UnsupportedError(Where(o_.output, std::nullopt, plans_[neediest].name),
                             "a GGUF tensor is converted a window of whole " + unit_name(plans_[neediest]) +
                                 " at a time: its smallest window needs " + std::to_string(most) +
                                 " bytes, more than --max-memory's " + std::to_string(plan.budget));
    // What the windows hold, as sized within that budget: the most any tensor's takes.
    uint64_t held = 0;
    for (const gguf::TensorPlan& tp : plans_)
      held = std::max(held, window_need(plan, tp, derived, window_units(plan, tp, derived)));
    job.plan.largest_need = held;
    for (size_t r = 0; r < job.deal.memory.size(); ++r) {  // what --dry-run --json says each process holds
      job.deal.memory[r].buffers = r < job.deal.writes.size() && job.deal.writes[r] ? held : 0;
      job.deal.memory[r].budget = job.deal.budget;
    }
    // The shards (gguf/gguf.h): one, the plain file, unless a limit splits it.
    std::vector<uint64_t> bytes;
    for (const gguf::TensorPlan& tp : plans_) {
      uint64_t n = 1;
      for (int64_t d : tp.shape) n *= static_cast<uint64_t>(d);
      bytes.push_back(gguf::tensor_bytes(tp.type, n, tp.shape.empty() ? 1 : static_cast<uint64_t>(tp.shape.back())));
    }
    const std::string split_size = option(o_.format_options, "--split-max-size");
    shard_ = gguf::split_shards(bytes, split_tensors(option(o_.format_options, "--split-max-tensors")),
                                split_size.empty() ? 0 : gguf::split_size(split_size));
    const size_t shards = shard_.empty() ? 1 : shard_.back() + 1;
    std::vector<gguf::Header> h(shards);
    gguf::add_model_keys(h[0], arch_, config_, gguf::id_to_title(stem(o_.output)), gguf::size_label(plans_), out_,
                         where_);
    if (gguf::w4a16_nvfp4_config(config_)) {  // _tag_prec_a4: every NVFP4 tensor, by name
      std::vector<std::string> names;
      for (const gguf::TensorPlan& tp : plans_)
        if (tp.packed && tp.type == gguf::TensorType::NVFP4) names.push_back(tp.name);
      std::sort(names.begin(), names.end());
      if (!names.empty()) {
        h[0].add_strings("general.tensor_extra.name", names);
        h[0].add_bools("general.tensor_extra.prec_a4", std::vector<bool>(names.size(), false));
      }
    }
    if (arch_.llama_model) gguf::add_llama_vocab_keys(h[0], config_, tokenizer_config_, where_);
    if (spm_)
      gguf::add_spm_tokenizer_keys(h[0], config_, *spm_model_, spm_path_, added_tokens_, tokenizer_, tokenizer_config_,
                                   jinja_, where_, arch_.vocab == gguf::Arch::Vocab::Phi3);
    else if (tokenizer_.is_null())
      gguf::add_kimi_tokenizer_keys(h[0], config_, *tiktoken_, tokenizer_config_, jinja_, where_);
    else
      gguf::add_tokenizer_keys(h[0], config_, tokenizer_, tokenizer_config_, jinja_, where_, arch_.name);
    if (arch_.no_space_prefix) h[0].add_bool("tokenizer.ggml.add_space_prefix", false);
    if (shards > 65535)
      throw UnsupportedError(Where(o_.output),
                             std::to_string(shards) + " shards: split.count is a u16 (at most 65535)");
    paths_.assign(1, o_.output);
    if (shards > 1) {
      paths_.clear();
      for (size_t f = 0; f < shards; ++f) {
        h[f].add_u16("split.no", static_cast<uint16_t>(f));
        h[f].add_u16("split.count", static_cast<uint16_t>(shards));
        h[f].add_i32("split.tensors.count", static_cast<int32_t>(plans_.size()));
        paths_.push_back(gguf::shard_path(o_.output, f, shards));
      }
      // execute() checked the plain name; the shards' names are known only now.
      if (job.leader)
        for (const std::string& p : paths_) check_output_path(p, o_.force, job.request.ck.dir);
    }
    offsets_.clear();
    for (size_t k = 0; k < plans_.size(); ++k)
      offsets_.push_back(h[shard_[k]].add_tensor(plans_[k].name, plans_[k].shape, plans_[k].type));
    headers_.clear();
    data_bytes_.clear();
    json files = json::array();
    for (size_t f = 0; f < shards; ++f) {
      headers_.push_back(h[f].bytes());
      data_bytes_.push_back(h[f].data_bytes());
      files.push_back(
          {{"path", paths_[f]}, {"tensors", h[f].tensors()}, {"bytes", headers_[f].size() + data_bytes_[f]}});
    }
    summary["files"] = files;
    summary["gguf"] = {{"architecture", arch_.name}, {"outtype", outtype(o_)}};
  }

  void write_files(WriteJob& job, Executor& ex, const std::string&) override {
    if (!job.leader) return;
    const WritePlan& plan = job.plan;
    const Metadata& md = job.request.ck.md;
    const DerivedTable* derived = job.request.ck.derived.get();
    // Each file is written front to back (its tensors in offset order, the padding as zeros), so
    // it is appended: with --io direct past the page cache, each full block of the append window
    // written in the background while the next window is encoded (write/output.h's stage_appends).
    if (ex.direct_io)
      for (auto& out : outs_)
        if (out) out->stage_appends(kAppendWindow);
    for (size_t k = 0; k < plans_.size(); ++k) {
      const gguf::TensorPlan& tp = plans_[k];
      const size_t f = shard_[k];
      if (k > 0 && shard_[k - 1] != f && outs_[shard_[k - 1]]) end_shard(job, shard_[k - 1]);
      if (!outs_[f]) continue;  // kept from a stopped run (write/resume.h)
      pad_to(*outs_[f], headers_[f].size() + offsets_[k]);
      auto put = [&](const uint8_t* enc, size_t n) {
        outs_[f]->append(enc, n);
        ex.prog.add(n);
      };
      const uint64_t row = tp.shape.empty() ? 1 : static_cast<uint64_t>(tp.shape.back());
      if (tp.inputs.empty()) {  // values the converter computes (rope_freqs): a few floats, whole
        GateReservation hold(ex.gate, window_need(plan, tp, derived, 1));
        std::vector<uint8_t> enc(gguf::tensor_bytes(tp.type, tp.values.size(), row));
        gguf::encode(tp.type, tp.values.data(), tp.values.size(), enc.data());
        put(enc.data(), enc.size());
        continue;
      }
      const uint64_t units = window_units(plan, tp, derived);
      // Packed and MXFP4 tensors hold buffers of their own: float_windows' kept ones go first, so
      // that no more than one tensor's windows are held at once (the plan's largest_need).
      if (tp.packed || tp.mxfp4) windows_ = WindowBuffers{};
      GateReservation hold(ex.gate, window_need(plan, tp, derived, units));
      // NVFP4 and MXFP4 weights (a layer's NVFP4 experts one after another): their bytes repacked
      // (and Q/K rows moved), a window of rows at a time.
      for (size_t input : tp.packed ? tp.inputs : std::vector<size_t>()) {
        const PlannedTensor &w = plan.tensors[order_[input]], &sc = plan.tensors[packed_.at(order_[input])];
        const int64_t rows = w.t->shape.at(0), bytes = w.t->shape.at(1), blocks = sc.t->shape.at(1);
        const int64_t step = static_cast<int64_t>(units) * gguf::rows_unit(tp, w.t->shape);
        std::vector<uint8_t> b(static_cast<size_t>(step * bytes)), s(static_cast<size_t>(step * blocks)),
            scratch(std::max(b.size(), s.size()));
        for (int64_t first = 0; first < rows; first += step) {
          const int64_t m = std::min(step, rows - first);
          read_rows(ex.src, md, w, first, m, b.data(), scratch.data());
          read_rows(ex.src, md, sc, first, m, s.data(), scratch.data());
          if (tp.permute_heads > 0) {
            const int64_t heads = m / gguf::rows_unit(tp, w.t->shape);
            b = gguf::permute_rows(b.data(), m, bytes, 1, heads), s = gguf::permute_rows(s.data(), m, blocks, 1, heads);
            b.resize(static_cast<size_t>(step * bytes)), s.resize(static_cast<size_t>(step * blocks));
          }
          const std::vector<uint8_t> enc = tp.type == gguf::TensorType::NVFP4
                                               ? gguf::nvfp4_pack(b.data(), s.data(), m, bytes * 2)
                                               : gguf::mxfp4_pack(b.data(), s.data(), m, bytes * 2);
          put(enc.data(), enc.size());
        }
      }
      if (tp.packed) continue;
      if (tp.mxfp4) {  // GPT-OSS's MXFP4 experts: their bytes repacked, nothing computed, an expert window at a time
        const PlannedTensor &blocks = plan.tensors[order_[tp.inputs.at(0)]],
                            &scales = plan.tensors[order_[tp.inputs.at(1)]];
        const int64_t experts = blocks.t->shape.at(0);
        const uint64_t b_per = blocks.t->nbytes() / static_cast<uint64_t>(std::max<int64_t>(experts, 1)),
                       s_per = scales.t->nbytes() / static_cast<uint64_t>(std::max<int64_t>(experts, 1));
        std::vector<uint8_t> b(units * b_per), s(units * s_per), scratch(std::max(b.size(), s.size()));
        for (int64_t e = 0; e < experts; e += static_cast<int64_t>(units)) {
          const int64_t m = std::min<int64_t>(static_cast<int64_t>(units), experts - e);
          read_rows(ex.src, md, blocks, e, m, b.data(), scratch.data());
          read_rows(ex.src, md, scales, e, m, s.data(), scratch.data());
          const std::vector<uint8_t> enc = gguf::mxfp4_rows(tp, b.data(), s.data(), blocks.t->shape, m);
          put(enc.data(), enc.size());
        }
        continue;
      }
      float_windows(ex, plan, md, tp, units, put);
    }
    if (!shard_.empty() && outs_[shard_.back()]) end_shard(job, shard_.back());
    for (size_t f = 0; f < outs_.size(); ++f)
      if (outs_[f] && !staging_) pad_to(*outs_[f], headers_[f].size() + data_bytes_[f]);
  }

  OutputFile& file(size_t f) override { return *outs_[f < outs_.size() ? f : 0]; }

 private:
  // A journaled split: every shard in the staging folder, the journal removed, each shard's manifest
  // beside its final name, then the shards moved out in order (put back should one fail).
  void commit_staged(WriteJob& job) {
    for (auto& out : outs_)
      if (out) out->commit();
    job.journal->remove();
    std::vector<std::string> staged;
    for (const std::string& p : paths_) staged.push_back(staging_->path_of(base_name(p)));
    for (size_t f = 0; f < paths_.size() && seal; ++f) seal(staged[f], paths_[f]);
    for (size_t f = 0; f < paths_.size(); ++f) {
      if (::rename(staged[f].c_str(), paths_[f].c_str()) == 0) continue;
      const int e = errno;
      for (size_t g = 0; g < f; ++g) ::rename(paths_[g].c_str(), staged[g].c_str());
      throw IoError(Where(paths_[f]), "cannot rename " + staged[f] + " into place: " + errno_text(e));
    }
    staging_->dissolve();
  }

  // Shard `f` written to its end: padded, and where journaled, renamed in the staging folder and
  // recorded (write/resume.h).
  void end_shard(WriteJob& job, size_t f) {
    pad_to(*outs_[f], headers_[f].size() + data_bytes_[f]);
    if (!staging_) return;
    outs_[f]->commit();
    std::optional<FileDigest> d = outs_[f]->digest();
    if (!d) d = digest_files(outs_[f]->final_path(), 1, nullptr, nullptr, o_.manifest).begin()->second;
    job.journal->finished(base_name(paths_[f]), *d);
    staging_->keep_when_stopped();
    failpoint_stop(("finished/" + base_name(paths_[f])).c_str());  // tests: killed with this shard finished
  }

  // A tensor of float inputs: each input in turn (a layer's stacked experts: one after another), a
  // window of whole `units` of its first dimension at a time: read, made float32, moved as the
  // converter moves its rows, encoded, handed to `put` after the window before. The casts and the
  // encoding run on every core (gguf/simd.h's encode_parallel); a window whose rows stay where
  // they are is cast as it is encoded, a few rows at a time (cast_encode_parallel), with no
  // float32 copy of it. The buffers (windows_) are kept from window to window and from tensor to
  // tensor, and only grow: a fresh one would fault in its pages, and a vector grown again after a
  // smaller tensor would zero its new part, each time (an F16 export spent an eighth of its CPU so).
  template <class Put>
  void float_windows(Executor& ex, const WritePlan& plan, const Metadata& md, const gguf::TensorPlan& tp,
                     uint64_t units, Put&& put) const {
    const uint64_t row = tp.shape.empty() ? 1 : static_cast<uint64_t>(tp.shape.back());
    std::vector<uint8_t>&raw = windows_.raw, &scratch = windows_.scratch, &enc = windows_.enc;
    std::vector<float> f32;
    const unsigned threads = default_threads();
    auto at_least = [](std::vector<uint8_t>& b, uint64_t n) {
      if (b.size() < n) b.resize(n);
    };
    for (size_t input : tp.inputs) {
      const PlannedTensor& pt = plan.tensors[order_[input]];
      const std::vector<int64_t>& shape = pt.t->shape;
      const int64_t dim0 = shape.empty() ? 1 : shape[0];
      const uint64_t per_index = dim0 ? static_cast<uint64_t>(pt.t->numel()) / static_cast<uint64_t>(dim0) : 0;
      const int64_t step = static_cast<int64_t>(units) * gguf::rows_unit(tp, shape);
      const size_t item = itemsize(pt.src);
      auto fp8 = fp8_.find(order_[input]);
      const std::vector<float> scale =
          fp8 == fp8_.end() ? std::vector<float>() : read_scale(ex.src, md, plan.tensors[fp8->second.scale]);
      for (int64_t first = 0; first < dim0; first += step) {
        const int64_t rows = std::min(step, dim0 - first);
        const uint64_t n = static_cast<uint64_t>(rows) * per_index;
        at_least(raw, n * item);
        at_least(scratch, n * item);
        read_rows(ex.src, md, pt, first, shape.empty() ? 1 : rows, raw.data(), scratch.data());
        at_least(enc, gguf::tensor_bytes(tp.type, n, row));
        if (fp8 == fp8_.end() && !gguf::moves_rows(tp) && tp.shift == 0) {  // the rows as they are
          const uint64_t bytes = gguf::tensor_bytes(tp.type, n, row);
          if (pt.src == DType::Float32)
            gguf::encode_parallel(tp.type, reinterpret_cast<const float*>(raw.data()), n, row, enc.data(), threads);
          else
            gguf::cast_encode_parallel(tp.type, pt.src, raw.data(), n, row, enc.data(), threads);
          put(enc.data(), bytes);
          continue;
        }
        f32.resize(n);
        if (fp8 != fp8_.end()) {  // dequant_simple: float32(weight) * float32(scale), the fp8-block codec's product
          const PlannedTensor& st = plan.tensors[fp8->second.scale];
          const int64_t scale_cols = st.t->shape.size() == 2 ? st.t->shape[1] : 1;
          dequantize_fp8_blocks(pt.src, raw.data(), rows_box(shape, first, rows), scale.data(), scale_cols,
                                fp8->second.block, f32.data());
        } else if (pt.src != DType::Float32) {
          cast_parallel(pt.src, raw.data(), f32.data(), n, threads);
        } else {
          std::memcpy(f32.data(), raw.data(), n * 4);
        }
        std::vector<float> out = gguf::convert_rows(tp, std::move(f32), shape, rows);
        if (tp.shift != 0 && pt.src == DType::Float16) gguf::round_to_half(out);
        const uint64_t bytes = gguf::tensor_bytes(tp.type, out.size(), row);
        at_least(enc, bytes);
        gguf::encode_parallel(tp.type, out.data(), out.size(), row, enc.data(), threads);
        put(enc.data(), bytes);
        f32 = std::move(out);
      }
    }
  }

  // Zeros appended up to `at` (gguf-py's padding between tensors and at the end).
  static void pad_to(OutputFile& out, uint64_t at) {
    if (out.appended() > at) throw std::logic_error("gguf: a tensor's bytes run past the next one's offset");
    static const std::vector<uint8_t> zeros(gguf::kDefaultAlignment);
    while (out.appended() < at) out.append(zeros.data(), std::min<uint64_t>(zeros.size(), at - out.appended()));
  }

  // What the windows of `units` units of each input of `tp` hold at once, the most over its
  // inputs (one is converted after the other): per input element its bytes as saved and their
  // scratch (read_rows), float32, a moved copy (gguf/rows.h's moves_rows), the encoded bytes (at
  // most 4, F32); beside them rows_read_extra. MXFP4 experts: the blocks and scales as saved,
  // their scratch, and the repacked bytes (no more than the two).
  uint64_t window_need(const WritePlan& plan, const gguf::TensorPlan& tp, const DerivedTable* derived,
                       uint64_t units) const {
    if (tp.inputs.empty()) return 8 * static_cast<uint64_t>(tp.values.size());
    if (tp.packed) {  // the packed rows and their block scales, their scratch, permuted copies and the repacked bytes
      // (a layer's experts: each input alike, one after another)
      const PlannedTensor &w = plan.tensors[order_[tp.inputs.at(0)]],
                          &sc = plan.tensors[packed_.at(order_[tp.inputs.at(0)])];
      const uint64_t rows = std::min<uint64_t>(units * static_cast<uint64_t>(gguf::rows_unit(tp, w.t->shape)),
                                               static_cast<uint64_t>(w.t->shape.at(0)));
      const uint64_t per_row = static_cast<uint64_t>(w.t->shape.at(1) + sc.t->shape.at(1));
      return 4 * rows * per_row + std::max(rows_read_extra(plan, w, derived), rows_read_extra(plan, sc, derived));
    }
    if (tp.mxfp4) {
      uint64_t in = 0, extra = 0;
      for (size_t input : tp.inputs) {
        const PlannedTensor& pt = plan.tensors[order_[input]];
        in += units * pt.t->nbytes() / static_cast<uint64_t>(std::max<int64_t>(pt.t->shape.at(0), 1));
        extra = std::max(extra, rows_read_extra(plan, pt, derived));
      }
      return 3 * in + extra;
    }
    uint64_t most = 0;
    for (size_t input : tp.inputs) {
      const PlannedTensor& pt = plan.tensors[order_[input]];
      const std::vector<int64_t>& shape = pt.t->shape;
      const int64_t dim0 = shape.empty() ? 1 : shape[0];
      if (dim0 == 0) continue;
      const uint64_t per_index = static_cast<uint64_t>(pt.t->numel()) / static_cast<uint64_t>(dim0);
      const uint64_t rows =
          std::min<uint64_t>(units * static_cast<uint64_t>(gguf::rows_unit(tp, shape)), static_cast<uint64_t>(dim0));
      const uint64_t per_elem = 2 * itemsize(pt.src) + 4 + (gguf::moves_rows(tp) ? 4 : 0) + 4;
      // An FP8 weight's whole scale beside it: its saved bytes, their scratch and float32.
      uint64_t scale = 0;
      if (auto f = fp8_.find(order_[input]); f != fp8_.end()) {
        const TensorMeta& st = *plan.tensors[f->second.scale].t;
        scale = 2 * st.nbytes() + 4 * static_cast<uint64_t>(st.numel()) +
                rows_read_extra(plan, plan.tensors[f->second.scale], derived);
      }
      most = std::max(most, rows * per_index * per_elem + scale + rows_read_extra(plan, pt, derived));
    }
    return most;
  }

  // A saved tensor of one float32 value (an NVFP4 weight's per-tensor factor).
  static float read_one(const Checkpoint& ck, const PlannedTensor& pt) {
    if (assembled(pt) || pt.t->numel() != 1 || pt.src != DType::Float32 || pt.t->num_chunks() != 1)
      throw UnsupportedError(Where(ck.dir, std::nullopt, pt.key),
                             "'" + pt.key + "' is not one saved float32: not read as an NVFP4 per-tensor scale");
    float v = 0;
    ItemReader(ck).read_chunk(*pt.t, 0, &v);
    return v;
  }

  // An FP8 weight's scale (gguf/lowbit.h), whole, as float32.
  static std::vector<float> read_scale(ChunkSource& src, const Metadata& md, const PlannedTensor& st) {
    const uint64_t n = static_cast<uint64_t>(st.t->numel());
    std::vector<uint8_t> raw(n * itemsize(st.src)), scratch(raw.size());
    read_rows(src, md, st, 0, st.t->shape.empty() ? 1 : st.t->shape[0], raw.data(), scratch.data());
    std::vector<float> out(n);
    gguf::scale_to_float(st.src, raw.data(), n, out.data());
    return out;
  }

  // Units per window of `tp`: as many as make a window of about kWindowElems input elements (one
  // at least), fewer when that would not fit the budget.
  uint64_t window_units(const WritePlan& plan, const gguf::TensorPlan& tp, const DerivedTable* derived) const {
    uint64_t unit_elems = 1;
    for (size_t input : tp.inputs) {
      const PlannedTensor& pt = plan.tensors[order_[input]];
      const int64_t dim0 = pt.t->shape.empty() ? 1 : pt.t->shape[0];
      if (dim0 > 0)
        unit_elems = std::max(unit_elems, static_cast<uint64_t>(pt.t->numel()) / static_cast<uint64_t>(dim0) *
                                              static_cast<uint64_t>(tp.mxfp4 ? 1 : gguf::rows_unit(tp, pt.t->shape)));
    }
    uint64_t units = std::max<uint64_t>(1, kWindowElems / unit_elems);
    // The need grows with the units; halve until it fits (the plan checked that one does).
    while (units > 1 && window_need(plan, tp, derived, units) > plan.budget) units = (units + 1) / 2;
    return units;
  }

  // About 16 MiB of float32 per window: enough that a window's reads and writes cost nothing beside
  // its encoding; a few of them well inside the default budget.
  static constexpr uint64_t kWindowElems = 4ull << 20;

  // "rows", "heads" or "experts": what a window of `tp` holds whole, for messages.
  static std::string unit_name(const gguf::TensorPlan& tp) {
    if (tp.qkv_groups) return "tensors (Falcon's query_key_value is regrouped whole)";
    if (tp.permute_heads > 0 || tp.kv_b) return "heads";
    if (tp.mxfp4 || tp.gate_up || tp.transpose) return "experts";
    return tp.inputs.empty() ? "values" : "rows";
  }

  gguf::OutType out_;
  gguf::Arch arch_;
  json config_, tokenizer_, tokenizer_config_;
  std::string jinja_, where_;
  std::optional<std::string> tiktoken_;   // tiktoken.model (Kimi K2: gguf/tiktoken.h)
  std::optional<std::string> spm_model_;  // tokenizer.model (SentencePiece: gguf/spm.h)
  std::string spm_path_;
  json added_tokens_;               // added_tokens.json
  bool spm_ = false;                // the tokenizer written is spm_model_'s
  std::vector<size_t> order_;       // the inputs (plan.tensors' indices), in the converter's order
  std::vector<std::string> names_;  // each plan.tensors key as the converter names it ("": left out)
  // FP8 weights the converter dequantizes (gguf/lowbit.h), by plan.tensors' index; their scales too.
  std::map<size_t, gguf::Fp8Source> fp8_;
  std::map<size_t, size_t>
      packed_;  // NVFP4 / MXFP4 weights passed through: each one's block scale (plan.tensors' indices)
  std::vector<gguf::TensorPlan> plans_;
  std::vector<uint64_t> offsets_;   // each tensor's, in its shard's data section
  std::vector<size_t> shard_;       // each tensor's shard
  std::vector<std::string> paths_;  // each shard's final path (one: the output's)
  std::vector<std::vector<uint8_t>> headers_;
  std::vector<uint64_t> data_bytes_;
  std::vector<std::unique_ptr<OutputFile>> outs_;  // null: a shard kept from a stopped run
  std::unique_ptr<OutputDir> staging_;             // a journaled split's (write/resume.h)
  // float_windows' buffers, kept from tensor to tensor (each grows to the largest window's bytes
  // as saved, their scratch and its encoding: within the plan's largest_need).
  struct WindowBuffers {
    std::vector<uint8_t> raw, scratch, enc;
  };
  mutable WindowBuffers windows_;
};

}  // namespace

namespace {
constexpr const char* kSplitElsewhere =
    "--split-max-size and --split-max-tensors go with a GGUF output (-o model.gguf)";
}  // namespace

const Format gguf::output_format = [] {
  Format f;
  f.name = "gguf";  // chosen by the name (-o model.gguf), not a --format word
  // One file, written by rank 0 tensor by tensor at the offsets its header gives.
  f.writing = Writing::InOrder;
  f.tensors_only = true;
  f.suffixes = {".gguf"};
  f.whole_model = true;
  f.own_windows = true;  // a tensor converted a window of whole rows at a time (gguf/rows.h)
  f.file_name = [](size_t, size_t) { return std::string("model.gguf"); };
  f.consolidate_writer = [](const ConsolidateOptions& o) -> std::unique_ptr<OutputWriter> {
    return std::make_unique<GgufFile>(o);
  };
  f.options = {
      {"--outtype", "TYPE",
       ".gguf output: the type of its 2-D weights, as convert_hf_to_gguf.py's --outtype: f32, f16 (default), bf16 or "
       "q8_0, or as "
       "llama-quantize --pure: q4_0, q4_k, q5_k or q6_k (norms and 1-D tensors stay F32)",
       "--outtype goes with a GGUF output (-o model.gguf)"},
      {"--split-max-size", "N",
       ".gguf output: split it as convert_hf_to_gguf.py --split-max-size does, a shard's tensor data at most N bytes "
       "(K, M, G: powers of 1000; a larger tensor alone), into NAME-00001-of-0000N.gguf beside NAME.gguf",
       kSplitElsewhere},
      {"--split-max-tensors", "N",
       ".gguf output: split it as convert_hf_to_gguf.py --split-max-tensors does, at most N tensors a shard",
       kSplitElsewhere},
      {"--mmproj", "",
       ".gguf output: the vision tower and projector as convert_hf_to_gguf.py --mmproj writes them: not written by "
       "this version (exit 5); without it a vision-language model's GGUF is its text model",
       "--mmproj goes with a GGUF output (-o mmproj.gguf)"},
  };
  f.check_options = check_options;
  return f;
}();

}  // namespace dcpctl
