// What every writer shares while it carries out a plan (plan/plan.h): the windows bytes move
// through, named once, and progress.
//
// The windows:
//   stream window    (kStreamWindow, 1 MiB of source elements, and their cast): a streamed record
//                    (a .pt storage, a DCP chunk) is read in place, cast, CRC'd and appended
//                    through it; small enough to stay in cache. Per worker, outside the budget.
//   copy window      (ConsolidateOptions::window, 64 MiB): a run copied in place into a
//                    safetensors file when copy_file_range is unavailable, or cast on the way;
//                    taken from the budget.
//   direct window    (kDirectWindow, 16 MiB): the part of the copy window a run read past the
//                    page cache (O_DIRECT, --io direct) goes through into a safetensors file, one
//                    read at a time; per lane, kept across its tasks, taken from the budget.
//   direct stream window (kStreamDirectWindow, 8 MiB): a streamed run read past the page cache
//                    (--io direct) into a .pt or a DCP rank file; per worker, outside the budget.
//   append window    (kAppendWindow, 2 x 4 MiB): what a sequential writer (.pt, DCP rank file)
//                    has appended and not yet written past the page cache (OutputFile::
//                    stage_appends, --io direct); per file being written, outside the budget.
//   transfer window  (kTransferWindow, 16 MiB): one message of a chunk pushed between ranks
//                    under torchrun (dist/exchange.h); one per lane each way, outside the budget.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "check/megatron_vocab.h"
#include "meta/manifest.h"
#include "meta/select.h"
#include "store/file.h"
#include "util/dtype.h"
#include "util/io_buffer.h"
#include "view/codecs/quantize.h"

namespace dcpctl {

class Group;

// What every write command (consolidate, reshard, cast) takes.
struct WriteOptions {
  std::string output;
  Selection selection;
  std::optional<DType> cast;  // --dtype: floating tensors are written in it (plan/checks.h)
  // --keep-dtype GLOB and --cast-all: the precision policy's own patterns, and casting what it
  // would keep (plan/precision.h).
  std::vector<std::string> keep_dtype;
  bool cast_all = false;
  bool force = false;    // replace an existing output
  bool dry_run = false;  // plan and check the output, write nothing
  // --resume: a stopped run's multi-file output is finished, its finished files kept
  // (write/resume.h).
  bool resume = false;
  // What a dry run's summary holds of the plan (write/execute.h): `plan` and `deal` as JSON
  // (Tree); the records without their pieces (Keys: the text dry run); or both already rendered as
  // their text in `summary.dump(2)` (Rendered: print it with dump_summary()).
  enum class PlanReport { Tree, Keys, Rendered } plan_report = PlanReport::Tree;
  unsigned threads = 4;
  // --io direct: bulk bytes are read and written past the page cache (O_DIRECT, where the
  // filesystem allows it; see Executor::direct_io); --io buffered sets it false.
  bool direct_io = true;
  // --manifest: the digest of the manifest every output gets (meta/manifest.h): CRC-32 by
  // default, SHA-256 where asked.
  ManifestAlgorithm manifest = ManifestAlgorithm::Crc32;
  uint64_t max_memory = 0;  // 0: automatic (the largest single need, at least 1 GiB)
  // --map NAME|FILE (view/maps/keymap.h): the outputs are the map's tensors; its parameters from
  // --config FILE, else `map_assets` (consolidate's --assets DIR), else the checkpoint's config.json.
  std::string map, map_config, map_assets;
  // --quantize (view/codecs/quantize.h): scheme "" for none. Not with --map (build_model refuses it).
  QuantizeRequest quantize;
  MegatronTarget megatron;  // --megatron-args, --make-vocab-size-divisible-by, --tensor-model-parallel-size
  std::function<void(uint64_t done, uint64_t total)> progress;  // called from worker threads
  std::function<void(const std::string&)> note;                 // one-line notices (stderr)
  // Several processes (torchrun); nullptr: one process.
  Group* group = nullptr;
};

constexpr uint64_t kStreamWindow = 1ull << 20;
constexpr uint64_t kTransferWindow = 16ull << 20;
constexpr uint64_t kDirectWindow = 16ull << 20;
constexpr uint64_t kStreamDirectWindow = 8ull << 20;
constexpr uint64_t kAppendWindow = 4ull << 20;  // each of the two buffers

// A worker's stream window: kStreamWindow bytes of source elements and room for their cast (up
// to 16 bytes per element).
// With `direct_reads` (--io direct), a run of kDirectMinRun bytes or more that is not all in the
// page cache is read past it, kStreamDirectWindow bytes at a time, into direct() (kDirectAlign-
// aligned, allocated on first use).
struct StreamWindow {
  std::unique_ptr<uint8_t[]> in{new uint8_t[kStreamWindow]}, out{new uint8_t[kStreamWindow * 16]};
  bool direct_reads = false;
  static uint64_t elems(DType src) { return kStreamWindow / itemsize(src); }
  // Room for direct_span() of kStreamDirectWindow bytes at any offset.
  uint8_t* direct() {
    if (!direct_) direct_ = make_io_buffer(kStreamDirectWindow + 2 * kDirectAlign);
    return direct_.get();
  }

 private:
  IoBuffer direct_;  // huge pages: see util/io_buffer.h
};

// Bytes written so far out of the plan's total, reported from any worker thread.
class WriteProgress {
 public:
  WriteProgress(uint64_t total, std::function<void(uint64_t done, uint64_t total)> report)
      : total_(total), report_(std::move(report)) {}
  void add(uint64_t n) {
    uint64_t d = done_.fetch_add(n) + n;
    if (report_) report_(d, total_);
  }

 private:
  std::atomic<uint64_t> done_{0};
  uint64_t total_;
  std::function<void(uint64_t, uint64_t)> report_;
};

}  // namespace dcpctl
