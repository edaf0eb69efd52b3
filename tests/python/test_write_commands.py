"""The write commands as functions: dcpctl.consolidate / reshard / cast write what the CLI writes
(byte for byte), return what its --json prints, and refuse as it refuses (the class of its exit
code, its message with each option spelled as Python's keyword). Their options are the CLI's flags:
one args struct per command (src/args/), filled by both front ends."""
import json
import re

import pytest
import torch

import dcpctl
from dcp_oracle import flat_state_from_dcp

SAMPLE = "sample/ckpt"
TIMED = ("seconds", "gb_per_s", "peak_rss_bytes")  # measured, run to run


def untimed(doc, paths=()):
    """The document without its timings, each of `paths` (a work folder) written as WORK."""
    if isinstance(doc, dict):
        return {k: untimed(v, paths) for k, v in doc.items() if k not in TIMED}
    if isinstance(doc, list):
        return [untimed(v, paths) for v in doc]
    if isinstance(doc, str):
        for p in paths:
            doc = doc.replace(str(p), "WORK")
    return doc


def spelled(cli_message: str) -> str:
    """The CLI's message with each flag as Python's keyword (--max-memory: max_memory;
    src/args/spelling.h)."""
    return re.sub(r"(?<![A-Za-z0-9])--([a-z][a-z0-9-]*)", lambda m: m.group(1).replace("-", "_"), cli_message)


def cli_error(cli, *args):
    r = cli(*args)
    line = next((l for l in r.stderr.splitlines() if l.startswith("dcpctl: error: ")), "")
    return r.returncode, line[len("dcpctl: error: "):]


@pytest.mark.parametrize("name,cli_args,kwargs", [
    ("model.safetensors", ("--select", "app.model"), {"select": "app.model"}),
    ("bf16.safetensors", ("--select", "app.model", "--dtype", "bf16", "--max-memory", "1MiB"),
     {"select": "app.model", "dtype": "bf16", "max_memory": 1 << 20}),
    ("all.pt", ("--flat",), {"flat": True}),
])
def test_consolidate_equals_the_cli(fixtures, cli, tmp_path, name, cli_args, kwargs):
    """The same file as the CLI's, byte for byte, and the same summary as its --json."""
    src = fixtures / SAMPLE
    (tmp_path / "cli").mkdir()
    (tmp_path / "py").mkdir()
    r = cli("consolidate", src, "-o", tmp_path / "cli" / name, *cli_args, "--json", "-q")
    assert r.returncode == 0, r.stderr
    seen = []
    got = dcpctl.consolidate(src, tmp_path / "py" / name, progress=lambda done, total: seen.append((done, total)),
                             **kwargs)
    assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes()
    want = json.loads(r.stdout)
    assert untimed(got, [tmp_path / "py"]) == untimed(want, [tmp_path / "cli"])
    assert seen and max(d for d, _ in seen) == seen[0][1] > 0
    if name.endswith(".safetensors"):
        from safetensors.torch import load_file

        loaded = load_file(tmp_path / "py" / name)
        truth = {k.removeprefix("app.model."): v for k, v in flat_state_from_dcp(src).items()
                 if isinstance(v, torch.Tensor) and k.startswith("app.model.")}
        assert sorted(loaded) == sorted(truth) and got["tensors"] == len(truth)
        for k, t in truth.items():
            t = t.to(torch.bfloat16) if kwargs.get("dtype") == "bf16" else t
            assert torch.equal(loaded[k], t), k


def test_consolidate_dry_run_and_hf_folder(fixtures, cli, tmp_path):
    """dry_run=True returns the plan --dry-run --json prints and writes nothing; a Hugging Face
    folder (output ending in "/") with max_shard_size is the CLI's, file for file."""
    src = fixtures / SAMPLE
    plan = dcpctl.consolidate(src, tmp_path / "plan.safetensors", select="app.model", dry_run=True)
    assert plan["dry_run"] and plan["tensors"] > 0 and not (tmp_path / "plan.safetensors").exists()
    r = cli("consolidate", src, "-o", tmp_path / "plan.safetensors", "--select", "app.model", "-n", "--json")
    assert untimed(plan) == untimed(json.loads(r.stdout))
    r = cli("consolidate", src, "-o", f"{tmp_path}/cli/", "--select", "app.model", "--max-shard-size", "20KB", "-q")
    assert r.returncode == 0, r.stderr
    got = dcpctl.consolidate(src, f"{tmp_path}/py/", select="app.model", max_shard_size="20KB")
    files = sorted(p.name for p in (tmp_path / "cli").iterdir())
    assert len(got["files"]) > 1 and files == sorted(p.name for p in (tmp_path / "py").iterdir())
    for f in files:
        assert (tmp_path / "py" / f).read_bytes() == (tmp_path / "cli" / f).read_bytes(), f


@pytest.mark.parametrize("world_size", [1, 3])
def test_reshard_loads_in_torch(fixtures, tmp_path, world_size):
    """reshard(world_size=N) writes a checkpoint of N rank files that torch's dcp.load reads back as
    the source's tensors and values; cast(dtype=) one of the source's chunks, cast."""
    src = fixtures / SAMPLE
    out = tmp_path / f"w{world_size}"
    r = dcpctl.reshard(src, out, world_size=world_size)
    assert r["world_size"] == world_size and len(list(out.glob("*.distcp"))) == world_size
    want, got = flat_state_from_dcp(src), flat_state_from_dcp(out)
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        if isinstance(v, torch.Tensor):
            assert got[k].dtype == v.dtype and torch.equal(got[k], v), k
        else:
            assert got[k] == v, k
    if world_size == 3:
        cast = dcpctl.cast(src, tmp_path / "bf16", dtype="bf16", include="app.model.*")
        assert cast["cast"]["dtype"] == "bfloat16"
        for k, v in flat_state_from_dcp(tmp_path / "bf16").items():
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                assert v.dtype == torch.bfloat16 and torch.equal(v, want[k].to(torch.bfloat16)), k


# The refusals of the options' checks (src/args/) name each option as Python spells it; those of the
# library beyond them are the CLI's message as it is ("verbatim").
@pytest.mark.parametrize("command,cli_args,kwargs,cls", [
    # exit 5: a scheme that needs calibrated activation scales
    ("consolidate", ("-o", "{out}/", "--quantize", "fp8-static"), {"quantize": "fp8-static"}, dcpctl.Unsupported),
    # exit 5: a GGUF without the model's config.json (the library's message)
    ("consolidate", ("-o", "{out}.gguf"), {"_verbatim": True}, dcpctl.Unsupported),
    # exit 2: the args' checks
    ("reshard", ("-o", "{out}"), {}, dcpctl.UsageError),
    ("reshard", ("-o", "{out}", "-w", "2", "--layout", "keep"), {"world_size": 2, "layout": "keep"}, dcpctl.UsageError),
    ("consolidate", ("-o", "{out}.safetensors", "--max-memory", "lots"), {"max_memory": "lots"}, dcpctl.UsageError),
    ("consolidate", ("-o", "{out}.safetensors", "--keep-dtype", "*"), {"keep_dtype": "*"}, dcpctl.UsageError),
    ("consolidate", ("-o", "{out}.safetensors", "--outtype", "q8_0"), {"outtype": "q8_0"}, dcpctl.UsageError),
    ("consolidate", ("-o", "{out}.safetensors", "--format", "megatron", "--flat"), {"format": "megatron", "flat": True},
     dcpctl.UsageError),
    ("stats", ("--config", "c.json"), {"config": "c.json"}, dcpctl.UsageError),
    ("diff", ("{src}", "--max-memory", "0"), {"max_memory": "0"}, dcpctl.UsageError),
    # exit 4: no such checkpoint
    ("reshard", ("-o", "{out}", "-w", "2"), {"world_size": 2, "_missing": True, "_verbatim": True},
     dcpctl.CheckpointIOError),
])
def test_refusals_raise_the_cli_class_and_message(fixtures, cli, tmp_path, command, cli_args, kwargs, cls):
    kwargs = dict(kwargs)
    src = tmp_path / "missing" if kwargs.pop("_missing", False) else fixtures / SAMPLE
    verbatim = kwargs.pop("_verbatim", False)
    out = tmp_path / "out"
    argv = [str(a).replace("{out}", str(out)).replace("{src}", str(src)) for a in cli_args]
    code, message = cli_error(cli, command, src, *argv)
    fn = getattr(dcpctl, command)
    positional = [src] + ([argv[argv.index("-o") + 1]] if "-o" in argv else []) + ([src] if command == "diff" else [])
    with pytest.raises(dcpctl.Error) as e:
        fn(*positional, **kwargs)
    assert type(e.value) is cls and e.value.exit_code == code, (type(e.value), code, message)
    assert message and str(e.value) == (message if verbatim else spelled(message))
    assert not out.exists() and not list(tmp_path.glob("out.*")), "a refusal left an output"


def test_unknown_keyword_and_wrong_type(fixtures, tmp_path):
    with pytest.raises(TypeError, match="unexpected keyword argument 'world-size'"):
        dcpctl.reshard(fixtures / SAMPLE, tmp_path / "o", **{"world-size": 2})
    with pytest.raises(TypeError, match="unexpected keyword argument 'checkpoint'"):
        dcpctl.consolidate(fixtures / SAMPLE, tmp_path / "o.pt", checkpoint="x")
    with pytest.raises(TypeError, match="world_size"):
        dcpctl.reshard(fixtures / SAMPLE, tmp_path / "o", world_size="two")


def cli_flags(cli, command):
    """The long flags `dcpctl COMMAND --help` lists (an option's line: "  -o,--output PATH ..."), as
    Python spells them."""
    r = cli(command, "--help")
    assert r.returncode == 0
    flags = {m.group(1).replace("-", "_") for m in re.finditer(r"^ +(?:-\w,)?--([a-z][a-z0-9-]*)", r.stdout, re.M)}
    assert len(flags) > 8, r.stdout
    return flags


# The command line's flags that are not keyword arguments: -o (the functions' second argument), what
# it prints (the functions print nothing and return the --json document), torchrun's, and diff's
# listing of identical keys.
CLI_ONLY = {"output", "help", "json", "quiet", "all", "parallel_write", "local_files", "timeout", "single_process", "backend"}


@pytest.mark.parametrize("command,args_class", [("stats", "_StatsArgs"), ("diff", "_DiffArgs"),
                                                ("consolidate", "_ConsolidateArgs"), ("reshard", "_ReshardArgs")])
def test_every_cli_flag_is_a_keyword(cli, command, args_class):
    """Each of the command's flags is a keyword argument of its function (an attribute of the args
    object both front ends fill, or a format's own option), and each keyword is one of its flags."""
    flags = cli_flags(cli, command)
    from dcpctl import _dcpctl

    a = getattr(_dcpctl, args_class)()
    keywords = {n for n in dir(a) if not n.startswith("_")} - {"checkpoint", "output", "a", "b", "is_cast"}
    missing = {f for f in flags - keywords - CLI_ONLY
               if not (command == "consolidate" and _dcpctl._set_format_option(_dcpctl._ConsolidateArgs(), f, "x"))}
    assert not missing, f"{command}: flags without a keyword argument: {sorted(missing)}"
    assert not keywords - flags, f"{command}: keywords the CLI lacks: {sorted(keywords - flags)}"


@pytest.mark.parametrize("command,args_class", [("stats", "_StatsArgs"), ("diff", "_DiffArgs"),
                                                ("consolidate", "_ConsolidateArgs"), ("reshard", "_ReshardArgs")])
def test_the_stubs_name_every_keyword(command, args_class):
    """The typed stubs (dcpctl/__init__.pyi) declare the keywords the args objects hold, no more."""
    import ast
    from pathlib import Path

    from dcpctl import _dcpctl

    stub = ast.parse((Path(dcpctl.__file__).parent / "__init__.pyi").read_text())
    fn = next(n for n in stub.body if isinstance(n, ast.FunctionDef) and n.name == command)
    declared = {a.arg for a in fn.args.kwonlyargs} - {"progress"}
    a = getattr(_dcpctl, args_class)()
    held = {n for n in dir(a) if not n.startswith("_")} - {"checkpoint", "output", "a", "b", "is_cast"}
    assert declared == held, (sorted(declared - held), sorted(held - declared))
