# zsh_complete.zsh FPATH_DIR LINE...: what zsh's completion system offers for each LINE<TAB>,
# with the completion functions in FPATH_DIR: one candidate per line, and a line "@@" after each
# LINE's candidates. It drives an interactive zsh on a pseudo-terminal (zsh/zpty) and wraps
# compadd to print every candidate added.
zmodload zsh/zpty || exit 77
zmodload zsh/datetime
zpty z zsh -f -i || exit 77
zpty -w z "PROMPT=; RPROMPT=; fpath=(${(q)1} \$fpath)"
zpty -w z 'autoload -Uz compinit; compinit -u -D'
zpty -w z 'compadd() { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return; fi; local -a __hits; builtin compadd -A __hits "$@"; local h; for h in $__hits; do print -r -- "<""<$h>"">"; done; builtin compadd "$@" }'
zpty -w z 'bindkey -e; bindkey "^I" complete-word; zstyle ":completion:*" menu no'
# ZLE handles keys in order, so this widget's output marks the end of the completion before it.
zpty -w z '_zc_done() { print -r -- "DO""NE"; }; zle -N _zc_done; bindkey "^X^D" _zc_done'

out=""
wait_for() {  # wait_for WORD: reads the terminal until WORD shows up
  # A hang guard far above what a loaded machine stretches a completion (milliseconds) to.
  local chunk deadline=$((EPOCHREALTIME + 300))
  while (( EPOCHREALTIME < deadline )); do
    if zpty -r -t z chunk; then
      out+=$chunk
      [[ $out == *$1* ]] && return 0
    else
      sleep 0.02
    fi
  done
  print -u2 "zsh_complete.zsh: no $1 from zsh within 300 s"
  exit 1
}
# The sentinels are spelled so that the terminal's echo of the command cannot match.
zpty -w z 'print -r -- RE""ADY'
wait_for READY
for line in "${@[2,-1]}"; do
  out=""
  zpty -w -n z $'\C-u'"$line"$'\t\C-x\C-d'
  wait_for DONE
  print -r -- "$out" | tr -d '\r' | grep -o '<<[^>]*>>' | sed 's/^<<//; s/>>$//' | LC_ALL=C sort -u
  print -r -- @@
done
zpty -d z
