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
//
// Trainers that save more than the model put it in a subfolder of the step, beside their own
// state and markers (step_folder below): transformers' Trainer `checkpoint-N/pytorch_model_fsdp_0/`,
// LLaMA-Factory `checkpoint-N/model/` (+ CHECKPOINT_COMPLETE), NeMo AutoModel
// `epoch_E_step_S/model/` (+ `.incomplete` while saving). Their markers count too: a step whose
// trainer says the save did not finish is incomplete whatever its model files say. Megatron's
// `latest_checkpointed_iteration.txt` names the last finished `iter_N/`: a newer one is in
// flight or died; verl writes the same tracker for its `global_step_N/` folders (the model's
// per-rank files in `actor/`, its config and tokenizer in `actor/huggingface/`). Lightning's `epoch=E-step=S.ckpt/`
// folders are checkpoints (DCP + meta.pt); `tmp-checkpoint-N` (transformers' staging name) is a save in flight.
// torch_checkpointing's CheckpointManager saves to the path it is given (torchtitan: `step-N/`) by writing
// `tmp_<name>/` and renaming it (its only commit: no marker), so `tmp_<name>/` is a save in flight
// (or one killed before its rename) however complete its files look; it has no keep-latest.
//
// Cost: judging a checkpoint reads and parses all of its metadata (a `.metadata` of 5 million
// chunks is ~700 MB), since completeness needs every storage entry; the file sizes come from stat.
// `ls` judges every checkpoint, so it reads every step's metadata; `latest` and the refusal a
// command gives for a run folder judge newest first and stop at the first complete one. Each
// judged entry records what it read and how long that took.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meta/checkpoint.h"

namespace dcpctl {

// A trainer's step folder that keeps the model checkpoint in a subfolder.
struct StepFolder {
  std::string dir;         // the step folder
  std::string model;       // the model checkpoint inside it
  std::string trainer;     // "transformers", "llamafactory", "nemo-automodel", "verl"; "" for a bare model/ folder
  std::string unfinished;  // the trainer's own marker says its save did not finish: why; else empty
  std::vector<std::string> asset_dirs;  // where its config and tokenizer are, nearest first
};

// The step folder at `dir`, when `dir` holds no checkpoint files itself but a trainer's model
// subfolder that does; nullopt otherwise.
std::optional<StepFolder> step_folder(const std::string& dir);

struct RunEntry {
  std::string name;             // the subfolder's name
  std::string path;             // folder/name
  std::string model_path;       // the model checkpoint: path, or its trainer's subfolder (StepFolder)
  std::string trainer;          // who wrote it, when told by its files ("" otherwise)
  std::optional<int64_t> step;  // the name's number; nullopt when it holds several (a timestamp)
  std::vector<uint64_t> order;  // every number in the name: checkpoints sort by these, in turn
  bool in_flight_name = false;  // .tmp / .partial / ... marker
  std::string step_unfinished;  // its trainer's marker says the save did not finish: why
  bool symlink = false;         // the subfolder is a symbolic link
  std::optional<CheckpointLayout> layout;
  bool complete = false;
  std::string why_incomplete;  // the first problem, when not complete
  size_t problems = 0;
  uint64_t bytes = 0;  // every regular file below it
  uint64_t tensors = 0;
  std::map<std::string, uint64_t> dtypes;  // dtype -> tensors
  bool optimizer = false;                  // holds optimizer state (keys under optim*/optimizer)
  int64_t mtime = 0;                       // newest modification time of its files (seconds since epoch)
  // What judging it cost (all zero when it was not judged).
  bool judged = false;
  uint64_t metadata_bytes = 0;  // metadata read and parsed (.metadata, __R.metadata, headers)
  double open_seconds = 0;      // reading and parsing them into the model
  double check_seconds = 0;     // the structure check (file sizes, windows, chunk coverage)
};

struct RunFolder {
  std::string dir;
  double seconds = 0;                        // listing and judging, all of it
  std::vector<RunEntry> entries;             // by the numbers in their names, then name
  std::vector<std::string> prune_leftovers;  // .dcpctl-prune-* left by an interrupted prune
  // latest_checkpointed_iteration.txt (Megatron's, and verl's): what it says ("release" or a
  // number), when there. Named for Megatron in --json since it came first.
  std::optional<std::string> megatron_tracker;
  // NeMo AutoModel's LATEST and LOWEST_VAL (symlinks, or NAME.txt files): pointer -> the path it
  // names, when there.
  std::map<std::string, std::string> pointers;
  const RunEntry* newest_complete() const;
};

// True when `dir` holds checkpoint files itself.
bool holds_checkpoint_files(const std::string& dir);

// Which entries scan_run_folder opens and checks.
enum class Judge {
  None,            // list only (complete stays false)
  All,             // every entry (ls, prune)
  NewestComplete,  // newest first, until one is complete (latest; what is older stays unjudged)
};

// The checkpoints inside `dir`; nullopt when `dir` is a checkpoint itself or holds none.
std::optional<RunFolder> scan_run_folder(const std::string& dir, Judge judge = Judge::All);

// The usage error text for a command given a run folder instead of a checkpoint, naming the
// checkpoints inside and the newest complete one; nullopt when `dir` is not a run folder.
std::optional<std::string> run_folder_refusal(const std::string& dir);

}  // namespace dcpctl
