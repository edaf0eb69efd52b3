// `dcpctl generate man`: the man(7) page dcpctl.1. It must pass `mandoc -T lint -W warning`
// (tests/docs/lint_man.sh). Every piece of model text goes through roff_text() or roff_arg().
#include <cctype>
#include <cstdio>
#include <functional>
#include <sstream>

#include "build_info.h"
#include "cmd/exit_codes.h"
#include "cmd/generate_model.h"
#include "view/maps/keymap.h"

namespace dcpctl::cli::gen {
namespace {

// Escapes text for roff: backslashes, hyphens as \- (so options copy and paste as ASCII
// hyphen-minus), non-ASCII as \[uXXXX]. Line-start control characters are handled per line.
std::string roff_escape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else if (c == '\n' || c == '\t') {
      out += ' ';
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      // UTF-8 to a code point; a malformed sequence becomes U+FFFD.
      int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      unsigned cp = len == 1 ? 0xFFFD : c & (0x7F >> len);
      bool ok = len > 1 && i + len <= s.size();
      for (int k = 1; ok && k < len; ++k) {
        unsigned char d = static_cast<unsigned char>(s[i + k]);
        ok = (d & 0xC0) == 0x80;
        cp = (cp << 6) | (d & 0x3F);
      }
      if (!ok) {
        cp = 0xFFFD;
        len = 1;
      }
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\[u%04X]", cp);
      out += buf;
      i += len - 1;
    }
  }
  return out;
}

// An escaped text line made safe to start a line: no leading or trailing blanks (a leading
// blank breaks the line), and a leading . or ' (control characters) made inert.
std::string guard_line(const std::string& escaped) {
  size_t start = escaped.find_first_not_of(' ');
  if (start == std::string::npos) return {};
  std::string t = escaped.substr(start);
  while (t.back() == ' ') t.pop_back();
  if (t[0] == '.' || t[0] == '\'') t = "\\&" + t;
  return t;
}

std::string roff_text(const std::string& s) {
  return guard_line(roff_escape(s));
}

// A quoted macro argument.
std::string roff_arg(const std::string& s) {
  std::string out = "\"";
  for (char c : roff_escape(s)) out += c == '"' ? std::string("\\(dq") : std::string(1, c);
  return out + "\"";
}

std::string bold(const std::string& s) {
  return "\\fB" + roff_escape(s) + "\\fR";
}
std::string italic(const std::string& s) {
  return "\\fI" + roff_escape(s) + "\\fR";
}

std::string sentence(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  if (!s.empty() && s.back() != '.' && s.back() != '!' && s.back() != '?') s += '.';
  return s;
}

// Paragraph text, blank lines dropped (fill mode joins lines anyway), each input line escaped
// and wrapped at spaces to 80 bytes (mandoc's style check; escapes never contain spaces).
void text_lines(std::ostream& o, const std::string& s) {
  constexpr size_t kWidth = 80;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) {
    std::string t = roff_text(line);
    while (t.size() > kWidth) {
      size_t cut = t.rfind(' ', kWidth);
      if (cut == std::string::npos || cut == 0) cut = t.find(' ', kWidth);
      if (cut == std::string::npos) break;
      o << t.substr(0, cut) << "\n";
      t = guard_line(t.substr(cut + 1));
    }
    if (!t.empty()) o << t << "\n";
  }
}

std::string value_of(const ArgDoc& a) {
  return italic(a.value_name.empty() ? "VALUE" : a.value_name);
}

// "\fBdcpctl inspect\fR [\fIOPTIONS\fR] \fIcheckpoint\fR": required options are spelled out.
std::string synopsis(const CommandDoc& c) {
  std::string s = bold(c.joined());
  bool optional_options = false;
  for (const ArgDoc& a : c.options) {
    if (!a.required) {
      optional_options = true;
      continue;
    }
    s += " " + bold(a.names().back());
    if (a.takes_value) s += " " + value_of(a);
  }
  if (optional_options) s += " [" + italic("OPTIONS") + "]";
  for (const ArgDoc& a : c.positionals) {
    std::string p = italic(a.positional);
    if (a.max_values == ArgDoc::kUnbounded || a.max_values > 1) p += "\\ ...";
    s += " " + (a.required ? p : "[" + p + "]");
  }
  if (!c.subcommands.empty()) s += " " + (c.needs_subcommand ? italic("COMMAND") : "[" + italic("COMMAND") + "]");
  return s;
}

void arg_item(std::ostream& o, const ArgDoc& a) {
  o << ".TP\n";
  if (a.is_positional() && a.shorts.empty() && a.longs.empty()) {
    o << italic(a.positional) << "\n";
  } else {
    std::string head;
    for (const std::string& n : a.names()) head += (head.empty() ? "" : ", ") + bold(n);
    if (a.takes_value) head += " " + value_of(a);
    o << head << "\n";
  }
  std::string text = a.description.empty() ? "" : sentence(a.description);
  auto add = [&](const std::string& s) { text += (text.empty() ? "" : " ") + s; };
  if (!a.choices.empty()) {
    std::string list;
    for (const std::string& c : a.choices) list += (list.empty() ? "" : ", ") + c;
    add("One of: " + list + ".");
  }
  if (!a.default_value.empty()) add("Default: " + a.default_value + ".");
  if (a.required && !a.is_positional()) add("Required.");
  if (a.repeatable && !a.is_positional() && a.takes_value && a.description.find("repeat") == std::string::npos)
    add("May be given more than once.");
  if (!a.envname.empty()) add("Environment: " + a.envname + ".");
  text_lines(o, text.empty() ? "(no description)" : text);
}

// Examples are shown only while the commands and options they use exist in the model.
struct Example {
  std::vector<std::string> path;  // below the root
  std::vector<std::string> options;
  const char* command_line;
  const char* explanation;
};

const CommandDoc* find(const CommandDoc& root, const std::vector<std::string>& path) {
  const CommandDoc* c = &root;
  for (const std::string& p : path) {
    const CommandDoc* next = nullptr;
    for (const CommandDoc& s : c->subcommands)
      if (s.name() == p) next = &s;
    if (!next) return nullptr;
    c = next;
  }
  return c;
}

bool has_option(const CommandDoc& c, const std::string& name) {
  for (const ArgDoc& a : c.options)
    for (const std::string& n : a.names())
      if (n == name) return true;
  return false;
}

const Example kExamples[] = {
    {{"inspect"}, {}, "dcpctl inspect ckpt/", "Show what the checkpoint in ckpt/ holds and how it is sharded."},
    {{"inspect"}, {"--json"}, "dcpctl inspect --json ckpt/", "The same as JSON, for scripts."},
    {{"consolidate"},
     {},
     "dcpctl consolidate hf-shards/ -o model.safetensors",
     "Consolidate the per-rank safetensors shards of HuggingFaceStorageWriter (any layout dcpctl reads: DCP, DCP with "
     "rank-local metadata or safetensors items, HF-mode DCP, Hugging Face safetensors)."},
    {{"ls"},
     {},
     "dcpctl ls outputs/checkpoint",
     "List a run folder's checkpoints (step-N, checkpoint_N, ...): layout, "
     "complete or not and why, size, content."},
    {{"latest"},
     {},
     "dcpctl consolidate \"$(dcpctl latest outputs/checkpoint)\" -o model.safetensors",
     "Consolidate the newest complete checkpoint of a run folder; latest exits 3 when none is complete."},
    {{"prune"},
     {"--dry-run"},
     "dcpctl prune outputs/checkpoint --keep 2 --dry-run",
     "Show which checkpoints a prune keeping the 2 newest complete ones would remove; without --dry-run, remove them."},
    {{"diff"},
     {"--select", "--quiet"},
     "dcpctl diff ckpt/ export/ --select app.model --quiet",
     "CI: exit 1 unless the exported model equals the model in the training checkpoint, bit for bit."},
    {{"diff"},
     {"--atol", "--rtol"},
     "dcpctl diff ckpt-w8/ hf-model/ --atol 1e-6 --rtol 1e-5",
     "Compare two differently sharded checkpoints with torch.allclose's rule, in float64."},
    {{"stats"},
     {"--check-finite"},
     "dcpctl stats --check-finite -q \"$(dcpctl latest RUN)\"",
     "CI: exit 3 naming every tensor of the newest checkpoint of a run that holds a NaN or an Inf."},
    {{"stats"},
     {"--depth"},
     "dcpctl stats ckpt/ --depth 4",
     "Statistics per layer (keys grouped by their first 4 components)."},
    {{"report"},
     {"--html", "--fail-on"},
     "dcpctl report outputs/checkpoint --html run.html --fail-on nan",
     "Norms, update ratios, NaNs and Adam's state of every step of a run, per layer and kind, as a page readable "
     "offline; exit 3 naming the first step where a tensor holds a NaN or an Inf."},
    {{}, {"--version"}, "dcpctl --version", "Show the versions of dcpctl and LibTorch and whether CUDA is usable."},
};

// The .TH date: the release's (DCPCTL_RELEASE_DATE beside the version in CMakeLists.txt), not
// the build's, so the page is byte-identical across builds.
constexpr const char* kManDate = DCPCTL_RELEASE_DATE;

}  // namespace

namespace {

// .TH and NAME.
void man_header(std::ostringstream& o, const CommandDoc& root) {
  std::string title;
  for (char c : root.name()) title += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  o << ".\\\" " << generated_notice("man") << "\n"
    << ".TH " << title << " 1 \"" << kManDate << "\" "  // a date, not text: no escaped hyphens
    << roff_arg(root.name() + " " + DCPCTL_VERSION) << " \"User Commands\"\n"
    << ".nh\n";  // no hyphenation: option names and dtypes must not be split

  // The description starts "dcpctl: ..."; NAME wants the part after the name.
  std::string what = root.description;
  if (what.rfind(root.name() + ":", 0) == 0) what = what.substr(root.name().size() + 1);
  std::string summary = what.substr(0, what.find('\n'));
  summary.erase(0, summary.find_first_not_of(' '));
  while (!summary.empty() && (summary.back() == '.' || summary.back() == ' ')) summary.pop_back();
  o << ".SH NAME\n";
  text_lines(o, root.name() + " - " + summary);
}

// COMMANDS: each command's synopsis, description, arguments and new footer, depth first.
void man_commands(std::ostringstream& o, const CommandDoc& root) {
  if (!root.subcommands.empty()) {
    o << ".SH COMMANDS\n";
    std::vector<const CommandDoc*> parents = {&root};
    std::function<void(const CommandDoc&)> section = [&](const CommandDoc& c) {
      o << ".SS " << roff_arg(c.joined()) << "\n" << synopsis(c) << "\n.PP\n";
      text_lines(o, sentence(c.description.empty() ? "(no description)" : c.description));
      for (const ArgDoc& a : c.positionals) arg_item(o, a);
      for (const ArgDoc& a : c.options) arg_item(o, a);
      // CLI11 subcommands inherit their parent's footer (the exit codes): print only new ones.
      if (!c.footer.empty() && c.footer != parents.back()->footer) {
        o << ".PP\n";
        text_lines(o, c.footer);
      }
      parents.push_back(&c);
      for (const CommandDoc& s : c.subcommands) section(s);
      parents.pop_back();
    };
    for (const CommandDoc& c : root.subcommands) section(c);
  }
}

// ENVIRONMENT: the options an environment variable sets.
void man_environment(std::ostringstream& o, const CommandDoc& root) {
  std::vector<const ArgDoc*> env;
  for_each_command(root, [&](const CommandDoc& c) {
    for (const ArgDoc& a : c.options)
      if (!a.envname.empty()) env.push_back(&a);
  });
  if (!env.empty()) {
    o << ".SH ENVIRONMENT\n";
    for (const ArgDoc* a : env) {
      o << ".TP\n" << bold(a->envname) << "\nSets " << bold(a->names().back()) << ".\n";
    }
  }
}

void man_inputs(std::ostringstream& o) {
  o << ".SH INPUTS\n";
  text_lines(
      o,
      "Every command that reads a checkpoint takes a DCP directory (.metadata and __R_N.distcp files, "
      "torch.save or safetensors items, zstd too), a DCP directory saved with use_collectives=False "
      "(one __R.metadata per rank, merged and checked), HF-mode DCP written by HuggingFaceStorageWriter "
      "(shard-R-model-i-of-N.safetensors with DCP_SHARDING_INFO, or its sharded/ folder), a Hugging Face "
      "safetensors directory (model-i-of-N.safetensors and model.safetensors.index.json) or one .safetensors "
      "file; diff and stats also a torch.save .pt or .bin file and a Hugging Face directory of torch.save "
      "files (pytorch_model.bin.index.json and pytorch_model-i-of-N.bin, or one pytorch_model.bin). A run "
      "folder (step-N, checkpoint_N, ... "
      "subfolders, as torchtitan and Ray Train leave them) goes to ls, latest, prune and report; any other command "
      "given one exits 2 naming its newest complete checkpoint.");
  o << ".SH KEY MAPS\n";
  text_lines(o,
             "--map NAME|FILE (consolidate, reshard, cast, diff, stats) renames and reshapes tensors between two "
             "naming conventions as torchtitan's state-dict adapters do; the direction follows the input's keys, "
             "parameters come from config.json (--config, --assets DIR, or beside the checkpoint). A FILE is a "
             "dcpctl-map/1 JSON map, or a dcpctl-map/2 family of them whose variant config.json's model_type chooses "
             "(docs/maps.md). The built-in maps (dcpctl maps):");
  for (const KeyMap& m : builtin_key_maps()) {
    o << ".TP\n" << bold(m.name) << "\n";
    text_lines(o, m.sides[0] + " <-> " + m.sides[1] + ": " + m.description);
  }
}

// EXAMPLES: those whose command and options this build has.
void man_examples(std::ostringstream& o, const CommandDoc& root) {
  bool examples = false;
  for (const Example& ex : kExamples) {
    const CommandDoc* c = find(root, ex.path);
    bool ok = c != nullptr;
    for (const std::string& opt : ex.options) ok = ok && has_option(*c, opt);
    if (!ok) continue;
    if (!examples) o << ".SH EXAMPLES\n";
    examples = true;
    o << ".TP\n.B " << roff_arg(ex.command_line) << "\n";
    text_lines(o, ex.explanation);
  }
}

}  // namespace

std::string emit_man(const CommandDoc& root) {
  std::ostringstream o;
  man_header(o, root);
  o << ".SH SYNOPSIS\n";
  bool first = true;
  for_each_command(root, [&](const CommandDoc& c) {
    if (!first) o << ".br\n";
    first = false;
    o << synopsis(c) << "\n";
  });

  o << ".SH DESCRIPTION\n";
  text_lines(o, root.description);
  if (!root.subcommands.empty()) {
    o << ".PP\nEach command has its own options, listed under\n.B COMMANDS\nbelow and shown by\n"
      << bold(root.name()) << " " << italic("COMMAND") << " " << bold("--help") << ".\n";
  }

  man_commands(o, root);
  if (!root.options.empty() || !root.positionals.empty()) {
    o << ".SH GLOBAL OPTIONS\nThese come before the command.\n";
    for (const ArgDoc& a : root.positionals) arg_item(o, a);
    for (const ArgDoc& a : root.options) arg_item(o, a);
  }

  man_environment(o, root);
  man_inputs(o);
  o << ".SH EXIT STATUS\n";
  for (const ExitCodeDoc& e : kExitCodes) {
    o << ".TP\n" << bold(std::to_string(static_cast<int>(e.code))) << "\n";
    text_lines(o, e.meaning);
  }

  man_examples(o, root);
  o << ".SH SEE ALSO\n.BR torchrun (1),\n.BR python3 (1)\n";
  return o.str();
}

}  // namespace dcpctl::cli::gen
