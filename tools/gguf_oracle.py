#!/usr/bin/env python3
"""llama.cpp's converter as the oracle of dcpctl's GGUF output (docs/gguf.md), fetched, not vendored.

    tools/gguf_oracle.py fetch                 # the sdist into ~/.cache/dcpctl, unpacked, and mistral-common's
                                               # wheel's tokenizer files; prints the llama.cpp dir
    tools/gguf_oracle.py tokenizer NAME DIR    # a real tokenizer.json for NAME (llama-bpe, qwen2, or one of
                                               # FAMILIES: qwen2-nfc, deepseek-llm, deepseek-coder, gpt-2,
                                               # starcoder, command-r, mpt, falcon) in DIR, or a real SentencePiece
                                               # tokenizer.model (llama-spm: Llama 2's; mistral-v1,
                                               # mistral-v3: Mistral's own, from mistral-common's wheel)
    tools/gguf_oracle.py check                 # the BPE tokenizers rebuilt, each named by the converter's
                                               # table (FAMILIES' also tokenizing llama.cpp's test texts);
                                               # llama-spm's, tokenizing llama.cpp's test texts
    tools/gguf_oracle.py build                 # llama-cpp-python built from the sdist (CPU, portable), cached;
                                               # prints the directory to put on sys.path

Everything comes from one pinned source distribution, llama-cpp-python 0.3.36 (PyPI, checked by its
SHA-256): llama.cpp's convert_hf_to_gguf.py with its conversion/ package, its gguf-py (0.19.0, the
same as PyPI's gguf==0.19.0) and llama.cpp's vocab-only test files (models/ggml-vocab-*.gguf).

Why the tokenizers: the converter names a BPE tokenizer (`tokenizer.ggml.pre`) by the SHA-256 of the
token ids it gives a fixed text (get_vocab_base_pre) and refuses a digest it does not know, so a
tokenizer trained for a test never converts. llama.cpp's vocab files of Llama 3 (`llama-bpe`) and
Qwen2 (`qwen2`) hold the tokens, their types and the merges; with the pre-tokenizer those models
publish (Llama 3's and Qwen2's split patterns, byte-level) and Llama 3's BOS template they make a
tokenizer.json that transformers loads and whose digest is the converter's own for that name
(`check` asserts it each time), without downloading a model. llama.cpp's Llama 2 vocab file
(`llama-spm`: SentencePiece's pieces, scores and types) makes Llama 2's tokenizer.model the same way
(SPM below), checked by sentencepiece's ids for the test texts beside the vocab file. The other
families' vocab files (FAMILIES below: DeepSeek LLM and Coder, GPT-2, StarCoder, Command-R, MPT, and
Qwen2 with its release's NFC) make the tokenizer.json and tokenizer_config.json each release ships,
checked by transformers' ids for those test texts and by the converter's digest.

`build`: llama.cpp itself, as llama-cpp-python 0.3.36 builds it from the same sdist (pip wheel, no
build isolation: the backend is .venv's pinned scikit-build-core and ninja, the system's cmake and
C/C++ compiler), CPU only and portable: BUILD_FLAGS turn off -march=native and every x86 extension
flag (ggml-cpu is then plain x86-64; ggml-base, whose ggml-quants.c holds the reference quantizers,
never gets them), no OpenMP, no llava/mtmd, -O1. The wheel and its install (with diskcache, its one
dependency .venv lacks) are kept under ~/.cache/dcpctl/llama-cpp-python-0.3.36/build-KEY/, KEY the
SHA-256 of the sdist's digest and the flags: a second run finds them and costs nothing.
DCPCTL_LLAMA_JOBS sets the compile's parallelism (default 1: the cores are shared).

Run with the project's virtualenv (.venv/bin/python: transformers, tokenizers, numpy).
"""
import ast
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

VERSION = "0.3.36"
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dcpctl" / f"llama-cpp-python-{VERSION}"
LLAMA = CACHE / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
# What the converter and these checks read of the sdist (76 MB; these are a few MB).
MEMBERS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/", "ggml/src/ggml-quants.c",
           *(f"models/ggml-vocab-{n}.gguf{x}" for n in ("llama-bpe", "qwen2", "llama-spm", "deepseek-llm", "deepseek-coder",
                                                          "gpt-2", "starcoder", "command-r", "mpt", "falcon", "refact") for x in ("", ".inp", ".out")))

# llama.cpp's CMake options for the oracle build: CPU only, nothing tuned to the building machine,
# and -O1 for Release (llama-cpp-python's build type) instead of -O3: the oracle runs tiny models,
# and the compile is what a fresh machine waits for (ggml-cpu's ops.cpp 6.9 -> 3.6 s of CPU,
# llama-model.cpp 10.4 -> 6.8 s, GCC 12, 2026-11-29). The results are the same bits: no
# -ffast-math and no FMA at any level, so GCC neither reassociates nor contracts a float operation.
BUILD_FLAGS = ("-DGGML_NATIVE=OFF", "-DGGML_SSE42=OFF", "-DGGML_AVX=OFF", "-DGGML_AVX2=OFF", "-DGGML_BMI2=OFF",
               "-DGGML_FMA=OFF", "-DGGML_F16C=OFF", "-DGGML_AVX512=OFF", "-DGGML_OPENMP=OFF", "-DGGML_CCACHE=OFF",
               "-DLLAVA_BUILD=OFF", "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG", "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG")
DISKCACHE = "diskcache==5.6.3"

# The split patterns of the published tokenizer.json files (Llama 3: numbers in threes; Qwen2: one
# digit a piece), and the digest the converter's table gives each name.
PATTERNS = {
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


def fetch():
    """The unpacked members, downloaded once (pip, no build) and checked by the sdist's SHA-256."""
    if all((LLAMA / m).exists() for m in MEMBERS):
        return LLAMA
    CACHE.mkdir(parents=True, exist_ok=True)
    archive = CACHE / SDIST
    if not archive.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps",
                        f"llama-cpp-python=={VERSION}", "-d", str(CACHE)], check=True)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        archive.unlink()
        sys.exit(f"gguf_oracle: {archive}: SHA-256 {digest}, want {SDIST_SHA256} (removed)")
    prefix = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
    with tarfile.open(archive) as t:
        wanted = [m for m in t.getmembers() if m.name.startswith(prefix)
                  and any(m.name[len(prefix):].startswith(w) for w in MEMBERS) and (m.isfile() or m.isdir())]
        t.extractall(CACHE, members=wanted, filter="data")
    return LLAMA


def build_dir():
    key = hashlib.sha256((SDIST_SHA256 + " " + " ".join(BUILD_FLAGS)).encode()).hexdigest()[:16]
    return CACHE / f"build-{key}"


def build():
    """The directory holding the built llama_cpp package (and diskcache), built once."""
    out = build_dir()
    site, done = out / "site", out / "built"
    if done.exists() and (site / "llama_cpp" / "lib").is_dir():
        return site
    fetch()
    archive = CACHE / SDIST
    if not archive.exists() or hashlib.sha256(archive.read_bytes()).hexdigest() != SDIST_SHA256:
        sys.exit(f"gguf_oracle: {archive} is missing or not the pinned sdist; run `gguf_oracle.py fetch` after removing it")
    import shutil
    shutil.rmtree(out, ignore_errors=True)
    (out / "wheel").mkdir(parents=True)
    env = dict(os.environ, CMAKE_ARGS=shlex.join(BUILD_FLAGS), FORCE_CMAKE="1",
               CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("DCPCTL_LLAMA_JOBS", "1"))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(out / "wheel"), str(archive)], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"gguf_oracle: building llama-cpp-python failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    seconds = time.monotonic() - t0
    wheels = list((out / "wheel").glob("llama_cpp_python-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheels[0]),
                    DISKCACHE], check=True)
    done.write_text(f"built in {seconds:.0f} s with {env['CMAKE_BUILD_PARALLEL_LEVEL']} job(s): {shlex.join(BUILD_FLAGS)}\n")
    return site


def llama_cpp():
    """llama-cpp-python's package, built from the sdist (build())."""
    sys.path.insert(0, str(build()))
    import llama_cpp as lc
    return lc


# GGUF's value types (gguf-py's GGUFValueType): the fixed-size ones as struct formats.
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_TYPE_NAMES = {0: "UINT8", 1: "INT8", 2: "UINT16", 3: "INT16", 4: "UINT32", 5: "INT32", 6: "FLOAT32", 7: "BOOL",
                    8: "STRING", 9: "ARRAY", 10: "UINT64", 11: "INT64", 12: "FLOAT64"}


def read_gguf(path, types=False):
    """A GGUF file's metadata and tensor infos, as gguf-py's GGUFReader gives them (each field's
    contents(), each tensor's name, shape in ggml's order, type number and the absolute offset of
    its data), read with struct instead: GGUFReader makes a numpy view of every part of every
    field, 1.4 to 10 s of CPU over one of llama.cpp's vocabulary files here (7 s for Llama 3's
    128,256 tokens), where this takes 0.02 to 0.3 s. With types, each value is (its types as
    GGUFReader names them: ["ARRAY", "STRING"], the value). gguf_read_test.py checks the two agree."""
    return _parse_gguf(Path(path).read_bytes(), path, types)


def _parse_gguf(data, path, types):
    """read_gguf of the file's bytes `data` (`path` names it in the error)."""
    import struct
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return data[pos - n:pos].decode("utf-8")

    def value(ty, names):  # names: the types, GGUFReader's way (an array's, then its first element's)
        nonlocal pos
        names.append(_GGUF_TYPE_NAMES[ty])
        if ty == _GGUF_STRING:
            return string()
        if ty != _GGUF_ARRAY:
            return take(_GGUF_SCALARS[ty])
        et, n = take("I"), take("Q")
        if et in _GGUF_SCALARS:
            if n:
                names.append(_GGUF_TYPE_NAMES[et])
            fmt = f"<{n}{_GGUF_SCALARS[et]}"
            v = list(struct.unpack_from(fmt, data, pos))
            pos += struct.calcsize(fmt)
            return v
        return [value(et, names if i == 0 else []) for i in range(n)]

    magic, version, n_tensors, n_kv = take("4sIQQ")
    if magic != b"GGUF" or version < 2:
        raise ValueError(f"{path}: not a GGUF file of version 2 or later")
    kv = {}
    for _ in range(n_kv):
        key = string()
        names = []
        v = value(take("I"), names)
        kv[key] = (names, v) if types else v
    tensors = []
    for _ in range(n_tensors):
        name = string()
        shape = [take("Q") for _ in range(take("I"))]
        ty, offset = take("I"), take("Q")
        tensors.append({"name": name, "shape": shape, "type": ty, "offset": offset})
    align = kv.get("general.alignment", 32)
    start = (pos + align - 1) // align * align
    for t in tensors:
        t["offset"] += start
    return kv, tensors


def gguf_fields(path):
    """A GGUF file as two dicts, {key: (its types, its value)} and {tensor: (type name, shape in
    ggml's order, its bytes)}, what a comparison of two files needs, read by read_gguf."""
    import math
    gguf = gguf_py()
    data = Path(path).read_bytes()
    kv, tensors = _parse_gguf(data, path, types=True)
    ts = {}
    for t in tensors:
        qt = gguf.GGMLQuantizationType(t["type"])
        block, size = gguf.GGML_QUANT_SIZES[qt]
        ts[t["name"]] = (qt.name, t["shape"], data[t["offset"]:t["offset"] + math.prod(t["shape"]) // block * size])
    return kv, ts


def gguf_py():
    sys.path.insert(0, str(fetch() / "gguf-py"))
    import gguf
    return gguf


def convert(hf, outfile, args=(), env=None, python_args=()):
    """llama.cpp's convert_hf_to_gguf.py HF --outfile OUTFILE ARGS (run as `python PYTHON_ARGS
    convert_hf_to_gguf.py ...`: a `-c` script that runs it patched): the CompletedProcess, with the
    files it wrote beside OUTFILE (one, or its split's shards). Its output is a function of the
    folder's files, the arguments and the converter, so a successful run's files are kept under
    CACHE/converted/KEY (KEY: the SHA-256 of the sdist's digest, this file, ARGS and every file of HF,
    name and bytes) and copied from there the next time (its stdout and stderr are then empty):
    the converter's Python start-up and conversion were most of gguf-converter's time."""
    import shutil
    hf, outfile = Path(hf), Path(outfile)
    h = hashlib.sha256((SDIST_SHA256 + " ").encode() + Path(__file__).read_bytes())
    h.update(json.dumps([[str(a) for a in python_args], [str(a) for a in args]]).encode())
    for f in sorted(p for p in hf.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(hf)).encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    kept = CACHE / "converted" / h.hexdigest()[:24]
    outfile.parent.mkdir(parents=True, exist_ok=True)
    if (kept / ".done").is_file():
        for f in kept.iterdir():
            if f.name != ".done":
                shutil.copyfile(f, outfile.parent / f.name)
        return subprocess.CompletedProcess(["convert_hf_to_gguf.py (kept)"], 0, "", "")
    before = set(outfile.parent.iterdir())
    argv = [str(fetch() / "convert_hf_to_gguf.py"), str(hf), "--outfile", str(outfile), *map(str, args)]
    r = _converter().run([str(a) for a in python_args], argv, env or dict(os.environ, PYTHONPATH=str(fetch() / "gguf-py")))
    if r.returncode == 0:
        tmp = kept.with_name(f"{kept.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for f in set(outfile.parent.iterdir()) - before:
            shutil.copyfile(f, tmp / f.name)
        (tmp / ".done").write_text("")
        try:
            tmp.rename(kept)
        except OSError:  # another run kept it first
            shutil.rmtree(tmp, ignore_errors=True)
    return r


class _ConverterServer:
    """The converter's runs forked from one process that imported it (and torch, transformers,
    sentencepiece, gguf-py: 3 to 4 s of CPU a run, most of a tiny model's conversion). `serve` below
    imports them, then forks a child per request that runs the script as `python PYTHON_ARGS
    SCRIPT ARGS` would (a `-c` program, or the script as __main__) with the request's environment,
    its stdout and stderr in files: each run starts from the same imported, unrun state, as a new
    process does. A request whose PYTHONPATH is not the server's runs as a subprocess of its own."""

    def __init__(self):
        self.proc = None
        self.path = str(fetch() / "gguf-py")

    def close(self):
        """Ends the server (its stdin closed, it exits) and waits for it."""
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()
            self.proc = None

    def run(self, python_args, argv, env):
        if env.get("PYTHONPATH") != self.path:
            return subprocess.run([sys.executable, *python_args, *argv], capture_output=True, text=True, env=env)
        import tempfile
        if self.proc is None or self.proc.poll() is not None:
            import atexit
            self.proc = subprocess.Popen([sys.executable, __file__, "serve"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True,
                                         env=dict(os.environ, PYTHONPATH=self.path))
            atexit.register(self.close)
        with tempfile.TemporaryDirectory() as d:
            out, err = Path(d) / "stdout", Path(d) / "stderr"
            self.proc.stdin.write(json.dumps({"python_args": python_args, "argv": argv, "env": env,
                                              "stdout": str(out), "stderr": str(err)}) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("gguf_oracle: the converter's server died (no answer)")
            rc = json.loads(line)["rc"]
            return subprocess.CompletedProcess(["convert_hf_to_gguf.py", *argv[1:]], rc, out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))


_SERVER = []


def _converter():
    if not _SERVER:
        _SERVER.append(_ConverterServer())
    return _SERVER[0]


def serve():
    """The server's side of _ConverterServer: requests as JSON lines on stdin, {"rc": N} answered."""
    import importlib.util
    import runpy
    script = fetch() / "convert_hf_to_gguf.py"
    sys.path.insert(0, str(script.parent))
    sys.argv = [str(script)]
    spec = importlib.util.spec_from_file_location("_converter_preload", script)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # its imports; main() is not run
    import transformers  # noqa: F401  (what the vocabulary paths import on first use)
    import sentencepiece  # noqa: F401
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                for fd, name in ((1, "stdout"), (2, "stderr")):
                    f = os.open(req[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.dup2(f, fd)
                    os.close(f)
                os.environ.clear()
                os.environ.update(req["env"])
                code = _serve_one(req["python_args"], req["argv"], runpy)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if not isinstance(e.code, (int, type(None))):
                    print(e.code, file=sys.stderr)
            except BaseException:  # noqa: BLE001  (as the interpreter would: the traceback, exit 1)
                import traceback
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        print(json.dumps({"rc": rc}), flush=True)


def _serve_one(python_args, argv, runpy):
    if python_args[:1] == ["-c"] and len(python_args) == 2:
        sys.argv = ["-c", *argv]
        exec(compile(python_args[1], "<string>", "exec"), {"__name__": "__main__"})
    elif not python_args:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")
    else:
        raise SystemExit(f"gguf_oracle serve: python arguments {python_args} not understood")
    return 0


def converter_digests(name):
    """The chkhsh values the converter's get_vocab_base_pre maps to `name` (qwen2 has several). Its
    table is a run of `if`s, so a digest met twice is named by the last (MPT's: `mpt`, then `olmo`)."""
    text = (fetch() / "conversion" / "base.py").read_text()
    last = dict(re.findall(r'if chkhsh == "([0-9a-f]{64})":\n(?:\s*#.*\n)*\s*res = "([^"]+)"', text))
    found = [d for d, res in last.items() if res == name]
    if not found:
        sys.exit(f"gguf_oracle: the converter names no digest {name}")
    return found


def check_text():
    text = (fetch() / "conversion" / "base.py").read_text()
    return ast.literal_eval(re.search(r"\n\s*chktxt = (.*)\n", text).group(1))


def tokenizer(name, out):
    """tokenizer.json and tokenizer_config.json for `name` in `out`; returns the digest transformers
    gives them, checked against the converter's. Built once (gguf-py's reader takes 10 to 15 s over
    a vocab file's 150,000 strings) and kept under CACHE/tokenizers/NAME-KEY, KEY the SHA-256 of the
    sdist's digest and this file: what is copied from there was checked when it was built."""
    import shutil
    key = hashlib.sha256((SDIST_SHA256 + " ").encode() + Path(__file__).read_bytes()).hexdigest()[:16]
    kept = CACHE / "tokenizers" / f"{name}-{key}"
    files = ("tokenizer.json", "tokenizer_config.json")
    out = Path(out)
    if not (kept / "digest").exists():
        tmp = kept.with_name(f"{kept.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        digest = built_tokenizer(name, tmp)
        (tmp / "digest").write_text(digest)
        try:
            tmp.rename(kept)
        except OSError:  # another run kept it first
            shutil.rmtree(tmp, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copyfile(kept / f, out / f)
    return (kept / "digest").read_text()


def built_tokenizer(name, out):
    """tokenizer(), built from llama.cpp's vocab file (or Mistral's Tekken file: tekken)."""
    if name in FAMILIES:
        return family_tokenizer(name, out)
    if name == "tekken":
        return tekken_tokenizer(out)
    gguf = gguf_py()
    get = read_gguf(fetch() / "models" / f"ggml-vocab-{name}.gguf")[0].__getitem__
    tokens, types, merges = get("tokenizer.ggml.tokens"), get("tokenizer.ggml.token_type"), get("tokenizer.ggml.merges")
    bos, eos = get("tokenizer.ggml.bos_token_id"), get("tokenizer.ggml.eos_token_id")
    normal = int(gguf.TokenType.NORMAL)
    control = int(gguf.TokenType.CONTROL)
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, t in enumerate(tokens) if types[i] == control]
    vocab = {t: i for i, t in enumerate(tokens) if types[i] in (normal, control)}
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "Split", "pattern": {"Regex": PATTERNS[name]}, "behavior": "Isolated", "invert": False},
              {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
          "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
          "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                    "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                    "ignore_merges": name == "llama-bpe", "vocab": vocab, "merges": [m.split(" ", 1) for m in merges]}}
    if name == "llama-bpe":  # Llama 3 adds <|begin_of_text|>
        b = tokens[bos]
        tj["post_processor"] = {"type": "TemplateProcessing",
                                "single": [{"SpecialToken": {"id": b, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                                "pair": [{"SpecialToken": {"id": b, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                         {"SpecialToken": {"id": b, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                                "special_tokens": {b: {"id": b, "ids": [bos], "tokens": [b]}}}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": tokens[bos], "eos_token": tokens[eos], "tokenizer_class": "PreTrainedTokenizerFast"}))
    from transformers import AutoTokenizer
    ids = AutoTokenizer.from_pretrained(str(out)).encode(check_text())
    digest = hashlib.sha256(str(ids).encode()).hexdigest()
    want = converter_digests(name)
    if digest not in want:
        sys.exit(f"gguf_oracle: the rebuilt {name} tokenizer's digest is {digest}, the converter's {', '.join(want)}")
    return digest


# SentencePiece vocabularies rebuilt as tokenizer.model (spm_tokenizer): llama.cpp's vocab file holds
# each piece, its score and its type; the rest of the ModelProto says how the model tokenizes, and
# only what encoding reads is set (the trainer's other fields are about training): Llama 2's is a
# BPE with byte fallback, <unk> <s> </s> at 0 1 2, no pad, the identity normalizer with a dummy
# prefix, whitespace escaped but not collapsed. That these are Llama 2's is what the check shows:
# sentencepiece then gives llama.cpp's ids for every test text of the vocab file.
SPM = {
    "llama-spm": dict(
        trainer=dict(model_type=2, vocab_size=32000, byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                     unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>", pad_piece="<pad>"),
        normalizer=dict(name="identity", add_dummy_prefix=True, remove_extra_whitespaces=False, escape_whitespaces=True)),
}


def vocab_tests(name):
    """llama.cpp's test texts for a vocab file and the ids its tokenizer gives each (no BOS):
    models/ggml-vocab-NAME.gguf.inp / .out, as test-tokenizer-0 reads them."""
    base = fetch() / "models" / f"ggml-vocab-{name}.gguf"
    texts = base.with_name(base.name + ".inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    ids = base.with_name(base.name + ".out").read_text(encoding="utf-8").split("\n")
    if texts[-1] != "" or ids[-1] != "" or len(texts) != len(ids):  # each file ends with its separator
        sys.exit(f"gguf_oracle: {base.name}.inp has {len(texts) - 1} texts, .out {len(ids) - 1} lines")
    return [(t, [int(x) for x in i.split()]) for t, i in zip(texts[:-1], ids[:-1])]


# Mistral's own SentencePiece models, as mistral-common (Mistral AI's library, Apache-2.0) ships them
# in its wheel's data/ folder, the tokenizer.model of the releases: v1 Mistral 7B v0.1's and
# Mixtral 8x7B's (32,000 pieces), v3 Mistral 7B v0.3's and Mixtral 8x22B's (32,768: after <unk>,
# <s> and </s>, 748 control pieces, [INST], [/INST], [TOOL_CALLS], ..., [control_N], then 20
# [REFERENCE_DOC_N] normal ones). The wheel is downloaded once (pip, no dependencies, nothing
# installed) and checked by its SHA-256.
MISTRAL_COMMON = "1.13.1"
MISTRAL_WHEEL_SHA256 = "98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af"
MISTRAL_SPM = {"mistral-v1": "tokenizer.model.v1", "mistral-v3": "mistral_instruct_tokenizer_240323.model.v3"}
# and Mistral NeMo's Tekken (tekken_240718.json), rebuilt into the tokenizer.json of its release (tekken_tokenizer)
MISTRAL_FILES = {**MISTRAL_SPM, "tekken": "tekken_240718.json", "tekken.py": "../tokens/tokenizers/tekken.py",
                 "base.py": "../tokens/tokenizers/base.py"}


def mistral_model(name):
    """MISTRAL_FILES[name] unpacked from mistral-common's wheel (its data/ folder): its path."""
    import zipfile
    cache = CACHE.parent / f"mistral-common-{MISTRAL_COMMON}"
    path = cache / Path(MISTRAL_FILES[name]).name
    if path.exists():
        return path
    wheel = cache / f"mistral_common-{MISTRAL_COMMON}-py3-none-any.whl"
    if not wheel.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "--no-deps",
                        f"mistral-common=={MISTRAL_COMMON}", "-d", str(cache)], check=True)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != MISTRAL_WHEEL_SHA256:
        wheel.unlink()
        sys.exit(f"gguf_oracle: {wheel}: SHA-256 {digest}, want {MISTRAL_WHEEL_SHA256} (removed)")
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    with zipfile.ZipFile(wheel) as z:
        tmp.write_bytes(z.read(os.path.normpath(f"mistral_common/data/{MISTRAL_FILES[name]}")))
    tmp.rename(path)
    return path


def tekken_special_tokens():
    """Tekkenizer.DEPRECATED_SPECIAL_TOKENS' strings, read from mistral-common's own source (its
    SpecialTokens enum): the special tokens of a Tekken file that lists none (NeMo's), ranks 0.."""
    consts = {}
    for node in ast.walk(ast.parse(mistral_model("base.py").read_text())):
        if isinstance(node, ast.ClassDef) and node.name == "SpecialTokens":
            consts = {a.targets[0].id: a.value.value for a in node.body if isinstance(a, ast.Assign)}
    names = []
    for node in ast.walk(ast.parse(mistral_model("tekken.py").read_text())):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DEPRECATED_SPECIAL_TOKENS":
            names = [kw.value.attr for call in node.value.elts for kw in call.keywords if kw.arg == "token_str"]
    if not consts or not names:
        sys.exit("gguf_oracle: mistral-common's Tekkenizer.DEPRECATED_SPECIAL_TOKENS not found")
    return [consts[n] for n in names]


def tekken_tokenizer(out):
    """Mistral NeMo's tokenizer.json from its Tekken file, as transformers' MistralConverter
    (convert_tekken_tokenizer) makes it: the special tokens (mistral-common's, then <SPECIAL_i>
    fillers up to the config's default_num_special_tokens) at ids 0.., the ranks' bytes in GPT-2's
    byte-level alphabet after them (default_vocab_size in all), the merges recovered from the ranks
    (each token's splits into two tokens of the ranks, in its rank's order, then by the parts' ranks),
    ignore_merges; the file's split pattern, then ByteLevel; NeMo's BOS template. Checked by the
    converter's digest for `tekken` (its row for Mistral-Nemo-Base-2407); returns the digest."""
    import base64
    tk = json.loads(mistral_model("tekken").read_text())
    cfg = tk["config"]
    names = tekken_special_tokens()
    specials = names + [f"<SPECIAL_{i}>" for i in range(len(names), cfg["default_num_special_tokens"])]
    inner = cfg["default_vocab_size"] - len(specials)
    ranks = {base64.b64decode(v["token_bytes"]): v["rank"] for v in tk["vocab"][:inner]}
    alphabet, more = {}, 256  # GPT-2's bytes_to_unicode
    for b in range(256):
        if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255:
            alphabet[b] = chr(b)
        else:
            alphabet[b], more = chr(more), more + 1
    text = lambda t: "".join(alphabet[x] for x in t)  # noqa: E731
    vocab, merges = {t: i for i, t in enumerate(specials)}, []
    for tok, rank in ranks.items():
        vocab[text(tok)] = rank + len(specials)
        parts = [(tok[:k], tok[k:], rank) for k in range(1, len(tok)) if tok[:k] in ranks and tok[k:] in ranks]
        merges += sorted(parts, key=lambda m: (ranks[m[0]], ranks[m[1]]))
    merges = [[text(a), text(b)] for a, b, _ in sorted(merges, key=lambda m: m[2])]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, t in enumerate(specials)]
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [SPLIT(cfg["pattern"]), BYTE_LEVEL(False)]},
          "post_processor": {"type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                             "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                             "special_tokens": {"<s>": {"id": "<s>", "ids": [vocab["<s>"]], "tokens": ["<s>"]}}},
          "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                    "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                    "vocab": vocab, "merges": merges}}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
                                                           "eos_token": "</s>", "unk_token": "<unk>"}))
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(out))
    digest = hashlib.sha256(str(tok.encode(check_text())).encode()).hexdigest()
    if digest not in converter_digests("tekken"):
        sys.exit(f"gguf_oracle: the rebuilt tekken tokenizer has digest {digest}, the converter's {converter_digests('tekken')}")
    print(f"gguf_oracle: tekken: {len(vocab)} tokens, {len(merges)} merges, digest tekken's", file=sys.stderr)
    return digest


def spm_tokenizer(name, out):
    """tokenizer.model for `name` (SPM) in `out`, built from llama.cpp's vocab file and checked:
    sentencepiece itself must give llama.cpp's ids for every one of its test texts. Kept under
    CACHE/tokenizers as tokenizer() keeps its files. Returns the number of texts checked. For a
    name of MISTRAL_SPM, Mistral's own file (no test texts: 0)."""
    import shutil
    if name in MISTRAL_SPM:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(mistral_model(name), out / "tokenizer.model")
        return 0
    key = hashlib.sha256((SDIST_SHA256 + " ").encode() + Path(__file__).read_bytes()).hexdigest()[:16]
    kept = CACHE / "tokenizers" / f"{name}-{key}"
    if not (kept / "checked").exists():
        tmp = kept.with_name(f"{kept.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        n = built_spm_tokenizer(name, tmp)
        (tmp / "checked").write_text(str(n))
        try:
            tmp.rename(kept)
        except OSError:  # another run kept it first
            shutil.rmtree(tmp, ignore_errors=True)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(kept / "tokenizer.model", out / "tokenizer.model")
    return int((kept / "checked").read_text())


def built_spm_tokenizer(name, out):
    """spm_tokenizer(), built: a ModelProto (sentencepiece's own protobuf classes) of the vocab
    file's pieces, scores and types, and SPM[name]'s trainer and normalizer settings."""
    gguf = gguf_py()
    from sentencepiece import SentencePieceProcessor, sentencepiece_model_pb2 as pb
    get = read_gguf(fetch() / "models" / f"ggml-vocab-{name}.gguf")[0].__getitem__
    if get("tokenizer.ggml.model") != "llama":
        sys.exit(f"gguf_oracle: ggml-vocab-{name}.gguf is not a SentencePiece vocabulary")
    m = pb.ModelProto()
    for text, score, typ in zip(get("tokenizer.ggml.tokens"), get("tokenizer.ggml.scores"), get("tokenizer.ggml.token_type")):
        m.pieces.add(piece=text, score=score, type=typ)  # llama.cpp's token types are SentencePiece's piece types
    for k, v in SPM[name]["trainer"].items():
        setattr(m.trainer_spec, k, v)
    for k, v in SPM[name]["normalizer"].items():
        setattr(m.normalizer_spec, k, v)
    if m.trainer_spec.vocab_size != len(m.pieces):
        sys.exit(f"gguf_oracle: {name}: {len(m.pieces)} pieces, the trainer's vocab_size {m.trainer_spec.vocab_size}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.model").write_bytes(m.SerializeToString())
    sp = SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    tests = vocab_tests(name)
    for text, want in tests:
        got = sp.encode(text)
        if got != want:
            sys.exit(f"gguf_oracle: {name}: sentencepiece gives {text!r} {got}, llama.cpp's test {want}")
    return len(tests)


# The families' tokenizers as their releases ship them (FAMILIES), rebuilt from llama.cpp's vocab
# files: the tokens (NORMAL in the model's vocabulary, CONTROL as special added tokens, USER_DEFINED
# but llama.cpp's `[PAD{i}]` fillers as added tokens that are not special) and merges, with the
# normalizer, pre-tokenizer, post-processor and tokenizer_config.json the release has. The special
# tokens the BPE was trained with (the CONTROL ones among the NORMAL ids: StarCoder's 0..37,
# GPT-NeoX's 0 and 1, Command-R's 0..7) are in the model's vocabulary too, as the releases hold
# them: transformers 5.24's rebuilding classes (GPT2Tokenizer, GPTNeoXTokenizer, CohereTokenizer)
# build the BPE from that vocabulary alone and give an added token missing from it the next free id
# past it, where a model token already is. Each is
# checked twice: transformers' AutoTokenizer (the class it picks for `check_type`, the family's own
# model type) encodes llama.cpp's test texts (.inp) to its token ids (.out, written by the update
# script from the release's own tokenizer), and the check text to a digest the converter's table
# names `converter`.
SPLIT = lambda rx: {"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated", "invert": False}  # noqa: E731
BYTE_LEVEL = lambda regex: {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": regex}  # noqa: E731
DIGITS = {"type": "Digits", "individual_digits": True}
NFC = {"type": "NFC"}
# deepseek-ai/deepseek-llm-7b-base's and deepseek-coder-6.7b-base's splits (llama.cpp's llama-vocab.cpp
# carries the same patterns for them), escaped: several of their range ends (U+1FD3, U+2126, ...) are
# not in NFC, and an editor that normalizes would empty their ranges.
DEEPSEEK_LLM = ["[\r\n]",
                "\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377"
                "\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556"
                "\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a"
                "\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4"
                "\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
                "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
                "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b"
                "\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a"
                "\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
                "\U000118a0-\U000118df\U0001e900-\U0001e943]+",
                "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", "\\s+$",
                "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", "\\p{N}+"]
DEEPSEEK_CODER = ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"]
FAMILIES = {
    # Qwen2/2.5/3 (Qwen/Qwen1.5-7B's vocabulary): NFC and the class Qwen2Tokenizer, as every release.
    "qwen2-nfc": dict(vocab="qwen2", converter="qwen2", check_type="qwen2", normalizer=NFC,
                      pre={"type": "Sequence", "pretokenizers": [SPLIT(PATTERNS["qwen2"]), BYTE_LEVEL(False)]},
                      config={"tokenizer_class": "Qwen2Tokenizer", "add_bos_token": False, "add_prefix_space": False,
                              "bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                              "unk_token": None, "errors": "replace", "split_special_tokens": False}),
    # DeepSeek LLM and Coder: an empty normalizer Sequence, LlamaTokenizerFast over a byte-level file.
    "deepseek-llm": dict(vocab="deepseek-llm", converter="deepseek-llm", check_type="llama",
                         normalizer={"type": "Sequence", "normalizers": []},
                         pre={"type": "Sequence", "pretokenizers": [SPLIT(r) for r in DEEPSEEK_LLM] + [BYTE_LEVEL(False)]},
                         bos=True, config={"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True,
                                           "add_eos_token": False, "bos_token": "<｜begin▁of▁sentence｜>",
                                           "eos_token": "<｜end▁of▁sentence｜>", "pad_token": None}),
    "deepseek-coder": dict(vocab="deepseek-coder", converter="deepseek-coder", check_type="llama",
                           normalizer={"type": "Sequence", "normalizers": []},
                           pre={"type": "Sequence", "pretokenizers": [SPLIT(r) for r in DEEPSEEK_CODER] + [DIGITS, BYTE_LEVEL(False)]},
                           bos=True, config={"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True,
                                             "add_eos_token": False, "bos_token": "<｜begin▁of▁sentence｜>",
                                             "eos_token": "<｜end▁of▁sentence｜>", "pad_token": None}),
    # GPT-2 and StarCoder: GPT2Tokenizer (StarCoder's Digits kept by its model type's TokenizersBackend).
    "gpt-2": dict(vocab="gpt-2", converter="gpt-2", check_type="gpt2", normalizer=None, pre=BYTE_LEVEL(True),
                  config={"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                          "unk_token": "<|endoftext|>", "add_prefix_space": False}),
    "starcoder": dict(vocab="starcoder", converter="starcoder", check_type="gpt_bigcode", normalizer=None,
                      pre={"type": "Sequence", "pretokenizers": [DIGITS, BYTE_LEVEL(True)]},
                      config={"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>",
                              "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}),
    # Command-R (CohereForAI/c4ai-command-r-v01): NFC, digits, byte-level; CohereTokenizerFast.
    "command-r": dict(vocab="command-r", converter="command-r", check_type="cohere", normalizer=NFC,
                      pre={"type": "Sequence", "pretokenizers": [DIGITS, BYTE_LEVEL(True)]}, bos=True,
                      config={"tokenizer_class": "CohereTokenizerFast", "add_bos_token": True, "add_eos_token": False,
                              "bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>", "pad_token": "<PAD>",
                              "unk_token": "<UNK>", "cls_token": "<CLS>", "sep_token": "<SEP>", "mask_token": "<MASK_TOKEN>"}),
    # Falcon (tiiuae/falcon-7b): no normalizer; punctuation runs split out, byte-level, then digit
    # runs and threes of digits split in the byte-level text; PreTrainedTokenizerFast (the falcon
    # model type registers none: TokenizersBackend), its 12 special tokens (ids 0..11) in the vocabulary.
    "falcon": dict(vocab="falcon", converter="falcon", check_type="falcon", normalizer=None,
                   pre={"type": "Sequence", "pretokenizers": [
                       {"type": "Punctuation", "behavior": "Contiguous"}, BYTE_LEVEL(True),
                       {"type": "Digits", "individual_digits": False},
                       {"type": "Split", "pattern": {"Regex": "[0-9][0-9][0-9]"}, "behavior": "Isolated", "invert": False}]},
                   config={"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
                           "add_prefix_space": False}),
    # Refact (smallcloudai/Refact-1_6-base): StarCoder's pre-tokenizer over its own vocabulary.
    "refact": dict(vocab="refact", converter="refact", check_type="gpt_bigcode", normalizer=None,
                   pre={"type": "Sequence", "pretokenizers": [DIGITS, BYTE_LEVEL(True)]},
                   config={"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>",
                           "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}),
    # MPT (mosaicml/mpt-7b, GPT-NeoX's tokenizer): NFC, byte-level; GPTNeoXTokenizerFast. The
    # converter names its digest `olmo` (OLMo 1.7's, the same tokenizer, comes later in its table).
    "mpt": dict(vocab="mpt", converter="olmo", check_type="mpt", normalizer=NFC, pre=BYTE_LEVEL(True),
                config={"tokenizer_class": "GPTNeoXTokenizerFast", "bos_token": "<|endoftext|>",
                        "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}),
}


def family_tokenizer(name, out):
    """tokenizer(), for FAMILIES[name]: the release's files rebuilt, checked as FAMILIES says."""
    f = FAMILIES[name]
    gguf = gguf_py()
    get = read_gguf(fetch() / "models" / f"ggml-vocab-{f['vocab']}.gguf")[0].__getitem__
    tokens, types, merges = get("tokenizer.ggml.tokens"), get("tokenizer.ggml.token_type"), get("tokenizer.ggml.merges")
    normal, control, user = int(gguf.TokenType.NORMAL), int(gguf.TokenType.CONTROL), int(gguf.TokenType.USER_DEFINED)
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": types[i] != control, "special": types[i] == control}
             for i, t in enumerate(tokens) if types[i] == control or (types[i] == user and not t.startswith("[PAD"))]
    last = max(i for i, t in enumerate(types) if t == normal)
    vocab = {t: i for i, t in enumerate(tokens) if types[i] == normal or (types[i] == control and i < last)}
    post = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    config = dict(f["config"])
    if f.get("bos"):
        b = config["bos_token"]
        post = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": b, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": b, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": b, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {b: {"id": b, "ids": [tokens.index(b)], "tokens": [b]}}}
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": f["normalizer"],
          "pre_tokenizer": f["pre"], "post_processor": post,
          "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                    "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                    "vocab": vocab, "merges": [m.split(" ", 1) for m in merges]}}
    config["added_tokens_decoder"] = {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
                                      for a in added}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False))
    from transformers import AutoTokenizer
    (out / "config.json").write_text(json.dumps({"model_type": f["check_type"]}))
    try:
        tok = AutoTokenizer.from_pretrained(str(out))
    finally:
        (out / "config.json").unlink()
    moved = [(a["content"], a["id"], tok.convert_tokens_to_ids(a["content"])) for a in added
             if tok.convert_tokens_to_ids(a["content"]) != a["id"]]
    if moved:
        sys.exit(f"gguf_oracle: {name} ({type(tok).__name__}) gives {len(moved)} added tokens other ids than the vocab file "
                 f"(content, file's, transformers'): {moved[:5]}")
    tests = vocab_tests(f["vocab"])
    for text, want in tests:
        got = tok.encode(text, add_special_tokens=False)
        if got != want:
            sys.exit(f"gguf_oracle: {name} ({type(tok).__name__}) encodes {text!r} as {got}, llama.cpp's test {want}")
    digest = hashlib.sha256(str(tok.encode(check_text())).encode()).hexdigest()
    want = converter_digests(f["converter"])
    if digest not in want:
        sys.exit(f"gguf_oracle: the rebuilt {name} tokenizer ({type(tok).__name__}) has digest {digest}, the converter's {', '.join(want)}")
    print(f"gguf_oracle: {name}: {type(tok).__name__} under model_type {f['check_type']}: {len(tests)} tests equal llama.cpp's, "
          f"digest {f['converter']}'s", file=sys.stderr)
    return digest


def main(argv):
    if argv[:1] == ["fetch"] and len(argv) == 1:
        for name in MISTRAL_FILES:  # mistral-common's wheel too (Mistral's tokenizers)
            mistral_model(name)
        print(fetch())
    elif argv[:1] == ["tokenizer"] and len(argv) == 3 and (argv[1] in PATTERNS or argv[1] in FAMILIES or argv[1] == "tekken"):
        print(tokenizer(argv[1], argv[2]))
    elif argv[:1] == ["tokenizer"] and len(argv) == 3 and (argv[1] in SPM or argv[1] in MISTRAL_SPM):
        print(f"{argv[1]}: tokenizer.model, {spm_tokenizer(argv[1], argv[2])} texts tokenized as llama.cpp's tests say")
    elif argv[:1] == ["serve"] and len(argv) == 1:  # _ConverterServer's process
        serve()
    elif argv[:1] == ["build"] and len(argv) == 1:
        print(build())
    elif argv[:1] == ["check"] and len(argv) == 1:
        import tempfile
        for name in [*PATTERNS, *FAMILIES, "tekken"]:
            with tempfile.TemporaryDirectory() as d:
                print(f"{name}: {tokenizer(name, d)} (the converter's)")
        for name in SPM:
            with tempfile.TemporaryDirectory() as d:
                print(f"{name}: {spm_tokenizer(name, d)} texts tokenized as llama.cpp's tests say")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
