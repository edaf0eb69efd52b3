#include "view/codecs/codecs.h"

#include <algorithm>

namespace dcpctl {

const std::vector<CodecView>& codec_views() {
  // A new codec the views compute: one line here (and its file in src/view/codecs/).
  static const std::vector<CodecView> list = {
      fp8_block_codec_view(), mxfp4_codec_view(),          deepseek_v4_codec_view(),  compressed_tensors_codec_view(),
      modelopt_codec_view(),  ct_fp8_dynamic_codec_view(), ct_fp8_block_codec_view(), ct_nvfp4_codec_view(),
      ct_mxfp8_codec_view(),  ct_mxfp4_codec_view(),       ct_w4a16_codec_view(),     mo_nvfp4_codec_view(),
      mo_mxfp8_codec_view(),  inkling2_loop_codec_view(),
  };
  return list;
}

namespace {

uint64_t largest_chunk_bytes(const TensorMeta& t) {
  uint64_t most = 0;
  for (size_t c = 0; c < t.num_chunks(); ++c) most = std::max(most, t.chunk_numel(c) * itemsize(*t.dtype));
  return most;
}

}  // namespace

Checkpoint quantized_result(Checkpoint view, std::shared_ptr<DerivedTable> table, const std::string& scheme,
                            const int64_t block[2], size_t weights, nlohmann::json kept, nlohmann::json config,
                            std::vector<std::string> keep_dtype, const std::string& format) {
  table->views["quantized"] = {
      {"scheme", scheme}, {"block", {block[0], block[1]}}, {"weights", weights}, {"kept", std::move(kept)}};
  if (!format.empty()) table->views["quantized"]["format"] = format;
  table->output.quantization_config = std::move(config);
  table->output.keep_dtype = std::move(keep_dtype);
  view.derived = std::move(table);
  return view;
}

uint64_t whole_read_bytes(const TensorMeta& t) {
  return t.numel() * itemsize(*t.dtype) + largest_chunk_bytes(t);
}

void read_computed(const std::string& path, const TensorMeta& saved, size_t chunk, uint64_t values, uint64_t from,
                   uint64_t n, void* dst, const std::function<void(float*)>& compute) {
  read_part(Where(path, std::nullopt, saved.fqn), "chunk " + std::to_string(chunk), values * 4, from, n, dst,
            [&](uint8_t* out) { compute(reinterpret_cast<float*>(out)); });
}

}  // namespace dcpctl
