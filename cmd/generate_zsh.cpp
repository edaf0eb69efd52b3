// `dcpctl generate zsh`: one _arguments function per command path (_dcpctl, _dcpctl__inspect);
// a command with subcommands dispatches on the first word after its options (the ->args state).
#include <sstream>

#include "cmd/generate_model.h"

namespace dcpctl::cli::gen {
namespace {

// Text inside an _arguments spec: "[...]" descriptions and ":message:" parts treat these specially.
std::string spec_text(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') c = ' ';
    if (c == '[' || c == ']' || c == ':' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string function_name(const CommandDoc& c) {
  return "_" + c.joined("__");
}

std::string action(const ArgDoc& a) {
  switch (a.kind) {
    case ValueKind::file: return "_files";
    case ValueKind::directory: return "_files -/";
    case ValueKind::choice: {
      std::string s = "(";
      for (size_t i = 0; i < a.choices.size(); ++i) s += (i ? " " : "") + spec_text(a.choices[i]);
      return s + ")";
    }
    case ValueKind::none: break;
  }
  return " ";  // a value is expected, but nothing to offer
}

// One _arguments spec per option name, with the option's other names excluded after it.
void option_specs(std::ostream& o, const ArgDoc& a) {
  std::vector<std::string> names = a.names();
  std::string exclusions;
  if (a.exits) {
    exclusions = "(- *)";
  } else if (!a.repeatable) {
    exclusions = "(";
    for (size_t i = 0; i < names.size(); ++i) exclusions += (i ? " " : "") + names[i];
    exclusions += ")";
  }
  for (const std::string& n : names) {
    std::string spec = exclusions + (a.repeatable && !a.exits ? "*" : "") + n;
    if (a.takes_value) spec += n.size() == 2 ? "+" : "=";
    spec += "[" + spec_text(a.description) + "]";
    if (a.takes_value) {
      std::string msg = a.value_name.empty() ? "value" : a.value_name;
      spec += ":" + spec_text(msg) + ":" + action(a);
    }
    o << "    " << sq(spec) << " \\\n";
  }
}

void command_function(std::ostream& o, const CommandDoc& c) {
  bool dispatch = !c.subcommands.empty();
  o << function_name(c) << "() {\n";
  if (dispatch) o << "  local curcontext=$curcontext state state_descr line ret=1\n  typeset -A opt_args\n";
  o << "  _arguments " << (dispatch ? "-C " : "") << "-s -S \\\n";
  for (const ArgDoc& a : c.options) option_specs(o, a);
  int index = 1;
  for (const ArgDoc& a : c.positionals) {
    // "N::msg" marks an optional argument; after "*", "::" would mean something else.
    bool rest = a.max_values == ArgDoc::kUnbounded || a.max_values > 1;
    std::string spec = rest ? "*:" : std::to_string(index++) + (a.required ? ":" : "::");
    spec += spec_text(a.positional) + ":" + action(a);
    o << "    " << sq(spec) << " \\\n";
    if (rest) break;
  }
  if (!dispatch) {
    o << "    && return 0\n  return 1\n}\n\n";
    return;
  }
  o << "    " << sq(std::to_string(index) + ":command:" + function_name(c) + "_commands") << " \\\n"
    << "    '*:: :->args' && ret=0\n"
    << "  if [[ $state == args ]]; then\n"
    << "    curcontext=${curcontext%:*:*}:" << c.joined("-") << "-$words[1]:\n"
    << "    case $words[1] in\n";
  for (const CommandDoc& s : c.subcommands) {
    std::string pats = sq(s.name());
    for (const std::string& al : s.aliases) pats += "|" + sq(al);
    o << "      " << pats << ") " << function_name(s) << " && ret=0 ;;\n";
  }
  o << "    esac\n  fi\n  return ret\n}\n\n";

  o << function_name(c) << "_commands() {\n  local -a commands\n  commands=(\n";
  for (const CommandDoc& s : c.subcommands) {
    std::string d = s.description;
    for (char& ch : d)
      if (ch == '\n') ch = ' ';
    o << "    " << sq(spec_text(s.name()) + ":" + d) << "\n";
    for (const std::string& al : s.aliases) o << "    " << sq(spec_text(al) + ":" + d) << "\n";
  }
  o << "  )\n  _describe -t commands " << sq(c.joined() + " command") << " commands\n}\n\n";
}

}  // namespace

std::string emit_zsh(const CommandDoc& root) {
  std::ostringstream o;
  o << "#compdef " << root.name() << "\n# " << generated_notice("zsh") << "\n"
    << "# Zsh completion for " << root.name() << ": install as _" << root.name() << " in a directory of $fpath.\n\n";
  for_each_command(root, [&](const CommandDoc& c) { command_function(o, c); });
  std::string f = function_name(root);
  o << "if [[ $funcstack[1] == " << f << " ]]; then\n  " << f << " \"$@\"\nelse\n  compdef " << f << " " << root.name()
    << "\nfi\n";
  return o.str();
}

}  // namespace dcpctl::cli::gen
