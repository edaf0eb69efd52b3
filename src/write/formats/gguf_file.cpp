// The `gguf` format (consolidate -o model.gguf): llama.cpp's model file, as its converter
// (convert_hf_to_gguf.py) writes it for the same model: one file, a whole model, its config and
// tokenizer from beside the checkpoint or --assets (issue 71 item 1; docs/gguf.md).
//
// What is here so far: the row (the `.gguf` name chooses it) and the file's layout and tensor
// arithmetic (write/gguf.h). What is not, and so refused before anything is written (exit 5):
// the architecture's tensor table (gguf-py's tensor_mapping), the Llama-family Q/K row permutation,
// the metadata keys from config.json, and the tokenizer, whose `tokenizer.ggml.pre` the converter
// picks from a SHA-256 of the token ids the tokenizer gives a fixed text (get_vocab_base_pre).
#include "write/formats/consolidated.h"

#include <stdexcept>

namespace dcpctl {

namespace {

class GgufFile final : public ConsolidatedWriter {
 public:
  using ConsolidatedWriter::ConsolidatedWriter;

  void check(const WriteRequest& request) override {
    ConsolidatedWriter::check(request);
    throw UnsupportedError(Where(o_.output),
                           "a GGUF output is not written yet: the architecture's tensor names, the llama.cpp "
                           "converter's metadata and its tokenizer (tokenizer.ggml.pre) are still to come (issue 71); "
                           "write a Hugging Face folder (-o DIR/) and convert it with llama.cpp's convert_hf_to_gguf.py; "
                           "nothing was written");
  }
  std::string set_up(WriteJob&) override { throw std::logic_error("gguf: refused at check"); }
  void commit(WriteJob&) override { throw std::logic_error("gguf: refused at check"); }

 protected:
  void plan_files(WriteJob&, nlohmann::json&) override { throw std::logic_error("gguf: refused at check"); }
  void write_files(WriteJob&, Executor&, const std::string&) override { throw std::logic_error("gguf: refused at check"); }
};

}  // namespace

const Format formats::gguf = [] {
  Format f;
  f.name = "gguf";
  // Not a --format word until it is written: the name (-o model.gguf) chooses it, to refuse it.
  f.writing = Writing::AtOffsets;
  f.tensors_only = true;
  f.suffixes = {".gguf"};
  // A whole model once it is written; until then the model checks would read the checkpoint (a
  // tied head is compared with the embedding) only to be refused at check.
  f.whole_model = false;
  f.file_name = [](size_t, size_t) { return std::string("model.gguf"); };
  f.consolidate_writer = [](const ConsolidateOptions& o) -> std::unique_ptr<OutputWriter> { return std::make_unique<GgufFile>(o); };
  return f;
}();

}  // namespace dcpctl
