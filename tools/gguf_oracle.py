#!/usr/bin/env python3
"""llama.cpp's converter as the oracle of dcpctl's GGUF output (docs/gguf.md), fetched, not vendored.

    tools/gguf_oracle.py fetch                 # the sdist into ~/.cache/dcpctl, unpacked; prints the llama.cpp dir
    tools/gguf_oracle.py tokenizer NAME DIR    # a real tokenizer.json for NAME (llama-bpe, qwen2) in DIR,
                                               # or a real SentencePiece tokenizer.model (llama-spm: Llama 2's)
    tools/gguf_oracle.py check                 # the BPE tokenizers rebuilt, each named by the converter's
                                               # table; llama-spm's, tokenizing llama.cpp's test texts
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
(SPM below), checked by sentencepiece's ids for the test texts beside the vocab file.

`build`: llama.cpp itself, as llama-cpp-python 0.3.36 builds it from the same sdist (pip wheel, no
build isolation: the backend is .venv's pinned scikit-build-core and ninja, the system's cmake and
C/C++ compiler), CPU only and portable: BUILD_FLAGS turn off -march=native and every x86 extension
flag (ggml-cpu is then plain x86-64; ggml-base, whose ggml-quants.c holds the reference quantizers,
never gets them), no OpenMP, no llava/mtmd. The wheel and its install (with diskcache, its one
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
           "models/ggml-vocab-llama-bpe.gguf", "models/ggml-vocab-qwen2.gguf",
           "models/ggml-vocab-llama-spm.gguf")

# llama.cpp's CMake options for the oracle build: CPU only, nothing tuned to the building machine.
BUILD_FLAGS = ("-DGGML_NATIVE=OFF", "-DGGML_SSE42=OFF", "-DGGML_AVX=OFF", "-DGGML_AVX2=OFF", "-DGGML_BMI2=OFF",
               "-DGGML_FMA=OFF", "-DGGML_F16C=OFF", "-DGGML_AVX512=OFF", "-DGGML_OPENMP=OFF", "-DGGML_CCACHE=OFF",
               "-DLLAVA_BUILD=OFF")
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
    env = dict(os.environ, CMAKE_ARGS=" ".join(BUILD_FLAGS), FORCE_CMAKE="1",
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
    done.write_text(f"built in {seconds:.0f} s with {env['CMAKE_BUILD_PARALLEL_LEVEL']} job(s): {' '.join(BUILD_FLAGS)}\n")
    return site


def llama_cpp():
    """llama-cpp-python's package, built from the sdist (build())."""
    sys.path.insert(0, str(build()))
    import llama_cpp as lc
    return lc


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
    r = subprocess.run([sys.executable, *map(str, python_args), str(fetch() / "convert_hf_to_gguf.py"), str(hf),
                        "--outfile", str(outfile),
                        *map(str, args)], capture_output=True, text=True,
                       env=env or dict(os.environ, PYTHONPATH=str(fetch() / "gguf-py")))
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


def converter_digests(name):
    """The chkhsh values the converter's get_vocab_base_pre maps to `name` (qwen2 has several)."""
    text = (fetch() / "conversion" / "base.py").read_text()
    found = [d for d, res in re.findall(r'if chkhsh == "([0-9a-f]{64})":\n(?:\s*#.*\n)*\s*res = "([^"]+)"', text) if res == name]
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
    """tokenizer(), built from llama.cpp's vocab file."""
    gguf = gguf_py()
    r = gguf.GGUFReader(str(fetch() / "models" / f"ggml-vocab-{name}.gguf"))
    get = lambda k: r.fields[k].contents()  # noqa: E731
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


def spm_tokenizer(name, out):
    """tokenizer.model for `name` (SPM) in `out`, built from llama.cpp's vocab file and checked:
    sentencepiece itself must give llama.cpp's ids for every one of its test texts. Kept under
    CACHE/tokenizers as tokenizer() keeps its files. Returns the number of texts checked."""
    import shutil
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
    r = gguf.GGUFReader(str(fetch() / "models" / f"ggml-vocab-{name}.gguf"))
    get = lambda k: r.fields[k].contents()  # noqa: E731
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


def main(argv):
    if argv[:1] == ["fetch"] and len(argv) == 1:
        print(fetch())
    elif argv[:1] == ["tokenizer"] and len(argv) == 3 and argv[1] in PATTERNS:
        print(tokenizer(argv[1], argv[2]))
    elif argv[:1] == ["tokenizer"] and len(argv) == 3 and argv[1] in SPM:
        print(f"{argv[1]}: tokenizer.model, {spm_tokenizer(argv[1], argv[2])} texts tokenized as llama.cpp's tests say")
    elif argv[:1] == ["build"] and len(argv) == 1:
        print(build())
    elif argv[:1] == ["check"] and len(argv) == 1:
        import tempfile
        for name in PATTERNS:
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
