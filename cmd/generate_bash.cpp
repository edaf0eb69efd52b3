// `dcpctl generate bash`: a self-contained completion function (no bash-completion helpers, so
// it also works when sourced into a bare shell). The per-command data are case tables keyed by
// the command path ("dcpctl inspect"); the walker in _dcpctl() finds the path, skips option
// values, and counts positionals.
#include <sstream>

#include "cmd/generate_model.h"

namespace dcpctl::cli::gen {
namespace {

std::string sq_list(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : " ") + sq(s);
  return out;
}

// Sets _dcpctl_kind (and _dcpctl_choices) for one value.
std::string kind_assignment(const ArgDoc& a) {
  switch (a.kind) {
    // Quoted: shellcheck takes a bare `x=file` for a mistyped `x=$(file)` (SC2209).
    case ValueKind::file: return "_dcpctl_kind='file'";
    case ValueKind::directory: return "_dcpctl_kind='dir'";
    case ValueKind::choice: return "_dcpctl_kind='choice' _dcpctl_choices=(" + sq_list(a.choices) + ")";
    case ValueKind::none: break;
  }
  return "_dcpctl_kind='none'";
}

const char* kRuntime = R"BASH(
# _dcpctl_in WORD LIST...: whether WORD is one of LIST.
_dcpctl_in() {
    local w=$1 x
    shift
    for x in "$@"; do [[ $x == "$w" ]] && return 0; done
    return 1
}

# _dcpctl_offer CUR: adds to COMPREPLY what a value of kind $_dcpctl_kind completes to.
_dcpctl_offer() {
    local c
    case $_dcpctl_kind in
        file)
            compopt -o filenames 2>/dev/null
            mapfile -t -O "${#COMPREPLY[@]}" COMPREPLY < <(compgen -f -- "$1")
            ;;
        dir)
            compopt -o filenames 2>/dev/null
            mapfile -t -O "${#COMPREPLY[@]}" COMPREPLY < <(compgen -d -- "$1")
            ;;
        choice)
            for c in "${_dcpctl_choices[@]}"; do [[ $c == "$1"* ]] && COMPREPLY+=("$c"); done
            ;;
    esac
    return 0
}

_dcpctl() {
    local cur=${COMP_WORDS[COMP_CWORD]} path=dcpctl pending="" npos=0 i j w c
    local _dcpctl_kind=none
    local -a _dcpctl_subs=() _dcpctl_canon=() _dcpctl_opts=() _dcpctl_vals=() _dcpctl_choices=()
    COMPREPLY=()
    _dcpctl_spec "$path"
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        # "--opt=value" arrives as three words when '=' is in COMP_WORDBREAKS (the default).
        if [[ $w == = && -n $pending ]]; then continue; fi
        if [[ -n $pending ]]; then
            pending=""
            continue
        fi
        case $w in
            --*=*) ;;
            -*) _dcpctl_in "$w" "${_dcpctl_vals[@]}" && pending=$w ;;
            *)
                c=""
                for ((j = 0; j < ${#_dcpctl_subs[@]}; j++)); do
                    [[ ${_dcpctl_subs[j]} == "$w" ]] && c=${_dcpctl_canon[j]}
                done
                if [[ -n $c ]]; then
                    path="$path $c"
                    npos=0
                    _dcpctl_spec "$path"
                else
                    npos=$((npos + 1))
                fi
                ;;
        esac
    done
    [[ $cur == = ]] && cur=""
    if [[ -n $pending ]]; then
        _dcpctl_value "$path" "$pending"
        _dcpctl_offer "$cur"
        return 0
    fi
    if [[ $cur == -* ]]; then
        for c in "${_dcpctl_opts[@]}"; do [[ $c == "$cur"* ]] && COMPREPLY+=("$c"); done
        return 0
    fi
    if ((npos == 0)); then
        for c in "${_dcpctl_subs[@]}"; do [[ $c == "$cur"* ]] && COMPREPLY+=("$c"); done
    fi
    _dcpctl_positional "$path" "$npos"
    _dcpctl_offer "$cur"
}

complete -F _dcpctl dcpctl
)BASH";

}  // namespace

std::string emit_bash(const CommandDoc& root) {
  std::ostringstream o;
  o << "# " << generated_notice("bash") << "\n"
    << "# Bash completion for " << root.name() << ": install as bash-completion/completions/" << root.name()
    << ", or source it.\n\n";

  o << "# _dcpctl_spec PATH: for the command PATH, its subcommand names and aliases (_dcpctl_subs) and\n"
    << "# the names they stand for (_dcpctl_canon), its options, and its options that take a value.\n"
    << "_dcpctl_spec() {\n"
    << "    _dcpctl_subs=() _dcpctl_canon=() _dcpctl_opts=() _dcpctl_vals=()\n"
    << "    case $1 in\n";
  for_each_command(root, [&](const CommandDoc& c) {
    std::vector<std::string> subs, canon, opts, vals;
    for (const CommandDoc& s : c.subcommands) {
      subs.push_back(s.name());
      canon.push_back(s.name());
      for (const std::string& a : s.aliases) {
        subs.push_back(a);
        canon.push_back(s.name());
      }
    }
    for (const ArgDoc& a : c.options) {
      for (const std::string& n : a.names()) {
        opts.push_back(n);
        if (a.takes_value) vals.push_back(n);
      }
    }
    o << "        " << sq(c.joined()) << ")\n";
    if (!subs.empty()) o << "            _dcpctl_subs=(" << sq_list(subs) << ")\n";
    if (!subs.empty()) o << "            _dcpctl_canon=(" << sq_list(canon) << ")\n";
    if (!opts.empty()) o << "            _dcpctl_opts=(" << sq_list(opts) << ")\n";
    if (!vals.empty()) o << "            _dcpctl_vals=(" << sq_list(vals) << ")\n";
    o << "            ;;\n";
  });
  o << "    esac\n}\n\n";

  o << "# _dcpctl_value PATH OPTION: sets _dcpctl_kind (none, file, dir, choice) for OPTION's value.\n"
    << "_dcpctl_value() {\n"
    << "    _dcpctl_kind=none _dcpctl_choices=()\n"
    << "    case \"$1|$2\" in\n";
  for_each_command(root, [&](const CommandDoc& c) {
    for (const ArgDoc& a : c.options) {
      if (!a.takes_value || a.kind == ValueKind::none) continue;
      std::string pats;
      for (const std::string& n : a.names()) pats += (pats.empty() ? "" : " | ") + sq(c.joined() + "|" + n);
      o << "        " << pats << ") " << kind_assignment(a) << " ;;\n";
    }
  });
  o << "    esac\n}\n\n";

  o << "# _dcpctl_positional PATH INDEX: sets _dcpctl_kind for the INDEXth (from 0) positional of PATH.\n"
    << "_dcpctl_positional() {\n"
    << "    _dcpctl_kind=none _dcpctl_choices=()\n"
    << "    case $1 in\n";
  for_each_command(root, [&](const CommandDoc& c) {
    if (c.positionals.empty()) return;
    o << "        " << sq(c.joined()) << ")\n";
    long end = 0;
    for (const ArgDoc& a : c.positionals) {
      if (a.max_values == ArgDoc::kUnbounded) {
        o << "            " << kind_assignment(a) << "\n";
        break;
      }
      end += a.max_values;
      o << "            if (($2 < " << end << ")); then\n"
        << "                " << kind_assignment(a) << "\n"
        << "                return\n"
        << "            fi\n";
    }
    o << "            ;;\n";
  });
  o << "    esac\n}\n";
  o << kRuntime;
  return o.str();
}

}  // namespace dcpctl::cli::gen
