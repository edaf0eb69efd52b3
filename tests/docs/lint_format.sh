#!/usr/bin/env bash
# format-lint: every C++ source of the repository is as Debian 12's clang-format (14) formats it with
# the repository's .clang-format (`tools/dev.sh format` formats them).
#   lint_format.sh SOURCE_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
need clang-format
version=$(clang-format --version)
[[ $version == *"version 14."* ]] || skip_or_fail "clang-format 14 is needed (another version formats otherwise): $version"

cd "$1"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.hpp')
else  # an unpacked source archive
  mapfile -t files < <(find bench cmd python src tests tools -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.hpp' | sort)
fi
[ "${#files[@]}" -ge 300 ] || fail "only ${#files[@]} C++ sources found under $1"
passed
if ! out=$(clang-format --dry-run --Werror "${files[@]}" 2>&1); then
  grep 'error:' <<<"$out" | head -20 >&2
  fail "$(grep -c 'error:' <<<"$out") places are not as clang-format formats them: run tools/dev.sh format and commit"
fi
passed
checks_at_least 2
echo "ok: ${#files[@]} C++ sources formatted"
