"""ledger-judge: the suite's own check that no test passed having checked nothing
(docs/testing.md#no-test-passes-on-nothing). Standard library only.

usage: ledger_judge.py LEDGER_DIR BUILD_DIR TESTS_SOURCE_DIR

CTest runs it last in every run (FIXTURES_CLEANUP of check-ledger, which every other test
requires; ledger-reset emptied LEDGER_DIR first), so it judges the tests that ran, whatever the
selection (-R, -L, -j). It fails:
- on a test whose ledger (LEDGER_DIR/NAME, written by tests/counted.sh and the test's harness) says
  it exited 0 with no "checks N" line, or with checks that sum to 0 (counted.sh has already failed
  that test itself; this says it again, in one list);
- on a test of the build tree (its CTestTestfile.cmake files) not run under tests/counted.sh or not
  requiring the fixture check-ledger: such a test would pass here unseen;
- on a floor under 1 anywhere in tests/: a `min_checks=` of 0 (or less) in a Python test, a
  `checks_at_least` under 1 in a shell test.
A test that was skipped (77), failed, or did not finish (a timeout: CTest reports it) is listed, not
judged again.
"""
import re
import sys
from pathlib import Path

SELF = ("ledger-reset", "ledger-judge")
# `add_test([=[NAME]=] "ARG" "ARG" ...)` and `set_tests_properties([=[NAME]=] PROPERTIES ...)`, as
# CMake 3.25 writes CTestTestfile.cmake.
ADD_TEST = re.compile(r'^add_test\(\[=\[(.*?)\]=\] (.*)\)$')
PROPS = re.compile(r'^set_tests_properties\(\[=\[(.*?)\]=\] PROPERTIES (.*)\)$')
ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')
FLOOR_PY = re.compile(r"min_checks\s*=\s*(-\s*\d+|0+)\b")
FLOOR_SH = re.compile(r"checks_at_least\s+(-\s*\d+|0+)\b")


def registered(build: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Every test of the tree: name -> its command's arguments, name -> its properties' text."""
    commands, props = {}, {}
    for f in sorted(build.rglob("CTestTestfile.cmake")):
        for line in f.read_text().splitlines():
            line = line.strip()
            if m := ADD_TEST.match(line):
                commands[m.group(1)] = [a.replace('\\"', '"') for a in ARG.findall(m.group(2))]
            elif m := PROPS.match(line):
                props[m.group(1)] = props.get(m.group(1), "") + " " + m.group(2)
    return commands, props


def read_ledger(path: Path) -> dict:
    entry = {"started": None, "exit": None, "checks": [], "verdict": None}
    for line in path.read_text(errors="replace").splitlines():
        word, _, rest = line.partition(" ")
        if word == "started":
            entry["started"] = rest
        elif word == "exit":
            entry["exit"] = int(rest) if rest.strip().lstrip("-").isdigit() else rest
        elif word == "checks":
            n, _, what = rest.partition(" ")
            entry["checks"].append((int(n) if n.isdigit() else 0, what))
        elif word == "verdict":
            entry["verdict"] = rest
    return entry


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    ledger_dir, build, tests_src = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    failures: list[str] = []
    checks = 0

    # 1. every test of the tree runs under counted.sh and inside the bracket
    commands, props = registered(build)
    if not commands:
        failures.append(f"no test found in the CTestTestfile.cmake files under {build}")
    for name, argv in sorted(commands.items()):
        if name in SELF:
            continue
        checks += 1
        counted = len(argv) >= 4 and Path(argv[1]).name == "counted.sh" and argv[3] == name \
            and Path(argv[2]) == ledger_dir
        if not counted:
            failures.append(f"{name}: not run under tests/counted.sh with its ledger (register it with "
                            f"dcpctl_add_test): {' '.join(argv)[:200]}")
        checks += 1
        if "check-ledger" not in props.get(name, ""):
            failures.append(f"{name}: does not require the fixture check-ledger, so a run of it alone is not judged")

    # 2. no floor under 1 in the tests' sources
    for f in sorted(tests_src.rglob("*")):
        if f.suffix not in (".py", ".sh") or not f.is_file() or f.name == "ledger_judge.py":
            continue
        checks += 1
        for i, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            for rx in (FLOOR_PY, FLOOR_SH):
                if m := rx.search(line):
                    failures.append(f"{f.relative_to(tests_src.parent)}:{i}: {m.group(0)!r}: a floor under 1 "
                                    "lets the test pass having checked nothing")

    # 3. the tests that ran in this CTest run
    ran = sorted(ledger_dir.iterdir()) if ledger_dir.is_dir() else []
    table = []
    for path in ran:
        name = path.name
        e = read_ledger(path)
        made = sum(n for n, _ in e["checks"])
        state = "exited 0 with no checks: failed by counted.sh" if e["exit"] == 0 and e["verdict"] else \
            "passed" if e["exit"] == 0 else "skipped" if e["exit"] == 77 else \
            "did not finish" if e["exit"] is None else f"failed (exit {e['exit']})"
        table.append(f"  {name:44s} {made:>9d} checks  {state}")
        if name not in commands:
            failures.append(f"{name}: a ledger for a test this tree does not register")
            continue
        checks += 1
        if e["started"] != name:
            failures.append(f"{name}: its ledger was not started by counted.sh (says {e['started']!r})")
        if e["exit"] == 0 and not e["checks"]:
            failures.append(f"{name}: passed having recorded nothing (no harness wrote to its ledger)")
        elif e["exit"] == 0 and made == 0:
            failures.append(f"{name}: passed having made 0 checks ({len(e['checks'])} counts recorded, all 0)")
    print(f"ledger-judge: {len(ran)} test(s) ran in this CTest run:")
    print("\n".join(table) if table else "  (none)")
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    print(f"ledger-judge: {checks} checks, {len(failures)} failed "
          f"({len(commands)} tests registered, {len(ran)} judged)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
