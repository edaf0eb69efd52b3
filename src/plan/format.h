// Output formats: one module each, one row each.
//
// A row (a `Format`) is everything the rest of the write side may know of a format, and nothing
// asks which format it is. It says how the format's files are written (`Writing`: at offsets on
// many lanes, in order on one lane, one file per target rank), what the files may hold (tensors
// only, the non-tensor items too), whether they are a folder and sharded, how they are named, the
// output names that choose it (`suffixes`: `-o model.safetensors`, `-o DIR/`), whether it holds a
// whole model as a runtime loads it (`whole_model`: an HF folder gets the model checks, the
// precision policy's refusals and the model schema; a .safetensors of whatever was selected does
// not), its s3:// part buffers, and the writer it makes for each command that writes it.
//
// The rows are declared here, in plan/, because the planner and the deal plan from them; each is
// defined with its writer in a module of write/formats/ (an OutputWriter, write/execute.h: what it
// derives from the plan, how its outputs are created, written and committed), and
// write/formats/formats.cpp lists them; a module's row (the GGUF module's, src/gguf/) is added by
// the module's register function (formats::add), after the built-in rows. The planner (plan/plan.h), the deal
// (plan/deal.h), the executor (write/executor.h), the upload planner and the model checks (write/execute.cpp,
// write/consolidate.cpp) ask a format only what its row says; consolidate and reshard translate
// options and pick a row (by --format's word, by the output's name, or by the command: --lora
// adapter). A new format is a new module and a new row (docs/architecture.md, "A new output
// format"): nothing else changes.
//
//   safetensors     safetensors_file.cpp  one .safetensors file
//   hf-safetensors  hf_folder.cpp         a Hugging Face folder: shards, their index, the config
//   torch           torch_file.cpp        a torch.save zip (.pt), nested as dcp_to_torch_save nests
//   dcp             dcp_checkpoint.cpp    a DCP checkpoint: one file per target rank, .metadata last
//   megatron        megatron.cpp          megatron-core's torch_dist: a DCP checkpoint, metadata.json,
//                                         the common state and the layers' extra states
//   peft-adapter    lora/peft_adapter.cpp a PEFT adapter folder (--lora adapter; the LoRA module's)
//   gguf            gguf/format.cpp       llama.cpp's GGUF file (-o model.gguf; docs/gguf.md), the GGUF module's row
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dcpctl {

class OutputWriter;
struct ConsolidateOptions;
struct ReshardOptions;

// How a format's files are written; what the planner, the deal and the executor need to know.
enum class Writing {
  // Files that start with a header, each record at the offset the plan gives it, in any order and
  // on many lanes (a run of a record straight to its place); rank 0 creates them.
  AtOffsets,
  // One file, records appended in plan order on one lane; a record streams (goes out front to
  // back through the stream window) where the plan says so; rank 0 creates and writes it.
  InOrder,
  // One file per target rank, each appended record by record by one thread of the process it is
  // dealt to; the records are target chunks, not whole tensors.
  RankFiles,
};

// The part buffers a process holds while uploading its files to s3:// (store/upload.h): what it
// wants, and the fewest it can work with (a --max-memory too small for them is refused).
struct PartBuffers {
  unsigned want = 0, least = 0;
};

// An option of one format alone (a GGUF's --outtype): consolidate's command line offers it and
// refuses it for another format's output; its value reaches the writer in
// ConsolidateOptions::format_options under its flag.
struct FormatOption {
  std::string_view flag;       // "--outtype"
  std::string_view type_name;  // "TYPE"; "": a flag without a value (its value "true" when given)
  std::string_view help;
  std::string_view elsewhere;  // the refusal when given with another format's output
};

// Values of a format's options, by flag ("--outtype" -> "q8_0"); a flag not given is absent.
using FormatOptionValues = std::map<std::string, std::string, std::less<>>;

struct Format {
  std::string_view name;  // the summary's "format", and --format's word unless `flag` says otherwise
  std::string_view flag;  // --format's word ("hf"); empty: --format does not choose it
  Writing writing = Writing::AtOffsets;
  bool tensors_only = false;   // holds tensors only, of the dtypes safetensors has
  bool writes_values = false;  // writes the selected non-tensor items (so the leader reads them)
  bool folder = false;         // the output is a directory of files
  bool sharded = false;        // AtOffsets: files of at most --max-shard-size data bytes each
  // The endings of an output name that choose this row when --format does not (".safetensors";
  // "/" for a folder, which a directory that exists and --max-shard-size choose too). Empty: only
  // --format or the command picks it (a DCP checkpoint, a PEFT adapter).
  std::vector<std::string_view> suffixes;
  // Holds a whole model as a runtime loads it, config and all (an HF folder), rather than tensors
  // under the names the checkpoint gave them. Such an output gets the model checks (the model alone
  // when optimizer state is beside it, a trainer's names refused without --map, a tied head left
  // out), the precision policy's refusal of a model the schema does not know, and its config and
  // tokenizer from beside the checkpoint or --assets.
  bool whole_model = false;
  // Reads and converts its tensors in windows it sizes and charges itself (GGUF: gguf/rows.h), not
  // through the executor's records: a record's need is never held, so the plan counts none, and
  // the format says what it holds (and raises the automatic budget to it) once planned.
  bool own_windows = false;
  // The name of planned file `index` of `count` (inside the folder, for a folder); a format of one
  // file not in a folder is named by the output path.
  std::string (*file_name)(size_t index, size_t count) = nullptr;
  // Part buffers for uploading `files` (those this process writes) with `lanes` writing lanes and
  // `threads` threads.
  PartBuffers (*part_buffers)(size_t files, unsigned lanes, unsigned threads) = nullptr;
  // Its writer, for the command that writes it (consolidate's formats, or reshard's).
  std::unique_ptr<OutputWriter> (*consolidate_writer)(const ConsolidateOptions&) = nullptr;
  std::unique_ptr<OutputWriter> (*reshard_writer)(const ReshardOptions&) = nullptr;
  // Its own options; `check_options` refuses bad values (UsageError) before anything is read.
  std::vector<FormatOption> options;
  void (*check_options)(const FormatOptionValues&) = nullptr;
};

// The rows (formats.cpp).
namespace formats {
extern const Format safetensors, hf_folder, torch_file, dcp, megatron;
// Every row, in the order --help lists them: the built-in rows, then the modules' in the order
// they were added.
const std::vector<const Format*>& all();
// Adds a module's row (once: a row added again is ignored). Before the command line is built.
void add(const Format* row);
// The row named `name` (Format::name); nullptr if none (a module's left out of this build).
const Format* by_name(std::string_view name);
// The consolidate format --format WORD names; nullptr if none.
const Format* by_flag(std::string_view word);
// "safetensors, hf or torch": the words --format takes.
std::string flags();
// The consolidate format whose suffix ends `output` (`directory`: it names a folder, as "DIR/");
// nullptr if none.
const Format* by_output(std::string_view output, bool directory);
// ".safetensors, DIR/ or .pt/.pth/.bin": the output names that choose a format.
std::string output_names();
}  // namespace formats

}  // namespace dcpctl
