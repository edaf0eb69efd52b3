// The codec list: every quantized format dcpctl reads or writes, and the one place the rest of
// dcpctl asks about them.
//
// A codec is a format of quantized weights on disk: a weight in a narrow dtype beside the scales
// that decode it. Its description (this header's `Codec`, one file each in src/meta/codecs/) says
// what is on disk and what config.json says of it: the `quantization_config` keys that name it,
// its rows (the weight's and scale's dtypes, one row per variant), the weight's and the scale's
// names beside each other, how a weight is recognised with its scale, what --quantize writes of it
// (its word, its help, the config it writes) and the error an export is held to (compare/audit.h).
// What decodes and encodes its bytes (the DerivedTensors of the dequantize and quantize views) is
// in src/view/codecs/, one file a codec, listed in view/codecs/codecs.h.
//
// Why two layers: the planner (plan/plan.cpp: which scales a cast would lose), verify's HF checks
// (check/hf_config_checks.cpp: every quantized weight has its scale), inspect (view/codecs/quantized.h) and
// the audit's bounds (compare/) all ask the codec list, and meta/ and plan/ sit below view/
// (docs/architecture.md: a folder includes only from the folders below it). So the descriptions
// are data and recognition here, in meta/, and the arithmetic over tensor reads stays in view/.
//
// A new codec: its description, a file in src/meta/codecs/ (a `const Codec& NAME_codec()`), and a
// line in codecs() (codecs.cpp); when a view decodes or encodes it, its DerivedTensors in a file in
// src/view/codecs/ and a line in codec_views() (view/codecs/codecs.cpp). The CLI's --quantize
// choices and help, the planner's and the HF checks' scale names, inspect and the audit follow.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/metadata.h"

namespace dcpctl {

// The tensor indices of a table by name.
using NameIndex = std::unordered_map<std::string_view, uint32_t>;

// One variant of a codec: the saved weight's and scale's dtypes, and what quantization_config says
// of them.
struct CodecRow {
  const char* name;       // for messages and --json: "fp8-block e4m3 float32", ...
  const char* fmt;        // quantization_config.fmt: "e4m3", "e5m2"; "" where the format has none
  const char* scale_fmt;  // quantization_config.scale_fmt: "float", "ue8m0"; "" where it has none
  DType weight;           // the saved weight's dtype
  DType scale;            // the saved scale's dtype
  bool writes;            // --quantize writes this row
};

struct Codec {
  const char* name;           // "fp8-block", "mxfp4", "F4"
  const char* quant_method;   // quantization_config.quant_method that names it: "fp8", "mxfp4"; "" none
  const char* weight_suffix;  // the weight's name: X + weight_suffix ("": X itself)
  const char* scale_suffix;   // the scale's name beside it: X + scale_suffix
  std::vector<CodecRow> rows;
  // Whether the codec reads what config.json's quantization_config `qc` (in `config`) declares;
  // null: the quant_method is its own. Asked by the fail-closed check (view/codecs/unexplained.h).
  bool (*explains)(const nlohmann::json& qc, const nlohmann::json& config) = nullptr;

  // What of quantization_config `qc` the codec recognises but does not decode, for the fail-closed
  // refusal's message (view/codecs/unexplained.h): ModelOpt's MIXED_PRECISION layers, each type
  // named. "" or null: nothing to add.
  std::string (*unread)(const nlohmann::json& qc) = nullptr;

  // Recognition: the (weight, scale) pairs of `md` this codec reads (by name and rows), in table
  // order of the weights. Null: no view reads it as a weight (its dtype is read and written as is).
  std::vector<std::pair<uint32_t, uint32_t>> (*pairs)(const Metadata& md, const NameIndex& by_name) = nullptr;

  // What verify's HF checks (check/hf_config_checks.cpp) hold the tensors beside weight `key` of
  // `dtype` and `shape` to where config.json has no quantization_config to name the format (the
  // codec's `beside` names them): each one's name, the dtypes and shapes it may have, and what it
  // is. None: `key` is not one of its weights, or not quantized.
  struct Expected {
    std::string key;
    std::vector<std::string> dtypes;  // torch names ("float8_e4m3fn")
    std::vector<std::vector<int64_t>> shapes;
    std::string what;  // "Inkling2Loop NVFP4 block scale (one per 16 values)"
  };
  std::vector<Expected> (*expected_beside)(const std::string& key, const std::string& dtype,
                                           const std::vector<int64_t>& shape) = nullptr;

  // The tensors its decode takes beside weight `key` (its scale and any other), or none where `key` is
  // not one of its weights: the model schema's check (check/hf_schema.cpp) counts those that are
  // there as the quantization's own, not the model's, where config.json has no quantization_config
  // to say so (Inkling2Loop's expert stacks). Null: the config's quantization_config says it.
  std::vector<std::string> (*beside)(const std::string& key) = nullptr;

  // verify's HF checks: a scale whose key ends in `orphan_tail` (and holds `orphan_within`) and
  // whose weight (the key less scale_suffix, plus weight_suffix) is not there is an orphan.
  const char* orphan_tail = "";
  const char* orphan_within = "";

  // --quantize: the word that writes it (null: --quantize does not), its part of the option's
  // help, the brief a refusal lists, and what the summary says of a write (`block`: --quantize-block).
  // Several codecs may share a word (fp8-block in transformers' form and in compressed-tensors'):
  // --quantize-format QUANT_METHOD picks one by its quant_method, the first in codecs() without it.
  const char* quantize_word = nullptr;
  const char* quantize_help = "";
  const char* quantize_brief = "";
  // --quantize-block's refusal where the codec has no block of its choosing ("": it takes one).
  const char* block_refusal = "";
  // --quantize-group's default where the codec's groups are of the user's choosing (0: they are not,
  // and --quantize-group is refused with it).
  int64_t quantize_group = 0;
  std::string (*written_summary)(const int64_t block[2]) = nullptr;
  // quantization_config as --quantize writes it (block: --quantize-block; not_convert: the modules
  // kept), in the key order the releases use.
  nlohmann::json (*written_config)(const CodecRow& row, const int64_t block[2],
                                   const nlohmann::json& not_convert) = nullptr;
  // Files --quantize writes beside config.json, made from the quantization_config written (name,
  // text): ModelOpt's hf_quant_config.json. Null: none.
  std::vector<std::pair<std::string, std::string>> (*written_files)(const nlohmann::json& config) = nullptr;

  // The audit's error bound (view/codecs/bound.h, compare/export_bound.h): half a step of the
  // element grid at a value q of it (at the top code, what the codec's scale rule lets saturate),
  // so that |x - dq| <= s * half_step(dq / s) for the scale s the element sees. The decode that
  // reads the format builds each weight's bound with it. Null: no bound implemented (auditing such
  // an export is refused, naming `display` and the weight).
  double (*half_step)(double q) = nullptr;
  const char* display = "";           // in messages: "block-scaled float8", "MXFP4"
  const char* scale_is = "scale is";  // in messages: "this one's scale is", "scales are"

  // The row of weight dtype `weight` beside scale dtype `scale`, or null.
  const CodecRow* row(DType weight, DType scale) const;
  // The row --quantize writes (logic_error where none does).
  const CodecRow& written_row() const;
  // Whether `d` is the weight dtype of one of its rows.
  bool weight_dtype(DType d) const;
};

// The codecs, each once, in the order messages and lists give them.
const std::vector<const Codec*>& codecs();
// The codec --quantize WORD writes in the form whose quant_method is `format` ("": the first in
// codecs() with that word), or null.
const Codec* quantize_codec(const std::string& word, const std::string& format = "");
// --quantize words of schemes that need what no checkpoint holds (activation scales, calibrated
// on data): each with what is missing and what dcpctl writes instead. Refused (exit 5).
struct CalibratedScheme {
  const char* word;     // "fp8-static", "nvfp4-w4a4"
  const char* missing;  // "input_scale: ..."
  const char* instead;  // "fp8-dynamic"
};
const std::vector<CalibratedScheme>& calibrated_schemes();
// The quant_methods --quantize WORD writes, in codecs()' order ("" : of every word).
std::vector<std::string> quantize_formats(const std::string& word = "");

// The codecs' descriptions (src/meta/codecs/*.cpp).
const Codec& fp8_block_codec();
const Codec& mxfp4_codec();
const Codec& f4_codec();
const Codec& deepseek_v4_codec();
const Codec& compressed_tensors_codec();
const Codec& modelopt_codec();
const Codec& ct_fp8_dynamic_codec();
const Codec& ct_fp8_block_codec();
const Codec& ct_nvfp4_codec();
const Codec& ct_mxfp8_codec();
const Codec& ct_mxfp4_codec();
const Codec& ct_w4a16_codec();
const Codec& mo_nvfp4_codec();
const Codec& mo_mxfp8_codec();
const Codec& inkling2_loop_codec();
// The compressed-tensors formats and ModelOpt quant_algo values dcpctl decodes.
bool ct_format_read(const std::string& format);
bool modelopt_algo_read(const std::string& algo);
// The quant_algo of ModelOpt quantization_config `qc` for Linear `module`: a MIXED_PRECISION
// config's quantized_layers entry for it ("" where it has none), else the config's own.
std::string modelopt_layer_algo(const nlohmann::json& qc, const std::string& module);
// fp8-block's half_step: half an e4m3fn ULP at |q| (q a value of the format, or near one).
double e4m3_half_ulp(double q);
// NVFP4's and compressed-tensors' MXFP4's half_step: half the larger gap beside |q| on the E2M1 grid
// (0, 0.5, 1, 1.5, 2, 3, 4, 6): 0.25 below 2, 0.5 below 4, 1 from 4 on. Their scales keep each block
// within 6 (NVFP4's e4m3 block scale of amax / 6 rounds by at most 2^-4, saturating 6.4 to 6;
// compressed-tensors' MX exponent rounds the amax up to a power of two from a significand of 1.25,
// so |x| / s < 5), so the top code is within 1 too.
double e2m1_half_step(double q);
// compressed-tensors' MXFP6's half_step: half the larger gap beside |q| on the E2M3 grid (steps of
// 0.125 below 2, 0.25 below 4, 0.5 up to 7.5): 0.0625, 0.125, 0.25. Its exponent rule (round_to_power_2
// with E2M3's three mantissa bits) keeps |x| / s below 7.75, so the saturating top code is within 0.25.
double e2m3_half_step(double q);
// The integer grid's half_step (compressed-tensors' pack-quantized, symmetric): 0.5 everywhere.
double int_half_step(double q);
// The quantization_config llm-compressor's model_free_ptq writes (save_utils.update_config over
// compressed-tensors 0.20.0's QuantizationConfig.model_dump) for one config group of `format` with
// these weights' and input activations' arguments (null: none) and `ignore`.
nlohmann::json ct_written_config(const std::string& format, const nlohmann::json& weights,
                                 const nlohmann::json& input_activations, const nlohmann::json& ignore);
// ModelOpt's written form (meta/codecs/modelopt.cpp): quantization_config's `ignore`, each module by
// its exact name, sorted as ModelOpt sorts it; hf_quant_config.json beside config.json as
// export_hf_checkpoint writes it (json.dump, indent 4) for quantization_config `config` and the
// algorithm's group size.
nlohmann::json modelopt_written_ignore(const nlohmann::json& ignore);
std::vector<std::pair<std::string, std::string>> modelopt_written_files(const nlohmann::json& config, int group_size);
// What a codec that --quantize writes and another codec reads answers the fail-closed check: no.
bool explained_by_reader(const nlohmann::json& qc, const nlohmann::json& config);

// The fused groups a global scale is shared across (llm-compressor's microscale mappings, which
// vLLM fuses into one matrix, and each MoE expert's gate/up): the key of `weight`'s group (the name
// with its member's part replaced), or the weight itself where it is in none. Asked by the encoders
// (view/codecs/linear_encode.h) and verify (check/hf_config_checks.cpp).
std::string fused_group(const std::string& weight);

// Of `keys`, those a codec's decode takes beside a weight among them (Codec::beside), asked by
// the schema's and verify's dtype checks.
std::set<std::string> codecs_beside(const std::set<std::string>& keys);

// The tensor indices by name.
NameIndex tensor_names(const Metadata& md);
// Whether `s` ends in `tail` and is longer than it.
bool ends_with_longer(const std::string& s, const char* tail);

}  // namespace dcpctl
