// `dcpctl generate fish`: `complete` lines guarded by which subcommands the command line holds.
#include <sstream>

#include "cmd/generate_model.h"

namespace dcpctl::cli::gen {
namespace {

// fish single quotes: only \ and ' are special.
std::string fq(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\n') c = ' ';
    if (c == '\\' || c == '\'') out += '\\';
    out += c;
  }
  return out + "'";
}

std::string names_of(const CommandDoc& c) {
  std::string s = c.name();
  for (const std::string& a : c.aliases) s += " " + a;
  return s;
}

// True when the command line is at command `c` (below its parent, not yet in one of its subcommands).
std::string condition(const CommandDoc& c, const std::vector<const CommandDoc*>& ancestors) {
  std::string cond;
  if (ancestors.empty()) {
    cond = "__fish_use_subcommand";
  } else {
    for (size_t i = 1; i < ancestors.size(); ++i)
      cond += "__fish_seen_subcommand_from " + names_of(*ancestors[i]) + "; and ";
    cond += "__fish_seen_subcommand_from " + names_of(c);
    if (!c.subcommands.empty()) {
      std::string subs;
      for (const CommandDoc& s : c.subcommands) subs += " " + names_of(s);
      cond += "; and not __fish_seen_subcommand_from" + subs;
    }
  }
  return fq(cond);
}

// The arguments that make a value complete to the right thing.
std::string value_args(const ArgDoc& a, bool option) {
  switch (a.kind) {
    case ValueKind::file: return option ? " -r -F" : " -F";
    case ValueKind::directory: return std::string(option ? " -x" : "") + " -a '(__fish_complete_directories)'";
    case ValueKind::choice: {
      std::string s;
      for (const std::string& c : a.choices) s += (s.empty() ? "" : " ") + c;
      return std::string(option ? " -x" : "") + " -a " + fq(s);
    }
    case ValueKind::none: break;
  }
  return option ? " -x" : "";
}

void command_lines(std::ostream& o, const std::string& root, const CommandDoc& c,
                   std::vector<const CommandDoc*>& ancestors) {
  const std::string prefix = "complete -c " + root + " -n " + condition(c, ancestors);
  o << "\n# " << c.joined() << "\n";
  for (const ArgDoc& a : c.options) {
    o << prefix;
    for (const std::string& s : a.shorts) o << " -s " << s.substr(1);
    for (const std::string& l : a.longs) o << " -l " << l.substr(2);
    if (a.takes_value) o << value_args(a, true);
    o << " -d " << fq(a.description) << "\n";
  }
  for (const CommandDoc& s : c.subcommands) {
    o << prefix << " -a " << fq(s.name()) << " -d " << fq(s.description) << "\n";
    for (const std::string& al : s.aliases) o << prefix << " -a " << fq(al) << " -d " << fq(s.description) << "\n";
  }
  for (const ArgDoc& a : c.positionals) {
    if (a.kind != ValueKind::none) o << prefix << value_args(a, false) << " -d " << fq(a.positional) << "\n";
  }
  ancestors.push_back(&c);
  for (const CommandDoc& s : c.subcommands) command_lines(o, root, s, ancestors);
  ancestors.pop_back();
}

}  // namespace

std::string emit_fish(const CommandDoc& root) {
  std::ostringstream o;
  o << "# " << generated_notice("fish") << "\n"
    << "# Fish completion for " << root.name() << ": install in a vendor_completions.d directory, or source it.\n\n"
    << "# Arguments complete to nothing unless a line below says files, directories or values.\n"
    << "complete -c " << root.name() << " -f\n";
  std::vector<const CommandDoc*> ancestors;
  command_lines(o, root.name(), root, ancestors);
  return o.str();
}

}  // namespace dcpctl::cli::gen
