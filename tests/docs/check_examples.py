#!/usr/bin/env python3
"""docs-examples: the README and docs/ stay true.

    check_examples.py DCPCTL SOURCE_DIR [--fixtures DIR] [--no-run] [FILE.md ...]

FILEs are relative to SOURCE_DIR (default: README.md and every docs/*.md). For each page:

  - Every fenced block tagged ```sh (or bash, shell) runs, line by line, in one bash session per
    page (so `ckpt=...` on one line serves the next blocks), inside a sandbox: a temporary
    directory holding a copy of tests/fixtures and build/cmd/dcpctl (the binary under test, also
    first on PATH). Paths in the examples are therefore the repository's own
    (tests/fixtures/sample/ckpt, ...), and every output lands in the sandbox. A command must exit
    0, or the code its trailing comment announces: `dcpctl diff a b  # exit 1 (they differ)`.
  - A block that cannot run offline is marked, with its reason, on the line right before its
    fence: `<!-- norun: downloads the release archive -->`. The check lists every block it skips
    and why. A block of another language (yaml, text) that invokes dcpctl must be marked too.
  - Every dcpctl invocation shown anywhere (run or not, fenced or inline code) names a real
    command and only options that command's --help lists.
  - Every relative link ([text](path), [text](path#anchor)) points to an existing file, and an
    anchor into a Markdown page to one of its headings (GitHub's slugs).
  - Every repository path in inline code (`src/meta/pieces.h`, `bench/integrity.sh`, ...) exists.
  - `tools/dev.sh WORD` names a command tools/dev.sh has, and .ci/run runs a command the README
    shows.
  - docs/commands.md has a section `## dcpctl CMD` for every command, mentioning each of its
    options.

--no-run leaves out running the examples (every other check still runs): the drift test uses it
for the cases that need no command run. Exit 0 when all hold; 1 with one line per finding
otherwise. Standard library only.
"""

import argparse
import concurrent.futures
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ledger  # noqa: E402

RUN_LANGS = {"sh", "bash", "shell"}
README_MAX_LINES = 200  # the front page stays one page (issue 72); details belong in docs/
PATH_PREFIXES = (".ci/", "bench/", "cmake/", "cmd/", "completions/", "docs/", "man/", "src/", "tests/", "tools/")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)(.*)$")
NORUN = re.compile(r"^\s*<!--\s*norun(?::\s*(.*?))?\s*-->\s*$")
# `# exit N` opening a command's comment, then `:`, `,`, `(` or nothing: the code it must exit with
# ("# exit 1: they differ"); "# exit 3 on a NaN" describes, it does not announce.
EXPECT = re.compile(r"#\s*exit (\d+)(?=\s*(?:$|[:,;(]))")
# dcpctl at a command position: line start, after a shell operator, a quote, `$(`, or as the last
# component of a path (build/cmd/dcpctl, dcpctl-0.1.0-linux-x86_64/bin/dcpctl).
INVOKE = re.compile(r"(?:^|(?<=[\s;|&(`\"'/]))dcpctl(?=\s|$)")
PER_COMMAND_TIMEOUT = 120

findings = []


def finding(where, msg):
    findings.append(f"{where}: {msg}")


# ---------------------------------------------------------------------------------------------
# Markdown: fenced blocks, inline code, links, headings.


class Block:
    def __init__(self, start, lang, lines, norun):
        self.start = start  # 1-based line number of the first line inside the fence
        self.lang = lang
        self.lines = lines
        self.norun = norun  # None (runs), or the reason given


def parse_markdown(path, text):
    """Returns (blocks, prose) where prose is [(lineno, line)] outside fenced blocks."""
    blocks, prose = [], []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        fence, lang = m.group(2), m.group(3).lower()
        norun = None
        prev = lines[i - 1] if i > 0 else ""
        nm = NORUN.match(prev)
        if nm:
            norun = (nm.group(1) or "").strip()
            if not norun:
                finding(f"{path}:{i}", "a norun marker must say why: <!-- norun: REASON -->")
                norun = "(no reason given)"
        body, j = [], i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence[0] * len(fence)) and
                                      lines[j].strip().strip(fence[0]) == ""):
            body.append(lines[j])
            j += 1
        if j == len(lines):
            finding(f"{path}:{i + 1}", "code block never closed")
        blocks.append(Block(i + 2, lang, body, norun))
        i = j + 1
    # A marker that does not sit right before a fence marks nothing.
    for n, line in prose:
        if NORUN.match(line) and not (n < len(lines) and FENCE.match(lines[n])):
            finding(f"{path}:{n}", "norun marker not directly followed by a code block")
    return blocks, prose


def strip_html_comments(prose):
    """Prose lines with <!-- ... --> removed (comments may span lines)."""
    out, inside = [], False
    for n, line in prose:
        s = ""
        rest = line
        while rest:
            if inside:
                k = rest.find("-->")
                if k < 0:
                    rest = ""
                else:
                    rest, inside = rest[k + 3:], False
            else:
                k = rest.find("<!--")
                if k < 0:
                    s, rest = s + rest, ""
                else:
                    s, rest, inside = s + rest[:k], rest[k + 4:], True
        out.append((n, s))
    return out


INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")


def inline_codes(prose):
    for n, line in prose:
        for m in INLINE_CODE.finditer(line):
            yield n, m.group(2).strip()


def links(prose):
    for n, line in prose:
        bare = INLINE_CODE.sub("", line)
        for m in LINK.finditer(bare):
            yield n, m.group(1)
        m = REFDEF.match(bare)
        if m:
            yield n, m.group(1)


def slug(heading):
    """GitHub's anchor for a heading."""
    h = re.sub(r"<[^>]+>", "", heading)  # HTML tags
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)  # links keep their text
    h = h.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)  # punctuation (backticks, dots, slashes, ...) goes
    return h.replace(" ", "-")


def anchors(text):
    out, counts = set(), {}
    in_fence = None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if m:
            if in_fence is None:
                in_fence = m.group(2)[0]
            elif line.strip().strip(in_fence) == "":
                in_fence = None
            continue
        if in_fence is not None:
            continue
        hm = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if hm:
            s = slug(hm.group(1))
            k = counts.get(s, 0)
            counts[s] = k + 1
            out.add(s if k == 0 else f"{s}-{k}")
    return out


# ---------------------------------------------------------------------------------------------
# The CLI model, from the binary's own --help.


class Cli:
    def __init__(self, binary):
        self.binary = binary
        self.cache = {}

    def help(self, path):
        """(exists, options) for the command path ('' for the top level, 'bench staging')."""
        if path in self.cache:
            return self.cache[path]
        args = [self.binary] + (path.split() if path else []) + ["--help"]
        r = subprocess.run(args, capture_output=True, text=True, timeout=60)
        usage = re.search(r"^Usage: dcpctl (.*)$", r.stdout, re.M)
        words = usage.group(1).split() if usage else []
        exists = r.returncode == 0 and (not path or words[:len(path.split())] == path.split())
        opts, subs = set(), set()
        section = None
        for line in r.stdout.splitlines():
            if re.match(r"^\S.*:$", line):
                section = line[:-1]
                continue
            if section == "Options" and re.match(r"^\s+-", line):
                first = re.split(r"\s{2,}", line.strip())[0]
                for part in first.split(","):
                    opts.add(part.split()[0])
            if section == "Subcommands" and re.match(r"^\s+\S", line):
                subs.add(line.split()[0])
        self.cache[path] = (exists, opts, subs)
        return self.cache[path]

    def commands(self):
        """Every documented command path: 'inspect', ..., 'bench staging' (not the hidden ones)."""
        out = []
        for sub in sorted(self.help("")[2]):
            nested = self.help(sub)[2]
            out.extend(f"{sub} {n}" for n in sorted(nested)) if nested else out.append(sub)
        return out


SHELL_STOP = re.compile(r"\s#|&&|\|\||[|;)<>`]")


def invocations(line):
    """The argument strings after each dcpctl invocation on a shell line."""
    for m in INVOKE.finditer(line):
        rest = line[m.end():]
        # Cut at the first shell operator outside quotes.
        out, quote, i = [], None, 0
        while i < len(rest):
            c = rest[i]
            if quote:
                if c == quote:
                    quote = None
                out.append(c)
            elif c in "'\"":
                quote = c
                out.append(c)
            elif SHELL_STOP.match(rest, i) or rest.startswith("$(", i):
                break
            else:
                out.append(c)
            i += 1
        yield "".join(out)


def lint_invocation(cli, where, args):
    try:
        tokens = shlex.split(args)
    except ValueError:
        tokens = args.split()
    tokens = [t.strip("[]") for t in tokens if t.strip("[]")]
    path, options = [], []
    for t in tokens:
        if t.startswith("-") and t != "-":
            options.append((" ".join(path), t.split("=", 1)[0]))
        elif cli.help(" ".join(path))[2]:  # this level has commands: t names one
            if not re.fullmatch(r"[a-z][a-z-]*", t):
                return  # a placeholder (dcpctl CMD ...): nothing to check
            if not cli.help(" ".join(path + [t]))[0]:
                finding(where, f"'dcpctl {' '.join(path + [t])}': no such command")
                return
            path.append(t)
        # else: a positional or an option's value
    for level, opt in options:
        known = cli.help(level)[1]
        if opt not in known:
            finding(where, f"'dcpctl {level}' has no option {opt} (its --help lists "
                           f"{', '.join(sorted(o for o in known if o.startswith('--')))})")


# ---------------------------------------------------------------------------------------------
# Running the examples.


def logical_lines(block):
    """(lineno, text) of each command: continuation lines joined, comment-only and blank lines out."""
    out, acc, start = [], "", None
    for k, line in enumerate(block.lines):
        n = block.start + k
        if not acc and (not line.strip() or line.strip().startswith("#")):
            continue
        if start is None:
            start = n
        if line.rstrip().endswith("\\"):
            acc += line.rstrip()[:-1] + " "
            continue
        acc += line
        out.append((start, acc.strip()))
        acc, start = "", None
    if acc:
        out.append((start, acc.strip()))
    return out


def split_comment(line):
    """(code, comment): the comment starts at the first '#' outside quotes that begins a word."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i], line[i:]
    return line, ""


def expected_code(cmd):
    m = EXPECT.match(split_comment(cmd)[1])
    return int(m.group(1)) if m else 0


def make_sandbox(root, fixtures, binary):
    (root / "tests").mkdir(parents=True)
    shutil.copytree(fixtures, root / "tests" / "fixtures", symlinks=True)
    (root / "build" / "cmd").mkdir(parents=True)
    # A link: dcpctl finds its LibTorch plugin beside its real path (/proc/self/exe).
    os.symlink(os.path.abspath(binary), root / "build" / "cmd" / "dcpctl")


def run_page(page, commands, fixtures, binary):
    """Runs the page's commands in one bash session; returns [(lineno, cmd, want, got, stderr)]."""
    tmp = Path(tempfile.mkdtemp(prefix="dcpctl-docs-"))
    try:
        box, log = tmp / "sandbox", tmp / "log"
        log.mkdir()
        make_sandbox(box, fixtures, binary)
        script = ["set -o pipefail", f"cd {shlex.quote(str(box))}",
                  f"export PATH={shlex.quote(str(box / 'build' / 'cmd'))}:\"$PATH\""]
        for k, (n, cmd, _) in enumerate(commands):
            script.append(f"{{ {cmd}\n}} </dev/null >{log}/{k}.out 2>{log}/{k}.err")
            script.append(f"echo \"{k} $?\" >>{log}/rc")
        (tmp / "page.sh").write_text("\n".join(script) + "\n")
        try:
            subprocess.run(["bash", str(tmp / "page.sh")], timeout=PER_COMMAND_TIMEOUT * max(1, len(commands)),
                           stdin=subprocess.DEVNULL, capture_output=True)
        except subprocess.TimeoutExpired:
            finding(page, "its examples did not finish in time")
        got = {}
        if (log / "rc").exists():
            for line in (log / "rc").read_text().split("\n"):
                if line.strip():
                    k, rc = line.split()
                    got[int(k)] = int(rc)
        results = []
        for k, (n, cmd, want) in enumerate(commands):
            err = (log / f"{k}.err").read_text(errors="replace") if (log / f"{k}.err").exists() else ""
            results.append((n, cmd, want, got.get(k), err))
        return results
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------


def dev_sh_commands(src):
    text = (src / "tools" / "dev.sh").read_text()
    body = text[text.index('case "$cmd" in'):]
    return set(re.findall(r"^  ([a-z][a-z-]*)\)", body, re.M))


def check_commands_page(cli, rel, text):
    """docs/commands.md: a section per command, naming each of its options."""
    sections = {}
    current, level = None, 0
    for line in text.split("\n"):
        hm = re.match(r"^(#{1,6})\s+(.*?)\s*$", line)
        if hm:
            h = hm.group(2).replace("`", "")
            cm = re.fullmatch(r"dcpctl ([a-z]+(?: [a-z]+)?)", h)
            if cm:
                current, level = cm.group(1), len(hm.group(1))
                sections[current] = ""
                continue
            if current and len(hm.group(1)) <= level:
                current = None
        if current:
            sections[current] += line + "\n"
    for cmd in cli.commands():
        if cmd not in sections:
            finding(rel, f"no section '## dcpctl {cmd}' for the command dcpctl {cmd}")
            continue
        for opt in sorted(cli.help(cmd)[1]):
            if opt.startswith("--") and opt != "--help" and not re.search(
                    re.escape(opt) + r"(?![\w-])", sections[cmd]):
                finding(rel, f"section 'dcpctl {cmd}' does not mention its option {opt}")
    top = cli.help("")[1]
    for opt in sorted(top):
        if opt.startswith("--") and opt != "--help" and opt not in text:
            finding(rel, f"the global option {opt} is not mentioned")


# The fewest commands a full run (not --no-run) of the README and docs/ runs: 147 on 2026-11-29,
# so that pages whose blocks stopped running (a fence changed, a page lost) fail.
MIN_COMMANDS = 140

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dcpctl")
    ap.add_argument("source")
    ap.add_argument("--fixtures", help="fixtures to copy into the sandbox (default SOURCE/tests/fixtures)")
    ap.add_argument("--no-run", action="store_true", help="static checks only")
    ap.add_argument("files", nargs="*")
    a = ap.parse_intermixed_args()
    src = Path(a.source).resolve()
    fixtures = Path(a.fixtures or src / "tests" / "fixtures").resolve()
    files = a.files or ["README.md"] + sorted(str(p.relative_to(src)) for p in (src / "docs").glob("*.md"))
    cli = Cli(os.path.abspath(a.dcpctl))
    dev_cmds = dev_sh_commands(src)

    ran = skipped = 0
    to_run = []
    for rel in files:
        page = src / rel
        if not page.is_file():
            finding(rel, "no such page")
            continue
        text = page.read_text()
        blocks, prose = parse_markdown(rel, text)
        prose = strip_html_comments(prose)

        for n, target in links(prose):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or not target:
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                finding(f"{rel}:{n}", f"broken link: {target} ({dest.relative_to(src) if src in dest.parents else dest} does not exist)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                finding(f"{rel}:{n}", f"broken link: {target} (no heading '#{anchor}' in {path or rel})")

        for n, code in inline_codes(prose):
            if code.startswith(PATH_PREFIXES) and re.fullmatch(r"[\w.\-/]+", code):
                if not (src / code.rstrip("/")).exists():
                    finding(f"{rel}:{n}", f"`{code}`: no such file or folder in the repository")
            for args in invocations(code):
                lint_invocation(cli, f"{rel}:{n}", args)
            for word in re.findall(r"(?:^|\s)tools/dev\.sh ([a-z][a-z-]*)", code):
                if word not in dev_cmds:
                    finding(f"{rel}:{n}", f"tools/dev.sh has no command '{word}'")

        commands = []
        for b in blocks:
            has_dcpctl = any(INVOKE.search(split_comment(line)[0]) for line in b.lines)
            for k, line in enumerate(b.lines):
                line = split_comment(line)[0]
                for args in invocations(line):
                    lint_invocation(cli, f"{rel}:{b.start + k}", args)
                for word in re.findall(r"(?:^|[\s;&|(])tools/dev\.sh ([a-z][a-z-]*)", line):
                    if word not in dev_cmds:
                        finding(f"{rel}:{b.start + k}", f"tools/dev.sh has no command '{word}'")
            if b.norun is not None:
                print(f"skipped {rel}:{b.start} (```{b.lang}): {b.norun}")
                skipped += 1
            elif b.lang in RUN_LANGS:
                commands.extend((n, cmd, expected_code(cmd)) for n, cmd in logical_lines(b))
            elif has_dcpctl:
                finding(f"{rel}:{b.start}", f"a ```{b.lang or '(untagged)'} block invokes dcpctl: make it ```sh so "
                                            "that it runs, or mark it <!-- norun: REASON -->")
        if commands and not a.no_run:
            to_run.append((rel, commands))

        if rel == "docs/commands.md":
            check_commands_page(cli, rel, text)
        if rel == "README.md":
            ci = (src / ".ci" / "run").read_text()
            m = re.search(r"^exec (.+)$", ci, re.M)
            shown = [line.split("#")[0].strip() for b in blocks for line in b.lines]
            if not m or m.group(1).strip() not in shown:
                finding("README.md", f"CI runs '{m.group(1).strip() if m else '?'}' (.ci/run), which no code block "
                                     "of the README shows")
            for code in range(6):
                if not re.search(rf"^\|\s*{code}\s*\|", text, re.M):
                    finding("README.md", f"the exit code table has no row for {code}")
            if text.count("\n") > README_MAX_LINES:
                finding("README.md", f"{text.count(chr(10))} lines, over {README_MAX_LINES}: move details to docs/")

    # Pages run side by side (each in its own sandbox); most of a command's time is LibTorch loading.
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda p: (p[0], run_page(p[0], p[1], fixtures, a.dcpctl)), to_run))
    for rel, page_results in results:
        for n, cmd, want, got, err in page_results:
            ran += 1
            if got != want:
                tail = err.strip().splitlines()[-3:]
                finding(f"{rel}:{n}", f"`{cmd}` exited {'nothing (not reached)' if got is None else got}, "
                                      f"expected {want}" + ("".join(f"\n    {t}" for t in tail)))

    print(f"{len(files)} page(s): {ran} command(s) run{' (--no-run)' if a.no_run else ''}, "
          f"{skipped} block(s) skipped as marked")
    # A check per page read (its links, anchors, paths, options) and per command run; a full run
    # runs at least MIN_COMMANDS of the pages' commands (docs/testing.md#no-test-passes-on-nothing).
    ledger.record(len(files) + ran, "pages checked and commands run")
    if not a.no_run and not a.files and ran < MIN_COMMANDS:  # the whole README and docs/
        finding("docs", f"{ran} commands run, fewer than the {MIN_COMMANDS} the pages hold")
    for f in findings:
        print(f"FAIL {f}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
