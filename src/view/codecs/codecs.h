// The codecs' DerivedTensors: how the views decode (--dtype over a quantized checkpoint,
// view/codecs/dequantize.h) and encode (--quantize, view/codecs/quantize.h) each codec of meta/codecs/codecs.h.
//
// One file a codec here (fp8_block.cpp, mxfp4.cpp), one line in codec_views(). The description
// (rows, names, recognition, --quantize word, bound) is the codec's file in src/meta/codecs/, where
// the planner, verify, inspect and the audit read it too (docs/architecture.md says why two layers).
// A new codec: its description there and a line in codecs(), its DerivedTensors here and a line in
// codec_views().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meta/checkpoint.h"
#include "meta/codecs/codecs.h"
#include "meta/derived.h"
#include "view/codecs/bound.h"
#include "view/codecs/quantize.h"
#include "view/codecs/quantized.h"

namespace dcpctl {

// A decoded weight: its tensor in the dequantize view (float32) and what computes it.
struct DecodedTensor {
  TensorMeta meta;  // its name may differ from the stored weight's (compressed-tensors' X.weight_packed -> X.weight)
  std::shared_ptr<const DerivedTensor> tensor;
  std::vector<std::string> consumed;  // further tensors that leave the view with it (global scales, zero points)
  // What diff's audit holds each of its elements to (view/codecs/bound.h); null where no bound is
  // implemented for its format (the audit refuses it, naming the weight).
  std::shared_ptr<const ElementBound> bound;
};

struct CodecView {
  const Codec* codec;
  // Whether this codec reads the checkpoint whose config says `qc` (several codecs pair the same
  // names: compressed-tensors' and ModelOpt's X.weight beside X.weight_scale); null: always.
  bool (*applies)(const QuantConfig& qc) = nullptr;
  // --dtype: refuses (UnsupportedError naming the first weight) what `qc` does not confirm of this
  // codec's `pairs` before anything is decoded; null: the names and dtypes suffice.
  void (*confirm)(const Checkpoint& ck, const std::vector<std::pair<uint32_t, uint32_t>>& pairs,
                  const QuantConfig& qc) = nullptr;
  // --dtype: weight `w` beside scale `s` (a pair codec->pairs found) read as float32; throws
  // (naming the tensor) what it cannot decode.
  DecodedTensor (*decode)(const Checkpoint& ck, const TensorMeta& w, const TensorMeta& s,
                          const QuantConfig& qc) = nullptr;
  // What the dequantize view's --json calls the number of them: "weights", "mxfp4".
  const char* said = "";
  // --quantize codec->quantize_word: the checkpoint with its weights encoded.
  Checkpoint (*quantize)(const Checkpoint& ck, const QuantizeRequest& rq) = nullptr;
};

// The codecs the views decode or encode, in codecs()' order.
const std::vector<CodecView>& codec_views();
// Each codec's (src/view/codecs/*.cpp).
CodecView fp8_block_codec_view();
CodecView mxfp4_codec_view();
CodecView deepseek_v4_codec_view();
CodecView compressed_tensors_codec_view();
CodecView modelopt_codec_view();
CodecView ct_fp8_dynamic_codec_view();
CodecView ct_fp8_block_codec_view();
CodecView ct_nvfp4_codec_view();
CodecView ct_mxfp8_codec_view();
CodecView ct_mxfp4_codec_view();
CodecView ct_w4a16_codec_view();
CodecView mo_nvfp4_codec_view();
CodecView mo_mxfp8_codec_view();
CodecView inkling2_loop_codec_view();

// Shared by the encoders: `view` with `table`, which says of itself (the view "quantized")
// {"scheme", "block", "weights", "kept"} and leaves the quantization_config to write and the keys
// --dtype keeps.
// `format`: the quant_method of the form written where a word writes several (--quantize-format).
Checkpoint quantized_result(Checkpoint view, std::shared_ptr<DerivedTable> table, const std::string& scheme,
                            const int64_t block[2], size_t weights, nlohmann::json kept, nlohmann::json config,
                            std::vector<std::string> keep_dtype, const std::string& format = "");

// Shared by the encoders (view/codecs/fp8_block.cpp): flat rows [a, b) of weight `t` (a 2-D weight,
// or a 3-D stack's rows counted expert after expert, within one expert) as the table below has
// them, as float32 into `out` ((b - a) * cols); and what such a read of `rows` rows holds.
void read_weight_rows(const TensorReads& below, const TensorMeta& t, int64_t a, int64_t b, float* out);
uint64_t weight_rows_need(const TensorMeta& t, int64_t rows);
// The same with `largest` = largest_chunk(t) (elements of t's largest chunk), which a DerivedTensor
// keeps: asked once for each of 2,048 chunks (FSDP over 2,048 ranks), the scan would be quadratic.
uint64_t largest_chunk(const TensorMeta& t);
uint64_t weight_rows_need(const TensorMeta& t, int64_t rows, uint64_t largest);

// Shared by the decoders: what TensorReads::read_whole holds for `t` (the whole tensor and one
// chunk of it at a time), and bytes [from, from + n) of a computed chunk of `values` float32s (n =
// UINT64_MAX: to its end), which `compute` writes whole; `saved` names it in messages.
uint64_t whole_read_bytes(const TensorMeta& t);
void read_computed(const std::string& path, const TensorMeta& saved, size_t chunk, uint64_t values, uint64_t from,
                   uint64_t n, void* dst, const std::function<void(float*)>& compute);

}  // namespace dcpctl
