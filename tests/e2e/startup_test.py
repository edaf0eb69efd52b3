#!/usr/bin/env python3
"""Instant start: only a process group loads LibTorch (standard library only).

dcpctl links no LibTorch; it loads its plugin libdcpctl_torch.so (src/torchlib/) when a command
joins a process group (torchrun). It reads and writes torch.save archives itself
(item/zip_directory.h, write/torch_zip_writer.h). This test proves it from outside:

  linking     the binary's DT_NEEDED list names no LibTorch or CUDA library, and no libcurl
              (objstore/curl_api.h opens it on the first s3:// or gs:// request).
  no-libcurl  a local verify --deep --checksum, consolidate and reshard never load libcurl: the
              dynamic loader's own log (LD_DEBUG=files) names libcrypto and not libcurl.
  no-plugin   with DCPCTL_TORCH_PLUGIN naming a plugin that does not exist, every command that
              reads (--help, --version, inspect, inspect --json/--flat/--chunks, verify, ls,
              latest; verify --deep and --checksum, stats, diff and inspect --value, which read
              items' torch.save zips; the same of a safetensors layout) exits 0 with exactly the
              output it gives with the plugin; so it never tried to load it. Every writer
              (consolidate to .safetensors and to .pt, reshard, cast) writes the same bytes
              without it (a DCP output's .metadata aside: its save_id is a fresh uuid).
  refusal     a command run under torchrun's environment (WORLD_SIZE=2) then exits 5 once,
              naming the plugin, every place looked, and DCPCTL_TORCH_PLUGIN; it writes nothing.
              A file that is not a loadable library is refused the same way (exit 5, "does not
              load").

usage: startup_test.py DCPCTL FIXTURES_DIR [--sanitized]
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corruption"))
import harness  # noqa: E402
from harness import EXIT_OK, EXIT_UNSUPPORTED  # noqa: E402



def untimed(stdout):
    """--json output without its timing fields (ls/latest's timing, stats' seconds differ from run to run)."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        return stdout
    if isinstance(doc, dict):
        doc.pop("timing", None)
        doc.pop("seconds", None)
        for e in doc.get("checkpoints", []) if isinstance(doc.get("checkpoints"), list) else []:
            if isinstance(e, dict):
                e.pop("timing", None)
    return json.dumps(doc, sort_keys=True)

def main():
    dcpctl, fixtures = sys.argv[1], sys.argv[2]
    chk = harness.Checker("--sanitized" in sys.argv[3:])
    sample = os.path.join(fixtures, "sample", "ckpt")
    layouts = os.path.join(fixtures, "layouts")
    hf = os.path.join(layouts, "hf_sharded", "ckpt")
    st_items = os.path.join(layouts, "safetensors_items", "ckpt")
    run = os.path.join(layouts, "run_torchtitan", "run")
    for p in (sample, hf, st_items, run):
        if not os.path.isdir(p):
            chk.fail(f"fixture {p} is missing")

    # linking
    dyn = subprocess.run(["readelf", "-d", dcpctl], capture_output=True, text=True, check=True).stdout
    needed = [l.split("[", 1)[1].rstrip("]") for l in dyn.splitlines() if "(NEEDED)" in l]
    chk.expect(needed, f"readelf -d {dcpctl} lists no NEEDED libraries at all: {dyn[:300]}")
    for lib in needed:
        chk.expect(not any(lib.startswith(p) for p in ("libtorch", "libc10", "libcuda", "libcudart", "libnccl", "libcurl")),
                   f"dcpctl links {lib}: every start would load it")

    # no-libcurl
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["LD_DEBUG"] = "files"
        try:
            for args in (["verify", "--deep", "--checksum", "--json", sample],
                         ["consolidate", sample, "-o", os.path.join(tmp, "out.safetensors"), "-q"],
                         ["reshard", sample, "--world-size", "2", "-o", os.path.join(tmp, "w2"), "-q"]):
                r = chk.run([dcpctl] + args)
                what = "dcpctl " + " ".join(args)
                chk.expect(r.rc == EXIT_OK, f"{what}: exit {r.rc}: {r.describe()}")
                if chk.expect("libcrypto" in r.stderr, f"{what}: LD_DEBUG=files logged no libcrypto: {r.stderr[:300]}"):
                    chk.expect("libcurl" not in r.stderr, f"{what}: loaded libcurl for local work")
        finally:
            os.environ.pop("LD_DEBUG", None)

    # no-plugin
    commands = [
        ["--help"], ["--version"],
        ["inspect", sample], ["inspect", "--json", sample], ["inspect", "--flat", sample], ["inspect", "--chunks", sample],
        ["verify", sample], ["verify", "--json", sample],
        ["verify", "--deep", sample], ["verify", "--deep", "--checksum", "--json", sample],
        ["stats", "--json", sample], ["diff", sample, sample], ["inspect", "--value", "app.model.tok_emb.weight", sample],
        ["inspect", hf], ["verify", hf], ["verify", "--deep", hf],
        ["inspect", st_items], ["verify", st_items],
        ["ls", run], ["ls", "--json", run], ["latest", run], ["report", "--json", run],
    ]
    first_key = None
    flat = chk.run([dcpctl, "inspect", "--flat", hf])
    for line in flat.stdout.splitlines():
        parts = line.split()
        if parts and "." in parts[0] and not parts[0].endswith(":"):
            first_key = parts[0]
            break
    if chk.expect(first_key, f"no key found in `inspect --flat {hf}`: {flat.stdout[:300]}"):
        commands.append(["inspect", "--value", first_key, hf])
    missing = os.path.join(tempfile.gettempdir(), "dcpctl-no-such-dir", "libdcpctl_torch.so")
    for args in commands:
        os.environ.pop("DCPCTL_TORCH_PLUGIN", None)
        with_plugin = chk.run([dcpctl] + args)
        os.environ["DCPCTL_TORCH_PLUGIN"] = missing
        without = chk.run([dcpctl] + args)
        what = "dcpctl " + " ".join(args)
        chk.expect(with_plugin.rc == EXIT_OK, f"{what}: exit {with_plugin.rc}: {with_plugin.describe()}")
        chk.expect(without.rc == EXIT_OK, f"{what} without the plugin: exit {without.rc}: {without.describe()}")
        chk.expect(untimed(without.stdout) == untimed(with_plugin.stdout),
                   f"{what}: output differs without the plugin:\n{without.stdout[:400]}\nvs\n{with_plugin.stdout[:400]}")

    def tree(path):
        """A file's bytes, or a directory's files' bytes by name (a DCP .metadata left out: its
        save_id is fresh each run; so is dcpctl's manifest's digest of it)."""
        if os.path.isfile(path):
            return open(path, "rb").read()
        if not os.path.isdir(path):
            return None
        out = {n: open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path)) if n != ".metadata"}
        if "dcpctl-manifest.json" in out:
            m = json.loads(out["dcpctl-manifest.json"])
            for part in ("files", "sizes"):
                m[part].pop(".metadata", None)
            out["dcpctl-manifest.json"] = m
        return out

    with tempfile.TemporaryDirectory() as tmp:
        writers = [("consolidate to .safetensors", ["consolidate", sample, "-o"], ".safetensors"),
                   ("consolidate to .pt", ["consolidate", sample, "-o"], ".pt"),
                   ("reshard", ["reshard", sample, "--world-size", "2", "-o"], ""),
                   ("cast", ["cast", sample, "--dtype", "bf16", "-o"], "")]
        for what, args, ext in writers:
            outs = []
            for plugin in (None, missing):
                os.environ.pop("DCPCTL_TORCH_PLUGIN", None)
                if plugin:
                    os.environ["DCPCTL_TORCH_PLUGIN"] = plugin
                out = os.path.join(tmp, f"{args[0]}{len(outs)}{ext}")
                r = chk.run([dcpctl] + args + [out, "-q"])
                chk.expect(r.rc == EXIT_OK, f"{what} (plugin {plugin}): exit {r.rc}: {r.describe()}")
                outs.append(tree(out))
            chk.expect(outs[0] and outs[0] == outs[1], f"{what}: other bytes without the plugin")

    # refusal
    with tempfile.TemporaryDirectory() as tmp:
        not_a_library = os.path.join(tmp, "libdcpctl_torch.so")
        with open(not_a_library, "w") as f:
            f.write("not an ELF file\n")
        launch = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29517"}
        for plugin, why in ((missing, "was not found"), (not_a_library, "does not load")):
            os.environ["DCPCTL_TORCH_PLUGIN"] = plugin
            os.environ.update(launch)
            try:
                for args in (["consolidate", sample, "-o", os.path.join(tmp, "out.safetensors")],
                             ["reshard", sample, "-o", os.path.join(tmp, "out-w2"), "--world-size", "2"]):
                    r = chk.run([dcpctl] + args, timeout=30)
                    what = f"torchrun's environment: dcpctl {' '.join(args)} (plugin {plugin})"
                    if chk.expect(r.rc == EXIT_UNSUPPORTED, f"{what}: exit {r.rc}, want 5: {r.describe()}"):
                        for s in ("libdcpctl_torch.so", why, plugin, "DCPCTL_TORCH_PLUGIN"):
                            chk.expect(s in r.stderr + r.stdout, f"{what}: does not say {s!r}: {r.stderr.strip()[:400]}")
                        chk.expect(r.stderr.count("needs LibTorch") + r.stdout.count("needs LibTorch") == 1,
                                   f"{what}: the plugin failure must be reported once: {r.stderr[:600]}")
                    left = sorted(n for n in os.listdir(tmp) if n != "libdcpctl_torch.so")
                    chk.expect(not left, f"{what}: left {left} behind")
            finally:
                for k in launch:
                    os.environ.pop(k, None)
    os.environ.pop("DCPCTL_TORCH_PLUGIN", None)

    return harness.finish(chk, "e2e-startup")


if __name__ == "__main__":
    sys.exit(main())
