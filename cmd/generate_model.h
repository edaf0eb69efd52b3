// The CLI model as the generators of `dcpctl generate` see it: a plain tree walked out of the
// CLI11 App once (generate_model.cpp), so that each emitter (bash, zsh, fish, man) is a pure
// function of data and CLI11's API quirks stay in one file.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace dcpctl::cli::gen {

// What a value (an option's argument or a positional) completes to.
enum class ValueKind { none, file, directory, choice };

// An option or a positional, as shown to users (hidden ones are never in the model).
struct ArgDoc {
  std::vector<std::string> shorts;  // "-h"
  std::vector<std::string> longs;   // "--help"
  std::string positional;           // the positional's name; empty for an option
  std::string description;
  std::string value_name;     // "TEXT", "DIR", ...; empty for flags
  std::string default_value;  // empty when none is shown
  std::vector<std::string> choices;
  ValueKind kind = ValueKind::none;
  bool takes_value = false;
  bool required = false;
  bool repeatable = false;  // may be given more than once, or takes several values
  int max_values = 1;       // for positionals: how many words it takes; kUnbounded for "all the rest"
  bool exits = false;       // --help, --version: prints and exits, nothing else matters
  std::string envname;
  std::string group;

  static constexpr int kUnbounded = -1;
  bool is_positional() const { return !positional.empty(); }
  std::vector<std::string> names() const;  // shorts, then longs
};

struct CommandDoc {
  std::vector<std::string> path;  // {"dcpctl"}, {"dcpctl", "inspect"}
  std::vector<std::string> aliases;
  std::string description;
  std::string footer;
  std::vector<ArgDoc> options;  // in definition order, option groups flattened in
  std::vector<ArgDoc> positionals;
  std::vector<CommandDoc> subcommands;
  bool needs_subcommand = false;

  const std::string& name() const { return path.back(); }
  std::string joined(const std::string& sep = " ") const;  // "dcpctl inspect"
};

// Walks the App (and its non-hidden subcommands, recursively) into a CommandDoc.
CommandDoc walk(CLI::App& app);

std::string emit_bash(const CommandDoc& root);
std::string emit_zsh(const CommandDoc& root);
std::string emit_fish(const CommandDoc& root);
std::string emit_man(const CommandDoc& root);

// The first line of every generated file says where it came from (`what`: bash, zsh, fish, man).
std::string generated_notice(const std::string& what);

// `s` in single quotes for a POSIX shell (bash, zsh): each ' inside becomes '\''.
std::string sq(const std::string& s);

// Calls f(cmd) for root and every subcommand below it, parents first.
template <typename F>
void for_each_command(const CommandDoc& root, F&& f) {
  f(root);
  for (const CommandDoc& c : root.subcommands) for_each_command(c, f);
}

}  // namespace dcpctl::cli::gen
