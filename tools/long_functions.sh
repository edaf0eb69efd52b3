#!/usr/bin/env bash
# Functions of N lines or more (default 100) in src/ and cmd/, longest first, as Universal Ctags
# (Debian's universal-ctags) measures them: from the definition's first line to its closing brace.
# The count is the last line. Used for the figure docs/architecture.md quotes (issue 78 item 6).
#   tools/long_functions.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
min=${1:-100}
command -v ctags >/dev/null || { echo "needs Universal Ctags (apt-get install universal-ctags)" >&2; exit 2; }
ctags --languages=C++ --kinds-C++=f --fields=+ne -R -f - src cmd python |
  awk -F'\t' -v min="$min" '{
    l = 0; e = 0
    for (i = 4; i <= NF; i++) { if ($i ~ /^line:/) l = substr($i, 6); if ($i ~ /^end:/) e = substr($i, 5) }
    if (e - l + 1 >= min) print e - l + 1, $2 ":" l, $1
  }' | sort -rn | tee /dev/stderr | wc -l | sed 's/$/ functions/'
