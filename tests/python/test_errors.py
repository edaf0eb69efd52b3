"""Refusals and damage: each raises the class of the exit code the command line gives for the same
input, with its message; a record damaged inside a tensor's bytes raises DamagedCheckpoint naming
the file and the offset, whether the tensor is read whole or in part."""
import shutil

import numpy as np
import pytest
import torch

import dcpctl
from dcp_oracle import flat_state_from_dcp


def cli_error(cli, *args):
    """(exit code, the message after "dcpctl: error: ") of the CLI on the same input."""
    r = cli(*args)
    line = next((l for l in r.stderr.splitlines() if l.startswith("dcpctl: error: ")), "")
    return r.returncode, line[len("dcpctl: error: "):]


@pytest.mark.parametrize("make,cls", [
    (lambda tmp, fx: tmp / "missing", dcpctl.CheckpointIOError),
    (lambda tmp, fx: fx / "layouts/run_torchtitan/run", dcpctl.UsageError),
    (lambda tmp, fx: incomplete(tmp, fx), dcpctl.DamagedCheckpoint),
])
def test_open_refusals_match_the_cli(tmp_path, fixtures, cli, make, cls):
    path = make(tmp_path, fixtures)
    code, message = cli_error(cli, "stats", path)  # stats opens inputs as open() does (compare/input.h)
    opened = False
    with pytest.raises(dcpctl.Error) as e:
        with dcpctl.open(path) as ck:
            opened = True  # a missing data file is found when a tensor in it is read, as stats finds it
            for key in ck.keys():
                ck.get(key)
    assert type(e.value) is cls and e.value.exit_code == code, (type(e.value), code, message)
    if not opened:
        assert str(e.value) == message and e.value.message == message


def incomplete(tmp, fixtures):
    dst = tmp / "incomplete"
    shutil.copytree(fixtures / "sample/ckpt", dst)
    (dst / "__1_0.distcp").unlink()
    return dst


def test_io_error_is_an_oserror(tmp_path):
    with pytest.raises(OSError):
        dcpctl.open(tmp_path / "missing")
    assert dcpctl.IOError is dcpctl.CheckpointIOError


def test_usage_errors():
    with pytest.raises(dcpctl.UsageError, match="framework"):
        dcpctl.open(".", framework="jax")
    with pytest.raises(dcpctl.UsageError, match="max_memory"):
        dcpctl.open(".", max_memory="lots")
    with pytest.raises(dcpctl.UsageError):
        dcpctl.verify(".", io="sideways")


def test_slice_refusals(fixtures):
    with dcpctl.open(fixtures / "sample/ckpt") as ck:
        key = next(k for k in ck.keys() if len(ck.info(k)["shape"]) == 2)
        n = ck.info(key)["shape"][0]
        s = ck.get_slice(key)
        for bad in (np.s_[n], np.s_[0, 0, 0], np.s_[..., ...], np.s_["a"]):
            with pytest.raises(dcpctl.UsageError):
                s[bad]
        with pytest.raises(KeyError):
            ck.get_slice("no.such.key")


def damaged_copy(tmp_path, fixtures):
    """The sample with one byte flipped inside a tensor's data in __0_0.distcp: (path, key, offset)."""
    src = fixtures / "sample/ckpt"
    want = flat_state_from_dcp(src)
    dst = tmp_path / "damaged"
    shutil.copytree(src, dst)
    with dcpctl.open(dst) as ck:
        key = next(k for k in ck.keys() if len(ck.info(k)["shape"]) == 2 and ck.info(k)["shape"][0] >= 8
                   and ck.info(k)["chunks"][0]["file"] == "__0_0.distcp")
        chunk = ck.info(key)["chunks"][0]
    data = bytearray((dst / "__0_0.distcp").read_bytes())
    t = want[key]
    rows = chunk["sizes"][0]
    raw = t[:rows].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    item = bytes(data[chunk["offset"]:chunk["offset"] + chunk["length"]])
    at = item.find(raw)
    assert at > 0 and item.find(raw, at + 1) < 0, "the chunk's bytes are in its item once"
    offset = chunk["offset"] + at + len(raw) - 3  # in the chunk's last row
    data[offset] ^= 0x40
    (dst / "__0_0.distcp").write_bytes(bytes(data))
    return dst, key, offset, t


def test_damaged_record(tmp_path, fixtures, cli):
    path, key, offset, t = damaged_copy(tmp_path, fixtures)
    with dcpctl.open(path) as ck:
        with pytest.raises(dcpctl.DamagedCheckpoint) as e:
            ck.get(key)
        assert e.value.exit_code == 3 and e.value.file.endswith("__0_0.distcp") and e.value.offset is not None
        assert "__0_0.distcp" in str(e.value) and "CRC" in str(e.value).upper()
        # A slice of the first rows, far from the flipped byte, reads the rest of the record to check it.
        with pytest.raises(dcpctl.DamagedCheckpoint):
            ck.get_slice(key)[0:1]
    r = dcpctl.verify(path, deep=True)
    assert not r["ok"] and any(p["code"] == "crc-mismatch" for p in r["problems"])
    with pytest.raises(dcpctl.DamagedCheckpoint, match="crc-mismatch"):
        dcpctl.verify(path, deep=True, check=True)
    assert cli("verify", "--deep", path).returncode == 3


def test_slice_reads_only_the_chunks_it_meets(tmp_path, fixtures):
    """With rank 1's data file gone, the rows rank 0 holds still read (from its file alone), equal to
    torch's; a slice that meets a chunk of rank 1 raises DamagedCheckpoint naming the missing file."""
    want = flat_state_from_dcp(fixtures / "sample/ckpt")
    path = incomplete(tmp_path, fixtures)
    with dcpctl.open(path, framework="pt") as ck:
        checked = 0
        for key in ck.keys():
            chunks = ck.info(key)["chunks"]
            if len(chunks) != 2 or chunks[0]["file"] != "__0_0.distcp" or chunks[1]["file"] != "__1_0.distcp":
                continue
            rows = chunks[0]["sizes"][0]
            got = ck.get_slice(key)[:rows]
            assert got.dtype == want[key].dtype and torch.equal(got, want[key][:rows]), key
            with pytest.raises(dcpctl.DamagedCheckpoint, match="__1_0.distcp"):
                ck.get_slice(key)[rows - 1:rows + 1]
            checked += 1
        assert checked >= 4


def test_object_store_module_registered(tmp_path, cli, monkeypatch):
    """s3:// reaches the object-store module from Python as from the CLI: with no credentials
    anywhere (no IMDS), the same CheckpointIOError (exit 4) and message, not the module left out (5)."""
    import os

    for k in [k for k in os.environ if k.startswith(("AWS_", "GOOGLE_"))]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, message = cli_error(cli, "stats", "s3://no-such-bucket-dcpctl/ckpt")
    with pytest.raises(dcpctl.Error) as e:
        dcpctl.open("s3://no-such-bucket-dcpctl/ckpt")
    assert code == 4 and type(e.value) is dcpctl.CheckpointIOError and str(e.value) == message
