#include "args/diff_args.h"

#include "util/size.h"

namespace dcpctl {

DiffOptions diff_options(const DiffArgs& a, Spelling s) {
  DiffOptions d;
  d.selection.prefix = a.select;
  d.map = a.map;
  d.map_config = a.config;
  d.assets = a.assets;
  if (!a.config.empty() && a.map.empty())
    throw usage_error(s, Where(a.config), "--config gives a key map's parameters; it needs --map");
  d.selection.include = a.include;
  d.selection.exclude = a.exclude;
  if (a.atol >= 0) d.atol = a.atol;
  if (a.rtol >= 0) d.rtol = a.rtol;
  d.equal_nan = a.equal_nan;
  d.ignore_dtype = a.ignore_dtype;
  d.threads = a.threads ? a.threads : 1;
  if (!a.max_memory.empty()) d.max_memory = parse_size(a.max_memory, spell(s, "--max-memory"));
  return d;
}

}  // namespace dcpctl
