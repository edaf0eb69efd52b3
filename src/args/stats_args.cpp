#include "args/stats_args.h"

#include "util/size.h"

namespace dcpctl {

StatsOptions stats_options(const StatsArgs& a, Spelling s) {
  if (a.depth < 0) throw usage_error(s, Where(), "--depth must be 0 or more");
  StatsOptions so;
  so.selection.prefix = a.select;
  so.map = a.map;
  so.map_config = a.config;
  if (!a.config.empty() && a.map.empty())
    throw usage_error(s, Where(a.config), "--config gives a key map's parameters; it needs --map");
  so.selection.include = a.include;
  so.selection.include.insert(so.selection.include.end(), a.filter.begin(), a.filter.end());
  so.selection.exclude = a.exclude;
  so.threads = a.threads ? a.threads : 1;
  if (!a.max_memory.empty()) so.max_memory = parse_size(a.max_memory, spell(s, "--max-memory"));
  so.depth = a.depth;
  so.check_finite = a.check_finite;
  so.check_zero = a.check_zero;
  return so;
}

}  // namespace dcpctl
