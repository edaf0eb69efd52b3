// One write, carried out the same way on every launcher. A command (consolidate, reshard, cast)
// translates its options into a WriteRequest and an OutputWriter (the format's hooks) and calls
// execute(), which owns every step:
//
//   check     rank 0 refuses an output that exists (without --force) or lies inside the
//             checkpoint, and what the format's check() refuses; under torchrun the other ranks
//             learn of it at the command agreement, with its exit code, so a dry run refuses what
//             the real run would, on every rank;
//   agree     the ranks agree on the command (options, .metadata size, save id);
//   plan      plan_write (what is written) and deal_work (who reads and writes what, memory),
//             the same on every rank by construction; the ranks agree on its digest;
//   dry run   stops here: the summary and the plan (`plan`: records and their pieces; `deal`);
//   set up    rank 0 creates the outputs under temporary names (dist/commit.h);
//   write     every process writes its share through the executor (write/executor.h), over its
//             own reads or, when chunks move between ranks, the exchange (dist/exchange.h);
//   commit    rank 0, once every process reported success, renames the outputs into place.
//
// A format supplies what differs: what it derives from the plan (headers, the pickle, the
// DCP .metadata), how its outputs are created, written and committed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "item/item_reader.h"
#include "meta/checkpoint.h"
#include "plan/deal.h"
#include "plan/plan.h"
#include "view/model.h"
#include "write/executor.h"
#include "write/run.h"

namespace dcpctl {

class Group;
class ResumeJournal;

// The views a write's options ask for (view/model.h: --select, --dtype, --lora, --map), built once
// by the command that builds the request (the same on every rank: .metadata, the map and the
// config are); the request reads the model's checkpoint, its target points at the model's map.
// `assets`: consolidate's --assets (the dequantized view's config.json).
ModelRequest model_request(const WriteOptions& o, const std::string& assets, const LoraRequest& lora);

// --dtype's precision policy (plan/precision.h) for `ck`: --keep-dtype, --cast-all, the model's
// config.json (the model's, view/model_config.h's policy(): --config, --assets DIR's, else beside the
// checkpoint), --map's (the model's, as loaded) and the built-in maps' keep_dtype rules. Keeps
// nothing without --dtype. `model_output`: the output is a Hugging Face folder (it carries
// config.json), where a model no schema finds is refused (plan/precision.h).
PrecisionPolicy precision_policy(const Checkpoint& ck, const WriteOptions& o, const Model& model, bool model_output);

// What a command asks for.
struct WriteRequest {
  const Checkpoint& ck;
  const WriteOptions& o;
  const Model& model;  // what `ck` was built as: its config.json (read once) and key map (view/model.h)
  Target target;
  nlohmann::json command;       // the options every rank must have been given alike
  bool parallel_write = false;  // consolidate under torchrun: every rank writes files
  bool local_files = false;     // under torchrun: each rank reads the data files of its own directory
};

// What the hooks see: the job, its plan and deal, and where this process stands.
struct WriteJob {
  const WriteRequest& request;
  ItemReader& reader;
  WritePlan plan;
  Deal deal;
  Visibility visibility;  // which data files each process reads
  Group* group = nullptr;
  int me = 0;
  bool leader = true;
  UploadSession* uploads = nullptr;  // an object-storage output's (store/upload.h)
  // A multi-file output's journal (write/resume.h): its files kept from a stopped run, and those
  // finished; null where the output is not journaled.
  ResumeJournal* journal = nullptr;
};

class OutputWriter {
 public:
  virtual ~OutputWriter() = default;
  // The command's name: failpoints ("<name>-write") and messages.
  virtual const char* name() const = 0;
  // True when the chunks move from the ranks that read them to the writers (consolidate under
  // torchrun); false when every process reads what it writes (reshard: a shared filesystem).
  virtual bool exchange() const { return false; }
  // True when a zstd chunk read for several records is decoded once (item/decoded_chunks.h).
  virtual bool decode_once() const { return false; }
  // The threads of one writer; under torchrun one exchange lane each.
  virtual unsigned lanes(const WriteRequest& request, Group* group) const {
    (void)group;
    return std::max(1u, request.o.threads);
  }
  // Rank 0, before anything else, after the output's own check: what the format refuses beyond
  // the checkpoint and the output (consolidate: an --assets folder that is not there). Under
  // torchrun the other ranks learn of a refusal, with its exit code, at the command agreement.
  virtual void check(const WriteRequest& request) { (void)request; }
  // Every rank, once planned: what the format derives from the plan (collective calls allowed
  // when `!dry_run`), and its part of the summary.
  virtual void planned(WriteJob& job, nlohmann::json& summary) = 0;
  // Once planned, for a local output written by one process: where the format's output is several
  // data files it journals (write/resume.h), {"files": {name: its header's SHA-256}, "options":
  // {the format's own options}}; null where it is not (one file), and --resume is refused.
  virtual nlohmann::json journal_files(const WriteJob& job) const {
    (void)job;
    return nullptr;
  }
  // Rank 0: creates the outputs under temporary names; returns what the other ranks need.
  virtual std::string set_up(WriteJob& job) = 0;
  // Every rank: writes its share; `set_up` is what rank 0's set_up returned.
  virtual void write(WriteJob& job, Executor& ex, const std::string& set_up) = 0;
  // Rank 0, once every rank reported success: commits.
  virtual void commit(WriteJob& job) = 0;
  // After the run, on every rank: the format's part of the summary.
  virtual void finish(WriteJob& job, nlohmann::json& summary) { (void)job, (void)summary; }
  // Set by execute(), called by commit with the output in its temporary place (a folder, or a
  // file under its temporary name, and its final path) once everything else is in it and before
  // it is renamed into place: writes dcpctl's manifest (write/manifest.h) as the last file. Not
  // called for an object-storage output.
  std::function<void(const std::string& staged, const std::string& final_path)> seal;
};

// Carries out the job (the steps at the top of this file); returns the summary. On a rank other
// than 0 under torchrun it has `rank` and no timings.
nlohmann::json execute(const WriteRequest& request, OutputWriter& writer);

// A summary's key that says its `plan` and `deal` are rendered text (WriteOptions::PlanReport).
inline constexpr const char* kRenderedPlan = "\x01rendered";

// Prints `summary` as summary.dump(2) and a newline do, its rendered plan (if any) written in
// place; the rendered texts are taken out of it.
void dump_summary(nlohmann::json& summary, std::ostream& os);

}  // namespace dcpctl
