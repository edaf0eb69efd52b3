// Run folders: the directory a trainer saves into, one checkpoint per subfolder.
//
// torchtitan writes `<folder>/step-N/` (purging older ones with keep_latest_k, without checking
// that they are complete); Ray Train `checkpoint_000N/`; others `checkpoint-N`, `ckpt_N`,
// `global_step_N`, `iter_000N`; Ray Train V2 `checkpoint_<YYYY-MM-DD_HH-MM-SS.ffffff>` (ordered
// by every number in the name, so by time). A subfolder is a checkpoint when its name ends in a number
// (optionally followed by a `.tmp`/`-tmp`/`.partial`/`.incomplete` marker of a save in flight)
// and it holds checkpoint files (.metadata, __R.metadata, .distcp, .safetensors, an HF index, or a
// `sharded/` folder of them). Anything else in the folder is never listed nor touched.
// Complete means what `verify` without --deep says: every file there, windows inside their
// files, chunks tiling every tensor, nothing the index promises missing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meta/checkpoint.h"

namespace dcpctl {

struct RunEntry {
  std::string name;  // the subfolder's name
  std::string path;  // folder/name
  std::optional<int64_t> step;  // the name's number; nullopt when it holds several (a timestamp)
  std::vector<uint64_t> order;  // every number in the name: checkpoints sort by these, in turn
  bool in_flight_name = false;  // .tmp / .partial / ... marker
  bool symlink = false;         // the subfolder is a symbolic link
  std::optional<CheckpointLayout> layout;
  bool complete = false;
  std::string why_incomplete;   // the first problem, when not complete
  size_t problems = 0;
  uint64_t bytes = 0;           // every regular file below it
  uint64_t tensors = 0;
  std::map<std::string, uint64_t> dtypes;  // dtype -> tensors
  bool optimizer = false;       // holds optimizer state (keys under optim*/optimizer)
  int64_t mtime = 0;            // newest modification time of its files (seconds since epoch)
};

struct RunFolder {
  std::string dir;
  std::vector<RunEntry> entries;  // by the numbers in their names, then name
  std::vector<std::string> prune_leftovers;  // .dcpctl-prune-* left by an interrupted prune
  const RunEntry* newest_complete() const;
};

// True when `dir` holds checkpoint files itself.
bool holds_checkpoint_files(const std::string& dir);

// The checkpoints inside `dir`; nullopt when `dir` is a checkpoint itself or holds none.
// With `judge` false, entries are listed without opening them (complete stays false).
std::optional<RunFolder> scan_run_folder(const std::string& dir, bool judge = true);

// The usage error text for a command given a run folder instead of a checkpoint, naming the
// checkpoints inside and the newest complete one; nullopt when `dir` is not a run folder.
std::optional<std::string> run_folder_refusal(const std::string& dir);

}  // namespace dcpctl
