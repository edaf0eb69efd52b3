#include "write/execute.h"

#include <chrono>
#include <memory>
#include <ostream>
#include <string_view>

#include "check/megatron_args.h"
#include "check/megatron_vocab.h"
#include "check/titan_config.h"
#include "dist/commit.h"
#include "dist/exchange.h"
#include "dist/group.h"
#include "item/chunk_source.h"
#include "item/decoded_chunks.h"
#include "store/upload.h"
#include "util/failpoint.h"
#include "util/memory_gate.h"
#include "util/numeric.h"
#include "util/sha256.h"
#include "write/leftovers.h"
#include "write/manifest.h"
#include "write/output.h"
#include "write/resume.h"
#include "write/write_hash.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// The stopped run --resume finishes ("": none, refused once the output is known to be one that
// resumes); without --resume, what is lost is said.
std::string stopped_run(const WriteOptions& o) {
  const std::optional<StoppedRun> stopped = find_stopped_run(o.output);
  if (o.resume) return stopped ? stopped->dir : std::string();
  if (stopped && stopped->files && o.note)
    o.note("a stopped run left " + std::to_string(stopped->files) + " finished file(s) of this output in " +
           stopped->dir + "; without --resume they are removed and written again");
  return {};
}

// Rank 0 refuses an output the run would refuse (it exists and no --force; it lies inside the
// checkpoint) before anything else. Under torchrun it does so before any rank connects, and the
// others learn of the refusal, with its exit code, at the command agreement (had they started
// connecting to a rank 0 that is gone, they would end with an I/O error). Returns the stopped run's
// folder --resume takes over (write/resume.h), else "".
std::string check_output(const WriteRequest& request, OutputWriter& writer, bool leader) {
  if (!leader) return {};
  const WriteOptions& o = request.o;
  try {
    check_output_path(o.output, o.force, request.ck.dir);
    writer.check(request);
    if (o.resume && (o.group || is_remote(o.output)))
      throw UnsupportedError(Where(o.output), std::string("--resume finishes a local output written by one process; ") +
                                                  (o.group ? "not under torchrun" : "not in object storage"));
    // What a killed run (SIGKILL: no handler ran) left for this output: write/leftovers.h.
    if (is_remote(o.output)) {
      clear_dead_uploads(o.output, o.dry_run, o.note);
      return {};
    }
    const std::string resume_from = stopped_run(o);
    clear_dead_temporaries(o.output, o.dry_run, o.note, resume_from);
    return resume_from;
  } catch (const std::exception& e) {
    if (o.group) o.group->announce("agree/command", std::string("rank 0 failed: ") + e.what(), exit_code_of(e));
    throw;
  }
}

// Every rank must be running the same command on the same checkpoint (its directory may differ:
// --local-files).
void agree_on_command(Group& group, const WriteRequest& request, const char* name) {
  const WriteOptions& o = request.o;
  const Metadata& md = request.ck.md;
  json cmd = request.command;
  cmd["command"] = name;
  cmd["output"] = o.output;
  cmd["include"] = o.selection.include;
  cmd["exclude"] = o.selection.exclude;
  cmd["select"] = o.selection.prefix;
  cmd["cast"] = o.cast ? static_cast<int>(*o.cast) : -1;
  cmd["keep_dtype"] = o.keep_dtype;
  cmd["cast_all"] = o.cast_all;
  cmd["force"] = o.force;
  cmd["dry_run"] = o.dry_run;
  cmd["max_memory"] = o.max_memory;
  cmd["map"] = o.map;
  cmd["map_config"] = o.map_config;
  cmd["parallel_write"] = request.parallel_write;
  cmd["local_files"] = request.local_files;
  cmd["metadata_bytes"] = request.ck.metadata_bytes;
  cmd["save_id"] = md.storage_meta && md.storage_meta->save_id ? *md.storage_meta->save_id : "";
  group.agree("command", Sha256::of(cmd.dump()));
}

// The saved items this process reads (ItemReader::expect: an s3:// checkpoint fetches
// neighbours together): with an exchange the chunks dealt to it, else the chunks of the files it
// writes; the non-tensor items on the leader, where the format holds them.
std::vector<StorageRef> items_read(const WriteJob& job, bool exchange) {
  const Metadata& md = job.request.ck.md;
  std::vector<StorageRef> refs;
  if (exchange) {
    for (const Transfer& t : job.deal.transfers)
      if (t.owner == job.me) refs.push_back(md.tensors[t.tensor].storage[t.chunk]);
  } else {
    for (size_t f : job.deal.files_of(job.me))
      for (size_t r : job.plan.files[f].records)
        for (const Piece& p : job.plan.records[r].pieces) refs.push_back(p.source->storage[p.chunk]);
  }
  if (job.leader && job.plan.target.format->writes_values)
    for (const SelectedItem* v : job.plan.values) refs.push_back(md.bytes[v->index].storage);
  return refs;
}

}  // namespace

PrecisionPolicy precision_policy(const Checkpoint& ck, const WriteOptions& o, const Model& model, bool model_output) {
  if (!o.cast) return PrecisionPolicy();
  PrecisionInputs in;
  in.cast = o.cast;
  in.keep_globs = o.keep_dtype;
  in.cast_all = o.cast_all;
  in.model_output = model_output;
  if (cast_narrows(*o.cast)) {  // else only --keep-dtype counts
    MapConfig c = model.config().policy(ck);
    in.config = std::move(c.json);
    in.config_path = std::move(c.path);
  }
  if (const KeyMap* m = model.key_map()) in.maps.push_back(*m);  // --map, loaded once by build_model
  for (KeyMap& m : builtin_key_maps())
    if (o.map.empty() || m.name != in.maps[0].name) in.maps.push_back(std::move(m));
  return PrecisionPolicy(in);
}

ModelRequest model_request(const WriteOptions& o, const std::string& assets, const LoraRequest& lora) {
  ModelRequest rq;
  rq.selection = o.selection;
  rq.cast = o.cast;
  // consolidate's --assets (`assets`) is the map's (o.map_assets): the one flag.
  rq.config = o.map_config;
  rq.assets = assets.empty() ? o.map_assets : assets;
  rq.lora = lora;
  rq.map = o.map;
  rq.quantize = o.quantize;
  // A Megatron checkpoint's own args, a torchtitan run's own job config, against config.json.
  rq.check_map = [](const Checkpoint& saved, MappedModel& map, const MapConfig& config) {
    check_megatron_map(saved, map, config);
    check_titan_map(saved, map, config);
  };
  // Megatron -> HF: its padded vocabulary cut to config.json's vocab_size; HF -> Megatron for a
  // Megatron-LM run (--megatron-args and the like): padded as that run pads it.
  rq.fit_map = [target = o.megatron](const Checkpoint& saved, MappedModel& map, const MapConfig& config) {
    fit_megatron_vocab(saved, map, config);
    pad_megatron_vocab(target, map, config);
  };
  return rq;
}

namespace {

// Who writes what: the work dealt to the processes and their lanes, within the budget.
DealRequest deal_request(const WriteJob& job, const OutputWriter& writer, bool exchange, int world) {
  const WriteOptions& o = job.request.o;
  DealRequest rq;
  rq.world = world;
  rq.lanes = writer.lanes(job.request, job.group);
  rq.parallel_write = job.request.parallel_write;
  rq.exchange = exchange;
  rq.budget_given = o.max_memory != 0;
  rq.visibility = &job.visibility;
  const bool remote = is_remote(o.output);
  // SHA-256 is hashed as written (below) near the file's prefix, so the lanes are dealt consecutive
  // windows; a CRC-32 takes the writes in any order.
  rq.hash_window = !job.group && !remote && o.manifest == ManifestAlgorithm::Sha256 ? kHashDealWindow : 0;
  if (remote) {
    rq.upload = true;
    rq.part_rules = store::of_url(o.output).part_rules();
    rq.threads = o.threads;
    rq.output = o.output;
  }
  return rq;
}

// The summary's planned part: what is written, from where, within what memory.
json plan_summary(const WriteJob& job) {
  const Checkpoint& ck = job.request.ck;
  const WriteOptions& o = job.request.o;
  json summary;
  summary["schema_version"] = 1;
  summary["checkpoint"] = ck.dir;
  summary["output"] = o.output;
  summary["tensors"] = job.plan.tensors.size();
  summary["tensor_bytes"] = job.plan.total_bytes;
  summary["cast"] = job.plan.cast.summary();
  summary["max_memory"] = job.deal.budget;
  summary["dry_run"] = o.dry_run;
  if (ck.derived)  // what the views said of themselves ("dequantized", "lora", "map", "quantized")
    for (const auto& [view, said] : ck.derived->views.items()) summary[view] = said;
  if (is_remote(o.output))  // the store's object: its part size and buffers here, what it moved added by the command
    summary[store::of_url(o.output).report_name()] = {
        {"part_size", job.deal.part_size[static_cast<size_t>(job.me)]},
        {"part_buffers", job.deal.part_buffers[static_cast<size_t>(job.me)]}};
  return summary;
}

// `-n`: the plan and the deal, as text (--plan) or as JSON.
void add_dry_run_plan(const WriteJob& job, json& summary) {
  const WriteOptions& o = job.request.o;
  if (o.plan_report == WriteOptions::PlanReport::Rendered) {
    summary["plan"] = job.plan.render(2);
    std::string deal;
    nlohmann::detail::serializer<json> s(nlohmann::detail::output_adapter<char, std::string>(deal), ' ',
                                         json::error_handler_t::strict);
    s.dump(job.deal.describe(), true, false, 2, 2);
    summary["deal"] = std::move(deal);
    summary[kRenderedPlan] = true;
  } else {
    summary["plan"] = job.plan.describe(o.plan_report == WriteOptions::PlanReport::Tree);
    summary["deal"] = job.deal.describe();
  }
}

// The manifest, the last file before the output is renamed into place (meta/manifest.h).
void seal_with_manifest(OutputWriter& writer, const WriteJob& job, json& summary) {
  writer.seal = [&writer, &job, &summary](const std::string& staged, const std::string& final_path) {
    const WriteOptions& o = job.request.o;
    if (is_remote(o.output)) forget_listings();  // the prefix was listed before its objects were written
    const bool folder = is_directory(staged);
    uint64_t read_back = 0;
    Manifest m = make_manifest(staged, final_path, writer.name(), job.request.ck.dir, std::max(1u, o.threads), false,
                               &read_back, o.manifest);
    m.tensors = written_tensor_digests(job.plan, &read_back);  // hashed as written (write/tensor_hash.h)
    write_manifest_file(staged, m, folder ? "" : final_path, job.uploads);
    uint64_t hashed = 0;
    for (const auto& [name, d] : m.files) hashed += d.size;
    summary["manifest_bytes"] = {{"hashed", hashed}, {"read_back", read_back}};
    summary["manifest"] = folder ? join_path(final_path, kManifestFile) : final_path + "." + kManifestFile;
  };
}

// The journal of a multi-file output written here by one process (write/resume.h), compared with
// the stopped run's (`from`) under --resume; null for any other output.
std::unique_ptr<ResumeJournal> open_journal(const WriteJob& job, const OutputWriter& writer, const std::string& from) {
  const WriteOptions& o = job.request.o;
  if (job.group || is_remote(o.output)) return nullptr;
  const json files = writer.journal_files(job);
  if (files.is_null()) {
    if (o.resume)
      throw UnsupportedError(
          Where(o.output),
          "--resume goes with an output of several files (a Hugging Face folder DIR/ of several shards, a "
          "GGUF split by --split-max-size or --split-max-tensors, a DCP checkpoint of several rank "
          "files not in a folder of its own)");
    return nullptr;
  }
  if (o.resume && from.empty())
    throw UsageError(Where(o.output), std::string("--resume: no stopped run of this output to finish (no ") +
                                          kResumeJournal + " in a dead run's temporary folder beside it)");
  auto journal = std::make_unique<ResumeJournal>(
      resume_plan(job.request, writer.name(), files["options"], files["files"]), o.manifest, from);
  if (o.dry_run && o.resume && o.note)
    o.note("--resume: the plan is the stopped run's; its " + std::to_string(journal->recorded_files()) +
           " finished file(s) in " + from + " would be read again and kept where intact");
  return journal;
}

// A failed run of a journaled output: its finished files are kept, and the error says where, only
// for a failure of the output's I/O (a full disk, a lost mount: exit 4), which a second run may not
// meet; damaged input (exit 3) or a refusal would stop a --resume at the same place, so the staging
// folder goes as any failed run's does and nothing is left behind.
void keep_or_remove_finished_files(Error& e, const ResumeJournal* journal, const std::string& output) {
  if (journal && !journal->dir().empty() && e.exit_code() != ExitCode::io) {
    remove_tree(journal->dir());
    return;
  }
  if (journal && journal->finished_files())
    e.add_leftover("kept " + std::to_string(journal->finished_files()) + " finished file(s) of " + output + " in " +
                   journal->dir() + ": the same command with --resume writes only the rest");
}

// An object-storage output's uploads (store/upload.h): a failure anywhere aborts those this
// process started and deletes the objects it completed; they are its output only once the run
// committed. Null for a local output.
std::unique_ptr<UploadSession> open_uploads(const WriteJob& job) {
  const WriteOptions& o = job.request.o;
  if (!is_remote(o.output)) return nullptr;
  const size_t me = static_cast<size_t>(job.me);
  auto uploads = std::make_unique<UploadSession>(job.deal.part_size[me], job.deal.part_buffers[me]);
  // What a SIGKILL would leave open, recorded for the next run (write/leftovers.h).
  if (std::string journal = upload_journal_name(o.output); !journal.empty()) uploads->journal_in(journal, o.output);
  return uploads;
}

// What the lanes share while they write.
struct WriteShared {
  MemoryGate& gate;
  WriteProgress& prog;
  DecodedChunks* decoded;
  const std::vector<HashPart>& hash_parts;
  bool exchange;
};

// This process's part of the output: its chunks read here, or pushed between the ranks under
// torchrun (write/exchange.h), through the executor's lanes.
void write_part(OutputWriter& writer, WriteJob& job, const WriteShared& w, const std::string& set_up) {
  const WriteOptions& o = job.request.o;
  LocalChunks local(job.reader, kTransferWindow, w.decoded);
  std::unique_ptr<ChunkExchange> ex;
  if (w.exchange) {
    ex = std::make_unique<ChunkExchange>(*job.group, job.reader, job.deal.transfers, job.deal.lanes, kTransferWindow,
                                         w.gate);
    ex->start_pushing();
  }
  Executor executor{job.plan, ex ? static_cast<ChunkSource&>(*ex) : local, w.gate, w.prog, std::max(1u, o.threads)};
  executor.direct_io = o.direct_io;
  executor.hash_parts = &w.hash_parts;
  // No descriptor to copy_file_range into; and bytes the kernel copies are not hashed as written
  // (they would be read back from the output: passing them through a lane's buffer costs a
  // copy in memory, reading them back a read of the disk).
  if (job.uploads || hashing_writes()) executor.cfr_ok = false;
  try {
    writer.write(job, executor, set_up);
  } catch (...) {
    if (!ex) throw;
    ex->fail(std::current_exception());
    std::rethrow_exception(ex->first_error());
  }
  if (ex) ex->finish_pushing();
}

}  // namespace

json execute(const WriteRequest& request, OutputWriter& writer) {
  const Checkpoint& ck = request.ck;
  const WriteOptions& o = request.o;
  require_complete(ck);
  const auto t0 = std::chrono::steady_clock::now();
  Group* group = o.group;
  const int me = group ? group->rank() : 0, world = group ? group->size() : 1;
  const bool leader = me == 0;
  const std::string resume_from = check_output(request, writer, leader);
  if (group) agree_on_command(*group, request, writer.name());

  // ---- plan: what is written, then who does what; everything refused before a byte is written ----
  ItemReader reader(ck);
  // A safetensors output under --io direct: the bulk bytes are read past the page cache, and the
  // zip headers' small reads must not pull them into it by readahead first (ReadFile::no_readahead:
  // at the kimi shapes of bench/scaling.sh 322 of 336 shared expert windows went through the page
  // cache that way; docs/performance.md, item 5). The other formats keep it: not measured.
  if (o.direct_io && request.target.format->writing == Writing::AtOffsets) reader.no_readahead();
  // Whether a chunk can be read in place decides whether some .pt and DCP records stream; it is
  // asked only where every process reads every chunk it writes (the answer must be the same on
  // every rank, and with an exchange the writer may not see the chunk's file).
  std::function<bool(const TensorMeta&, size_t)> in_place;
  if (!group || !writer.exchange())
    in_place = [&](const TensorMeta& t, size_t c) { return reader.readable_in_place(t, c); };
  // --dtype keeps what the model and the key maps keep in their saved dtype (plan/precision.h).
  // A whole model's output (an HF folder) claims to be the model, so an unknown model is refused there.
  const PrecisionPolicy precision = precision_policy(ck, o, request.model, request.target.format->whole_model);
  Target target = request.target;
  target.precision = &precision;
  WriteJob job{request, reader, plan_write(ck, o.selection, o.cast, target, in_place), {}, {}, group, me, leader};
  job.visibility =
      group && request.local_files ? gather_visibility(*group, ck) : Visibility::everything(world, ck.md.files.size());
  const bool exchange = group && writer.exchange();
  if (exchange && !o.dry_run) group->connect_transport();
  job.deal = deal_work(ck, job.plan, deal_request(job, writer, exchange, world));
  reader.expect(items_read(job, exchange));
  json summary = plan_summary(job);
  writer.planned(job, summary);
  const std::unique_ptr<ResumeJournal> journal = open_journal(job, writer, resume_from);
  job.journal = journal.get();
  // The same plan on every rank: the command was agreed on; this catches two .metadata of one
  // size and save id that differ.
  if (group) group->agree("plan", plan_digest(job.plan, job.deal));
  if (o.dry_run) {
    add_dry_run_plan(job, summary);
    return summary;
  }

  // ---- set up, write, commit ----
  seal_with_manifest(writer, job, summary);
  // A single process hashes its files (local or uploaded) as it writes them (write/write_hash.h);
  // under torchrun other processes write into the leader's files, so its manifest reads them.
  HashWrites hashing(!group, o.manifest);
  const std::vector<HashPart> hash_parts = declare_planned_tensors(job.plan);
  MemoryGate gate(job.deal.gate_bytes(me));
  const std::unique_ptr<UploadSession> uploads = open_uploads(job);
  job.uploads = uploads.get();
  WriteProgress prog(job.plan.total_bytes, o.progress);
  // A zstd source chunk read for several records is decoded once (item/decoded_chunks.h).
  std::unique_ptr<DecodedChunks> decoded;
  if (writer.decode_once()) decoded = std::make_unique<DecodedChunks>(reader, &gate);
  const WriteShared shared{gate, prog, decoded.get(), hash_parts, exchange};
  try {
    const std::string set_up = set_up_on_leader(group, [&] { return writer.set_up(job); });
    if (uploads) uploads->start_part_window();
    const std::string failpoint_name = std::string(writer.name()) + "-write";
    bool committed = write_then_commit(
        group,
        [&] {
          if (group) failpoint(failpoint_name.c_str(), me);
          write_part(writer, job, shared, set_up);
        },
        [&] { writer.commit(job); });
    if (uploads) uploads->keep();
    if (!committed) {
      summary["rank"] = me;
      return summary;
    }
  } catch (Error& e) {
    if (uploads)
      for (std::string& l : uploads->discard()) e.add_leftover(std::move(l));
    keep_or_remove_finished_files(e, journal.get(), o.output);
    throw;
  } catch (...) {
    if (uploads) uploads->discard();  // what it could not undo is lost with a failure that is not an Error
    throw;
  }
  writer.finish(job, summary);
  if (journal && o.resume) summary["resume"] = journal->summary();
  if (decoded) summary["chunk_decodes"] = decoded->decodes();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  summary["seconds"] = secs;
  summary["gb_per_s"] = secs > 0 ? static_cast<double>(job.plan.total_bytes) / secs / 1e9 : 0.0;
  summary["peak_rss_bytes"] = peak_rss_bytes();
  return summary;
}

void dump_summary(nlohmann::json& summary, std::ostream& os) {
  if (!summary.is_object() || !summary.contains(kRenderedPlan)) {
    os << summary.dump(2) << "\n";
    return;
  }
  summary.erase(kRenderedPlan);
  // Each rendered text is swapped for a mark, the rest dumped, and the text written where its mark
  // is: the mark's quotes are not escaped, so it is not found inside a dumped string.
  std::string plan = std::move(summary["plan"].get_ref<std::string&>());
  std::string deal = std::move(summary["deal"].get_ref<std::string&>());
  summary["plan"] = "\x01";
  summary["deal"] = "\x01";
  const std::string text = summary.dump(2);
  const std::string plan_mark = "\"plan\": \"\\u0001\"", deal_mark = "\"deal\": \"\\u0001\"";
  const size_t d = text.find(deal_mark), p = text.find(plan_mark);
  if (d == std::string::npos || p == std::string::npos || d > p)
    throw Error(Where(), "internal error: the dry run's summary lost its plan");
  os.write(text.data(), static_cast<std::streamsize>(d));
  os << "\"deal\": " << deal;
  os.write(text.data() + d + deal_mark.size(), static_cast<std::streamsize>(p - d - deal_mark.size()));
  os << "\"plan\": " << plan;
  os << std::string_view(text).substr(p + plan_mark.size()) << "\n";
  summary.erase("plan");
  summary.erase("deal");
}

}  // namespace dcpctl
