// Walks the CLI11 App into the generators' plain model. Everything CLI11-specific about
// reading the model back lives here; see the notes on validators and help flags below.
#include "cmd/generate_model.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <sstream>

namespace dcpctl::cli::gen {
namespace {

// Hidden subcommands and options have the empty group (CLI11's convention, used by `generate`).
bool hidden(const CLI::App& a) {
  return a.get_group().empty() || a.get_disabled();
}

// Lower-case alphanumeric words of a name or a sentence.
std::vector<std::string> words_of(const std::string& s) {
  std::vector<std::string> out;
  std::string w;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!w.empty()) {
      out.push_back(w);
      w.clear();
    }
  }
  if (!w.empty()) out.push_back(w);
  return out;
}

bool any_of_words(const std::vector<std::string>& words, std::initializer_list<const char*> wanted) {
  return std::any_of(words.begin(), words.end(), [&](const std::string& w) {
    return std::any_of(wanted.begin(), wanted.end(), [&](const char* x) { return w == x; });
  });
}

// CLI11 2.1.2 exposes an option's validators only one at a time: get_validator(int) throws
// OptionNotFound past the end. Their descriptions are what --help shows after the type name.
std::vector<std::string> validator_descriptions(CLI::Option& o) {
  std::vector<std::string> out;
  for (int i = 0;; ++i) {
    try {
      out.push_back(o.get_validator(i)->get_description());
    } catch (const CLI::OptionNotFound&) {
      break;
    }
  }
  return out;
}

// CLI::IsMember describes itself as "{a,b,c}"; that rendering is the only way CLI11 2.1.2 lets
// us read the set back. Maps (CLI::Transformer, "{a->x,...}") and anything nested are left alone.
std::vector<std::string> parse_choices(const std::string& desc) {
  if (desc.size() < 3 || desc.front() != '{' || desc.back() != '}') return {};
  std::string body = desc.substr(1, desc.size() - 2);
  if (body.find("->") != std::string::npos || body.find_first_of("{}") != std::string::npos) return {};
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t comma = body.find(',', start);
    std::string item = body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) return {};
    out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// Which values complete to file or directory names. In order:
//  1. CLI11's path validators: ExistingDirectory ("DIR"), ExistingFile ("FILE"), ExistingPath and
//     NonexistentPath ("PATH(...)");
//  2. the type name, when the command set one with ->type_name(): "DIR" is a directory, "FILE"
//     and "PATH" a file, and any other ("N", "SIZE", "GLOB", "INT") is no path at all;
//  3. only for CLI11's generic "TEXT": the last word of the name ("checkpoint", "output-dir"),
//     then the words of the description, leaving out the names of other options ("--deep").
// A mention of a file or path wins over directory words, because file completion also offers
// directories: a wrong guess then offers too much, never hides what the user wants. DCP
// checkpoints are directories, so "checkpoint" counts as a directory word.
ValueKind path_kind(const std::string& type, const std::vector<std::string>& vdescs, const std::string& name,
                    const std::string& description) {
  auto explicit_kind = [](const std::string& d) {
    if (d == "DIR" || d == "DIRECTORY") return ValueKind::directory;
    if (d == "FILE" || d.rfind("PATH", 0) == 0) return ValueKind::file;
    return ValueKind::none;
  };
  for (const std::string& d : vdescs)
    if (ValueKind k = explicit_kind(d); k != ValueKind::none) return k;
  if (type != "TEXT") return explicit_kind(type);

  auto classify = [](const std::vector<std::string>& words) {
    if (any_of_words(words, {"file", "files", "filename", "path", "paths"})) return ValueKind::file;
    if (any_of_words(words, {"dir", "dirs", "directory", "directories", "folder", "checkpoint", "checkpoints", "ckpt"}))
      return ValueKind::directory;
    return ValueKind::none;
  };
  std::vector<std::string> name_words = words_of(name);
  if (!name_words.empty())
    if (ValueKind k = classify({name_words.back()}); k != ValueKind::none) return k;
  // Other options named in the description ("none with --from-checkpoint") say nothing of this one.
  std::string prose;
  std::istringstream in(description);
  for (std::string w; in >> w;) {
    size_t first = w.find_first_not_of("(\"'");
    if (first != std::string::npos && w[first] != '-') prose += w + " ";
  }
  return classify(words_of(prose));
}

ArgDoc walk_option(CLI::Option& o, const std::string& group) {
  ArgDoc a;
  for (const std::string& s : o.get_snames()) a.shorts.push_back("-" + s);
  for (const std::string& l : o.get_lnames()) a.longs.push_back("--" + l);
  if (o.get_positional()) a.positional = o.get_name(true);
  a.description = o.get_description();
  a.group = group;
  a.required = o.get_required();
  a.envname = o.get_envname();
  // Flags are options that expect 0 values (CLI11 sets expected(0); the type size stays 1).
  a.takes_value = o.get_items_expected_max() > 0;
  int max_items = o.get_items_expected_max();
  a.max_values = max_items >= CLI::detail::expected_max_vector_size ? ArgDoc::kUnbounded : max_items;
  // TakeLast (CLI11's policy for bool flags) accepts repeats but ignores them: not worth offering.
  CLI::MultiOptionPolicy policy = o.get_multi_option_policy();
  a.repeatable = policy == CLI::MultiOptionPolicy::TakeAll || policy == CLI::MultiOptionPolicy::Join || max_items > 1;
  // CLI11 2.1.2 keeps the help and version flag pointers private, so they are known by name.
  for (const std::string& n : a.longs) a.exits = a.exits || n == "--help" || n == "--help-all" || n == "--version";
  if (!a.takes_value) return a;

  // get_type_name() is the type followed by ":<validator description>" for each validator.
  std::string type = o.get_type_name();
  std::vector<std::string> vdescs = validator_descriptions(o);
  a.value_name = type.substr(0, type.find(':'));
  // --help shows "TEXT:DIR" for a CLI::ExistingDirectory; "DIR" alone says more.
  for (const std::string& d : vdescs)
    if (a.value_name == "TEXT" && (d == "DIR" || d == "FILE")) a.value_name = d;
  a.default_value = o.get_default_str();
  for (const std::string& d : vdescs) {
    if (a.choices.empty()) a.choices = parse_choices(d);
  }
  if (!a.choices.empty()) {
    a.kind = ValueKind::choice;
  } else {
    std::string name = a.is_positional() ? a.positional : (a.longs.empty() ? std::string() : a.longs.front());
    a.kind = path_kind(a.value_name, vdescs, name, a.description);
  }
  return a;
}

bool known(const CommandDoc& doc, const ArgDoc& a) {
  for (const ArgDoc& b : doc.options)
    for (const std::string& n : b.names())
      for (const std::string& m : a.names())
        if (n == m) return true;
  return false;
}

void add_options(CLI::App& app, CommandDoc& doc, const std::string& group_override) {
  for (CLI::Option* o : app.get_options(std::function<bool(CLI::Option*)>())) {
    if (o->get_group().empty()) continue;
    ArgDoc a = walk_option(*o, group_override.empty() ? o->get_group() : group_override);
    // An option group is an App of its own and gets a copy of its parent's help flag.
    if (!group_override.empty() && known(doc, a)) continue;
    (a.is_positional() && a.shorts.empty() && a.longs.empty() ? doc.positionals : doc.options).push_back(a);
  }
}

CommandDoc walk_app(CLI::App& app, std::vector<std::string> path) {
  CommandDoc doc;
  doc.path = std::move(path);
  doc.aliases = app.get_aliases();
  doc.description = app.get_description();
  doc.footer = app.get_footer();
  doc.needs_subcommand = app.get_require_subcommand_min() > 0;
  add_options(app, doc, "");
  // get_subcommands() without a filter lists the *parsed* subcommands; with one, all of them.
  // Option groups are nameless subcommands whose options belong to this command.
  for (CLI::App* sub : app.get_subcommands(std::function<bool(CLI::App*)>([](CLI::App*) { return true; }))) {
    if (hidden(*sub)) continue;
    if (sub->get_name().empty()) {
      add_options(*sub, doc, sub->get_group());
      continue;
    }
    std::vector<std::string> p = doc.path;
    p.push_back(sub->get_name());
    doc.subcommands.push_back(walk_app(*sub, std::move(p)));
  }
  return doc;
}

}  // namespace

std::vector<std::string> ArgDoc::names() const {
  std::vector<std::string> n = shorts;
  n.insert(n.end(), longs.begin(), longs.end());
  return n;
}

std::string CommandDoc::joined(const std::string& sep) const {
  std::string s;
  for (const std::string& p : path) s += (s.empty() ? "" : sep) + p;
  return s;
}

CommandDoc walk(CLI::App& app) {
  return walk_app(app, {app.get_name()});
}

std::string generated_notice(const std::string& what) {
  return "generated by `dcpctl generate " + what + "`, do not edit";
}

std::string sq(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace dcpctl::cli::gen
