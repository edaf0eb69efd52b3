// What every format consolidate writes shares (plan/format.h has the formats): the
// selected non-tensor values (kept where the format writes them and torch.load(weights_only=True)
// accepts them, else listed as left out), a Lightning checkpoint's meta.pt (merged by the .pt
// module, reported by the others), the chunk exchange under torchrun, and the summary's part every
// format has. A module derives from ConsolidatedWriter and supplies its files: what it derives
// from the plan (plan_files), set_up, write_files, commit.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pickle/tree.h"
#include "write/assets.h"
#include "write/consolidate.h"
#include "write/execute.h"
#include "write/lightning_meta.h"

namespace dcpctl {

// The selected non-tensor values: those a file keeps (decoded, re-picklable, and accepted by
// torch.load(weights_only=True) unless --keep-unsafe-values), and the keys of those left out.
struct Values {
  std::vector<std::unique_ptr<pickle::Tree>> trees;
  std::vector<const SelectedItem*> kept;  // trees[i] is kept[i]'s
  std::vector<std::string> skipped;
};

class ConsolidatedWriter : public OutputWriter {
 public:
  explicit ConsolidatedWriter(const ConsolidateOptions& o) : o_(o) {}
  const char* name() const override { return "consolidate"; }
  // Under torchrun the ranks read their share of the chunks and push it to the writers.
  bool exchange() const override { return true; }
  // Lanes: the writing threads (under torchrun one exchange lane each; one when the backend
  // ignores tags); a format written in order has one.
  unsigned lanes(const WriteRequest& request, Group* group) const override;
  void check(const WriteRequest& request) override;
  // The values and the Lightning meta.pt, the summary's format and values, then plan_files.
  void planned(WriteJob& job, nlohmann::json& summary) override;
  // The notes of what was left out, then write_files.
  void write(WriteJob& job, Executor& ex, const std::string& set_up) override;
  void finish(WriteJob& job, nlohmann::json& summary) override;

 protected:
  // The format's part of planned(): what it derives from the plan, and the summary's "files".
  virtual void plan_files(WriteJob& job, nlohmann::json& summary) = 0;
  virtual void write_files(WriteJob& job, Executor& ex, const std::string& set_up) = 0;

  // The summary's assets (rank 0's): the files copied beside the weights (or, with --dry-run, to
  // be copied; none but for a folder that copies them), those left out, and what config.json says
  // of tied word embeddings against the keys written; notes for what a user must act on.
  void assets_summary(const WritePlan& plan, nlohmann::json& summary) const;

  const ConsolidateOptions& o_;
  Values values_;
  LightningMerge lightning_;
  Assets assets_;              // rank 0's: found by a format that copies them (check)
  bool wants_config_ = false;  // and that from_pretrained needs a config.json among them
  bool keeps_layout_ = false;  // writes the keys under the names they were read by (the summary's hf_layout)
};

}  // namespace dcpctl
