"""The commands as functions: dcpctl.inspect / verify / stats return what the CLI's --json prints
(the same library functions, cmd/*.cpp's options as keyword arguments)."""
import pytest

import dcpctl

TIMED = ("seconds",)


def untimed(doc):
    if isinstance(doc, dict):
        return {k: untimed(v) for k, v in doc.items() if k not in TIMED}
    if isinstance(doc, list):
        return [untimed(v) for v in doc]
    return doc


@pytest.mark.parametrize("case", ["sample/ckpt", "layouts/hf_sharded/ckpt", "zstd/ckpt", "layouts/verl_fsdp2/ckpt"])
def test_inspect_equals_cli(fixtures, cli_json, case):
    path = fixtures / case
    code, want = cli_json("inspect", path)
    assert code == 0
    doc = dcpctl.inspect(path)
    assert doc == want
    glob = doc["items"][-1]["key"][:-1] + "*"
    code, want = cli_json("inspect", path, "--chunks", "--filter", glob)
    assert code == 0 and dcpctl.inspect(path, chunks=True, filter=glob) == want


@pytest.mark.parametrize("case", ["sample/ckpt", "layouts/hf_sharded/ckpt", "dtensor_2d_mesh/ckpt"])
def test_verify_equals_cli(fixtures, cli_json, case):
    path = fixtures / case
    for flags, kwargs in (((), {}), (("--deep",), {"deep": True}),
                          (("--deep", "--checksum", "--io", "buffered"), {"deep": True, "checksum": True, "io": "buffered"})):
        code, want = cli_json("verify", path, *flags)
        got = dcpctl.verify(path, **kwargs)
        assert code == 0 and got["ok"]
        assert untimed(got) == untimed(want), flags


@pytest.mark.parametrize("case", ["sample/ckpt", "all_dtypes/ckpt"])
def test_stats_equals_cli(fixtures, cli_json, case):
    path = fixtures / case
    code, want = cli_json("stats", path, "--check-finite", "--depth", "2")
    got = dcpctl.stats(path, check_finite=True, depth=2)
    assert untimed(got) == untimed(want)
    code, want = cli_json("stats", path, "--filter", "*weight*", "--threads", "1", "--max-memory", "1MiB")
    assert untimed(dcpctl.stats(path, filter="*weight*", threads=1, max_memory="1MiB")) == untimed(want)


@pytest.mark.parametrize("case,flags,cls", [
    ("sample/ckpt", ("--filter", "nothing*"), dcpctl.UsageError),
    ("hf_bin/single/pytorch_model.bin", (), dcpctl.Unsupported),  # inspect reads no .pt (stats does): exit 5
    ("layouts/run_torchtitan/run", (), dcpctl.UsageError),
])
def test_refusal_messages_match_the_cli(fixtures, cli, case, flags, cls):
    path = fixtures / case
    r = cli("inspect", path, *flags)
    with pytest.raises(cls) as e:
        dcpctl.inspect(path, filter=list(flags[1:]))
    assert r.returncode == e.value.exit_code
    assert f"dcpctl: error: {e.value}" in r.stderr


def test_diff_equals_cli(fixtures, cli, cli_json, tmp_path):
    """diff of a checkpoint against itself and against its .pt (the CLI's exit 0), and against another
    (exit 1): the same document as --json, `same` as the exit code."""
    sample = fixtures / "sample/ckpt"
    pt = tmp_path / "sample.pt"
    assert cli("consolidate", sample, "-o", pt).returncode == 0
    for b, flags, kwargs in ((sample, (), {}), (pt, ("--atol", "0", "--rtol", "0"), {"atol": 0, "rtol": 0}),
                             (fixtures / "fsdp2_app_state/ckpt", ("--include", "*weight*"), {"include": "*weight*"})):
        code, want = cli_json("diff", sample, b, *flags)
        got = dcpctl.diff(sample, b, **kwargs)
        assert untimed(got) == untimed(want), b
        assert got["same"] == (code == 0) and code in (0, 1)


def test_progress_callback(fixtures):
    seen = []
    r = dcpctl.stats(fixtures / "sample/ckpt", progress=lambda done, total: seen.append((done, total)))
    # From several threads, in any order: the largest count is the total, the bytes read.
    assert seen and max(d for d, _ in seen) == seen[0][1] == r["bytes_read"] > 0
    seen.clear()
    assert dcpctl.diff(fixtures / "sample/ckpt", fixtures / "sample/ckpt", progress=lambda d, t: seen.append(d))["same"]
    assert seen

    def boom(done, total):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        dcpctl.stats(fixtures / "sample/ckpt", progress=boom)
