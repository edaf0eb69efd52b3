// dcpctl stats' options, as the command line (cmd/stats.cpp) and Python (python/commands.cpp,
// dcpctl.stats) fill them, and the one place they become the library's StatsOptions.
#pragma once

#include <string>
#include <vector>

#include "args/spelling.h"
#include "compare/stats.h"

namespace dcpctl {

struct StatsArgs {
  std::string checkpoint, select, max_memory, map, config;
  std::vector<std::string> filter, include, exclude;
  int depth = 0;
  bool check_finite = false, check_zero = false;
  unsigned threads = 4;

  // Each option's name (Python's spelling, args/spelling.h) and field, for a front end that
  // fills them by name; the checkpoint is the command's argument, not an option.
  template <class V>
  static void fields(V&& v) {
    v("select", &StatsArgs::select);
    v("max_memory", &StatsArgs::max_memory);
    v("map", &StatsArgs::map);
    v("config", &StatsArgs::config);
    v("filter", &StatsArgs::filter);
    v("include", &StatsArgs::include);
    v("exclude", &StatsArgs::exclude);
    v("depth", &StatsArgs::depth);
    v("check_finite", &StatsArgs::check_finite);
    v("check_zero", &StatsArgs::check_zero);
    v("threads", &StatsArgs::threads);
  }
};

// The options checked (UsageError naming the option as `s` spells it), before anything is read.
StatsOptions stats_options(const StatsArgs& a, Spelling s);

}  // namespace dcpctl
