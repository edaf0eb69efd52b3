// The `gguf` format (consolidate -o model.gguf): llama.cpp's model file, as its converter
// (convert_hf_to_gguf.py) writes it for the same model: one file, a whole model, its config and
// tokenizer from beside the checkpoint or --assets (issue 71 item 1; docs/gguf.md); or, with
// --split-max-size / --split-max-tensors, the converter's split files (gguf/gguf.h), each shard
// a file of its own under a temporary name, renamed only once every shard is complete.
//
// The header (gguf/gguf.h) is a function of config.json, the tokenizer files and the plan's
// tensors (gguf/model.h: names, types, the converter's key order), so it is laid out before
// the first byte: rank 0 creates the file under a temporary name with its header and its space,
// then converts one GGUF tensor at a time (its inputs read whole in their saved dtype, float32, the
// Llama Q/K row permutation, a layer's experts stacked, DeepSeek's kv_b split, GPT-OSS's fused experts split, or the values the
// converter computes (rope_freqs); the output type: F32, F16, BF16, Q8_0 or ggml's quantizers) into its place, inside
// --max-memory, and renames it. Tensors go in the order of their Hugging Face keys (the converter reads a
// safetensors file's sorted keys). Refused (exit 5, before anything is written): an architecture,
// tensor, config setting or tokenizer gguf/model.h does not write, a non-floating tensor,
// and a run under torchrun (the exchange serves chunks in the deal's order, which this one-pass
// writer does not follow yet).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "item/chunk_source.h"
#include "util/numeric.h"
#include "write/executor.h"
#include "write/formats/consolidated.h"
#include "gguf/format.h"
#include "gguf/gguf.h"
#include "gguf/model.h"
#include "gguf/tiktoken.h"
#include "gguf/spm.h"
#include "write/output.h"

namespace dcpctl {

namespace {

using nlohmann::json;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(Where(path), "cannot read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

json parse(const std::string& text, const std::string& path) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw FormatError(Where(path), "not a JSON object");
  return j;
}

// A tensor's bytes, whole: a saved tensor (or one a map renames whole) from its chunks; any other key
// map output (a layer of Megatron's stacked tensors, q/k/v split out of linear_qkv, the vocabulary's
// first rows, a permuted q) from its record's pieces of the saved tensors it is made of: its
// synthetic TensorMeta has no chunks of its own (read as such it would be zeros).
bool assembled(const PlannedTensor& pt) { return pt.mapped && !pt.renamed; }

void read_whole(ChunkSource& src, const WritePlan& plan, const PlannedTensor& pt, uint8_t* dst) {
  if (!assembled(pt)) return read_full_tensor(src, *pt.t, dst);
  if (pt.records.size() != 1) throw std::logic_error("gguf: '" + pt.key + "' is not planned as one whole record");
  const Record& r = plan.records[pt.records[0]];
  assemble_box(src, *pt.t, r.box, r.pieces, dst);
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
    if (o_.cast) throw UsageError(Where(o_.output), "--dtype does not apply to a GGUF output: --outtype (f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k) says its type");
    out_ = gguf::out_type(outtype(o_));
    Assets assets = find_assets(request.ck, o_.assets_from, &request.model.config());
    std::string tokenizer_config, jinja;
    for (const Asset& a : assets.files) {
      if (a.name == "config.json") config_ = parse(a.text ? *a.text : read_text(a.source), a.source);
      if (a.name == "tokenizer.json") tokenizer_ = parse(read_text(a.source), a.source);
      if (a.name == "tokenizer_config.json") tokenizer_config_ = parse(read_text(a.source), a.source);
      if (a.name == "chat_template.jinja") jinja_ = read_text(a.source);
      if (a.name == "tiktoken.model") tiktoken_ = read_text(a.source);
      if (a.name == "tokenizer.model") spm_model_ = read_text(a.source), spm_path_ = a.source;
      if (a.name == "added_tokens.json") added_tokens_ = parse(read_text(a.source), a.source);
    }
    std::string where = assets.searched.empty() ? o_.output : assets.searched.front();
    if (!config_.is_null()) arch_ = gguf::arch_of(config_, where);
    // The converter's set_vocab: a SentencePiece tokenizer.model first where the architecture's
    // tries one (gguf/spm.h), else tokenizer.json, else (DeepseekV2Model.set_vocab's kimi-k2
    // branch) Kimi K2's tiktoken.model.
    spm_ = spm_model_ && gguf::tries_sentencepiece(arch_.name);
    const bool kimi = !spm_ && tokenizer_.is_null() && tiktoken_ && gguf::is_kimi_tokenizer(tokenizer_config_);
    if (config_.is_null() || (tokenizer_.is_null() && !kimi && !spm_))
      throw UnsupportedError(Where(o_.output), std::string("a GGUF output needs the model's config.json and tokenizer.json (beside the checkpoint, or --assets DIR); ") +
                                               (config_.is_null() ? "config.json" : "tokenizer.json") + " was not found" +
                                               (!config_.is_null() && tiktoken_ ? " (a tiktoken.model is written only as Kimi K2's, tokenizer_config.json's auto_map naming tokenization_kimi.TikTokenTokenizer)" : "") +
                                               (!config_.is_null() && spm_model_ ? " (a tokenizer.model is read only for the architectures whose converter reads it: llama, qwen2, qwen3)" : ""));
    where_ = where;
    if (!spm_ && arch_.name == "llama" && gguf::is_llama_hf_tokenizer(tokenizer_))
      throw UnsupportedError(Where(where_), "a tokenizer.json of a byte-fallback BPE without tokenizer.model: llama.cpp's converter writes it through "
                                            "transformers (_set_vocab_llama_hf), which dcpctl does not yet; put the model's tokenizer.model beside it");
    if (kimi && arch_.name != "deepseek2")
      throw UnsupportedError(Where(where_), "Kimi's tiktoken tokenizer is written into a GGUF of deepseek2 only (the converter's DeepseekV2Model reads it)");
  }

  std::string set_up(WriteJob& job) override {
    std::string list;
    for (size_t f = 0; f < headers_.size(); ++f) {
      outs_.push_back(std::make_unique<OutputFile>(paths_[f], job.uploads));
      outs_[f]->reserve(headers_[f].size() + data_bytes_[f]);
      outs_[f]->pwrite_all(headers_[f].data(), headers_[f].size(), 0);
      list += outs_[f]->temp_path() + "\n";
    }
    return list;
  }

  // Every shard complete before the first is renamed: each one's manifest beside it, then the
  // renames, in order; should one fail, the shards already renamed are removed again, so that no
  // incomplete set is left under the final names (the rest are removed as temporaries).
  void commit(WriteJob&) override {
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
      throw UnsupportedError(Where(o_.output), "a GGUF output is written by one process: run consolidate without torchrun");
    order_.resize(plan.tensors.size());
    std::iota(order_.begin(), order_.end(), size_t{0});
    std::vector<std::string> keys;
    for (const PlannedTensor& pt : plan.tensors) keys.push_back(gguf::sort_key(arch_, pt.key));
    std::sort(order_.begin(), order_.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
    std::vector<gguf::Input> inputs;
    for (size_t i : order_) {
      const PlannedTensor& pt = plan.tensors[i];
      const bool mxfp4 = pt.key.size() > 7 && (pt.key.compare(pt.key.size() - 7, 7, "_blocks") == 0 || pt.key.compare(pt.key.size() - 7, 7, "_scales") == 0);
      // GPT-OSS's MXFP4 experts are copied as bytes (gguf::mxfp4_repack): uint8 blocks and scales
      // only, as the converter's repack_mxfp4 asserts.
      if (mxfp4 && arch_.experts == gguf::Arch::Experts::GptOss && pt.src != DType::UInt8)
        throw UnsupportedError(Where(where_, std::nullopt, pt.key), "'" + pt.key + "' is " + torch_name(pt.src) +
                                                                   ": the converter repacks MXFP4 blocks and scales of uint8 only");
      if (mxfp4 && arch_.experts == gguf::Arch::Experts::GptOss) {
        inputs.push_back({pt.key, pt.t->shape});
        continue;
      }
      if (!info(pt.src).floating || pt.src == DType::Float4_E2M1FN_X2)
        throw UnsupportedError(Where(where_, std::nullopt, pt.key), "'" + pt.key + "' is " + torch_name(pt.src) + ": a GGUF output holds floating tensors");
      inputs.push_back({pt.key, pt.t->shape});
    }
    plans_ = gguf::plan_tensors(arch_, config_, inputs, out_, where_);
    uint64_t most = 0;
    for (const gguf::TensorPlan& tp : plans_) most = std::max(most, need(plan, tp));
    if (most > plan.budget)
      throw UnsupportedError(Where(o_.output), "a GGUF tensor is converted whole: the largest needs " + std::to_string(most) +
                                                   " bytes, more than --max-memory's " + std::to_string(plan.budget));
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
    gguf::add_model_keys(h[0], arch_, config_, gguf::id_to_title(stem(o_.output)), gguf::size_label(plans_), out_, where_);
    if (arch_.name == "llama") gguf::add_llama_vocab_keys(h[0], config_, tokenizer_config_, where_);
    if (spm_)
      gguf::add_spm_tokenizer_keys(h[0], config_, *spm_model_, spm_path_, added_tokens_, tokenizer_, tokenizer_config_, jinja_, where_);
    else if (tokenizer_.is_null())
      gguf::add_kimi_tokenizer_keys(h[0], config_, *tiktoken_, tokenizer_config_, jinja_, where_);
    else
      gguf::add_tokenizer_keys(h[0], config_, tokenizer_, tokenizer_config_, jinja_, where_, arch_.name);
    if (shards > 65535) throw UnsupportedError(Where(o_.output), std::to_string(shards) + " shards: split.count is a u16 (at most 65535)");
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
    for (size_t k = 0; k < plans_.size(); ++k) offsets_.push_back(h[shard_[k]].add_tensor(plans_[k].name, plans_[k].shape, plans_[k].type));
    headers_.clear();
    data_bytes_.clear();
    json files = json::array();
    for (size_t f = 0; f < shards; ++f) {
      headers_.push_back(h[f].bytes());
      data_bytes_.push_back(h[f].data_bytes());
      files.push_back({{"path", paths_[f]}, {"tensors", h[f].tensors()}, {"bytes", headers_[f].size() + data_bytes_[f]}});
    }
    summary["files"] = files;
    summary["gguf"] = {{"architecture", arch_.name}, {"outtype", outtype(o_)}};
  }

  void write_files(WriteJob& job, Executor& ex, const std::string&) override {
    if (!job.leader) return;
    const WritePlan& plan = job.plan;
    for (size_t k = 0; k < plans_.size(); ++k) {
      const gguf::TensorPlan& tp = plans_[k];
      GateReservation hold(ex.gate, need(plan, tp));
      if (tp.mxfp4) {  // GPT-OSS's MXFP4 experts: their bytes repacked, nothing computed
        const PlannedTensor &blocks = plan.tensors[order_[tp.inputs.at(0)]], &scales = plan.tensors[order_[tp.inputs.at(1)]];
        std::vector<uint8_t> b(blocks.t->nbytes()), s(scales.t->nbytes());
        read_whole(ex.src, plan, blocks, b.data());
        read_whole(ex.src, plan, scales, s.data());
        std::vector<uint8_t> enc = gguf::mxfp4_repack(tp, b.data(), s.data(), blocks.t->shape);
        const size_t f = shard_[k];
        outs_[f]->pwrite_all(enc.data(), enc.size(), headers_[f].size() + offsets_[k]);
        ex.prog.add(enc.size());
        continue;
      }
      // float32 of each input (permuted), one after the other: stacked experts are their concatenation.
      std::vector<uint8_t> f32;
      if (tp.inputs.empty()) f32.assign(reinterpret_cast<const uint8_t*>(tp.values.data()), reinterpret_cast<const uint8_t*>(tp.values.data() + tp.values.size()));
      for (size_t input : tp.inputs) {
        const PlannedTensor& pt = plan.tensors[order_[input]];
        const uint64_t n = static_cast<uint64_t>(pt.t->numel());
        std::vector<uint8_t> raw(pt.t->nbytes());
        read_whole(ex.src, plan, pt, raw.data());
        const size_t at = f32.size();
        f32.resize(at + n * 4);
        if (pt.src != DType::Float32) cast_elements(pt.src, DType::Float32, raw.data(), f32.data() + at, n);
        else std::memcpy(f32.data() + at, raw.data(), n * 4);
        if (tp.permute_heads > 0) {
          const int64_t rows = pt.t->shape[0], cols = rows ? static_cast<int64_t>(n) / rows : 0;
          std::vector<uint8_t> permuted = gguf::permute_rows(f32.data() + at, rows, cols, 4, tp.permute_heads);
          std::memcpy(f32.data() + at, permuted.data(), permuted.size());
        }
      }
      if (tp.gate_up || tp.transpose) {  // GPT-OSS's fused experts: the gate or up part, transposed
        std::vector<float> part = gguf::fused_part(tp, reinterpret_cast<const float*>(f32.data()), plan.tensors[order_[tp.inputs[0]]].t->shape);
        f32.assign(reinterpret_cast<const uint8_t*>(part.data()), reinterpret_cast<const uint8_t*>(part.data() + part.size()));
      }
      if (tp.kv_b) {  // DeepSeek's kv_b_proj: its k_b or v_b part
        std::vector<float> part = gguf::kv_b_part(tp, reinterpret_cast<const float*>(f32.data()), plan.tensors[order_[tp.inputs[0]]].t->shape[1]);
        f32.assign(reinterpret_cast<const uint8_t*>(part.data()), reinterpret_cast<const uint8_t*>(part.data() + part.size()));
      }
      uint64_t n = 1;
      for (int64_t d : tp.shape) n *= static_cast<uint64_t>(d);
      const uint64_t row = tp.shape.empty() ? 1 : static_cast<uint64_t>(tp.shape.back());
      std::vector<uint8_t> enc(gguf::tensor_bytes(tp.type, n, row));
      gguf::encode(tp.type, reinterpret_cast<const float*>(f32.data()), n, enc.data());
      const size_t f = shard_[k];
      outs_[f]->pwrite_all(enc.data(), enc.size(), headers_[f].size() + offsets_[k]);
      ex.prog.add(enc.size());
    }
  }

  OutputFile& file(size_t f) override { return *outs_[f < outs_.size() ? f : 0]; }

 private:
  // The bytes a tensor's conversion holds at once: its inputs in float32, one input as saved and
  // permuted, the encoded bytes.
  uint64_t need(const WritePlan& plan, const gguf::TensorPlan& tp) const {
    uint64_t n = 1, most = 0;
    for (int64_t d : tp.shape) n *= static_cast<uint64_t>(d);
    if (tp.mxfp4) {  // the blocks and scales as saved, and the repacked bytes
      uint64_t in = 0;
      for (size_t input : tp.inputs) in += plan.tensors[order_[input]].t->nbytes();
      return in + gguf::tensor_bytes(tp.type, n, static_cast<uint64_t>(tp.shape.back()));
    }
    for (size_t input : tp.inputs) {
      const PlannedTensor& pt = plan.tensors[order_[input]];
      // an assembled input: its record's need (the tensor and the copies of source chunks it takes)
      const uint64_t in = assembled(pt) ? std::max(pt.t->nbytes(), plan.records[pt.records.at(0)].need) : pt.t->nbytes();
      most = std::max(most, in + (tp.permute_heads || tp.kv_b || tp.gate_up || tp.transpose ? 4 * static_cast<uint64_t>(pt.t->numel()) : 0));
    }
    const uint64_t row = tp.shape.empty() ? 1 : static_cast<uint64_t>(tp.shape.back());
    return 4 * n + most + gguf::tensor_bytes(tp.type, n, row);
  }

  gguf::OutType out_;
  gguf::Arch arch_;
  json config_, tokenizer_, tokenizer_config_;
  std::string jinja_, where_;
  std::optional<std::string> tiktoken_;  // tiktoken.model (Kimi K2: gguf/tiktoken.h)
  std::optional<std::string> spm_model_;  // tokenizer.model (SentencePiece: gguf/spm.h)
  std::string spm_path_;
  json added_tokens_;  // added_tokens.json
  bool spm_ = false;   // the tokenizer written is spm_model_'s
  std::vector<size_t> order_;
  std::vector<gguf::TensorPlan> plans_;
  std::vector<uint64_t> offsets_;  // each tensor's, in its shard's data section
  std::vector<size_t> shard_;      // each tensor's shard
  std::vector<std::string> paths_;  // each shard's final path (one: the output's)
  std::vector<std::vector<uint8_t>> headers_;
  std::vector<uint64_t> data_bytes_;
  std::vector<std::unique_ptr<OutputFile>> outs_;
};

}  // namespace

namespace {
constexpr const char* kSplitElsewhere = "--split-max-size and --split-max-tensors go with a GGUF output (-o model.gguf)";
}  // namespace

const Format gguf::output_format = [] {
  Format f;
  f.name = "gguf";  // chosen by the name (-o model.gguf), not a --format word
  // One file, written by rank 0 tensor by tensor at the offsets its header gives.
  f.writing = Writing::InOrder;
  f.tensors_only = true;
  f.suffixes = {".gguf"};
  f.whole_model = true;
  f.file_name = [](size_t, size_t) { return std::string("model.gguf"); };
  f.consolidate_writer = [](const ConsolidateOptions& o) -> std::unique_ptr<OutputWriter> { return std::make_unique<GgufFile>(o); };
  f.options = {
      {"--outtype", "TYPE",
       ".gguf output: the type of its 2-D weights, as convert_hf_to_gguf.py's --outtype: f32, f16 (default), bf16 or q8_0, or as "
       "llama-quantize --pure: q4_0, q4_k, q5_k or q6_k (norms and 1-D tensors stay F32)",
       "--outtype goes with a GGUF output (-o model.gguf)"},
      {"--split-max-size", "N",
       ".gguf output: split it as convert_hf_to_gguf.py --split-max-size does, a shard's tensor data at most N bytes "
       "(K, M, G: powers of 1000; a larger tensor alone), into NAME-00001-of-0000N.gguf beside NAME.gguf", kSplitElsewhere},
      {"--split-max-tensors", "N", ".gguf output: split it as convert_hf_to_gguf.py --split-max-tensors does, at most N tensors a shard",
       kSplitElsewhere},
  };
  f.check_options = check_options;
  return f;
}();

}  // namespace dcpctl
