// dcpctl diff's options, as the command line (cmd/diff.cpp) and Python (python/commands.cpp,
// dcpctl.diff) fill them, and the one place they become the library's DiffOptions.
#pragma once

#include <string>
#include <vector>

#include "args/spelling.h"
#include "compare/diff.h"

namespace dcpctl {

struct DiffArgs {
  std::string a, b, select, max_memory, map, config, assets;
  std::vector<std::string> include, exclude;
  double atol = -1, rtol = -1;  // < 0: not given
  bool equal_nan = false, ignore_dtype = false;
  unsigned threads = 4;

  // Each option's name (Python's spelling, args/spelling.h) and field; A and B are the command's
  // arguments, not options.
  template <class V>
  static void fields(V&& v) {
    v("select", &DiffArgs::select);
    v("max_memory", &DiffArgs::max_memory);
    v("map", &DiffArgs::map);
    v("config", &DiffArgs::config);
    v("assets", &DiffArgs::assets);
    v("include", &DiffArgs::include);
    v("exclude", &DiffArgs::exclude);
    v("atol", &DiffArgs::atol);
    v("rtol", &DiffArgs::rtol);
    v("equal_nan", &DiffArgs::equal_nan);
    v("ignore_dtype", &DiffArgs::ignore_dtype);
    v("threads", &DiffArgs::threads);
  }
};

// The options checked (UsageError naming the option as `s` spells it), before anything is read.
// The command line adds stop_early (--quiet) and each front end its progress.
DiffOptions diff_options(const DiffArgs& a, Spelling s);

}  // namespace dcpctl
