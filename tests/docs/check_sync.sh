#!/usr/bin/env bash
# docs-sync: the committed completions and man page must be what the built dcpctl generates.
#   check_sync.sh DCPCTL_BINARY SOURCE_DIR
# SOURCE_DIR holds completions/ and man/ (the repository, or a copy in the drift test).
set -euo pipefail
bin=$1
src=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

bash "$here/../../tools/regen-docs.sh" "$bin" "$tmp/gen" 2>/dev/null
bash "$here/../../tools/regen-docs.sh" "$bin" "$tmp/again" 2>/dev/null
if ! diff -ru "$tmp/gen" "$tmp/again"; then
  echo "FAIL: dcpctl generate is not deterministic: two runs differ (above)" >&2
  exit 1
fi
passed "two runs of dcpctl generate are the same"

status=0
while IFS= read -r f; do
  if [ ! -f "$src/$f" ]; then
    echo "$f: missing from $src"
    status=1
  elif ! diff -u --label "$f (committed)" --label "$f (generated)" "$src/$f" "$tmp/gen/$f"; then
    status=1
  else
    passed "$f"
  fi
done < <(cd "$tmp/gen" && find . -type f | sed 's|^\./||' | LC_ALL=C sort)

if [ "$status" -ne 0 ]; then
  echo "FAIL: the committed completions or man page differ from the CLI model: run tools/regen-docs.sh" >&2
  exit "$status"
fi
checks_at_least 4  # the bash, zsh and fish completions and the man page
