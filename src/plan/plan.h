// The write planner: one plan, from .metadata alone, for every output dcpctl writes.
//
// plan_write turns (checkpoint, selection, --dtype, target) into records: each a box of a selected
// tensor (the whole tensor for a consolidated file, one target chunk for a DCP checkpoint) with
// the pieces it is made of (meta/pieces.h), the dtype it is written in, where it goes (output
// file or target rank, and its offset there), whether it streams, and the memory writing it takes.
// Everything a run would refuse is refused here, before a byte is written: unknown dtypes, tensors
// their chunks do not cover, dtypes the format cannot hold, a record that cannot fit the budget.
// A key map's output (the written map table, view/maps/map_view.h: DerivedTable::parts) is planned
// from its parts: pieces of the table's inputs, the saved chunks (a whole tensor renamed: that
// tensor's records), sharded by rows where ranks are written.
//
// Whether a record streams (its bytes go out front to back, read in place a window at a time, no
// buffer of its size) is decided here and nowhere else, from .metadata: every process of a
// torchrun, and the single-process run, therefore write the same records the same way, which is
// what keeps their `.pt` files byte-identical (a streamed zip record differs from a stored one).
//
// The executor (write/executor.h, over a chunk source: local reads or, under torchrun, the
// exchange in dist/) only carries out a plan; `--dry-run` prints it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/checkpoint.h"
#include "meta/pieces.h"
#include "meta/select.h"
#include "plan/checks.h"
#include "plan/format.h"
#include "util/dtype.h"
#include "view/maps/keymap.h"

namespace dcpctl {

// What is written.
struct Target {
  // The output format (plan/format.h): the planner asks only how it writes its files
  // (Writing), whether it is sharded, whether it holds tensors only, and how its files are named.
  const Format* format = &formats::safetensors;
  uint64_t max_shard_size = 5'000'000'000;  // a sharded format: data bytes per file
  int world_size = 0;                       // RankFiles: target ranks (Fsdp layout)
  bool keep_layout = false;                 // RankFiles: the source's chunks, on the ranks whose files held them
  unsigned threads = 1;                     // InOrder: an assembled record reads its chunks on all threads
  uint64_t window = 64ull << 20;            // safetensors: the copy window of a chunk read in place
  uint64_t max_memory = 0;                  // --max-memory (0: automatic, see memory_budget)
  // --dtype's precision policy (plan/precision.h): the tensors it keeps in their saved dtype;
  // null: every floating tensor is cast.
  const PrecisionPolicy* precision = nullptr;

  // How the format writes (Writing): a file per target rank (reshard, cast), or one stream in the
  // plan's order (.pt).
  bool rank_files() const { return format->writing == Writing::RankFiles; }
  bool in_order() const { return format->writing == Writing::InOrder; }
};

// One unit of write work: a box of a tensor, written to one place.
struct Record {
  size_t tensor = 0;  // index into WritePlan::tensors
  Box box;            // the whole tensor, or one target chunk
  std::vector<Piece> pieces;
  uint32_t dest = 0;       // output file (AtOffsets), target rank (RankFiles); 0 for InOrder's one file
  uint64_t offset = 0;     // AtOffsets: where the record's bytes start in its file's data section
  uint64_t out_bytes = 0;  // bytes written, in the target dtype
  bool runs = false;       // every piece is a run: each can be written at its own offset
  // Every piece a run of an untransformed chunk, the runs tiling the box, and not empty: the
  // record's bytes go out in order, each piece read in place a window at a time.
  bool streams = false;
  uint64_t need = 0;  // bytes of buffers writing the record holds at once
  // AtOffsets, a run read in place: elements per copy window (Target::window, made smaller
  // when that would not fit --max-memory); its need is one window and its cast.
  uint64_t window_elems = 0;
};

// A selected tensor, as written.
struct PlannedTensor {
  // The saved tensor; for a key map's output (`mapped`) its synthetic TensorMeta (its shape and
  // dtype; its bytes are in the pieces' source tensors), or the tensor it renames (`renamed`).
  const TensorMeta* t = nullptr;
  std::string key;  // the output key (after --select)
  DType src{}, dst{};
  bool transformed = false;  // some chunk is stream-transformed (zstd)
  // A key map's output in the table written (view/maps/map_view.h, DerivedTable::parts): what it is
  // made of, planned as pieces of the table's inputs.
  const MappedTensor* mapped = nullptr;
  // A whole tensor under a new name (renames_whole): `t` is that tensor, and it is planned, read
  // and written as without a map (its runs stream; nothing is assembled).
  bool renamed = false;
  std::vector<size_t> records;  // indices into WritePlan::records, in box order
};

// An output file and the records it holds, in the order they are written.
struct PlannedFile {
  std::string name;
  std::vector<size_t> records;
  uint64_t data_bytes = 0;  // bytes of tensor data it holds
};

struct WritePlan {
  Target target;
  std::vector<SelectedItem> items;          // the selection, in state_dict order
  std::vector<const SelectedItem*> values;  // the selected non-tensor items
  std::vector<PlannedTensor> tensors;       // in state_dict order
  std::vector<Record> records;              // tensor by tensor
  std::vector<PlannedFile> files;           // the format's files: shards, the one file, or target ranks' files
  CastChoice cast{std::nullopt};
  uint64_t total_bytes = 0;   // tensor bytes written
  uint64_t largest_need = 0;  // the most any record holds at once
  uint64_t budget = 0;        // --max-memory, or the automatic budget (plan/memory.h)

  const TensorMeta& meta(const Record& r) const { return *tensors[r.tensor].t; }
  // The plan as --dry-run prints it: every record with its pieces, streaming decision and need.
  // `pieces` false: the records without their pieces (what the text dry run prints).
  nlohmann::json describe(bool pieces = true) const;
  // describe().dump(2)'s text as it stands inside an object dumped with indent 2, the key at
  // `indent` spaces (2 at the top level), without building the pieces' JSON objects: a record's
  // pieces are written straight into the text (3.4 million of them in a Kimi-K2 map's plan).
  std::string render(unsigned indent) const;
};

// Plans the write; throws on anything the write would refuse (see the top of this file).
// `in_place` (optional) tells whether a chunk can be read in place (ItemReader::direct_run: its
// item is an untransformed, contiguous tensor); it is asked only about streaming records
// (InOrder, RankFiles) that would not otherwise fit --max-memory: when every piece can, the record goes out
// through the stream window and needs no buffer. Without it such a record counts as assembled.
WritePlan plan_write(const Checkpoint& ck, const Selection& selection, std::optional<DType> cast, const Target& target,
                     const std::function<bool(const TensorMeta&, size_t)>& in_place = nullptr);

}  // namespace dcpctl
