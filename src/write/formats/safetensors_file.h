// Safetensors files written at offsets: the `safetensors` format (one file, `__metadata__
// {"format": "pt"}`, flat keys) and what the formats that are folders of safetensors files build
// on (hf_folder.cpp, peft_adapter.cpp).
//
// Every file is laid out first (all offsets known from .metadata: plan/plan.h), created by rank 0
// with its header written and its space reserved, then filled at offsets on every lane, each run
// of a record straight to its place (write/executor.h). Under torchrun with --parallel-write each
// writer opens the shards dealt to it in rank 0's temporary folder (a shared filesystem).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "write/formats/consolidated.h"
#include "write/output.h"

namespace dcpctl {

class SafetensorsFiles : public ConsolidatedWriter, protected FileSink {
 public:
  using ConsolidatedWriter::ConsolidatedWriter;
  std::string set_up(WriteJob& job) override;
  void commit(WriteJob& job) override;
  // A folder of several shards is journaled (write/resume.h); one file is not.
  nlohmann::json journal_files(const WriteJob& job) const override;

 protected:
  void plan_files(WriteJob& job, nlohmann::json& summary) override;
  void write_files(WriteJob& job, Executor& ex, const std::string& set_up) override;
  // A folder format: where planned file `f` goes (the summary's path), whether the output is a
  // folder, what it adds to the summary's files, and what it writes into the folder after the
  // weights and before it is committed (the config, the index).
  virtual std::string path_of(const PlannedFile& f) const {
    (void)f;
    return o_.output;
  }
  virtual void more_files(const WritePlan& plan, nlohmann::json& files) const { (void)plan, (void)files; }
  virtual void finish_folder(WriteJob& job) { (void)job; }
  // A small file of the folder (an index, a config), committed at once.
  void write_text(const std::string& name, const std::string& text);
  // The header's __metadata__.
  virtual std::map<std::string, std::string> metadata() const { return {{"format", "pt"}}; }

  OutputFile& file(size_t f) override { return *outs_[f]; }
  void task_done(const Task& task) override;
  uint64_t data_start(size_t f) const override { return headers_[f].size(); }

  std::vector<std::string> headers_;
  std::unique_ptr<OutputDir> dir_;                 // a folder format's
  std::vector<std::unique_ptr<OutputFile>> outs_;  // null: a file kept from a stopped run

 private:
  Deal journaled_deal(WriteJob& job, const Executor& ex);
  void finish_file(size_t f);
  ResumeJournal* journal_ = nullptr;  // set while a journaled folder is written
  const WritePlan* plan_ = nullptr;
  std::unique_ptr<std::atomic<size_t>[]> left_;  // each file's tasks still to write
};

// The part buffers of files written at offsets: the tasks under way (as many as lanes) leave at
// most two parts each unfinished, and one more (store/upload.h); three let one task run at a time.
PartBuffers at_offsets_part_buffers(size_t files, unsigned lanes, unsigned threads);

}  // namespace dcpctl
