#!/usr/bin/env python3
"""Refusals of the write commands that need no torch, through the real binary (standard library).

Every refusal must exit with its documented code exactly (a crash, a signal or another code
fails) and name what was wrong on stderr; a refused run leaves the input and any existing output
unchanged and no temporary behind.

  dry-run      `--dry-run` makes the same output checks as the real run: an existing output
               without --force (consolidate to .safetensors, .pt and DIR/, reshard, cast) and an
               output inside the checkpoint are refused with exit 2; with --force the plan prints.
  sizes        `--max-memory` / `--max-shard-size` values of less than one byte (`0.5`, `0.1B`)
               are usage errors (exit 2) naming the option, not 0 ("automatic").
  names        the output's name chooses its format (plan/format.h's suffixes): a name no format
               ends in is exit 2 listing the names that do; `--max-shard-size` with a file name is
               exit 2; `-o model.gguf` without a config.json is refused (exit 5: docs/gguf.md),
               with --dry-run too, before anything is written.
  inputs       a torch.save file (.pt) and a Hugging Face folder of pytorch_model*.bin, which only
               stats and diff read (meta/readers.h's compare_only rows): inspect, verify,
               consolidate and reshard refuse them with exit 5 naming the layout and the commands
               that read it (they were exit 4 "not a directory" and exit 3 "missing .metadata":
               valid inputs called damaged), and stats still reads them (exit 0).
  commit       replacing an existing directory output is one atomic swap: a run killed right
               after it (DCPCTL_FAILPOINT=output-dir-commit:0, SIGKILL) leaves the complete new
               output under the final name, never no output at all.

usage: cli_refusals_test.py DCPCTL FIXTURES_DIR [--sanitized]
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corruption"))
import harness  # noqa: E402
from harness import EXIT_OK, EXIT_UNSUPPORTED, EXIT_USAGE  # noqa: E402


def listing(d):
    return sorted(os.listdir(d))


def refuses(chk, args, code, names, what, stdout=False):
    """Runs dcpctl ARGS; it must exit `code` exactly and name every string of `names` on stderr (with
    `stdout`, on standard output: verify lists its problems there)."""
    r = chk.run(args)
    if chk.expect(r.rc == code, f"{what}: exit {r.rc}, want {code}: {r.describe()}"):
        said, stream = (r.stdout, "stdout") if stdout else (r.stderr, "stderr")
        for n in names:
            chk.expect(n in said, f"{what}: {stream} does not name {n!r}: {said.strip()[:300]}")
    return r


def case_dry_run(chk, dcpctl, fixtures, work):
    ck = os.path.join(work, "ckpt")
    shutil.copytree(os.path.join(fixtures, "sample", "ckpt"), ck)
    before = harness.tree_digest(ck)
    runs = [
        ("consolidate .safetensors", ["consolidate", ck, "-o"], "out.safetensors", []),
        ("consolidate .pt", ["consolidate", ck, "-o"], "out.pt", []),
        ("consolidate DIR/", ["consolidate", ck, "-o"], "hf/", ["--max-shard-size", "20KB"]),
        ("reshard", ["reshard", ck, "-o"], "w2", ["-w", "2"]),
        ("cast", ["cast", ck, "-o"], "bf16", ["--dtype", "bf16"]),
    ]
    for what, head, name, extra in runs:
        out = os.path.join(work, name)
        path = out.rstrip("/")
        if name.endswith("/") or "." not in name:
            os.mkdir(path)
            with open(os.path.join(path, "keep.txt"), "w") as f:
                f.write("user data")
        else:
            with open(path, "w") as f:
                f.write("user data")
        snap = harness.tree_digest(work)
        # (each run starts LibTorch, ~0.7 s: the fast tier keeps the variants few)
        for dry in (["--dry-run"], ["--dry-run", "--json"]) if what in ("consolidate DIR/", "cast") else (["--dry-run"],):
            label = f"{what} over an existing output {' '.join(dry)}".rstrip()
            refuses(chk, [dcpctl, *head, out, *extra, *dry], EXIT_USAGE, [path, "--force"], label)
            chk.expect(harness.tree_digest(work) == snap, f"{label}: the existing output or the work dir changed")
        r = chk.run([dcpctl, *head, out, *extra, "--dry-run", "--force"])
        chk.expect(r.rc == EXIT_OK and "nothing written" in r.stdout,
                   f"{what} --dry-run --force: exit {r.rc} (want 0 and a plan): {r.describe()}")
        chk.expect(harness.tree_digest(work) == snap, f"{what} --dry-run --force: something was written")
        if what in ("consolidate .pt", "reshard"):
            # --json prints the write plan: records whose bytes add up to the tensor bytes, each
            # made of pieces that add up to it (no cast here), with a streaming decision and a need.
            r = chk.run([dcpctl, *head, out, *extra, "--dry-run", "--force", "--json"])
            plan = json.loads(r.stdout).get("plan", []) if r.rc == EXIT_OK else []
            chk.expect(r.rc == EXIT_OK and plan, f"{what} --dry-run --json: exit {r.rc}, no plan: {r.describe()}")
            if plan:
                total = json.loads(r.stdout)["tensor_bytes"]
                chk.expect(sum(rec["bytes"] for rec in plan) == total,
                           f"{what} --dry-run --json: records hold {sum(rec['bytes'] for rec in plan)} bytes, not {total}")
                bad = [rec["key"] for rec in plan if sum(p["bytes"] for p in rec["pieces"]) != rec["bytes"]
                       or not isinstance(rec["streams"], bool) or not isinstance(rec["need"], int)]
                chk.expect(not bad, f"{what} --dry-run --json: records whose pieces do not make them: {bad[:5]}")
            chk.expect(harness.tree_digest(work) == snap, f"{what} --dry-run --json: something was written")
        shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
    # inside the checkpoint: the dry run refuses it as the real run does
    for what, head, extra in (("consolidate", ["consolidate", ck, "-o", os.path.join(ck, "m.safetensors")], []),
                              ("reshard", ["reshard", ck, "-o", os.path.join(ck, "sub")], ["-w", "2"])):
        refuses(chk, [dcpctl, *head, *extra, "--dry-run"], EXIT_USAGE, ["inside the checkpoint"],
                f"{what} --dry-run into the checkpoint")
    chk.expect(harness.tree_digest(ck) == before, "dry-run: the input checkpoint changed")
    chk.expect(listing(work) == ["ckpt"], f"dry-run: left behind {listing(work)}")


def case_sizes(chk, dcpctl, fixtures, work):
    ck = os.path.join(fixtures, "sample", "ckpt")
    for value, cmds in (("0.5", ("consolidate", "reshard", "cast")), ("0.1B", ("consolidate", "reshard")),
                        ("0.0001KB", ("cast",))):
        for what, args in (("consolidate", ["consolidate", ck, "-o", os.path.join(work, "m.safetensors")]),
                           ("reshard", ["reshard", ck, "-o", os.path.join(work, "w2"), "-w", "2"]),
                           ("cast", ["cast", ck, "-o", os.path.join(work, "c"), "--dtype", "bf16"])):
            if what in cmds:
                dry = ["--dry-run"] if what == "reshard" else []
                refuses(chk, [dcpctl, *args, "--max-memory", value, *dry], EXIT_USAGE, ["--max-memory", value],
                        f"{what} --max-memory {value} {' '.join(dry)}")
        refuses(chk, [dcpctl, "consolidate", ck, "-o", os.path.join(work, "hf/"), "--max-shard-size", value],
                EXIT_USAGE, ["--max-shard-size", value], f"consolidate --max-shard-size {value}")
    # sizes of at least one byte still work, fractions included
    r = chk.run([dcpctl, "consolidate", ck, "-o", os.path.join(work, "m.pt"), "--max-memory", "1.5GiB", "--dry-run"])
    chk.expect(r.rc == EXIT_OK, f"--max-memory 1.5GiB --dry-run: {r.describe()}")
    for value in ("1", "2.5KB"):
        r = chk.run([dcpctl, "consolidate", ck, "-o", os.path.join(work, "hf/"), "--max-shard-size", value, "--dry-run"])
        chk.expect(r.rc == EXIT_OK, f"--max-shard-size {value} --dry-run: {r.describe()}")
    chk.expect(listing(work) == [], f"sizes: left behind {listing(work)}")


def case_names(chk, dcpctl, fixtures, work):
    ck = os.path.join(fixtures, "sample", "ckpt")
    refuses(chk, [dcpctl, "consolidate", ck, "-o", os.path.join(work, "m.xyz")], EXIT_USAGE,
            ["cannot tell the output format", ".safetensors, DIR/, .pt/.pth/.bin or .gguf"], "consolidate -o m.xyz")
    refuses(chk, [dcpctl, "consolidate", ck, "-o", os.path.join(work, "m.pt"), "--max-shard-size", "1GB"], EXIT_USAGE,
            ["--max-shard-size writes a directory"], "consolidate -o m.pt --max-shard-size")
    for dry in ([], ["--dry-run"]):
        refuses(chk, [dcpctl, "consolidate", ck, "--select", "app.model", "-o", os.path.join(work, "m.gguf"), *dry],
                EXIT_UNSUPPORTED, ["m.gguf", "a GGUF output needs the model's config.json"], f"consolidate -o m.gguf {' '.join(dry)}")
    chk.expect(listing(work) == [], f"names: left behind {listing(work)}")


def case_inputs(chk, dcpctl, fixtures, work):
    for path in (os.path.join(fixtures, "layouts", "lightning_fabric", "ckpt", "meta.pt"),
                 os.path.join(fixtures, "hf_bin", "single"), os.path.join(fixtures, "hf_bin", "sharded")):
        for head, extra in ((["inspect"], []), (["verify"], []), (["consolidate"], ["-o", os.path.join(work, "o.safetensors")]),
                            (["reshard"], ["-o", os.path.join(work, "w2"), "-w", "2"])):
            refuses(chk, [dcpctl, *head, path, *extra], EXIT_UNSUPPORTED,
                    [path, "torch.save", "dcpctl stats and dcpctl diff do"], f"{head[0]} {os.path.relpath(path, fixtures)}",
                    stdout=head == ["verify"])
        r = chk.run([dcpctl, "stats", path, "--json"])
        chk.expect(r.rc == EXIT_OK, f"stats {os.path.relpath(path, fixtures)}: {r.describe()}")
    chk.expect(listing(work) == [], f"inputs: left behind {listing(work)}")


def case_commit(chk, dcpctl, fixtures, work):
    ck = os.path.join(fixtures, "sample", "ckpt")
    env = dict(os.environ, DCPCTL_FAILPOINT="output-dir-commit:0")
    for what, args, check in (
            ("reshard", ["reshard", ck, "-w", "2"], lambda o: listing(o) == [".metadata", "__0_0.distcp", "__1_0.distcp", "dcpctl-manifest.json"]),
            ("consolidate DIR/", ["consolidate", ck, "--max-shard-size", "20KB"],
             lambda o: "model.safetensors.index.json" in listing(o))):
        out = os.path.join(work, "out")
        os.mkdir(out)
        with open(os.path.join(out, "old.txt"), "w") as f:
            f.write("the previous output")
        # killed between making the new output visible and removing the old one
        p = subprocess.run([dcpctl, *args[:2], "-o", out + ("/" if what.startswith("consolidate") else ""), *args[2:],
                            "--force", "-q"], env=env, capture_output=True, text=True, timeout=120)
        chk.checks += 1
        if p.returncode != -signal.SIGKILL:
            chk.fail(f"{what}: the failpoint output-dir-commit did not fire (exit {p.returncode}): {p.stderr[:300]}")
        elif not os.path.isdir(out):
            chk.fail(f"{what}: killed while committing over an existing output: no output under the final name "
                     f"(left: {listing(work)})")
        else:
            chk.expect(check(out) and "old.txt" not in listing(out),
                       f"{what}: killed while committing: the final name holds {listing(out)}, not the new output")
            if what == "reshard":
                r = chk.run([dcpctl, "verify", "--deep", out])
                chk.expect(r.rc == EXIT_OK, f"{what}: the output left by the kill does not verify: {r.describe()}")
        # the kill (like a power cut) may leave the old output under its temporary name; nothing else
        for n in listing(work):
            if n != "out":
                chk.expect(".dcpctl-tmp-" in n, f"{what}: unexpected {n} left")
                q = os.path.join(work, n)
                shutil.rmtree(q) if os.path.isdir(q) else os.unlink(q)
        shutil.rmtree(out, ignore_errors=True)
        # without the failpoint the replacement completes and leaves nothing else
        os.mkdir(out)
        r = chk.run([dcpctl, *args[:2], "-o", out + ("/" if what.startswith("consolidate") else ""), *args[2:],
                     "--force", "-q"])
        chk.expect(r.rc == EXIT_OK and check(out) and listing(work) == ["out"],
                   f"{what} --force over an existing dir: exit {r.rc}, left {listing(work)}, output {listing(out)}")
        shutil.rmtree(out, ignore_errors=True)


def main():
    args, sanitized = harness.parse_args(sys.argv)
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dcpctl, fixtures = args
    chk = harness.Checker(sanitized)
    for name, fn in (("dry-run", case_dry_run), ("sizes", case_sizes), ("names", case_names), ("inputs", case_inputs), ("commit", case_commit)):
        with tempfile.TemporaryDirectory(prefix=f"dcpctl-cli-{name}-") as work:
            fn(chk, dcpctl, fixtures, work)
    return harness.finish(chk, "cli refusals")


if __name__ == "__main__":
    sys.exit(main())
