#include "report/runs.h"

namespace dcpctl {

using nlohmann::json;

json run_entry_json(const RunEntry& e) {
  return {{"name", e.name},
          {"path", e.path},
          {"model_path", e.model_path},
          {"trainer", e.trainer.empty() ? json(nullptr) : json(e.trainer)},
          {"step", e.step ? json(*e.step) : json(nullptr)},
          {"layout", e.layout ? json(layout_name(*e.layout)) : json(nullptr)},
          {"complete", e.complete},
          {"problems", e.problems},
          {"why_incomplete", e.complete ? json(nullptr) : json(e.why_incomplete)},
          {"bytes", e.bytes},
          {"tensors", e.tensors},
          {"dtypes", e.dtypes},
          {"optimizer", e.optimizer},
          {"mtime", e.mtime},
          {"symlink", e.symlink},
          {"timing",
           {{"judged", e.judged},
            {"metadata_bytes", e.metadata_bytes},
            {"open_seconds", e.open_seconds},
            {"check_seconds", e.check_seconds}}}};
}

json run_folder_timing(const RunFolder& rf) {
  uint64_t bytes = 0, judged = 0;
  for (const auto& e : rf.entries) {
    bytes += e.metadata_bytes;
    judged += e.judged;
  }
  return {{"seconds", rf.seconds}, {"judged", judged}, {"metadata_bytes", bytes}};
}

json run_folder_report(const RunFolder& rf) {
  json list = json::array();
  for (const auto& e : rf.entries) list.push_back(run_entry_json(e));
  const RunEntry* newest = rf.newest_complete();
  return {{"schema_version", 1},
          {"run_folder", rf.dir},
          {"newest_complete", newest ? json(newest->path) : json(nullptr)},
          {"checkpoints", list},
          {"prune_leftovers", rf.prune_leftovers},
          {"megatron_tracker", rf.megatron_tracker ? json(*rf.megatron_tracker) : json(nullptr)},
          {"pointers", rf.pointers},
          {"timing", run_folder_timing(rf)}};
}

}  // namespace dcpctl
