// The commands as functions (dcpctl.inspect, verify, stats, diff): the library functions the command
// line's cmd/inspect.cpp, verify.cpp, stats.cpp and diff.cpp call, with the same options, returning the
// document their --json prints (as JSON text; dcpctl/__init__.py makes it a dict). Errors are the
// library's, raised as dcpctl/_errors.py's classes (python/errors.h). The GIL is released while
// they run.
#pragma once

#include <nanobind/nanobind.h>

namespace dcpctl::py {

void bind_commands(nanobind::module_& m);

}  // namespace dcpctl::py
