#include "write/shared_reads.h"

#include <algorithm>
#include <numeric>

namespace dcpctl {

JoinedRuns join_runs(const std::vector<RunRead>& runs, uint64_t max_window) {
  JoinedRuns j;
  j.window_of.assign(runs.size(), 0);
  std::vector<uint32_t> order(runs.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return runs[a].key != runs[b].key ? runs[a].key < runs[b].key : runs[a].offset < runs[b].offset;
  });
  for (uint32_t i : order) {
    const RunRead& r = runs[i];
    const uint64_t end = r.offset + r.bytes;
    if (!j.windows.empty()) {
      ReadWindow& w = j.windows.back();
      const uint64_t wend = w.offset + w.bytes, joined = std::max(wend, end) - w.offset;
      if (w.key == r.key && r.offset <= wend && joined <= max_window) {
        w.bytes = joined;
        j.window_of[i] = static_cast<uint32_t>(j.windows.size() - 1);
        continue;
      }
    }
    j.windows.push_back({r.key, r.offset, r.bytes});
    j.window_of[i] = static_cast<uint32_t>(j.windows.size() - 1);
  }
  return j;
}

std::vector<TaskGroup> group_tasks(const std::vector<uint64_t>& cost, uint64_t limit, size_t max_tasks) {
  std::vector<TaskGroup> groups;
  uint64_t held = 0;  // the open group's cost (the last group, when shared and open)
  bool open = false;
  for (size_t i = 0; i < cost.size(); ++i) {
    const uint64_t c = cost[i];
    if (c == 0 || c > limit) {
      groups.push_back({i, i + 1, false});
      open = false;
      continue;
    }
    if (open && held + c <= limit && groups.back().end - groups.back().begin < max_tasks) {
      groups.back().end = i + 1;
      held += c;
      continue;
    }
    groups.push_back({i, i + 1, true});
    held = c;
    open = true;
  }
  return groups;
}

}  // namespace dcpctl
