#!/usr/bin/env bash
# Where a cold build of dcpctl spends its time: the demo's build (no LibTorch, no ccache,
# RelWithDebInfo as tools/dev.sh configures it), each compile and the link run through a launcher
# that records its wall time, CPU time (user+sys, of the compiler and its children), peak memory and
# start, so that a loaded machine (wall times stretch with the load) still gives each translation
# unit's CPU cost.
#
#   bench/build_time.sh [BUILD_DIR] [cmake args...]   (default: a new directory under /tmp; removed unless KEEP=1)
#
# Prints each translation unit (a unity batch, or a source that compiles alone) by CPU time, the
# sum per library, the build's wall and CPU time, and how long one or no compile ran while the
# other core waited (the schedule's tail at each library's end).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
B=${1:-$(mktemp -d /tmp/dcpctl-build-time.XXXXXX)}
shift || true
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$B"' EXIT
JOBS=${DCPCTL_JOBS:-$(nproc)}
mkdir -p "$B"
LOG=$B/times.log
: >"$LOG"
cat >"$B/launcher.sh" <<EOF
#!/usr/bin/env bash
out=""; prev=""
for a in "\$@"; do [ "\$prev" = -o ] && out=\$a; prev=\$a; done
exec /usr/bin/time -a -o "$LOG" -f "%e %U %S %M \$out \$(date +%s.%N)" "\$@"
EOF
chmod +x "$B/launcher.sh"
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $(git -C "$ROOT" rev-parse --short HEAD) into $B, -j$JOBS"
cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDCPCTL_WITH_TORCH=OFF \
  -DCMAKE_CXX_COMPILER_LAUNCHER="$B/launcher.sh" -DCMAKE_CXX_LINKER_LAUNCHER="$B/launcher.sh" "$@" >/dev/null
/usr/bin/time -o "$B/total" -f "%e %U %S" cmake --build "$B" -j "$JOBS" --target dcpctl >"$B/build.log" 2>&1 ||
  { tail -20 "$B/build.log"; exit 1; }
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$LOG" "$B/total" "$B" <<'PY'
import collections, sys
rows = []
for line in open(sys.argv[1]):
    wall, user, sys_, rss, out, start = line.split()
    name = out.replace(sys.argv[3] + "/", "").replace("CMakeFiles/", "").replace(".dir/", ": ")
    rows.append((float(user) + float(sys_), float(wall), int(rss) // 1024, name, float(start)))
rows.sort(reverse=True)
print("| translation unit | CPU s | wall s | peak MB |")
print("|---|---|---|---|")
for cpu, wall, rss, name, _ in rows:
    print(f"| {name} | {cpu:.1f} | {wall:.1f} | {rss} |")
lib = collections.Counter()
for cpu, _, _, name, _ in rows:
    lib[name.split(":")[0].split("/")[-1]] += cpu
print("\n" + ", ".join(f"{k} {v:.1f}" for k, v in lib.most_common()) + " CPU-s")
wall, user, sys_ = map(float, open(sys.argv[2]).read().split())
# How many compiles ran at once, over the build: time with one (a core idle) and none.
t0 = min(r[4] for r in rows)
ev = sorted([(r[4] - t0, 1) for r in rows] + [(r[4] - t0 + r[1], -1) for r in rows])
busy, cur, last = collections.Counter(), 0, 0.0
for t, d in ev:
    busy[min(cur, 2)] += t - last
    last, cur = t, cur + d
print(f"build: {wall:.1f} s wall, {user + sys_:.1f} CPU-s; sum over the units {sum(r[0] for r in rows):.1f} CPU-s; "
      f"one compile running {busy[1]:.1f} s, none {busy[0]:.1f} s (of {last:.1f} s)")
PY
