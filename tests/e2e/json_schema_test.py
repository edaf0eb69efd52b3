#!/usr/bin/env python3
"""Every `--json` document dcpctl prints, validated against its published JSON Schema.

The schemas are docs/schemas/*.schema.json (JSON Schema draft 2020-12; docs/schemas/README.md).
This test runs the real binary with --json over the committed fixtures, which real torch wrote
(DCP from torch 2.14 and 2.6, rank-local metadata, safetensors items, HF-mode DCP, Hugging Face
safetensors and .bin directories, zstd items, torchtitan and Ray Train run folders), over outputs
dcpctl writes from them (.safetensors, .pt, HF directories, resharded and cast checkpoints) and
over damaged copies (a data file removed, one bit flipped in tensor data), for every command and
mode: inspect (report, --value, the error document), verify (plain, --deep, --checksum),
consolidate / reshard / cast (real runs, --dry-run, a two-rank torchrun consolidate), diff, stats
(--depth, the --check-finite/--check-zero gates), ls, latest, prune (--dry-run, a real prune, a
removal that fails) and bench staging (--host-only). Each run must exit with its documented
code and print one JSON document that its schema accepts.

It can fail, and it proves so on the real outputs:
  drift      in every document (arrays cut to 2 elements), each object gets an extra key, loses
             each of its keys in turn, and has each scalar replaced by an object: the schema must
             reject every change but those of the few places declared open below (maps keyed by
             dtype or key, the pickled values, the optional keys).
  coverage   every command whose --help offers --json (found by walking `dcpctl --help`) has a
             schema, every schema validated at least one real output, every definition of
             common.schema.json is used, and docs/schemas/README.md lists every schema.
  tooling    the schemas are valid draft 2020-12; the validation README.md documents
             (`python -m jsonschema --base-uri ...`) resolves common.schema.json and accepts a
             real output and rejects a drifted one.

usage: json_schema_test.py DCPCTL FIXTURES_DIR SCHEMAS_DIR [--sanitized]
Needs the `jsonschema` package (tools/requirements.txt; run through tests/with_venv.sh).
"""
import concurrent.futures
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from skip import skip_or_fail  # noqa: E402
from testlib import TALLY, crash_of, fail, run, summary  # noqa: E402

try:
    import jsonschema
    import referencing
    import referencing.jsonschema
except ImportError as e:  # tools/dev.sh setup installs it (tools/requirements.txt)
    skip_or_fail(f"the Python package jsonschema is not installed ({e}); tools/dev.sh setup installs "
                 "tools/requirements.txt into .venv")

# dcpctl's documented exit codes (README, cmd/exit_codes.h).
OK, FAILURE, USAGE, INVALID, IO, UNSUPPORTED = 0, 1, 2, 3, 4, 5

# Which schemas describe what each command with --json prints (a command path as `dcpctl --help`
# names it). A command that offers --json and is not here fails the coverage check.
COMMAND_SCHEMAS = {
    "inspect": ["inspect", "inspect-value", "inspect-error"],
    "verify": ["verify"],
    "ls": ["ls"],
    "latest": ["latest"],
    "prune": ["prune"],
    "compat": ["compat"],
    "consolidate": ["consolidate"],
    "reshard": ["reshard"],
    "cast": ["cast"],
    "diff": ["diff"],
    "stats": ["stats"],
    "report": ["report"],
    "bench staging": ["bench-staging"],
    "maps": ["maps"],
}
DEFINITIONS = "common"  # common.schema.json: definitions only, no document of its own

# Where a document is open by design, as paths: "/a/b" a key, "[]" any array element, "{}" any
# key of a map. MAPS: objects keyed by data (dtype names, tensor keys): adding or removing an
# entry is no drift. FREE: values of any shape (the pickled value). OPTIONAL: keys a document may
# lack; every other key is required where it appears
# (the drift check removes each key in turn, and it must also be rejected when not listed here).
MAPS = {
    "inspect": {"/summary/dtypes", "/quantization/codecs"},  # codecs: keyed by codec name
    "maps": {"/maps/[]/params", "/maps/[]/model"},  # model: keyed by the map's side names
    # a mapped write's dropped keys, each with its rule's reason
    "consolidate": {"/map/drop_reasons", "/map/params"},  # params: keyed by the map's parameter names
    "reshard": {"/map/drop_reasons", "/map/params"},
    "cast": {"/map/drop_reasons", "/map/params"},
    "verify": {"/checksums"},
    "ls": {"/checkpoints/[]/dtypes"},
}
FREE = {
    "inspect-value": {"/value"},
    "inspect": {"/framework/config"},  # megatron's metadata.json, as written
}
OPTIONAL = {
    "inspect": {"/items/[]/path", "/items/[]/chunk_list", "/items/[]/transforms",
                "/items/[]/chunk_list/[]/transforms"},
    # (and /unsupported, present only for input this version does not read: no fixture is such)
    "verify": {"/layout", "/checksums", "/hf"},
    # lightning_meta: only for a Lightning checkpoint (meta.pt)
    # map: only with --map, and a piece's tensor with it
    # dequantized: only with --dtype on block-scaled float8 weights
    # lora: only with --lora adapter or merge; its scale with merge
    # quantized: only with --quantize; its format for the codecs written row by row (linear_encode.h)
    # manifest: not in a dry run nor for an object-storage output
    "consolidate": {"/manifest", "/manifest_bytes", "/lightning_meta", "/map", "/plan/[]/pieces/[]/tensor", "/plan/[]/from", "/dequantized",
                    "/lora", "/lora/scale", "/quantized", "/quantized/format"},
    "reshard": {"/manifest", "/manifest_bytes", "/map", "/dequantized", "/plan/[]/pieces/[]/tensor", "/plan/[]/from"},
    "maps": {"/maps/[]/params/{}/config", "/maps/[]/params/{}/default", "/maps/[]/params/{}/shape"},
    "cast": {"/manifest", "/manifest_bytes", "/map", "/dequantized", "/plan/[]/pieces/[]/tensor", "/plan/[]/from"},
    "stats": {"/tensors/[]/view_as_real", "/groups", "/checks/finite", "/checks/zero"},
    # audit: only with --map; a key's b_key only for a tied head
    "diff": {"/audit", "/keys/[]/b_key"},
}

DCPCTL = FIXTURES = SCHEMAS = None
TIMEOUT = 120


def ok(msg=None):
    """One passing check (testlib's count)."""
    TALLY.passed += 1
    if msg:
        print("PASS", msg, flush=True)


def expect(cond, msg):
    if cond:
        ok()
    else:
        fail(msg)
    return cond


# --- schemas ------------------------------------------------------------------------------------


class Schemas:
    def __init__(self, folder):
        self.folder = folder
        self.docs = {}
        for name in sorted(os.listdir(folder)):
            if name.endswith(".schema.json"):
                with open(os.path.join(folder, name)) as f:
                    self.docs[name[:-len(".schema.json")]] = json.load(f)
        resources = []
        for name, doc in self.docs.items():
            jsonschema.Draft202012Validator.check_schema(doc)  # raises on an invalid schema
            expect(doc.get("$schema") == "https://json-schema.org/draft/2020-12/schema",
                   f"{name}.schema.json: $schema is not draft 2020-12")
            expect(doc.get("$id") == f"{name}.schema.json", f"{name}.schema.json: $id is {doc.get('$id')!r}")
            expect(bool(doc.get("title")) and bool(doc.get("description")), f"{name}.schema.json: no title or description")
            resources.append((doc["$id"], referencing.jsonschema.DRAFT202012.create_resource(doc)))
        # A relative $id: common.schema.json#/$defs/... resolves beside the schema that refers to it.
        self.registry = referencing.Registry().with_resources(resources)
        self.validators = {n: jsonschema.Draft202012Validator(d, registry=self.registry) for n, d in self.docs.items()}

    def errors(self, name, doc):
        return sorted(self.validators[name].iter_errors(doc), key=lambda e: list(e.absolute_path))

    def valid(self, name, doc):
        return self.validators[name].is_valid(doc)


def lint_strict(name, node, where="#"):
    """Every object schema that lists properties closes them (additionalProperties: false), so
    a field added to the output fails validation; a few references are wrapped (cast)."""
    if isinstance(node, dict):
        if "properties" in node and node.get("type") == "object":
            expect(node.get("additionalProperties") is False,
                   f"{name}.schema.json {where}: an object with properties lacks additionalProperties: false")
        for k, v in node.items():
            if k not in ("const", "enum", "default", "examples"):
                lint_strict(name, v, f"{where}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            lint_strict(name, v, f"{where}/{i}")


def refs_of(node, out):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                out.add(v)
            else:
                refs_of(v, out)
    elif isinstance(node, list):
        for v in node:
            refs_of(v, out)
    return out


def check_schema_files(schemas):
    for name, doc in schemas.docs.items():
        lint_strict(name, doc)
    used = set()
    for doc in schemas.docs.values():
        refs_of(doc, used)
    common = schemas.docs[DEFINITIONS]["$defs"]
    common_refs = {r.rsplit("/", 1)[-1] for r in used if r.startswith(("common.schema.json#/$defs/", "#/$defs/"))}
    for d in common:
        expect(d in common_refs, f"common.schema.json: $defs/{d} is used by no schema")
    expect(common["schema_version"].get("const") == 1, "common.schema.json: schema_version is not const 1")


# --- running dcpctl -----------------------------------------------------------------------------


class Case:
    def __init__(self, schema, label, args, rc=OK, env=None):
        self.schema, self.label, self.args, self.rc, self.env = schema, label, args, rc, env
        self.doc = None


def run_dcpctl(args, env=None, timeout=None):
    """dcpctl ARGS with env added; a crash or a timeout is a failure by itself (testlib.run)."""
    return run(DCPCTL, *args, timeout=timeout or TIMEOUT, env=dict(os.environ, **(env or {})))


def execute(case):
    """Runs a case: its exit code, one JSON document on stdout, no crash."""
    p = run_dcpctl(case.args, case.env)
    what = f"{case.label}: dcpctl {' '.join(case.args)}"
    if crash_of(p):
        return f"{what}: {crash_of(p)}"
    if p.returncode != case.rc:
        return f"{what}: exit {p.returncode}, want {case.rc}: {p.stderr.strip()[:600]}"
    try:
        case.doc = json.loads(p.stdout)
    except ValueError as e:
        return f"{what}: stdout is not one JSON document ({e}): {p.stdout[:300]!r}"
    return None


def run_all(cases, workers=3):
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for case, err in zip(cases, pool.map(execute, cases)):
            if err:
                fail(err)


# --- the outputs --------------------------------------------------------------------------------


def fx(*parts):
    return os.path.join(FIXTURES, *parts)


def checkpoints():
    """Every DCP-family checkpoint under tests/fixtures: <case>/ckpt and layouts/<case>/ckpt."""
    out = []
    for base in (FIXTURES, fx("layouts")):
        for case in sorted(os.listdir(base)):
            d = os.path.join(base, case, "ckpt")
            if os.path.isdir(d):
                out.append(d)
    return out


def run_folders():
    folders = [fx("layouts", "run_torchtitan", "run"), fx("layouts", "run_torchtitan_hf", "run"),
               fx("layouts", "run_ray", "run")]
    v1 = fx("layouts", "run_ray_v1", "run")
    folders += [os.path.join(v1, n) for n in sorted(os.listdir(v1)) if n.startswith("TorchTrainer_")]
    return folders


def flip_tensor_record(ckpt, data_file):
    """Flips one bit in the largest tensor record of a data file (tests/corruption/crc_test.py);
    returns the key of the tensor whose chunk holds it."""
    crc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corruption", "crc_test.py")
    at = int(subprocess.run([sys.executable, crc, "--flip-tensor", os.path.join(ckpt, data_file)], check=True,
                            capture_output=True, text=True).stdout)
    for it in json.loads(run_dcpctl(["inspect", ckpt, "--json", "--chunks"]).stdout)["items"]:
        for c in it.get("chunk_list", []):
            if c["file"] == data_file and c["offset"] <= at < c["offset"] + c["length"]:
                return it["key"]
    raise RuntimeError(f"no chunk of {ckpt}/{data_file} holds offset {at}")


def prepare(work):
    """Damaged copies, run folders and the inputs that dcpctl's own outputs make. Returns the
    cases that write those outputs (run first, in order) and the paths made."""
    sample = fx("sample", "ckpt")
    p = {}
    p["incomplete"] = os.path.join(work, "incomplete")
    shutil.copytree(sample, p["incomplete"])
    os.remove(os.path.join(p["incomplete"], "__1_0.distcp"))
    p["flipped"] = os.path.join(work, "flipped")
    shutil.copytree(sample, p["flipped"])
    p["flipped_key"] = flip_tensor_record(p["flipped"], "__0_0.distcp")
    p["megatron_flipped"] = os.path.join(work, "megatron-flipped")
    shutil.copytree(fx("layouts", "megatron_gpt_tp2", "ckpt"), p["megatron_flipped"])
    with open(os.path.join(p["megatron_flipped"], "__1_0.distcp"), "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))
    p["not_ckpt"] = os.path.join(work, "not-a-checkpoint")
    os.makedirs(p["not_ckpt"])
    with open(os.path.join(p["not_ckpt"], "notes.txt"), "w") as f:
        f.write("no .metadata here\n")

    # A run folder: three saves of the sample, the last one incomplete (a save in flight), one
    # older incomplete one, a symbolic link, and the leftover of an interrupted prune.
    run = os.path.join(work, "run")
    os.makedirs(run)
    for n in ("step-100", "step-200", "step-300", "step-400"):
        shutil.copytree(sample, os.path.join(run, n))
    os.remove(os.path.join(run, "step-200", "__1_0.distcp"))
    os.remove(os.path.join(run, "step-400", "__1_0.distcp"))
    os.symlink("step-300", os.path.join(run, "step-350"))
    shutil.copytree(sample, os.path.join(run, ".dcpctl-prune-step-50"))
    p["run"] = run
    p["run_none_complete"] = os.path.join(work, "run-none-complete")
    os.makedirs(p["run_none_complete"])
    shutil.copytree(p["incomplete"], os.path.join(p["run_none_complete"], "step-1"))
    for n in ("prune", "prune-dry", "prune-incomplete", "prune-fails"):
        shutil.copytree(run, os.path.join(work, n), symlinks=True)

    out = os.path.join(work, "out")
    os.makedirs(out)
    p["st"] = os.path.join(out, "sample.safetensors")
    p["pt"] = os.path.join(out, "sample.pt")
    p["hf"] = os.path.join(out, "hf")
    p["bf16"] = os.path.join(out, "sample-bf16")
    p["w3"] = os.path.join(out, "zstd-w3")
    p["titan"] = os.path.join(out, "titan-mapped")
    writes = [
        Case("reshard", "reshard an HF folder --map torchtitan-llama3",
             ["reshard", fx("layouts", "hf_transformers", "start"), "-o", p["titan"], "-w", "2", "--map", "torchtitan-llama3", "--json", "-q"]),
        Case("consolidate", "consolidate .safetensors", ["consolidate", sample, "-o", p["st"], "--json"]),
        Case("consolidate", "consolidate .pt", ["consolidate", sample, "-o", p["pt"], "--json"]),
        Case("consolidate", "consolidate DIR/ in shards, --dtype fp16",
             ["consolidate", sample, "-o", p["hf"] + "/", "--max-shard-size", "60KB", "--dtype", "fp16", "--json", "-q"]),
        Case("cast", "cast bf16", ["cast", sample, "-o", p["bf16"], "--dtype", "bf16", "--json", "-q"]),
        Case("reshard", "reshard zstd -w 3", ["reshard", fx("zstd", "ckpt"), "-o", p["w3"], "-w", "3", "--json"]),
    ]
    return writes, p


def cases_for(p, work):
    sample = fx("sample", "ckpt")
    out = os.path.join(work, "out")
    cs = []
    add = lambda *a, **k: cs.append(Case(*a, **k))  # noqa: E731

    # inspect: every fixture checkpoint, the damaged copy, dcpctl's outputs, run folder members
    for ck in checkpoints():
        add("inspect", f"inspect --chunks {ck}", ["inspect", ck, "--json", "--chunks"])
        add("verify", f"verify {ck}", ["verify", ck, "--json"])
    add("inspect", "inspect (no --chunks)", ["inspect", sample, "--json"])
    add("inspect", "inspect --filter", ["inspect", sample, "--json", "--filter", "app.model.layers.0.*", "--filter", "app.epoch"])
    add("inspect", "inspect incomplete copy", ["inspect", p["incomplete"], "--json", "--chunks"])
    add("inspect", "inspect a .safetensors file", ["inspect", p["st"], "--json", "--chunks"])
    add("inspect", "inspect an FP8 block-scaled folder (quantization)", ["inspect", fx("layouts", "hf_fp8_deepseek", "ckpt"), "--json"])
    add("inspect", "inspect a PEFT LoRA fine-tune (lora)", ["inspect", fx("layouts", "peft_lora", "ckpt"), "--json"])
    add("inspect", "inspect an HF directory dcpctl wrote", ["inspect", p["hf"], "--json"])
    add("inspect", "inspect a resharded checkpoint", ["inspect", p["w3"], "--json", "--chunks"])
    add("inspect", "inspect a cast checkpoint", ["inspect", p["bf16"], "--json"])
    for rf in run_folders():
        for e in json.loads(run_dcpctl(["ls", rf, "--json"]).stdout)["checkpoints"]:
            add("inspect", f"inspect run member {e['path']}", ["inspect", e["path"], "--json"])

    # inspect --value: non-tensor values of every kind, tensors of every element kind
    odd = fx("odd_keys_values", "ckpt")
    for key in ("nested_list", "tuple_mixed", "nan"):
        add("inspect-value", f"inspect --value {key}", ["inspect", odd, "--value", key, "--json"])
    add("inspect-value", "inspect --value a tensor with a non-ASCII key", ["inspect", odd, "--value", "模型.权重", "--json"])
    alld = fx("all_dtypes", "ckpt")
    for key in ("dtype.bool", "dtype.complex64", "special.float16", "scalar.int64", "empty.float32_0x3"):
        add("inspect-value", f"inspect --value {key}", ["inspect", alld, "--value", key, "--json"])
    add("inspect-value", "inspect --value (zstd item)", ["inspect", fx("zstd", "ckpt"), "--value", "step", "--json"])
    add("inspect-value", "inspect --value (safetensors layout)",
        ["inspect", fx("layouts", "hf_sharded", "ckpt"), "--value", "model.embed_tokens.weight", "--json"])

    # inspect's error document, with the exit code it names
    errors = [
        # valid inputs inspect does not read (stats and diff do): unsupported, not damaged or an I/O error
        ("an HF .bin directory", [fx("hf_bin", "single")], UNSUPPORTED),
        ("a .pt file", [fx("fsdp2_app_state", "model_full.pt")], UNSUPPORTED),
        ("a missing path", [os.path.join(work, "missing")], IO),
        ("a directory without .metadata", [p["not_ckpt"]], INVALID),
        ("a Ray Train folder no save finished in", [os.path.join(run_folders()[-1], "checkpoint_000003")], INVALID),
        ("a run folder", [fx("layouts", "run_torchtitan", "run")], USAGE),
        ("--filter matching nothing", [sample, "--filter", "nothing.*"], USAGE),
        ("--value of no such key", [sample, "--value", "no.such.key"], USAGE),
        ("--value of a tensor over --max-values", [sample, "--value", "app.model.tok_emb.weight", "--max-values", "10"], USAGE),
        ("--value of a flipped tensor record", [p["flipped"], "--value", p["flipped_key"]], INVALID),
    ]
    for what, args, rc in errors:
        add("inspect-error", f"inspect --json of {what}", ["inspect", *args, "--json"], rc)

    # verify: --deep and --checksum on every kind of item, damaged copies (exit 3)
    for ck in (fx("odd_keys_values", "ckpt"), fx("layouts", "hf_sharded", "ckpt"),
               fx("layouts", "rank_local", "ckpt"), fx("layouts", "safetensors_items", "ckpt")):
        add("verify", f"verify --deep {ck}", ["verify", ck, "--deep", "--json"])
    for ck in (fx("zstd", "ckpt"), fx("exotic_dtypes", "ckpt"), fx("layouts", "hf_consolidated", "ckpt")):
        add("verify", f"verify --deep --checksum {ck}", ["verify", ck, "--deep", "--checksum", "--json"])
    add("verify", "verify --checksum alone (implies --deep)", ["verify", fx("multi_file", "ckpt"), "--checksum", "--json"])
    add("verify", "verify a copy missing a data file", ["verify", p["incomplete"], "--json"], INVALID)
    add("verify", "verify --deep --checksum a copy missing a data file",
        ["verify", p["incomplete"], "--deep", "--checksum", "--json"], INVALID)
    add("verify", "verify --deep a flipped bit", ["verify", p["flipped"], "--deep", "--json"], INVALID)
    add("verify", "verify a directory without .metadata", ["verify", p["not_ckpt"], "--json"], INVALID)
    add("verify", "verify dcpctl's resharded output --deep", ["verify", p["w3"], "--deep", "--json"])
    add("verify", "verify dcpctl's HF output --deep --checksum", ["verify", p["hf"], "--deep", "--checksum", "--json"])
    add("verify", "verify megatron's integrity.json, a listed file changed", ["verify", p["megatron_flipped"], "--json"], INVALID)

    # consolidate / reshard / cast: more formats and options, and --dry-run
    co = lambda name: os.path.join(out, name)  # noqa: E731
    for case in ("lightning_trainer", "lightning_fabric"):
        add("consolidate", f"consolidate {case} .pt (meta.pt merged)",
            ["consolidate", fx("layouts", case, "ckpt"), "-o", co(f"{case}.pt"), "--json", "-q"])
    add("consolidate", "consolidate a Lightning checkpoint to .safetensors (meta.pt not merged)",
        ["consolidate", fx("layouts", "lightning_fabric", "ckpt"), "-o", co("fabric.safetensors"), "--json", "-q"])
    add("consolidate", "consolidate .pt --flat --select", ["consolidate", sample, "-o", co("model.pt"), "--flat",
                                                           "--select", "app.model", "--json"])
    add("consolidate", "consolidate --format torch .bin, --include", ["consolidate", fx("torchtitan_style", "ckpt"), "-o",
                                                                      co("tt.bin"), "--include", "model.*", "--json"])
    add("consolidate", "consolidate exotic dtypes to .pt --dtype bf16 (not_cast)",
        ["consolidate", fx("exotic_dtypes", "ckpt"), "-o", co("exotic.pt"), "--dtype", "bf16", "--json", "-q"])
    add("consolidate", "consolidate zstd --io buffered", ["consolidate", fx("zstd", "ckpt"), "-o", co("zstd.safetensors"),
                                                         "--io", "buffered", "--json", "-q"])
    for fmt, name, extra in (("safetensors", "dry.safetensors", []), ("torch", "dry.pt", []),
                             ("hf", "dry-hf/", ["--max-shard-size", "60KB"])):
        add("consolidate", f"consolidate --dry-run ({fmt})", ["consolidate", sample, "-o", co(name), *extra, "--dry-run", "--json"])
    add("consolidate", "consolidate --lora adapter (a PEFT adapter folder)",
        ["consolidate", fx("layouts", "peft_lora", "ckpt"), "--lora", "adapter", "-o", co("lora-adapter/"), "--json", "-q"])
    add("consolidate", "consolidate --lora merge (the merged model)",
        ["consolidate", fx("layouts", "peft_lora", "ckpt"), "--lora", "merge", "-o", co("lora-merged.safetensors"), "--json", "-q"])
    add("consolidate", "consolidate --lora merge --dry-run",
        ["consolidate", fx("layouts", "peft_lora_variants", "ckpt"), "--lora", "merge", "--lora-name", "default", "--lora-alpha", "16",
         "-o", co("lora-dry/"), "--dry-run", "--json"])
    add("consolidate", "consolidate --quantize fp8-block (a transformers folder)",
        ["consolidate", fx("layouts", "hf_transformers", "ckpt"), "-o", co("fp8-quantized/"), "--quantize", "fp8-block",
         "--quantize-block", "16x16", "--json", "-q"])
    add("consolidate", "consolidate --quantize w4a16 --quantize-group 16 (a transformers folder)",
        ["consolidate", fx("layouts", "hf_transformers", "ckpt"), "-o", co("w4a16-quantized/"), "--quantize", "w4a16",
         "--quantize-group", "16", "--json", "-q"])
    add("consolidate", "consolidate an FP8 block-scaled folder to DIR/ --dtype bf16 (dequantized)",
        ["consolidate", fx("layouts", "hf_fp8_transformers", "ckpt"), "-o", co("fp8-hf/"), "--dtype", "bf16", "--json", "-q"])
    add("reshard", "reshard an FP8 block-scaled folder --dtype fp32 (dequantized)",
        ["reshard", fx("layouts", "hf_fp8_deepseek", "ckpt"), "-o", co("fp8-rs"), "-w", "2", "--dtype", "fp32", "--json", "-q"])
    add("cast", "cast an FP8 block-scaled folder --dtype fp32 (dequantized)",
        ["cast", fx("layouts", "hf_fp8_transformers", "ckpt"), "-o", co("fp8-cast"), "--dtype", "fp32", "--json", "-q"])
    tds = fx("layouts", "titan_deepseek_v3")
    add("consolidate", "consolidate DeepSeek-V3 to DIR/ --dtype bf16 (the router bias kept: cast.kept, cast.policy)",
        ["consolidate", os.path.join(tds, "hf"), "-o", co("ds-bf16/"), "--dtype", "bf16", "--json", "-q"])
    add("consolidate", "consolidate DeepSeek-V3 --dtype bf16 --cast-all (cast.cast_anyway)",
        ["consolidate", os.path.join(tds, "hf"), "-o", co("ds-all.safetensors"), "--dtype", "bf16", "--cast-all", "--json", "-q"])
    add("cast", "cast a torchtitan DeepSeek-V3 run --dtype bf16 --keep-dtype (expert_bias_E kept by the key map)",
        ["cast", os.path.join(tds, "run", "step-2"), "-o", co("ds-titan-bf16"), "--dtype", "bf16", "--keep-dtype", "norm.*", "--json", "-q"])
    hft = fx("layouts", "hf_transformers")
    add("consolidate", "consolidate transformers' distributed checkpoint to DIR/ (assets, tied embeddings)",
        ["consolidate", fx("layouts", "hf_transformers_tied", "ckpt"), "-o", co("hf-assets/"), "--json", "-q"])
    add("consolidate", "consolidate DCP to DIR/ --assets --dry-run",
        ["consolidate", os.path.join(hft, "dcp"), "-o", co("hf-assets-dry/"), "--assets", os.path.join(hft, "start"),
         "--dry-run", "--json"])
    add("reshard", "reshard -w 1 --select", ["reshard", sample, "-o", co("w1"), "-w", "1", "--select", "app.model", "--json", "-q"])
    add("reshard", "reshard --layout keep --dtype fp16", ["reshard", fx("dtensor_2d_mesh", "ckpt"), "-o", co("keep16"),
                                                          "--layout", "keep", "--dtype", "fp16", "--json", "-q"])
    add("reshard", "reshard rank-local -w 2", ["reshard", fx("layouts", "rank_local_3", "ckpt"), "-o", co("rl2"), "-w", "2", "--json"])
    add("reshard", "reshard --dry-run", ["reshard", sample, "-o", co("dry-w4"), "-w", "4", "--dry-run", "--json"])
    add("cast", "cast exotic dtypes (not_cast)", ["cast", fx("exotic_dtypes", "ckpt"), "-o", co("exotic-fp16"), "--dtype", "fp16", "--json"])
    add("cast", "cast --dry-run --exclude", ["cast", sample, "-o", co("dry-cast"), "--dtype", "fp8_e4m3", "--exclude", "app.optim.*",
                                             "--dry-run", "--json"])

    # diff: same (exit 0) and different (exit 1), across layouts, tolerances, values
    tt = fx("layouts", "run_torchtitan", "run")
    diffs = [
        ("a checkpoint with itself", [sample, sample], OK),
        ("DCP against its own .pt", [sample, p["pt"]], OK),
        ("two HF layouts", [fx("layouts", "hf_sharded", "ckpt"), fx("layouts", "hf_single", "ckpt")], FAILURE),
        ("a cast copy (dtype_changed)", [sample, p["bf16"]], FAILURE),
        ("a cast copy --ignore-dtype --rtol", [sample, p["bf16"], "--ignore-dtype", "--rtol", "1e-4"], FAILURE),
        ("two torchtitan steps (values and tensors)", [os.path.join(tt, "step-2"), os.path.join(tt, "step-6")], FAILURE),
        ("NaNs --equal-nan", [fx("all_dtypes", "ckpt"), fx("all_dtypes", "ckpt"), "--equal-nan", "--atol", "0"], OK),
        ("HF .bin directories (torch-save)", [fx("hf_bin", "sharded"), fx("hf_bin", "single"), "--ignore-dtype"], FAILURE),
        ("torchtitan HF step against DCP step", [os.path.join(fx("layouts", "run_torchtitan_hf", "run"), "step-2"),
                                                 os.path.join(fx("layouts", "run_torchtitan_hf", "run"), "step-4")], FAILURE),
        ("an export audit (--map, a tied head)", [fx("layouts", "titan_qwen3", "run", "step-2"), fx("layouts", "titan_qwen3", "hf"),
                                                  "--map", "torchtitan-qwen3", "--config", fx("layouts", "titan_qwen3", "config.json")], OK),
        ("an fp8 block export audit", [fx("layouts", "titan_deepseek_v3", "run", "step-2"), fx("layouts", "hf_fp8_deepseek", "ckpt"),
                                       "--map", "torchtitan-deepseek-v3", "--config", fx("layouts", "titan_deepseek_v3", "config.json")], OK),
        ("an export audit, not clean", [fx("layouts", "titan_deepseek_v3_mtp", "run", "step-2"), fx("layouts", "titan_deepseek_v3_mtp", "hf"),
                                        "--map", "torchtitan-deepseek-v3", "--config", fx("layouts", "titan_deepseek_v3_mtp", "config.json")],
         FAILURE),
    ]
    for what, args, rc in diffs:
        add("diff", f"diff {what}", ["diff", *args, "--json"], rc)

    # stats: every layout and input kind, --depth, the gates
    for inp in (fx("odd_keys_values", "ckpt"), fx("layouts", "hf_sharded", "ckpt"), fx("layouts", "rank_local", "ckpt"),
                fx("hf_bin", "single"), fx("fsdp2_app_state", "model_full.pt"),
                p["st"]):
        add("stats", f"stats {inp}", ["stats", inp, "--json"])
    add("stats", "stats --depth 3 --select", ["stats", sample, "--depth", "3", "--select", "app.model", "--json"])
    add("stats", "stats --depth 1 with complex and skipped", ["stats", fx("exotic_dtypes", "ckpt"), "--depth", "1", "--json"])
    add("stats", "stats --check-finite --check-zero passing", ["stats", sample, "--check-finite", "--check-zero", "--json"])
    add("stats", "stats --check-finite failing", ["stats", fx("all_dtypes", "ckpt"), "--check-finite", "--json"], INVALID)
    add("stats", "stats --check-zero failing", ["stats", fx("zstd", "ckpt"), "--check-zero", "--json"], INVALID)

    # ls / latest / prune
    for rf in run_folders() + [p["run"]]:
        add("ls", f"ls {rf}", ["ls", rf, "--json"])
        add("latest", f"latest {rf}", ["latest", rf, "--json"])
    add("ls", "ls a run folder with nothing complete", ["ls", p["run_none_complete"], "--json"])
    for rf in run_folders():
        add("prune", f"prune --dry-run {rf}", ["prune", rf, "--keep", "1", "--dry-run", "--json"])
    add("prune", "prune --dry-run --incomplete", ["prune", os.path.join(work, "prune-dry"), "--keep", "1", "--incomplete",
                                                  "--dry-run", "--json"])
    add("prune", "prune --keep 1", ["prune", os.path.join(work, "prune"), "--keep", "1", "--json"])
    add("prune", "prune --keep 1 --incomplete", ["prune", os.path.join(work, "prune-incomplete"), "--keep", "1",
                                                 "--incomplete", "--json"])
    add("prune", "prune --keep 5 (removes nothing)", ["prune", fx("layouts", "run_torchtitan", "run"), "--keep", "5", "--json"])

    # report: a run with a NaN and a scaled layer (a failed gate prints the document, exit 3), a
    # run folder with incomplete steps (skipped_steps), one with uint8 tensors (skipped), named steps
    rr = fx("layouts", "run_report", "run")
    add("report", "report --fail-on nan failing", ["report", rr, "--fail-on", "nan", "--json"], INVALID)
    add("report", "report of a run folder with incomplete steps", ["report", p["run"], "--json"])
    add("report", "report --depth 2 (uint8 tensors skipped)", ["report", fx("layouts", "run_megatron_fsdp", "run"), "--depth", "2", "--json"])
    add("report", "report of named checkpoints", ["report", os.path.join(rr, "step-1"), os.path.join(rr, "step-2"), "--json"])

    # compat: a torch 2.15 checkpoint made loadable by older torch (data files linked, then copied)
    t215 = fx("layouts", "torch_2_15_dtensor", "ckpt")
    add("compat", "compat of a torch 2.15 checkpoint", ["compat", t215, "-o", os.path.join(work, "compat-auto"), "--json"])
    add("compat", "compat --link copy", ["compat", t215, "-o", os.path.join(work, "compat-copy"), "--link", "copy", "--json"])
    add("inspect", "inspect a torch 2.15 checkpoint", ["inspect", t215, "--json"])

    # --map (view/maps/keymap.h): the HF folder transformers wrote, to torchtitan names and back
    hfs = fx("layouts", "hf_transformers", "start")
    titan = p["titan"]
    add("consolidate", "consolidate --map torchtitan-llama3 --config", ["consolidate", titan, "-o", co("mapped/"), "--map",
                                                                          "torchtitan-llama3", "--config", os.path.join(hfs, "config.json"),
                                                                          "--json", "-q"])
    add("consolidate", "consolidate --map --dry-run", ["consolidate", titan, "-o", co("mapped-dry.safetensors"), "--map",
                                                       "torchtitan-llama3", "--config", os.path.join(hfs, "config.json"), "--dry-run", "--json"])
    add("cast", "cast --map", ["cast", hfs, "-o", co("titan-cast"), "--dtype", "bf16", "--map", "torchtitan-llama3",
                               "--json", "-q"])
    # a dropped key with its rule's reason (torchtitan's expert_bias_E) and keys left out by --exclude
    add("consolidate", "consolidate --map torchtitan-gpt-oss (drops, --exclude)",
        ["consolidate", fx("layouts", "titan_gpt_oss", "run", "step-2"), "-o", co("gpt-oss.safetensors"), "--map", "torchtitan-gpt-oss",
         "--exclude", "lr_scheduler.*", "--dry-run", "--json"])
    add("reshard", "reshard --map torchtitan-gpt-oss (drops)",
        ["reshard", fx("layouts", "titan_gpt_oss", "run", "step-2"), "-o", co("gpt-oss-hf-dcp"), "-w", "1", "--map", "torchtitan-gpt-oss",
         "--dry-run", "--json"])
    add("cast", "cast --map torchtitan-gpt-oss (drops)",
        ["cast", fx("layouts", "titan_gpt_oss", "run", "step-2"), "-o", co("gpt-oss-cast"), "--dtype", "bf16", "--map", "torchtitan-gpt-oss",
         "--dry-run", "--json"])
    # a map family's variant (map.variant): GLM-4.5 on Megatron through megatron-gpt's glm4_moe variant
    add("consolidate", "consolidate --map megatron-gpt (a family's variant)",
        ["consolidate", fx("layouts", "megatron_glm4_moe", "ckpt"), "-o", co("glm-hf/"), "--map", "megatron-gpt",
         "--assets", fx("layouts", "megatron_glm4_moe", "hf"), "--dry-run", "--json"])
    add("maps", "maps --json", ["maps", "--json"])
    # bench staging, host side (no GPU needed)
    bench_dir = os.path.join(work, "bench")
    os.makedirs(bench_dir)
    add("bench-staging", "bench staging --host-only sweep", ["bench", "staging", "--host-only", "--sizes", "1MiB,2MiB", "--iters", "2",
                                                             "--warmup", "0", "--json"])
    add("bench-staging", "bench staging --host-only --modes --streams --chunk --write-to --fsync",
        ["bench", "staging", "--host-only", "--sizes", "1MiB", "--modes", "pageable,cold", "--streams", "2", "--chunk", "256KiB",
         "--iters", "1", "--warmup", "0", "--write-to", bench_dir, "--fsync", "--json"])
    add("bench-staging", "bench staging --host-only --from-checkpoint", ["bench", "staging", "--host-only", "--from-checkpoint",
                                                                        sample, "--rank", "1", "--iters", "1", "--json"])
    return cs


def prune_failure_case(work):
    """A removal that fails: prune prints what it removed before it, then exits 4. A file in the
    checkpoint to remove is made immutable (chattr +i) as root, who ignores permissions; for
    anyone else its folder is made read-only (as tests/e2e/runs_test.py does)."""
    run = os.path.join(work, "prune-fails")
    pinned_dir = os.path.join(run, "step-100", "extra")
    pinned = os.path.join(pinned_dir, "pinned.bin")
    os.makedirs(pinned_dir)
    with open(pinned, "wb") as f:
        f.write(b"x" * 1000)
    if os.geteuid() == 0:
        chattr = shutil.which("chattr")
        r = subprocess.run([chattr, "+i", pinned], capture_output=True, text=True) if chattr else None
        if not r or r.returncode != 0:
            print(f"N/A  prune with a failing removal: chattr +i is not available here "
                  f"({r.stderr.strip() if r else 'no chattr'}); prune's document is validated on the other runs", flush=True)
            return None, None
        undo = lambda: subprocess.run([chattr, "-R", "-i", run], capture_output=True)  # noqa: E731
    else:
        os.chmod(pinned_dir, 0o555)
        undo = lambda: [os.chmod(d, 0o755) for d, _, _ in os.walk(run)]  # noqa: E731
    return Case("prune", "prune with a removal that fails (exit 4, what was removed before)",
                ["prune", run, "--keep", "1", "--json"], IO), undo


def torchrun_consolidate(work):
    """consolidate under a launcher, two ranks started by hand: rank 0 prints the document (with
    ranks and backend), rank 1 prints nothing on stdout."""
    for attempt in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        out = os.path.join(work, "out", f"torchrun{attempt}.safetensors")
        args = ["consolidate", fx("sample", "ckpt"), "-o", out, "--json", "--timeout", "300"]
        procs = []
        for r in range(2):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(subprocess.Popen([DCPCTL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
        res = [p.communicate(timeout=TIMEOUT) + (p.returncode,) for p in procs]
        if all(rc == 0 for _, _, rc in res):
            break
        if attempt == 0 and any("ddress already in use" in err for _, err, _ in res):
            continue  # the port was taken between choosing and binding it: once more on another
        break
    case = Case("consolidate", "consolidate under torchrun (2 ranks, rank 0's document)", args)
    detail = "; ".join(f"rank {r}: exit {rc}, stderr {err.strip()[-400:]!r}" for r, (_, err, rc) in enumerate(res))
    if not expect(all(rc == 0 for _, _, rc in res), f"{case.label}: {detail}"):
        return None
    expect(res[1][0] == "", f"{case.label}: rank 1 printed on stdout: {res[1][0][:200]!r}")
    try:
        case.doc = json.loads(res[0][0])
    except ValueError as e:
        fail(f"{case.label}: rank 0's stdout is not JSON ({e}): {res[0][0][:300]!r}")
        return None
    expect(case.doc.get("ranks") == 2 and case.doc.get("backend") == "gloo",
           f"{case.label}: ranks/backend are {case.doc.get('ranks')!r}/{case.doc.get('backend')!r}")
    return case


# --- coverage -----------------------------------------------------------------------------------


def subcommands(help_text):
    out, inside = [], False
    for line in help_text.splitlines():
        if line.startswith("Subcommands:"):
            inside = True
        elif inside and re.match(r"^  [a-z][a-z0-9-]*\s", line):
            out.append(line.split()[0])
        elif inside and line and not line.startswith(" "):
            inside = False
    return out


def json_commands(path=()):
    """Command paths ("bench staging") whose --help offers --json, walking `dcpctl --help`."""
    p = run_dcpctl([*path, "--help"])
    expect(p.returncode == 0, f"dcpctl {' '.join(path)} --help: exit {p.returncode}")
    found = {" ".join(path)} if path and re.search(r"^\s+--json\b", p.stdout, re.M) else set()
    if not path and re.search(r"^\s+--json\b", p.stdout, re.M):
        found.add("")  # a top-level --json (none today) would need a schema too
    for sub in subcommands(p.stdout):
        found |= json_commands((*path, sub))
    return found


def check_coverage(schemas, validated):
    offered = json_commands()
    expect("inspect" in offered and "bench staging" in offered,
           f"the walk of dcpctl --help found too little: {sorted(offered)}")
    for cmd in sorted(offered):
        expect(cmd in COMMAND_SCHEMAS, f"`dcpctl {cmd}` offers --json but has no schema in COMMAND_SCHEMAS / docs/schemas")
    for cmd in sorted(set(COMMAND_SCHEMAS) - offered):
        fail(f"COMMAND_SCHEMAS names `dcpctl {cmd}`, whose --help offers no --json")
    mapped = {s for names in COMMAND_SCHEMAS.values() for s in names}
    for name in sorted(schemas.docs):
        if name == DEFINITIONS:
            continue
        expect(name in mapped, f"{name}.schema.json belongs to no command in COMMAND_SCHEMAS")
        expect(validated.get(name, 0) > 0, f"{name}.schema.json: no real output was validated against it")
    for name in sorted(mapped - set(schemas.docs)):
        fail(f"COMMAND_SCHEMAS names {name}.schema.json, which docs/schemas lacks")
    with open(os.path.join(SCHEMAS, "README.md")) as f:
        readme = f.read()
    for name in sorted(schemas.docs):
        expect(f"{name}.schema.json" in readme, f"docs/schemas/README.md does not list {name}.schema.json")


# --- drift --------------------------------------------------------------------------------------


def trimmed(doc, keep=2):
    if isinstance(doc, list):
        return [trimmed(v, keep) for v in doc[:keep]]
    if isinstance(doc, dict):
        return {k: trimmed(v, keep) for k, v in doc.items()}
    return doc


def shapes(doc, path="", maps=(), out=None):
    """The normalised paths of a document ("[]" for elements, "{}" for a map's keys)."""
    out = set() if out is None else out
    out.add(path)
    if isinstance(doc, dict):
        for k, v in doc.items():
            shapes(v, f"{path}/{'{}' if path in maps else k}", maps, out)
    elif isinstance(doc, list):
        for v in doc:
            shapes(v, f"{path}/[]", maps, out)
    return out


def drift(schemas, name, doc, seen):
    """Mutates `doc` at every place and expects the schema to reject each change but those
    declared open (MAPS, FREE, OPTIONAL). Returns the number of mutations tried."""
    maps, free, optional = MAPS.get(name, set()), FREE.get(name, set()), OPTIONAL.get(name, set())
    tried = 0

    def is_free(path):
        return any(path == f or path.startswith(f + "/") for f in free)

    def rejected(mutant, what):
        nonlocal tried
        tried += 1
        return not schemas.valid(name, mutant)

    def walk(node, path, setter):
        if is_free(path):
            return
        if isinstance(node, dict):
            shape = (path, frozenset(node))  # each kind of object once (a tensor item, a bytes item)
            if path not in maps and shape not in seen:
                mutant = dict(node)
                mutant["__drift__"] = 0
                if not rejected(setter(mutant), "extra key"):
                    fail(f"{name}: an extra key in the object at {path or '/'} is accepted")
                for k in node:
                    mutant = {kk: vv for kk, vv in node.items() if kk != k}
                    declared = f"{path}/{k}" in optional
                    if rejected(setter(mutant), "missing key") == declared:
                        fail(f"{name}: removing {path}/{k} is " + ("rejected, but OPTIONAL declares it optional" if declared
                                                                   else "accepted: the schema does not require it"))
            seen.add(shape)
            for k, v in node.items():
                child = f"{path}/{'{}' if path in maps else k}"

                def set_child(x, k=k):
                    c = dict(node)
                    c[k] = x
                    return setter(c)
                walk(v, child, set_child)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                def set_elem(x, i=i):
                    c = list(node)
                    c[i] = x
                    return setter(c)
                walk(v, f"{path}/[]", set_elem)
        elif (path, type(node)) not in seen:
            seen.add((path, type(node)))
            if not rejected(setter({"__drift__": 0}), "wrong type"):
                fail(f"{name}: an object in place of the {type(node).__name__} at {path} is accepted")

    walk(doc, "", lambda x: x)
    return tried


def check_drift(schemas, by_schema):
    """Drift at every path of every schema's outputs, each path once (the first output with it)."""
    total = 0
    for name, docs in sorted(by_schema.items()):
        seen = set()
        for doc in docs:
            t = trimmed(doc)
            if not schemas.valid(name, t):
                fail(f"{name}: a real output cut to 2 elements per array no longer validates")
                continue
            total += drift(schemas, name, t, seen)
        # The top-level contract, stated once more in plain words: schema_version pinned to 1.
        t = trimmed(docs[0])
        for bad in ("1", 2, None):
            expect(not schemas.valid(name, dict(t, schema_version=bad)), f"{name}: schema_version {bad!r} is accepted")
        for path in OPTIONAL.get(name, set()) | MAPS.get(name, set()) | FREE.get(name, set()):
            expect(any(path in shapes(d, maps=MAPS.get(name, set())) for d in docs),
                   f"{name}: the open path {path} declared here appears in no real output (stale declaration?)")
    ok(f"drift: {total} altered documents, each rejected unless declared open")


def check_cli_tool(schemas, work, name, doc):
    """The validation docs/schemas/README.md documents, run as written: python -m jsonschema with
    --base-uri resolves common.schema.json beside the schema: it accepts a real output and rejects
    it with schema_version 2 (pinned in common.schema.json)."""
    good, bad = os.path.join(work, "good.json"), os.path.join(work, "bad.json")
    with open(good, "w") as f:
        json.dump(doc, f)
    with open(bad, "w") as f:
        json.dump(dict(doc, schema_version=2), f)
    base = "file://" + os.path.abspath(SCHEMAS) + "/"
    schema = os.path.join(SCHEMAS, f"{name}.schema.json")
    for path, want_ok in ((good, True), (bad, False)):
        p = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-m", "jsonschema", "--base-uri", base,
                            "-i", path, schema], capture_output=True, text=True, timeout=120)
        if (p.returncode == 0) == want_ok:
            ok(f"python -m jsonschema --base-uri ... {'accepts a real' if want_ok else 'rejects a drifted'} {name} document")
            continue
        fail(f"python -m jsonschema --base-uri {base} -i {os.path.basename(path)} {schema}: exit {p.returncode} "
             f"(want {'0' if want_ok else 'non-zero'}): {(p.stdout + p.stderr).strip()[:600]}")


# --- main ---------------------------------------------------------------------------------------


def main():
    global DCPCTL, FIXTURES, SCHEMAS, TIMEOUT
    args = [a for a in sys.argv[1:] if a != "--sanitized"]
    if len(args) != 3:
        sys.exit(__doc__)
    DCPCTL, FIXTURES, SCHEMAS = args
    if "--sanitized" in sys.argv[1:]:
        TIMEOUT = 600

    schemas = Schemas(SCHEMAS)
    check_schema_files(schemas)

    work = tempfile.mkdtemp(prefix="dcpctl-json-schema-")
    undo = None
    try:
        writes, paths = prepare(work)
        for c in writes:  # in order: the later cases read what these write
            err = execute(c)
            if err:
                fail(err)
        if TALLY.failures:
            return finish()
        cases = writes + cases_for(paths, work)
        failing_prune, undo = prune_failure_case(work)
        run_all(cases[len(writes):] + ([failing_prune] if failing_prune else []))
        if failing_prune:
            cases.append(failing_prune)
        latest_none = run_dcpctl(["latest", paths["run_none_complete"], "--json"])
        expect(latest_none.returncode == INVALID and latest_none.stdout == "",
               f"latest --json with nothing complete: exit {latest_none.returncode} (want 3) and stdout "
               f"{latest_none.stdout[:200]!r} (want none)")
        tr = torchrun_consolidate(work)
        if tr:
            cases.append(tr)

        validated, by_schema = {}, {}
        for c in cases:
            if c.doc is None:
                continue
            errs = schemas.errors(c.schema, c.doc)
            if errs:
                for e in errs[:5]:
                    fail(f"{c.label}: {c.schema}.schema.json rejects the output at /{'/'.join(map(str, e.absolute_path))}: "
                         f"{e.message[:300]}")
                continue
            validated[c.schema] = validated.get(c.schema, 0) + 1
            by_schema.setdefault(c.schema, []).append(c.doc)
        if failing_prune and failing_prune.doc is not None:
            expect(failing_prune.doc["removed"] and failing_prune.doc["removed"][0]["name"] == ".dcpctl-prune-step-50",
                   f"prune with a failing removal: its document lists no earlier removal: {failing_prune.doc['removed']}")
        for name in sorted(validated):
            ok(f"{name}.schema.json: {validated[name]} real outputs valid")
        print(f"{sum(validated.values())} real outputs of {len(validated)} schemas validated", flush=True)

        check_coverage(schemas, validated)
        check_drift(schemas, by_schema)
        if "inspect" in by_schema:
            check_cli_tool(schemas, work, "inspect", by_schema["inspect"][0])
    finally:
        if undo:
            undo()
        shutil.rmtree(work, ignore_errors=True)
    return finish()


def finish():
    return summary("json_schema_test")


if __name__ == "__main__":
    sys.exit(main())
