#!/usr/bin/env bash
# docs-sync-detects-drift: check_sync.sh passes on an exact copy of the committed files and
# fails, asking for tools/regen-docs.sh, when any one of them is edited or missing.
#   check_sync_detects_drift.sh DCPCTL_BINARY
# It works on freshly generated copies, never on the repository's files.
set -euo pipefail
bin=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# dcpctl takes a while to start (LibTorch), and this runs check_sync.sh many times: a stand-in
# that runs it once per `generate WHAT` and replays the output.
mkdir "$tmp/memo"
cat >"$tmp/dcpctl" <<STUB
#!/usr/bin/env bash
set -e
memo="$tmp/memo/\$2"
[ -f "\$memo" ] || "$bin" "\$@" >"\$memo"
cat "\$memo"
STUB
chmod +x "$tmp/dcpctl"
bin=$tmp/dcpctl

fresh_copy() {
  rm -rf "$tmp/src"
  mkdir -p "$tmp/src"
  bash "$here/../../tools/regen-docs.sh" "$bin" "$tmp/src" 2>/dev/null
}

fresh_copy
bash "$here/check_sync.sh" "$bin" "$tmp/src" >"$tmp/log" 2>&1 || { cat "$tmp/log"; fail "check_sync.sh fails on freshly generated files"; }
passed

expect_drift() {  # expect_drift WHAT: check_sync.sh must fail after the change WHAT
  if bash "$here/check_sync.sh" "$bin" "$tmp/src" >"$tmp/log" 2>&1; then
    cat "$tmp/log"
    fail "check_sync.sh passed after $1"
  fi
  grep -q "run tools/regen-docs.sh" "$tmp/log" || { cat "$tmp/log"; fail "no 'run tools/regen-docs.sh' after $1"; }
  passed
}

for f in completions/dcpctl.bash completions/_dcpctl completions/dcpctl.fish man/dcpctl.1; do
  fresh_copy
  [ -f "$tmp/src/$f" ] || fail "regen-docs.sh did not write $f"
  passed
  sed -i '2s/$/ (edited)/' "$tmp/src/$f"
  expect_drift "editing $f"
  grep -q "^+++ $f (generated)" "$tmp/log" || { cat "$tmp/log"; fail "no diff shown for $f"; }
  passed
  fresh_copy
  rm "$tmp/src/$f"
  expect_drift "deleting $f"
done
checks_at_least 17
echo "ok: check_sync.sh catches edited and missing files"
