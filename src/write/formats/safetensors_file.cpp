#include "write/formats/safetensors_file.h"

#include <algorithm>

#include "util/failpoint.h"
#include "util/sha256.h"
#include "write/executor.h"
#include "write/resume.h"
#include "write/safetensors.h"
#include "write/write_hash.h"

namespace dcpctl {

using nlohmann::json;

void SafetensorsFiles::plan_files(WriteJob& job, json& summary) {
  const WritePlan& plan = job.plan;
  headers_.assign(plan.files.size(), {});
  for (size_t f = 0; f < plan.files.size(); ++f) {
    std::vector<SafetensorsEntry> entries;
    for (size_t ri : plan.files[f].records) {
      const Record& r = plan.records[ri];
      const PlannedTensor& pt = plan.tensors[r.tensor];
      entries.push_back({pt.key, pt.dst, pt.t->shape, r.offset, r.offset + r.out_bytes});
    }
    headers_[f] = safetensors_header(entries, metadata());
  }
  outs_.resize(plan.files.size());
  json fj = json::array();
  for (size_t f = 0; f < plan.files.size(); ++f)
    fj.push_back({{"path", path_of(plan.files[f])},
                  {"tensors", plan.files[f].records.size()},
                  {"bytes", headers_[f].size() + plan.files[f].data_bytes}});
  more_files(plan, fj);
  summary["files"] = fj;
}

// Rank 0 creates the outputs under temporary names (their headers written, their space
// reserved); writers of other shards open them there (a shared filesystem, --parallel-write). A
// journaled folder's files a stopped run finished are kept (write/resume.h), not created.
std::string SafetensorsFiles::set_up(WriteJob& job) {
  const WritePlan& plan = job.plan;
  ResumeJournal* journal = job.journal;
  if (o_.format->folder) dir_ = std::make_unique<OutputDir>(o_.output, job.uploads, journal ? journal->from() : "");
  if (journal) journal->start(dir_->temp_path());
  std::string list;
  for (size_t f = 0; f < outs_.size(); ++f) {
    if (journal && journal->kept(plan.files[f].name)) {
      dir_->keep_when_stopped();
      // The manifest takes its digest from the journal, as from a file hashed as written.
      record_written_digest(dir_->path_of(plan.files[f].name), *journal->kept_digest(plan.files[f].name), 0);
      list += "\n";
      continue;
    }
    outs_[f] = std::make_unique<OutputFile>(dir_ ? dir_->path_of(plan.files[f].name) : o_.output, job.uploads);
    outs_[f]->reserve(headers_[f].size() + plan.files[f].data_bytes);
    outs_[f]->pwrite_all(headers_[f].data(), headers_[f].size(), 0);
    list += outs_[f]->temp_path() + "\n";
  }
  return list;
}

json SafetensorsFiles::journal_files(const WriteJob& job) const {
  // One data file: nothing to keep that its run would not write again (and a failed run leaves
  // nothing, as for a single file).
  if (!o_.format->folder || job.plan.files.size() < 2) return nullptr;
  json files = json::object();
  for (size_t f = 0; f < job.plan.files.size(); ++f) files[job.plan.files[f].name] = Sha256::of(headers_[f]);
  return {{"files", files}, {"options", json::object()}};
}

// A journaled folder: the tasks of the files kept left out, the kept files' tensors located for the
// manifest's digests (read back from them), each other file finished after its last task.
Deal SafetensorsFiles::journaled_deal(WriteJob& job, const Executor& ex) {
  const WritePlan& plan = job.plan;
  Deal deal = job.deal;
  auto kept = [&](size_t f) { return outs_[f] == nullptr; };
  deal.tasks.erase(std::remove_if(deal.tasks.begin(), deal.tasks.end(),
                                  [&](const Task& t) { return kept(plan.records[t.record].dest); }),
                   deal.tasks.end());
  left_ = std::make_unique<std::atomic<size_t>[]>(plan.files.size());
  for (const Task& t : deal.tasks)
    if (t.writer == job.me) ++left_[plan.records[t.record].dest];
  for (size_t f = 0; f < plan.files.size(); ++f)
    for (size_t r : plan.files[f].records)
      if (kept(f) && ex.hash_parts && !(*ex.hash_parts)[r].tensor.empty()) {
        const std::string path = dir_->path_of(plan.files[f].name);
        locate_part((*ex.hash_parts)[r], path, path, headers_[f].size() + plan.records[r].offset);
      }
  return deal;
}

void SafetensorsFiles::task_done(const Task& task) {
  if (!journal_) return;
  const size_t f = plan_->records[task.record].dest;
  if (--left_[f] == 0) finish_file(f);
}

// File `f` is complete: synced, renamed to its name in the folder, journaled; the folder now
// outlives a failure.
void SafetensorsFiles::finish_file(size_t f) {
  OutputFile& out = *outs_[f];
  out.commit();
  std::optional<FileDigest> d = out.digest();
  if (!d) d = digest_files(out.final_path(), 1, nullptr, nullptr, o_.manifest).begin()->second;
  journal_->finished(plan_->files[f].name, *d);
  dir_->keep_when_stopped();
  failpoint_stop(("finished/" + plan_->files[f].name).c_str());  // tests: killed with this file finished
}

void SafetensorsFiles::write_files(WriteJob& job, Executor& ex, const std::string& paths) {
  if (!job.leader && o_.parallel_write) {
    size_t f = 0;
    for (size_t a = 0, b; (b = paths.find('\n', a)) != std::string::npos; a = b + 1, ++f)
      if (f < outs_.size() && job.deal.writer_of[f] == job.me)
        outs_[f] = OutputFile::open_shared(paths.substr(a, b - a));
  }
  uploads = job.uploads;
  if (!job.journal) return ex.write(job.deal, job.me, *this);
  journal_ = job.journal;
  plan_ = &job.plan;
  ex.write(journaled_deal(job, ex), job.me, *this);
}

// The weights, then what the folder adds (the config and tokenizer files, then the index): in an
// s3:// folder, where each file appears as it is committed, the files from_pretrained looks for
// first come last.
void SafetensorsFiles::commit(WriteJob& job) {
  // A single file's manifest goes beside it before it is renamed (write/execute.h: seal).
  if (!dir_ && seal && outs_.size() == 1 && !outs_[0]->remote()) {
    outs_[0]->finish_writes();
    seal(outs_[0]->temp_path(), o_.output);
  }
  for (auto& f : outs_)
    if (f) f->commit();
  // An object is hashed as it is uploaded, and its manifest follows it (no rename to wait for).
  if (!dir_ && seal && outs_.size() == 1 && outs_[0]->remote()) seal(o_.output, o_.output);
  if (dir_) {
    finish_folder(job);
    if (job.journal) job.journal->remove();  // not part of the output
    if (seal) seal(dir_->temp_path(), o_.output);
    dir_->commit();
  }
}

void SafetensorsFiles::write_text(const std::string& name, const std::string& text) {
  OutputFile f(dir_->path_of(name), dir_->uploads());
  f.append(text.data(), text.size());
  f.commit();
}

PartBuffers at_offsets_part_buffers(size_t files, unsigned lanes, unsigned threads) {
  (void)threads;
  return files == 0 ? PartBuffers{0, 0} : PartBuffers{2 * lanes + 2, 3};
}

namespace {

class SafetensorsFile final : public SafetensorsFiles {
 public:
  using SafetensorsFiles::SafetensorsFiles;
};

}  // namespace

const Format formats::safetensors = [] {
  Format f;
  f.name = f.flag = "safetensors";
  f.writing = Writing::AtOffsets;
  f.tensors_only = true;
  f.suffixes = {".safetensors"};
  f.file_name = [](size_t, size_t) { return std::string("model.safetensors"); };
  f.part_buffers = at_offsets_part_buffers;
  f.consolidate_writer = [](const ConsolidateOptions& o) -> std::unique_ptr<OutputWriter> {
    return std::make_unique<SafetensorsFile>(o);
  };
  return f;
}();

}  // namespace dcpctl
