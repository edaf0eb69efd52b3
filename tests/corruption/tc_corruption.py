#!/usr/bin/env python3
"""torch_checkpointing's files damaged (tests/fixtures/layouts/tc_sync_2r/ckpt, tc_safetensors_2r/ckpt
and tc_strided_4r/ckpt, written by torch-checkpointing 0.1.1): metadata.pkl, the per-rank
<item>_<rank>.pt files and the safetensors layout's per-rank local shards (model_<rank>.safetensors,
placed by metadata.pkl) cut at many lengths and byte-flipped, each damage on a fresh copy, then
`dcpctl verify --deep --json`.

Every run must end cleanly: no signal, no sanitizer report, no hang, bounded memory (harness).
A cut file must be detected: exit 3 naming the file (a cut torch.save zip has no central
directory; a cut pickle has no STOP). A flipped byte must give 3 naming the file, or 5 (a flip
that turns a pickled class name into one the restricted VM does not know is input dcpctl does not
read), or 0 where the byte is tensor data or a name no reader checks (torch keeps no checksums
either): the run only has to finish cleanly then. `inspect` of every damaged copy must exit 0, 3
or 5, never anything else.

usage: tc_corruption.py DCPCTL FIXTURES_DIR [--sanitized] [--stride N]
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import EXIT_INVALID, EXIT_OK, EXIT_UNSUPPORTED  # noqa: E402

SOURCES = [("tc_sync_2r", ["metadata.pkl", "model_1.pt", "optimizer_0.pt", "step_0.pt"]),
           ("tc_custom_2r", ["config_1.json"]),
           ("tc_safetensors_2r", ["metadata.pkl", "model_1.safetensors"]),
           ("tc_strided_4r", ["metadata.pkl", "model_2.safetensors"])]


def offsets(size, n):
    """About n offsets spread over [0, size), always with 0, 1 and size - 1."""
    step = max(1, size // n)
    return sorted(set(list(range(0, size, step)) + [0, 1, size - 1]))


def names_file(r, fname):
    text = r.stdout + r.stderr
    return fname in text


def main():
    argv = list(sys.argv)
    per_file = 40
    if "--stride" in argv:
        i = argv.index("--stride")
        per_file = int(argv[i + 1])
        del argv[i:i + 2]
    args, sanitized = harness.parse_args(argv)
    dcpctl, fixtures = os.path.abspath(args[0]), os.path.abspath(args[1])
    chk = harness.Checker(sanitized)
    counts = {"cut": 0, "flip": 0, "flip-unnoticed": 0, "flip-unsupported": 0}
    for case, files in SOURCES:
        sweep(chk, dcpctl, os.path.join(fixtures, "layouts", case, "ckpt"), files, per_file, counts)
    print(f"{counts['cut']} cuts (all detected), {counts['flip']} flips ({counts['flip-unnoticed']} in bytes no reader checks, "
          f"{counts['flip-unsupported']} refused as unsupported)")
    return harness.finish(chk, "corruption-torch-checkpointing")


def sweep(chk, dcpctl, src, files, per_file, counts):
    fixtures_before = harness.tree_digest(os.path.dirname(src))
    with tempfile.TemporaryDirectory(prefix="dcpctl-tc-corrupt-") as base:
        work = os.path.join(base, "ckpt")
        r = chk.run([dcpctl, "verify", "--deep", src])
        chk.expect(r.rc == EXIT_OK, f"the intact fixture verifies: {r.describe()}")
        for fname in files:
            blob = open(os.path.join(src, fname), "rb").read()
            for kind in ("cut", "flip"):
                places = offsets(len(blob), per_file)
                if fname.endswith(".pt"):
                    # A record name in the zip's central directory made invalid UTF-8: the message
                    # quoting it must still make a valid --json document.
                    places = sorted(set(places + [blob.rfind(b"archive/") + 1]))
                for off in places:
                    shutil.rmtree(work, ignore_errors=True)
                    shutil.copytree(src, work)
                    damaged = blob[:off] if kind == "cut" else blob[:off] + bytes([blob[off] ^ 0xFF]) + blob[off + 1:]
                    with open(os.path.join(work, fname), "wb") as f:
                        f.write(damaged)
                    label = f"{os.path.basename(os.path.dirname(src))}/{fname} {kind} at {off} of {len(blob)}"
                    r = chk.run([dcpctl, "verify", "--deep", "--json", work])
                    if r.rc < 0:
                        continue  # the harness recorded it
                    if kind == "cut":
                        counts["cut"] += 1
                        chk.expect(r.rc == EXIT_INVALID and names_file(r, fname),
                                   f"{label}: verify must exit 3 naming {fname}: {r.describe()}\n  stdout: {r.stdout[:400]}")
                    else:
                        counts["flip"] += 1
                        if r.rc == EXIT_OK:
                            counts["flip-unnoticed"] += 1
                        elif r.rc == EXIT_UNSUPPORTED:
                            counts["flip-unsupported"] += 1
                        chk.expect(r.rc in (EXIT_OK, EXIT_UNSUPPORTED) or (r.rc == EXIT_INVALID and names_file(r, fname)),
                                   f"{label}: verify must exit 0, 5, or 3 naming {fname}: {r.describe()}\n  stdout: {r.stdout[:400]}")
                    if r.rc == EXIT_INVALID and r.stdout.strip():
                        try:
                            doc = json.loads(r.stdout)
                            chk.expect(doc.get("ok") is False or doc.get("problems"), f"{label}: verify --json says not ok")
                        except ValueError as e:
                            chk.fail(f"{label}: verify --json is not JSON ({e}): {r.stdout[:200]!r}")
                    ri = chk.run([dcpctl, "inspect", work])
                    chk.expect(ri.rc in (EXIT_OK, EXIT_INVALID, EXIT_UNSUPPORTED), f"{label}: inspect: {ri.describe()}")
    chk.expect(harness.tree_digest(os.path.dirname(src)) == fixtures_before, "the fixture changed")


if __name__ == "__main__":
    sys.exit(main())
