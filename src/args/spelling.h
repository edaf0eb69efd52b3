// The options of the commands, as each front end names them. The command line's flags are the
// names' source; a Python keyword argument is the flag without its dashes, '-' written '_'
// (--max-memory: max_memory, --world-size: world_size). The args structs (args/*_args.h) hold one
// field per option, named as Python spells it, which both front ends fill; their checks write a
// refusal in the command line's spelling and spell() rewrites it for the front end that asked.
#pragma once

#include <string>

#include "util/error.h"

namespace dcpctl {

enum class Spelling { Cli, Python };

// `text` with each option flag in it ("--max-memory", not "-w") as `s` spells it: unchanged for the
// command line, "max_memory" for Python.
std::string spell(Spelling s, const std::string& text);

// A UsageError (exit 2) whose message is spell(s, text).
UsageError usage_error(Spelling s, Where where, const std::string& text);

}  // namespace dcpctl
