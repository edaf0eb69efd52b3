"""dcpctl.open(): every tensor of fixtures written by real torch (DCP of several layouts, Hugging Face
safetensors, a torch.save file) and of a GGUF file gguf-py wrote, equal to what torch's dcp.load /
torch.load / safetensors / GGUFReader read; slices equal to the full tensor's slice; NumPy and torch
(DLPack) results; bounded bands; threads."""
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import dcpctl
from dcp_oracle import flat_state_from_dcp

# DCP checkpoints torch's own reader loads (FileSystemReader, no process group): layouts, dtypes,
# sharding (FSDP2, 2-D mesh, uneven dim-0 shards), zstd items, safetensors items, older torch.
DCP_FIXTURES = [
    "sample/ckpt", "all_dtypes/ckpt", "all_dtypes_sharded/ckpt", "exotic_dtypes/ckpt", "dtensor_2d_mesh/ckpt",
    "dtensor_shard0_uneven/ckpt", "zstd/ckpt", "fsdp2_app_state/ckpt", "async_save/ckpt", "multi_file/ckpt",
    "one_file_per_item/ckpt", "odd_keys_values/ckpt", "torchtitan_style/ckpt",
    "layouts/torch_2_15_dtensor/ckpt", "layouts/old_torch_2_6_fsdp2/ckpt",
]


NO_NUMPY = (torch.complex32, torch.float4_e2m1fn_x2)  # torch only


def pt_bytes(t: torch.Tensor) -> bytes:
    """The tensor's elements, C order, as bytes (a dense copy: a size-1 dimension may carry any stride)."""
    dense = torch.empty(t.shape, dtype=t.dtype)
    dense.copy_(t)
    return dense.reshape(-1).view(torch.uint8).numpy().tobytes()


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and bytes (NaNs and signed zeros included)."""
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and pt_bytes(a) == pt_bytes(b)


def np_bytes_equal(a: np.ndarray, t: torch.Tensor) -> bool:
    return tuple(a.shape) == tuple(t.shape) and np.ascontiguousarray(a).tobytes() == pt_bytes(t)


@pytest.mark.parametrize("case", DCP_FIXTURES)
def test_dcp_equals_torch(fixtures, case):
    path = fixtures / case
    want = {k: v for k, v in flat_state_from_dcp(path).items() if isinstance(v, torch.Tensor)}
    assert want, f"torch read no tensor from {case}"
    with dcpctl.open(path, framework="pt") as ck:
        assert sorted(ck.keys()) == sorted(want)
        for key, t in want.items():
            assert key in ck
            got = ck.get(key)
            assert same(got, t), f"{case}: {key}: {got.dtype} {tuple(got.shape)} differs from torch's {t.dtype}"
            i = ck.info(key)
            assert i["shape"] == list(t.shape) and i["numel"] == t.numel()
            try:  # NumPy (bfloat16 and float8 through ml_dtypes)
                a = ck.get(key, framework="np")
            except dcpctl.Unsupported:
                assert t.dtype in NO_NUMPY, f"{case}: {key}: {t.dtype} refused for NumPy"
                continue
            assert t.dtype not in NO_NUMPY and np_bytes_equal(a, t), f"{case}: {key}: NumPy array differs"
            assert a.dtype.name == str(t.dtype).removeprefix("torch."), (a.dtype, t.dtype)


def test_hf_safetensors_equal_safetensors(fixtures):
    from safetensors.torch import load_file

    for folder in ("layouts/hf_consolidated/ckpt", "layouts/hf_single/ckpt"):  # files of whole tensors
        want = {}
        for f in sorted((fixtures / folder).glob("*.safetensors")):
            want.update(load_file(str(f)))
        assert want
        with dcpctl.open(fixtures / folder) as ck:
            assert ck.layout.startswith("hf")
            assert sorted(ck.keys()) == sorted(want)
            for key, t in want.items():
                assert same(ck.get(key, framework="pt"), t), f"{folder}: {key}"


def test_torch_save_file_equals_torch_load(fixtures):
    path = fixtures / "hf_bin/single/pytorch_model.bin"
    want = torch.load(path, weights_only=True, map_location="cpu")
    with dcpctl.open(path) as ck:
        assert sorted(ck.keys()) == sorted(want)
        for key, t in want.items():
            assert same(ck.get(key, framework="pt"), t), key


def test_gguf_equals_gguf_reader(tmp_path):
    gguf = pytest.importorskip("gguf")  # pinned in tools/requirements.txt: never skipped there
    from gguf.quants import quantize

    rng = np.random.default_rng(3)
    plain = {"token_embd.weight": rng.standard_normal((10, 64)).astype(np.float32),
             "blk.0.ffn_up.weight": rng.standard_normal((6, 96)).astype(np.float16),
             "blk.0.rows.weight": np.arange(12, dtype=np.int32).reshape(3, 4)}
    w = gguf.GGUFWriter(str(tmp_path / "t.gguf"), "reader")
    w.add_block_count(1)
    for name, a in plain.items():
        w.add_tensor(name, a)
    q8 = quantize(rng.standard_normal((4, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("blk.0.attn_q.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    reader = gguf.GGUFReader(str(tmp_path / "t.gguf"))
    with dcpctl.open(tmp_path / "t.gguf") as ck:
        assert ck.layout == "gguf"
        for t in reader.tensors:
            if t.tensor_type == gguf.GGMLQuantizationType.Q8_0:
                assert not ck.info(t.name)["readable"]
                with pytest.raises(dcpctl.Unsupported, match="Q8_0") as e:
                    ck.get(t.name)
                assert e.value.exit_code == 5 and e.value.key == t.name
                continue
            want = np.asarray(t.data).reshape([int(x) for x in reversed(t.shape.tolist())])
            got = ck.get(t.name)
            assert got.dtype == want.dtype and np.array_equal(got, want), t.name


# Slices of sharded tensors (2 ranks, FSDP2's dim-0 shards; a 2-D mesh's boxes; uneven shards).
SLICES = [np.s_[1:3], np.s_[5:47, 2:9], np.s_[::3], np.s_[-7:], np.s_[::-2, 1::5], np.s_[4], np.s_[..., 3],
          np.s_[10:11, -1], np.s_[3:3], np.s_[:, ::-1], np.s_[2:90:7, 4:5]]


@pytest.mark.parametrize("case", ["sample/ckpt", "dtensor_2d_mesh/ckpt", "dtensor_shard0_uneven/ckpt", "zstd/ckpt",
                                  "layouts/hf_sharded/ckpt"])
def test_slices_equal_full_slices(fixtures, case):
    with dcpctl.open(fixtures / case) as ck:
        keys = [k for k in ck.keys() if len(ck.info(k)["shape"]) == 2 and ck.info(k)["dtype"] != "bfloat16"]
        keys += [k for k in ck.keys() if len(ck.info(k)["shape"]) == 2][:2]
        assert keys, case
        for key in keys[:6]:
            full_np, full_pt = ck.get(key), ck.get(key, framework="pt")
            s = ck.get_slice(key)
            assert s.get_shape() == list(full_np.shape)
            for index in SLICES:
                try:
                    want = full_np[index]
                except IndexError:
                    with pytest.raises(dcpctl.UsageError):
                        s[index]
                    continue
                got = s[index]
                assert got.dtype == want.dtype and got.shape == want.shape, (key, index)
                assert np.array_equal(got, want, equal_nan=got.dtype.kind == "f"), (key, index)
            # torch slices (negative steps become flips)
            ck_pt = dcpctl.open(fixtures / case, framework="pt")
            for index in SLICES:
                try:
                    want = full_np[index]
                except IndexError:
                    continue
                got = ck_pt.get_slice(key)[index]
                assert isinstance(got, torch.Tensor) and tuple(got.shape) == want.shape
                assert np.ascontiguousarray(want).tobytes() == pt_bytes(got), (key, index)
                assert same(full_pt, ck_pt.get(key))
            ck_pt.close()


def test_bands_small_max_memory(fixtures):
    """A max_memory of 2 KiB reads in bands of a few rows: the same bytes as one band."""
    with dcpctl.open(fixtures / "sample/ckpt", framework="pt") as big, dcpctl.open(fixtures / "sample/ckpt", max_memory=2048, framework="pt") as small:
        for key in big.keys():
            a, b = big.get(key, framework="pt"), small.get(key, framework="pt")
            assert same(a, b), key
            if a.dim() == 2 and a.shape[0] > 4:
                assert same(small.get_slice(key)[3:-1, 1:], a[3:-1, 1:]), key


def test_zstd_chunk_within_max_memory(fixtures):
    """A zstd chunk is decoded whole for any read of it: one that does not fit in max_memory beside
    the read's band is refused (UsageError naming the file, the key and the budget it needs) before
    anything is read; at that budget it reads, equal to torch's; a small chunk reads at the small one."""
    path = fixtures / "zstd/ckpt"
    want = flat_state_from_dcp(path)
    with dcpctl.open(path, max_memory=2048, framework="pt") as ck:
        assert same(ck.get("ramp_33"), want["ramp_33"])  # 132 bytes and a band of 1 KiB: within 2 KiB
        for read in (lambda: ck.get("zeros_64x16"), lambda: ck.get_slice("zeros_64x16")[:1]):
            with pytest.raises(dcpctl.UsageError, match="zstd-compressed") as e:
                read()
            assert e.value.key == "zeros_64x16" and e.value.file.endswith(".distcp") and e.value.offset is not None
            assert "more than max_memory (2048)" in str(e.value)
        largest = max(c["sizes"][0] * c["sizes"][1] for c in ck.info("zeros_64x16")["chunks"]) * 4
    need = int(re.search(r"raise max_memory to at least (\d+)", str(e.value)).group(1))
    assert need == 2 * largest  # the chunk's float32 and a band of max_memory / 2 beside it
    with dcpctl.open(path, max_memory=need, framework="pt") as ck:
        assert same(ck.get("zeros_64x16"), want["zeros_64x16"])


def test_dtype_and_without_ml_dtypes(fixtures, monkeypatch):
    path = fixtures / "sample/ckpt"
    with dcpctl.open(path) as ck:
        key = next(k for k in ck.keys() if ck.info(k)["dtype"] == "bfloat16")
        ref = ck.get(key, framework="pt")
        assert same(ck.get(key, dtype=torch.float32, framework="pt"), ref.float())
        assert np_bytes_equal(ck.get(key, dtype="float32"), ref.float())
        monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # as if it were not installed
        with pytest.raises(dcpctl.Unsupported, match="ml_dtypes") as e:
            ck.get(key)
        assert "framework='pt'" in str(e.value) and "dtype='float32'" in str(e.value)
        assert np_bytes_equal(ck.get(key, dtype="float32"), ref.float())  # exact without ml_dtypes
        assert same(ck.get(key, framework="pt"), ref)


def test_dlpack_shares_the_buffer(fixtures):
    """framework="pt" wraps dcpctl's buffer (the array the extension returns) through DLPack: the
    tensor's data is that buffer, no copy; and it outlives the checkpoint, whose buffer it owns."""
    with dcpctl.open(fixtures / "sample/ckpt", framework="pt") as ck:
        key = ck.keys()[0]
        i = ck.info(key)
        raw = ck._c.read(key, [0] * len(i["shape"]), i["shape"], True)  # what get() wraps
        t = dcpctl._as_torch(raw, i["dtype"], i["shape"], None)
        assert t.data_ptr() == raw.ctypes.data
        got = ck.get(key)
    assert same(t, got)


def test_context_manager_and_closed(fixtures):
    with dcpctl.open(fixtures / "sample/ckpt") as ck:
        key = ck.keys()[0]
        assert "no.such.key" not in ck and key in ck and len(ck) == len(ck.keys())
        with pytest.raises(KeyError, match="no.such.key"):
            ck.get("no.such.key")
        value = ck.values()[0]
        with pytest.raises(KeyError, match="non-tensor"):
            ck.get(value)
        assert ck.value(value)
    with pytest.raises(ValueError, match="closed"):
        ck.get(key)


def make_big(tmp_path, mib=48):
    import torch.distributed.checkpoint as dcp

    g = torch.Generator().manual_seed(0)
    sd = {f"w{i}": torch.randn(mib << 18, generator=g).reshape(-1, 1024) for i in range(2)}
    dcp.save(sd, checkpoint_id=str(tmp_path / "big"), no_dist=True)
    return tmp_path / "big", sd


def test_threads_read_concurrently(tmp_path):
    """Two threads reading at once (the GIL released) get the bytes one thread gets; the timings are
    printed (a measurement, not a check)."""
    path, sd = make_big(tmp_path, 32)
    with dcpctl.open(path, framework="pt") as ck:
        for k in sd:  # warm the page cache
            ck.get(k)
        t0 = time.perf_counter()
        serial = {k: ck.get(k) for k in sd}
        t1 = time.perf_counter()
        got, errors = {}, []

        def read(k):
            try:
                got[k] = ck.get(k)
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=read, args=(k,)) for k in sd]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        t2 = time.perf_counter()
    assert not errors
    for k, t in sd.items():
        assert same(serial[k], t) and same(got[k], t), k
    print(f"\n[measure] two 32 MiB tensors: one thread {t1 - t0:.3f} s, two threads {t2 - t1:.3f} s")


def test_gil_released_during_a_read(tmp_path):
    """While one thread is inside get(), another runs Python: the largest pause in its loop during the
    read is under 3/4 of the read. With the GIL held throughout it pauses for all of it (a ratio of
    1.0: measured with a 330 ms bytes multiplication, which holds it); with it released the pauses
    are the OS's, 20-60% on the loaded 2-core VM. A loaded machine can pause any thread: the best of
    five tries counts."""
    path, sd = make_big(tmp_path, 32)
    best = []
    with dcpctl.open(path, threads=1) as ck:  # one reader thread: fewer threads for the cores
        ck.get("w0")  # warm
        for _ in range(5):
            stamps, window, done = [], [], threading.Event()

            def spin():
                while not done.is_set():
                    stamps.append(time.perf_counter())

            spinner = threading.Thread(target=spin)
            spinner.start()
            time.sleep(0.01)
            window.append(time.perf_counter())
            ck.get("w0")
            window.append(time.perf_counter())
            done.set()
            spinner.join()
            inside = [s for s in stamps if window[0] <= s <= window[1]]
            points = [window[0]] + inside + [window[1]]
            gap = max(b - a for a, b in zip(points, points[1:]))
            best.append((gap / (window[1] - window[0]), window[1] - window[0]))
            if best[-1][0] < 0.75:
                break
    ratio, seconds = min(best)
    print(f"\n[measure] during a {seconds * 1e3:.1f} ms get(), the other thread's longest pause was {ratio:.0%} of it")
    assert ratio < 0.75, best


@pytest.mark.parametrize("case", ["tc_sync_2r", "tc_safetensors_2r", "tc_strided_4r"])
def test_torch_checkpointing_equals_its_own_load(fixtures, case):
    """Folders torch_checkpointing wrote (its module, as the CLI registers it): every tensor equal to
    what the library's own CheckpointManager.load gave back (expected.safetensors)."""
    from safetensors.torch import load_file

    want = load_file(str(fixtures / "layouts" / case / "expected.safetensors"))
    with dcpctl.open(fixtures / "layouts" / case / "ckpt", framework="pt") as ck:
        assert ck.layout.startswith("torch-checkpointing")
        assert sorted(ck.keys()) == sorted(want)
        for key, t in want.items():
            assert same(ck.get(key), t), key


# In a fresh process (no torch: its peak would hide ours), the peak RSS (VmHWM) before and after
# one read of a checkpoint opened with max_memory=32 MiB: "before after nbytes".
PEAK_CHILD = r"""
import sys
import dcpctl

def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

path, key, how = sys.argv[1:4]
with dcpctl.open(path, max_memory=32 << 20) as ck:
    before = peak()
    a = ck.get_slice(key)[1000:1064] if how == "slice" else ck.get(key)
    after = peak()
print(before, after, a.nbytes)
"""


def test_peak_memory_of_a_slice_is_the_slice_and_a_band(tmp_path):
    """Bounded memory, measured: a 64-row slice of a 128 MiB tensor raises the process's peak RSS by
    at most max_memory (32 MiB: a band of half of it, and the rest of a record read for its CRC)
    beside the slice; a get() of the whole tensor raises it by the tensor (so the measure sees what a
    read holds), and by no more than the same bound beside it."""
    path, sd = make_big(tmp_path, 128)
    budget, slack = 32 << 20, 8 << 20  # slack: the allocator's and Python's own
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    grew = {}
    for how in ("slice", "whole"):
        r = subprocess.run([sys.executable, "-c", PEAK_CHILD, str(path), "w0", how], capture_output=True, text=True,
                           env=env)
        assert r.returncode == 0, r.stderr
        before, after, nbytes = map(int, r.stdout.split())
        grew[how] = (after - before, nbytes)
        print(f"\n[measure] {how}: peak RSS +{(after - before) / 2**20:.1f} MiB for {nbytes / 2**20:.2f} MiB read")
    held, nbytes = grew["slice"]
    assert nbytes == 64 * 1024 * 4 and held <= budget + nbytes + slack, grew
    held, nbytes = grew["whole"]
    assert nbytes == sd["w0"].numel() * 4 and nbytes <= held <= budget + nbytes + slack, grew
