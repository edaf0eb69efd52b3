#!/usr/bin/env python3
"""The model schema's precision policy and key checks against transformers itself, type by type.

    hf_schema_sweep_test.py DCPCTL sample|all|rest|flags [--shard K/N] [-j N] [--mem-gb G] [TYPE ...]

For each model type (`sample`: the types below; `all`: every type of src/check/hf_schema.json;
`rest`: every type but the sample's; `flags`: every case TYPE[FIELD=VALUE], the type built with a
config field set under which the schema requires keys, e.g. qwen3[attention_bias=true], and every
layer-pattern case TYPE[@FIELD], the type built with a layer-pattern field changed, e.g.
deepseek_v2[@first_k_dense_replace]: a dense first layer; or the TYPEs and cases named), a tiny
float32 model of the type's schema class (tools/hf_schema.py's tiny_config: the class defaults,
sizes cut, 4 layers, retried with the relations its validators check kept where the cut is refused
or does not build; seed 0), made of distinct sizes (hf_schema.sweep_config: head_dim not hidden_size
/ heads, fewer key/value heads, intermediate sizes no two alike; one configuration for bf16, another
for fp16: SOURCES) and saved by transformers' save_pretrained is the source, and for each target
dtype in bf16 and fp16 (each on its own source):
  - `dcpctl consolidate SRC -o OUT/ --dtype D` exits 0 (its post-write checks, the schema's among
    them, pass);
  - OUT holds the keys, dtypes and bytes of transformers' own from_pretrained(SRC, dtype=D) +
    save_pretrained, tensor for tensor (what transformers keeps in float32, after its load-time
    renames, is what the policy kept);
  - from_pretrained(OUT) reports no missing or unexpected keys;
  - `dcpctl verify SRC` exits 0 (the schema accepts what transformers itself saves), and so does
    `verify` of transformers' own bf16 and fp16 folders (the references above).
A type whose from_pretrained reads a file beside the weights that save_pretrained does not write
(SIDECARS: Qwen2.5-Omni's speakers, spk_dict.pt) has it written into its source folder, as a released
folder ships it, and its export must carry it byte for byte (dcpctl's assets).
A type whose tiny folder transformers itself cannot reload (NOT_RELOADED) is listed, not failed, with
the reason; so is one NOT_BUILT names for a reason outside transformers (a missing optional package).
Any other type that is not built tiny fails the sweep, naming why: tiny_config builds every type
transformers builds (the sweep covers them all).

How it runs: a fork server. This process imports torch and transformers once, runs one type's
transformers round trip as a warm-up (the shared modules and caches every type needs; --warm ''
leaves it out), freezes its objects out of the garbage collector's way, then forks a child per type,
-j N at a time (default 1). Each child sweeps one type and writes its checks to a file: its
transformers steps (building, saving, from_pretrained) run under a memory cap (RLIMIT_AS of --mem-gb
GiB, default 10; lifted for the dcpctl runs), so a type that needs more fails "not built tiny:
memory"; a child that dies (killed, a crash, past --cpu-limit CPU seconds or --timeout seconds
of wall) is a failure naming the type; neither stops the others. torch runs on one thread (the
child's models are tiny; two shards share two cores). A child's modules (its model's modeling file)
die with it. --shard K/N sweeps every Nth type from the Kth (of the sorted list), so N shards cover
the types once (ctest: hf-schema-sweep is the sample, hf-schema-sweep-all-K `rest --shard K/4`).
Each type's CPU time (the child and its dcpctl runs, from wait4) and where it went (--profile
prints it per type: import of its modeling file, build and save, verify, transformers' reference
round trips, the consolidates, the comparison, the loads of the exports) are summed at the end.

The sample covers transformers 5.24's Dory (its config.json counts two blocks a layer: the
schema's saved_config) and Sarvam-MoE (Glm4MoeForCausalLM with its own config class: a fused
query_key_value saved, expert_bias renamed on load), bfloat16 saves (TYPE[saved=bf16]), the load-time renames (hy_v3 `mlp.expert_bias`, kolibri1, flint
`self_attn.softmax_offset`), T5's `wo` kept in float16 loads, MoE router biases (deepseek_v3,
ernie4_5_moe's `moe_statics`), zero experts (longcat_flash), fused experts (gpt_oss), a plain
decoder (llama) and a gate-less shared expert (glm4_moe); a class's ignore-unexpected regex that
matches its own keys (gpt2), an embedding under another name and a config flag (m2m_100's
shared embedding), experts numbered in their names (nllb-moe's experts.expert_N) and a released
hybrid whose schema real_config completes (lfm2_moe, LiquidAI's LFM2-8B-A1B: its null layer_types
made of its conv and attention kinds; a float32 router `feed_forward.expert_bias`; per-expert
w1/w2/w3 on disk, fused in memory), and Mixtral with an explicit head_dim (its attention wider than
hidden_size, as the distinct sizes make every type's: the schema once took one for the other).

What transformers produced for a case (its source folder, its reference folders) is kept between
runs in DCPCTL_SWEEP_CACHE (default ~/.cache/dcpctl/schema-sweep; 0: none), under a digest of
transformers' and torch's versions, this file, tools/hf_schema.py and the schema: every dcpctl run, the
comparison and from_pretrained of the export still run each time (cache_open).

Exit status: 0 pass, 1 failure, 77 skip (torch/transformers missing; a failure under CI).
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import io
import json
import logging
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from testlib import EXIT_OK, HF_OUTPUTS, TALLY, check, expect_rc, hf_loaded, run, same_tensor, summary  # noqa: E402

# One thread per process: the models are tiny (threads cost more than they give) and the shards
# run two at a time on two cores. torch is imported before this script runs (tests/torch_main.py):
# set_num_threads below sets its pools; the variables reach what starts later.
for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_v] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only: nothing asks the Hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SAMPLE = ["llama", "t5", "deepseek_v3", "ernie4_5_moe", "hy_v3", "kolibri1", "flint", "longcat_flash", "gpt_oss",
          "glm4_moe", "gpt2", "m2m_100", "nllb-moe", "lfm2_moe", "mixtral", "dory", "sarvam_moe"]
# Cases (flag_cases): a type built with a config field set that brings keys, checked as a type is.
# `flags` sweeps every case of the schema (253 with transformers 5.23: 247 pass, 6 transformers does not
# build or reload with the field alone; ~140 s of CPU: ctest's hf-schema-sweep-flags-1 and -2, label
# slow); the sample takes an attention-bias flag, an MLP-bias flag and a null LoRA rank.
FLAG_SAMPLE = ["qwen3[attention_bias=true]", "llama[mlp_bias=true]", "deepseek_v2[q_lora_rank=null]",
               # layer patterns (pattern_cases): DeepSeek-V2's dense first layer, Qwen3-MoE's MoE
               # every other layer
               "deepseek_v2[@first_k_dense_replace]", "qwen3_moe[@decoder_sparse_step]",
               # bfloat16 saves (SAVED_BF16): an MoE router transformers 5.24 keeps float32
               # (gate.weight), a vision-language model's float32 buffers and router
               "deepseek_v3[saved=bf16]", "glm4v_moe[saved=bf16]"]

# The types the sweep of every type (`all`) fails on, each with why (swept with transformers
# 5.23.0). Their failures are printed, not counted; one that passes fails the sweep until it is
# taken off this list. Fixed and taken off: gpt2 and gpt-sw3 (GPT-2's _keys_to_ignore_on_load_unexpected
# `attn.bias`, a regex, also matches its own c_attn.bias: it is now applied only to keys the model does
# not define), fsmt and deepseek_v4 (heads under other names: lm-head-missing asks the schema), m2m_100
# (its embedding is model.shared.weight: embedding-missing asks the schema), CTRL and git (a pattern
# of two shapes gets no dims); opt, blip-2, instructblip, instructblipvideo (OPT's project_in/out)
# and roformer (embeddings_project): keys that exist when two size fields differ, the schema's
# "A!=B" conditions; marian (decoder_vocab_size rows), mllama (text_config.vocab_size+8) and moshi
# (vocab_size+1): vocab-size-mismatch compares the rows with the schema's formula; bigbird_pegasus
# (BigBirdPegasusForCausalLM never ties its head: the schema's head_untied, so no tied-head-differs);
# granite_speech5_ctc and granite_speech5_encoder (BatchNorm's int64 num_batches_tracked, which
# transformers' dtype plan casts to float32 on load: dcpctl keeps it as saved, from_pretrained of
# the export holds the same float32 tensor, checked); mamba2 (its mixer.out_proj width was 2*hidden_size, expand's
# default taken for a constant: the generator now doubles expand too, so the width gets no form);
# inkling_mm_model (its vision layers
# are numbered in their names, model.visual.layers.norm_N / linear_N, which the schema held as 15 fixed
# keys of its 8-layer build: the schema's "named" indices now stand for them, counted with
# vision_config.n_layers).
KNOWN_GAPS: dict[str, str] = {}

# Types not built tiny here for a reason outside transformers and tiny_config: (what the reason
# prints, why). Any other type of the schema that is not built tiny fails the sweep. (Inkling's
# vision tower needs scipy to build with fewer layers than output scales: tools/requirements.txt.)
NOT_BUILT: dict[str, tuple[str, str]] = {}

# Types transformers itself cannot round-trip tiny: its from_pretrained of its own save_pretrained
# folder reports missing and unexpected keys, so there is no reference to compare with. Listed as not
# built, with the reason printed; one that reloads clean fails the sweep until it is taken off.
# (shieldgemma2: the schema's class for it is the image-text-to-text mapping's Gemma3ForConditionalGeneration;
# released folders name ShieldGemma2ForImageClassification, which reloads its own folder and the
# released names clean, and which the schema does not hold: verify of such a folder is a
# schema-not-checked note, not a refusal.)
NOT_RELOADED = {
    "shieldgemma2": "Gemma3ForConditionalGeneration built from ShieldGemma2Config saves model.language_model.model.*; "
                    "from_pretrained reads the folder as Gemma3Config (model_type shieldgemma2), whose conversion "
                    "mapping's first step is shieldgemma2's PrefixChange adding `model.` (model.model.language_model."
                    "model.*), which the Gemma 3 rename of ^language_model.model then no longer matches: every "
                    "language-model key is reported unexpected and missing (55 missing, 54 unexpected tiny), and "
                    "the reference would be a model initialised at random",
}

# Files a type's from_pretrained reads beside the weights that save_pretrained does not write (a
# released folder ships them): written into the source folder after save_pretrained, as a real
# folder has them; dcpctl's export must carry them (its assets) for from_pretrained of it to load.
# Qwen2_5OmniForConditionalGeneration.from_pretrained raises without spk_dict.pt, then
# load_speakers puts torch.load(weights_only=True) of it in speaker_map: {speaker name: its
# conditioning}, read only when generating speech; an empty dict is what it loads without speakers.
SIDECARS = {
    "qwen2_5_omni": {"spk_dict.pt": lambda path: __import__("torch").save({}, path)},
}


def load_with_info(cls, path: Path, dt, t: str):
    """cls.from_pretrained(path, dtype=dt, output_loading_info=True). For a type with SIDECARS, whose
    class's own from_pretrained reads them after PreTrainedModel's and breaks with
    output_loading_info (Qwen2.5-Omni's calls load_speakers on the (model, info) pair it gets back):
    its own from_pretrained first (it raises where the folder lacks spk_dict.pt), then its parent's
    for the missing and unexpected keys."""
    own = getattr(getattr(cls, "config_class", None), "model_type", None)
    if own and own != t:
        # A class whose config class is another type's (transformers 5.24's exaone and sarvam_moe
        # load as LlamaForCausalLM and Glm4MoeForCausalLM): read with the folder's own config class,
        # as AutoModelForCausalLM reads it. The class's own config would say model_type llama over
        # the tensors of exaone's load-time renames, reverted on save: a folder transformers itself
        # then loads with every key missing.
        from transformers import AutoConfig
        config = AutoConfig.from_pretrained(path)
        return cls.from_pretrained(path, config=config, dtype=dt, output_loading_info=True)
    if t not in SIDECARS:
        return cls.from_pretrained(path, dtype=dt, output_loading_info=True)
    own = cls.from_pretrained(path, dtype=dt)
    del own
    return super(cls, cls).from_pretrained(path, dtype=dt, output_loading_info=True)


def tensors(d: Path) -> dict:
    from safetensors.torch import load_file
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def quiet() -> None:
    import transformers
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def cpu_now() -> float:
    """CPU seconds of this process and of the processes it started and waited for."""
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


@contextlib.contextmanager
def phase(phases: dict, name: str):
    """Adds the CPU and wall seconds of the block to phases[name] ([cpu, wall])."""
    c0, w0 = cpu_now(), time.monotonic()
    try:
        yield
    finally:
        p = phases.setdefault(name, [0.0, 0.0])
        p[0] += cpu_now() - c0
        p[1] += time.monotonic() - w0


# The memory cap of the transformers steps (bytes of address space; 0: none), set in each child.
CAP = [0]


class OutOfMemory(Exception):
    pass


@contextlib.contextmanager
def capped():
    """The transformers steps of a type run under RLIMIT_AS = CAP (the soft limit: lifted again
    after, so the dcpctl runs between them are not capped); an allocation past it is OutOfMemory."""
    if not CAP[0]:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (CAP[0], hard))
    try:
        yield
    except MemoryError as e:
        raise OutOfMemory(f"MemoryError past the {CAP[0] >> 30} GiB cap") from e
    except RuntimeError as e:
        if "allocate" in str(e) and "memory" in str(e):
            raise OutOfMemory(f"{str(e)[:120]} (the {CAP[0] >> 30} GiB cap)") from e
        raise
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def parameter_bytes(cls, cfg) -> int:
    """The float32 bytes of cls built from cfg, counted on the meta device (no memory, no init).
    What the class refuses of cfg it refuses there too, raised as is (Zamba's tie_weights_keys,
    after every layer is built); 0 where the meta device itself is refused (a module that reads a
    tensor's values in __init__): the real build then says."""
    import torch
    try:
        with torch.device("meta"):
            model = cls._from_config(cfg, dtype=torch.float32)
    except Exception as e:
        if isinstance(e, NotImplementedError) or "meta" in str(e).lower():
            return 0
        raise
    return 4 * sum(p.numel() for p in model.parameters())


def flag_cases(schema: dict) -> list:
    """TYPE[FIELD=VALUE] for each condition under which the schema requires keys of a type (a
    boolean config field set, an optional integer null: the keys a flag brings), sorted."""
    out = []
    for t, s in sorted(schema["types"].items()):
        for cond in sorted({k[3] for k in s["keys"] if k[3] and len(k) > 4 and k[4]}):
            if "!=" not in cond and cond.rsplit("=", 1)[1] in ("true", "false", "null"):
                out.append(f"{t}[{cond}]")
    return out


def pattern_cases(schema: dict) -> list:
    """TYPE[@FIELD] for each layer-pattern field the generator varied for a type (its "patterns":
    first_k_dense_replace, decoder_sparse_step, mlp_only_layers, mlp_layer_types, ...), sorted."""
    return [f"{t}[@{f}]" for t, s in sorted(schema["types"].items()) for f in s.get("patterns", [])]


def case_of(t: str) -> tuple:
    """(type, None) of a type; (type, (field path, value)) of a case TYPE[FIELD=VALUE]; (type,
    ("@FIELD", None)) of a layer-pattern case TYPE[@FIELD]; (type, (SAVED_BF16, None)) of TYPE[saved=bf16]."""
    if not t.endswith("]"):
        return t, None
    base, cond = t[:-1].split("[", 1)
    if cond.startswith("@"):
        return base, (cond, None)
    if cond == SAVED_BF16:
        return base, (cond, None)
    field, val = cond.rsplit("=", 1)
    return base, (field, {"true": True, "false": False, "null": None}[val])


# A case TYPE[saved=bf16]: the tiny model built in bfloat16 (`_from_config(config, dtype=bfloat16)`,
# as a bf16 training run or `model.to(bfloat16)` holds it) and saved so: config.json says bfloat16, and
# what the class creates in float32 whatever the default dtype (a vision tower's float32 buffers,
# parameters made with an explicit dtype) stays float32 in the folder. The sweep's other sources are
# float32 saves; their bf16 references are from_pretrained(dtype=bfloat16) + save_pretrained, whose
# float32 tensors are the dtype plan's. Checked as a type is, in bf16 on the first configuration.
SAVED_BF16 = "saved=bf16"


def with_field(cfg, field: str, value):
    """A copy of cfg with the (dotted: a sub-config's) field set, as a config.json saying so is read."""
    import copy
    cfg = copy.deepcopy(cfg)
    c = cfg
    parts = field.split(".")
    for p in parts[:-1]:
        c = getattr(c, p)
    setattr(c, parts[-1], value)
    return cfg


def load_schema() -> dict:
    return json.loads((HERE.parent.parent / "src" / "check" / "hf_schema.json").read_text())


def warm_up(t: str, schema: dict) -> None:
    """One type's transformers round trip in the server, before any fork (no dcpctl, no checks):
    what every type's steps import and cache (modeling_utils, the loaders, safetensors) is then
    loaded once, not once per child."""
    import torch
    import transformers
    import hf_schema
    cls = getattr(transformers, schema["types"][t]["class"])
    with tempfile.TemporaryDirectory(prefix="dcpctl-sweep-warm-") as tmp, \
            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.manual_seed(0)
        cls._from_config(hf_schema.tiny_config(t), dtype=torch.float32).save_pretrained(Path(tmp) / "src")
        for dt in (torch.bfloat16, torch.float16):
            model, _ = cls.from_pretrained(Path(tmp) / "src", dtype=dt, output_loading_info=True)
            model.save_pretrained(Path(tmp) / "ref")
            del model
            tensors(Path(tmp) / "ref")
            shutil.rmtree(Path(tmp) / "ref")


def _die_with_parent() -> None:
    """A child outlives no server (ctest's timeout kills the server): SIGKILL when it exits."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def child(t: str, schema: dict, dcpctl: str, tmp: str, result: Path, log: Path, mem_gb: float,
          cpu_limit: int) -> int:
    """In a forked child: sweeps type t, writes {"passed", "failures", "not_built", "phases"} to
    result (the server judges them; a child that writes none died). Its output goes to log."""
    code = 1
    try:
        os.setpgid(0, 0)  # its dcpctl runs with it: the server kills the group on a timeout
        _die_with_parent()
        # torch's pthreadpool is corrupt after a fork and made again on its first use, unguarded:
        # two threads meeting that first use at once can find none ("pool INTERNAL ASSERT FAILED
        # ... Invalid thread pool!", caffe2's pthreadpool-cpp.cc; once in three sample runs here).
        # Make it now, while the child has one thread.
        import torch
        torch.set_num_threads(1)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit, hard))  # SIGXCPU past it: a hang guard in CPU time
        CAP[0] = int(mem_gb * (1 << 30))
        TALLY.passed, TALLY.failures = 0, []
        HF_OUTPUTS.__init__()
        SIZES_REFUSED.clear()
        not_built: dict[str, str] = {}
        phases: dict[str, list] = {}
        work = Path(tmp) / t
        try:
            sweep_type(t, schema, str(work), dcpctl, not_built, phases)
            HF_OUTPUTS.check(TALLY.check)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        result.write_text(json.dumps({"passed": TALLY.passed, "failures": TALLY.failures,
                                      "not_built": not_built.get(t), "phases": phases,
                                      "sizes_refused": SIZES_REFUSED.get(t)}))
        code = 0
    except BaseException:  # noqa: BLE001 - the server names the type and shows this
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
    return code


def judge_child(t: str, result: Path, log: Path, rc: int, why_killed: str | None, mem_gb: float) -> dict:
    """A child's result, or what its end says: killed past the memory cap in a way Python could
    not catch (the kernel's OOM killer, an abort in a C allocation) is "not built tiny: memory";
    any other end without a result (a crash, a timeout, past the CPU limit) is a failure naming it."""
    tail = log.read_text(errors="replace").strip()[-600:] if log.exists() else ""
    if result.exists() and not why_killed:
        out = json.loads(result.read_text())
    elif why_killed:
        out = {"passed": 0, "failures": [], "died": f"{t}: {why_killed}: {tail}", "not_built": None}
    elif rc == -signal.SIGXCPU:
        out = {"passed": 0, "failures": [], "died": f"{t}: its process ran past its CPU limit (SIGXCPU): {tail}",
               "not_built": None}
    elif rc in (-9, 137) or "MemoryError" in tail or "std::bad_alloc" in tail or "allocate" in tail:
        out = {"passed": 0, "failures": [], "not_built": f"memory: its process ended with {rc} past the "
               f"{mem_gb:g} GiB cap: {tail[-200:]}"}
    else:
        out = {"passed": 0, "failures": [], "died": f"{t}: its process ended with {rc} and no result: {tail}",
               "not_built": None}
    out["log"] = tail if result.exists() else ""
    return out


def sweep_forked(todo: list, schema: dict, dcpctl: str, tmp: str, jobs: int, mem_gb: float, timeout: float,
                 cpu_limit: int, report) -> None:
    """Forks a child per type, jobs at a time; report(t, result) as each ends (result["seconds"]:
    wall, result["cpu"]: the child's CPU and its dcpctl runs', from wait4)."""
    queue, running = list(todo), {}  # pid -> [type, result, log, start, why killed]
    while queue or running:
        while queue and len(running) < jobs:
            t = queue.pop(0)
            result, log = Path(tmp) / f"{t}.result.json", Path(tmp) / f"{t}.log"
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os._exit(child(t, schema, dcpctl, tmp, result, log, mem_gb, cpu_limit))
            running[pid] = [t, result, log, time.monotonic(), None]
        pid, status, ru = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            now = time.monotonic()
            for p, r in running.items():
                if r[4] is None and now - r[3] > timeout:
                    r[4] = f"its process ran past {timeout:g} s of wall time"
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p, signal.SIGKILL)
            time.sleep(0.05)
            continue
        if pid not in running:
            continue
        t, result, log, start, why_killed = running.pop(pid)
        out = judge_child(t, result, log, os.waitstatus_to_exitcode(status), why_killed, mem_gb)
        out["seconds"] = time.monotonic() - start
        out["cpu"] = ru.ru_utime + ru.ru_stime
        out["rss"] = ru.ru_maxrss / (1 << 20)  # GiB (ru_maxrss is KiB): the child's peak, the server's pages it touched included
        report(t, out)


def shard_of(types: list, spec: str) -> list:
    k, n = (int(x) for x in spec.split("/"))
    if not 1 <= k <= n:
        raise SystemExit(f"--shard {spec}: wanted K/N with 1 <= K <= N")
    return types[k - 1::n]


def main() -> int:
    ap = argparse.ArgumentParser(usage=__doc__.split("\n")[2].strip())
    ap.add_argument("dcpctl")
    ap.add_argument("which", choices=["sample", "all", "rest", "flags"])
    ap.add_argument("types", nargs="*")
    ap.add_argument("--shard", default="1/1")
    ap.add_argument("-j", type=int, default=1, help="children at a time")
    ap.add_argument("--mem-gb", type=float, default=10.0)
    ap.add_argument("--timeout", type=float, default=1800.0, help="wall seconds a type's child may run")
    ap.add_argument("--cpu-limit", type=int, default=600, help="CPU seconds a type's child may use")
    ap.add_argument("--warm", default="llama", help="the type the server round-trips before forking ('': none)")
    ap.add_argument("--profile", action="store_true", help="print each type's CPU seconds per phase")
    ap.add_argument("--one-dtype", action="store_true", help="each type in bf16 or fp16, not both (sources_of)")
    a = ap.parse_intermixed_args()
    ONE_DTYPE[0] = a.one_dtype and os.environ.get("DCPCTL_SWEEP_BOTH_DTYPES") != "1"
    dcpctl, which = os.path.abspath(a.dcpctl), a.which
    started, cpu0 = time.monotonic(), 0.0  # CPU: the whole process, the import of torch before this script included
    import torch
    import transformers  # noqa: F401 (the skip when it is missing)
    torch.set_num_threads(1)
    with contextlib.suppress(RuntimeError):  # set once per process, before any inter-op work
        torch.set_num_interop_threads(1)
    quiet()
    schema = load_schema()
    cache_open()
    types = a.types or (SAMPLE + FLAG_SAMPLE if which == "sample" else
                        flag_cases(schema) + pattern_cases(schema) if which == "flags" else
                        sorted(t for t in schema["types"] if which == "all" or t not in SAMPLE))
    types = shard_of(types, a.shard)
    not_built: dict[str, str] = {}
    todo = []
    for t in types:
        base = case_of(t)[0]
        if base not in schema["types"]:
            check(False, f"{t}: not in the schema ({schema['failed'].get(base) or schema.get('skipped', {}).get(base)})")
        else:
            todo.append(t)
    if a.warm:
        warm_up(a.warm, schema)
    gc.collect()
    gc.freeze()  # the server's objects: no child's collection walks them, no page of them is copied for it
    server_cpu = cpu_now() - cpu0

    def judge(t: str, failures: list, built_not: str | None) -> None:
        if built_not:
            not_built[t] = built_not
        if which != "sample" and case_of(t)[0] in KNOWN_GAPS:
            for msg in failures:
                print(f"known gap: {msg[:300]}")
            print(f"known gap {t}: {KNOWN_GAPS[case_of(t)[0]]}")
            check(bool(failures) or t in not_built, f"{t} now passes the sweep: take it off KNOWN_GAPS")
        else:
            for msg in failures:
                check(False, msg)

    phases: dict[str, list] = {}
    at_tiny: dict[str, str] = {}  # case -> why its class refused a distinct-size configuration
    done = [0, 0.0, 0.0, ""]  # types, CPU seconds, the largest peak RSS (GiB) and its type

    def report(t: str, r: dict) -> None:
        done[0] += 1
        done[1] += r["cpu"]
        if r["rss"] > done[2]:
            done[2], done[3] = r["rss"], t
        TALLY.passed += r["passed"]
        for k, (c, w) in (r.get("phases") or {}).items():
            p = phases.setdefault(k, [0.0, 0.0])
            p[0] += c
            p[1] += w
        state = ("not built: " + r["not_built"][:60]) if r["not_built"] else \
            "its process died" if r.get("died") else \
            f"{len(r['failures'])} failed" if r["failures"] else "ok"
        print(f"[{done[0]}/{len(todo)}] {t}: {r['passed']} checks, {state} ({r['seconds']:.1f} s wall, "
              f"{r['cpu']:.1f} s CPU, peak {r['rss']:.2f} GiB)", flush=True)
        if a.profile and r.get("phases"):
            print("    " + ", ".join(f"{k} {c:.2f}" for k, (c, _) in r["phases"].items()) + " (CPU s)", flush=True)
        if r.get("log") and a.profile:  # a failure's own line says what; a death's carries the log's tail
            print("    its output: " + r["log"][-600:].replace("\n", "\n    "), flush=True)
        judge(t, r["failures"], r["not_built"])
        if r.get("sizes_refused"):
            at_tiny[t] = r["sizes_refused"]
        if r.get("died"):  # a crash or a hang is a failure, known gap or not
            check(False, r["died"])

    with tempfile.TemporaryDirectory(prefix="dcpctl-sweep-") as tmp:
        sweep_forked(todo, schema, dcpctl, tmp, max(1, a.j), a.mem_gb, a.timeout, a.cpu_limit, report)
    for t, why in sorted(not_built.items()):
        base = case_of(t)[0]
        reason = NOT_RELOADED.get(base) or (NOT_BUILT[base][1] if base in NOT_BUILT else None)
        print(f"not built tiny by transformers: {t}: {why}" + (f" (why: {reason})" if reason else ""))
    for t in todo:
        if case_of(t)[1]:
            # A case: transformers may refuse the field set on that type (a tie flag its tied-weight
            # check refuses, a combination a validator forbids): listed above, not failed.
            continue
        if t in NOT_RELOADED:
            check("from_pretrained of its own save_pretrained folder" in not_built.get(t, ""),
                  f"{t}: transformers now reloads its own folder: take it off NOT_RELOADED ({not_built.get(t)})")
        elif t in not_built:
            # Every other type of the schema builds tiny (tiny_config keeps the relations its validators
            # check): one that does not is a failure naming why, unless NOT_BUILT says why not here.
            expected = NOT_BUILT.get(t)
            check(expected is not None and expected[0] in not_built[t],
                  f"{t}: not built tiny ({not_built[t][:200]}): tools/hf_schema.py's tiny_config should build "
                  f"every type transformers builds" + (f"; NOT_BUILT expects {expected[0]!r}" if expected else ""))
    for t, why in sorted(at_tiny.items()):
        print(f"swept at TINY's sizes (transformers builds, saves or reloads no distinct-size configuration of it): {t}: {why}")
    cpu = cpu_now() - cpu0
    print(f"swept {len(todo) - len(not_built)} of {len(types)} types (shard {a.shard}, {a.j} child(ren) at a "
          f"time) in {time.monotonic() - started:.0f} s wall, {cpu:.0f} s CPU: the server's imports and warm-up "
          f"{server_cpu:.1f} s, the types {done[1]:.0f} s ({done[1] / max(1, done[0]):.2f} s a type); the largest "
          f"child {done[2]:.2f} GiB resident ({done[3]})", flush=True)
    if ONE_DTYPE[0]:
        n = sum(1 for t in todo if not case_of(t)[1] and sources_of(t)[0][0] == "d0")
        print(f"--one-dtype: {n} types swept in bf16 (d0), {sum(1 for t in todo if not case_of(t)[1]) - n} in fp16 (d1)")
    if phases:
        print("where the types' CPU went (s): " + ", ".join(f"{k} {c:.1f}" for k, (c, _) in phases.items()), flush=True)
    if which == "sample":
        check(not not_built, f"the sample's types and cases all build tiny: {sorted(not_built)}")
    return summary("hf-schema-sweep")


# The sizes each target dtype's source folder is built in (hf_schema.sweep_config): the bf16 checks
# on distinct-size configuration 0 (head_dim 5/4 of hidden_size / heads, key/value heads half the
# heads, intermediate sizes no two alike), the fp16 checks on configuration 1 (head_dim 7/4, one
# key/value head): no product of the tiny sizes coincides (TINY's own: 4 heads x 16 = 64 =
# hidden_size), so a formula true of one configuration only fails here. A type whose class builds
# neither is swept at TINY's sizes and said so (SIZES_REFUSED).
SOURCES = (("d0", ("bf16",)), ("d1", ("fp16",)))
# --one-dtype (CI's shards of every type: its time): each type swept in one of them, SOURCES[crc32 of
# its name % 2] (about half the types each; the same choice every run); DCPCTL_SWEEP_BOTH_DTYPES=1
# overrides it. The sample sweeps both.
ONE_DTYPE = [False]


def sources_of(t: str):
    return (SOURCES[zlib.crc32(t.encode()) % 2],) if ONE_DTYPE[0] else SOURCES


# A case (a flag or a layer pattern: the type swept already, in both dtypes) checks the keys its
# setting brings, in one dtype on one source: CI's time (the fp16 pass cost a third of each case).
CASE_SOURCES = (("d0", ("bf16",)),)
# Per case, why its class built neither distinct-size configuration of a source (the child's; the
# server prints them).
SIZES_REFUSED: dict[str, str] = {}

# The transformers side of a case, kept between runs: its source folder (the tiny model built with
# seed 0 and saved) and its reference folders (transformers' own from_pretrained(dtype) +
# save_pretrained of that source) are a function of transformers, torch, this file,
# tools/hf_schema.py and the schema alone, so the cache's name is a digest of those; a change to any
# of them starts a new one. Only what transformers produced is kept: every dcpctl run, the comparison
# and from_pretrained of dcpctl's export run every time. A miss builds as before and stores what it
# built (a temporary name, then a rename: a killed run leaves no half folder). DCPCTL_SWEEP_CACHE:
# the cache's folder (default ~/.cache/dcpctl/schema-sweep), or 0 for none. CI's time: the builds
# and round trips were about half of a case's CPU once dcpctl's own start-up was a few milliseconds.
CACHE: list = [None]


def cache_open() -> None:
    import hashlib
    import torch
    import transformers
    where = os.environ.get("DCPCTL_SWEEP_CACHE", "")
    if where == "0":
        return
    root = Path(where) if where else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dcpctl" / "schema-sweep"
    h = hashlib.sha256(f"{transformers.__version__}\0{torch.__version__}\0".encode())
    for f in (Path(__file__), HERE.parent.parent / "tools" / "hf_schema.py", HERE.parent.parent / "src" / "check" / "hf_schema.json"):
        h.update(hashlib.sha256(f.read_bytes()).digest())
    CACHE[0] = root / h.hexdigest()[:20]
    # One generation kept (~3 MB a case, ~2 GB for every shard): another digest's is gone for good.
    if root.is_dir():
        for old in root.iterdir():
            if old != CACHE[0] and old.is_dir() and re.fullmatch(r"[0-9a-f]{20}", old.name):
                shutil.rmtree(old, ignore_errors=True)


def cache_entry(t: str, name: str) -> Path | None:
    """The cache's folder for case t's `name` (src-SPEC, ref-SPEC-FLAG), or None without a cache."""
    if CACHE[0] is None:
        return None
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", t)[:60] + "-" + format(zlib.crc32(t.encode()), "08x")
    return CACHE[0] / safe / name


def cache_get(t: str, name: str, dest: Path) -> dict | None:
    """Copies case t's cached `name` to dest and returns what was stored beside it, or None (a miss)."""
    entry = cache_entry(t, name)
    if entry is None or not (entry / ".case.json").is_file():
        return None
    shutil.copytree(entry / "folder", dest)
    return json.loads((entry / ".case.json").read_text())


def cache_put(t: str, name: str, folder: Path, info: dict) -> None:
    entry = cache_entry(t, name)
    if entry is None or entry.exists():
        return
    tmp = entry.parent / f".{entry.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(folder, tmp / "folder")
    (tmp / ".case.json").write_text(json.dumps(info))
    try:
        os.rename(tmp, entry)
    except OSError:  # another shard stored it first
        shutil.rmtree(tmp, ignore_errors=True)


def build_source(t: str, base: str, setting, cls, spec: str, src: Path) -> None:
    """Case t's tiny model (the distinct sizes of `spec` where the class builds them, else TINY's),
    saved by save_pretrained into src with the type's SIDECARS."""
    import torch
    import hf_schema

    def make(cfg):  # seed 0 for each build tiny_config tries
        if setting and setting[0].startswith("@"):
            cfg, _ = hf_schema.sweep_config(cfg, cls, "p:" + setting[0][1:], lambda c: True)
        elif setting and setting[0] == SAVED_BF16:
            pass
        elif setting:
            cfg = with_field(cfg, *setting)
        if CAP[0] and parameter_bytes(cls, cfg) > CAP[0]:
            # what the class or the cap refuses, refused before the real build allocates and
            # initialises the layers (Zamba's tiny repairs try ~100 configs, some of GiBs: 120 s of
            # CPU, 1 s so)
            raise OutOfMemory(f"its parameters alone are past the {CAP[0] >> 30} GiB cap")
        torch.manual_seed(0)
        saved = torch.bfloat16 if setting and setting[0] == SAVED_BF16 else torch.float32
        return cls._from_config(cfg, dtype=saved)

    def sized(cfg):
        try:
            return hf_schema.sweep_config(cfg, cls, spec, make)[1]
        except Exception as e:
            SIZES_REFUSED.setdefault(t, f"{spec}: {type(e).__name__}: {str(e)[:100]}")
            return make(cfg)
    _, model = hf_schema.tiny_config(base, build=sized)
    model.save_pretrained(src)
    del model
    for name, write in SIDECARS.get(base, {}).items():
        write(src / name)


def sweep_type(t: str, schema: dict, work: str, dcpctl: str, not_built: dict, phases: dict) -> None:
    """Type t's checks, in the folder work (made here); phases: where its CPU went. t may be a case
    TYPE[FIELD=VALUE] (flag_cases): the type built with that config field set; or TYPE[@FIELD]
    (pattern_cases): the type built with that layer-pattern field changed (a dense first layer)."""
    import torch
    import transformers
    base, setting = case_of(t)
    with phase(phases, "import"):  # the class's modeling file, imported lazily by transformers
        cls = getattr(transformers, schema["types"][base]["class"])
    todo = list(CASE_SOURCES if setting else sources_of(t))
    while todo:
        spec, flags = todo.pop(0)
        src = Path(work) / f"src-{spec or 'tiny'}"
        hit = cache_get(t, src.name, src)
        if hit is not None and hit.get("sizes_refused"):
            SIZES_REFUSED.setdefault(t, hit["sizes_refused"])
        try:
            if hit is None:
                with phase(phases, "build+save"), capped(), \
                        contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    build_source(t, base, setting, cls, spec, src)
                cache_put(t, src.name, src, {"sizes_refused": SIZES_REFUSED.get(t)})
        except OutOfMemory as e:
            not_built[t] = f"memory: {e}"
            return
        except Exception as e:  # transformers cannot build it tiny: listed, not a dcpctl failure
            if spec:  # nor save it at these sizes (Gradium Phonon TTS's conversion): TINY's, said so
                SIZES_REFUSED.setdefault(t, f"{spec}: saving raises {type(e).__name__}: {str(e)[:120]}")
                shutil.rmtree(src, ignore_errors=True)
                todo.insert(0, ("", flags))
                continue
            not_built[t] = f"{type(e).__name__}: {str(e)[:120]}"
            return
        if setting and not setting[0].startswith("@") and setting[0] != SAVED_BF16:  # the case builds what it is for: a key the field brings
            cond = t[len(base) + 1:-1]
            brought = [re.compile(re.escape(k[0]).replace("\\#", r"\d+") + "$") for k in schema["types"][base]["keys"]
                       if k[3] == cond]
            held = list(tensors(src))
            check(any(p.match(k) for p in brought for k in held),
                  f"{t}: the folder holds none of the keys the schema says {cond} brings "
                  f"({[p.pattern for p in brought][:2]})")
        with phase(phases, "verify"):
            r = run(dcpctl, "verify", str(src))
        expect_rc(r, EXIT_OK, f"{t}: verify of transformers' own save_pretrained folder ({spec} sizes)")
        for i, flag in enumerate(flags):
            dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[flag]
            if check_dtype(t, base, cls, src, spec, flag, dt, work, dcpctl, not_built, phases):
                continue
            if spec and t in not_built and "from_pretrained of its own" in not_built[t]:
                # transformers does not reload its own folder of these sizes (NeMo Speech-LM's audio
                # encoders split q, k and v out of one fused tensor: as many key/value heads as
                # heads): no configuration a release has; swept at TINY's sizes, and said so.
                SIZES_REFUSED.setdefault(t, f"{spec}: {not_built.pop(t)[:160]}")
                shutil.rmtree(src, ignore_errors=True)
                todo.insert(0, ("", flags[i:]))
                break
            return


def check_dtype(t, base, cls, src, spec, flag, dt, work, dcpctl, not_built, phases) -> bool:
    """consolidate --dtype flag of the folder src against transformers' own from_pretrained(dtype) +
    save_pretrained, and the export's reload; False where transformers itself cannot (listed)."""
    import torch
    ref, out = Path(work) / f"ref-{flag}", Path(work) / f"out-{flag}"
    try:
        info = cache_get(t, f"ref-{spec or 'tiny'}-{flag}", ref)
        if info is None:
            with phase(phases, "reference"), capped(), \
                    contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                model, info = load_with_info(cls, src, dt, base)
                model.save_pretrained(ref)
                del model
            info = {k: sorted(info[k]) for k in ("missing_keys", "unexpected_keys")}
            cache_put(t, f"ref-{spec or 'tiny'}-{flag}", ref, info)
        if info["missing_keys"] or info["unexpected_keys"]:
            # transformers' own folder does not load into its own class (shieldgemma2: saved as
            # model.language_model.model.*, loaded as model.language_model.*): no oracle to compare with.
            not_built[t] = (f"transformers' from_pretrained of its own save_pretrained folder (dtype={flag}) reports "
                            f"missing {sorted(info['missing_keys'])[:3]} unexpected {sorted(info['unexpected_keys'])[:3]}")
            return False
    except OutOfMemory as e:
        not_built[t] = f"memory: from_pretrained(dtype={flag}): {e}"
        return False
    except Exception as e:
        not_built[t] = (f"transformers' from_pretrained of its own save_pretrained folder (dtype={flag}) raises "
                        f"{type(e).__name__}: {str(e)[:120]}")
        return False
    with phase(phases, "verify"):  # transformers' own bf16/fp16 folder (XLNet's says dtype float32)
        r = run(dcpctl, "verify", str(ref))
    expect_rc(r, EXIT_OK, f"{t}: verify of transformers' own {flag} folder (from_pretrained(dtype={flag}) + save_pretrained)")
    with phase(phases, "consolidate"):
        r = run(dcpctl, "consolidate", str(src), "-o", str(out) + "/", "--dtype", flag)
    if not expect_rc(r, EXIT_OK, f"{t}: consolidate --dtype {flag} ({spec} sizes)"):
        return True
    for name in SIDECARS.get(base, {}):
        check((out / name).is_file() and (out / name).read_bytes() == (src / name).read_bytes(),
              f"{t} {flag}: the export carries {name} from the source folder, byte for byte (from_pretrained reads it)")
    with phase(phases, "compare"):
        a, b = tensors(out), tensors(ref)
        check(set(a) == set(b), f"{t} {flag}: keys differ from transformers': only dcpctl "
              f"{sorted(set(a) - set(b))[:5]}, only transformers {sorted(set(b) - set(a))[:5]}")
        bad = [(k, same_tensor(a[k], b[k])) for k in sorted(set(a) & set(b))]
        bad = [(k, why) for k, why in bad if why]
        # An integer tensor transformers' dtype plan casts on load (granite_speech5's BatchNorm
        # num_batches_tracked, under _keep_in_fp32_modules_strict "conv.norm": core_model_loading
        # casts whatever the plan matches, floating or not): dcpctl keeps it as saved; the
        # destination loads both to the same float32 tensor, checked below on the export.
        cast = [k for k, _ in bad if not a[k].is_floating_point() and b[k].dtype == torch.float32
                and torch.equal(a[k].to(torch.float32), b[k])]
        bad = [(k, why) for k, why in bad if k not in cast]
        check(not bad, f"{t} {flag}: {len(bad)} tensor(s) differ from transformers' own cast: {bad[:4]}")
    try:
        with phase(phases, "load export"), capped(), \
                contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            loaded, info = load_with_info(cls, out, dt, base)
            held = loaded.state_dict()
            del loaded
    except OutOfMemory as e:
        not_built[t] = f"memory: from_pretrained of the export: {e}"
        return False
    check(not info["missing_keys"] and not info["unexpected_keys"],
          f"{t} {flag}: from_pretrained of the export reports missing {sorted(info['missing_keys'])[:5]} "
          f"unexpected {sorted(info['unexpected_keys'])[:5]}")
    if cast:
        wrong = [k for k in cast if k not in held or held[k].dtype != b[k].dtype or not torch.equal(held[k], b[k])]
        check(not wrong, f"{t} {flag}: from_pretrained(dtype={flag}) of the export holds {wrong[:4]} unlike "
              f"transformers' own round trip ({b[wrong[0]].dtype if wrong else ''})")
        print(f"{t} {flag}: {len(cast)} integer tensor(s) ({cast[0]}, ...) kept {a[cast[0]].dtype} as saved where "
              f"transformers' round trip writes float32 (its dtype plan casts them on load); from_pretrained of "
              f"the export holds them float32, equal to transformers'")
    hf_loaded(out)
    del a, b, held
    shutil.rmtree(ref, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    return True


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Out without the interpreter's teardown: nothing is left to clean (the children are reaped,
    # the folders removed), and triton, which transformers imports, prints a page of nanobind
    # "leaked" lines when its module is finalised.
    os._exit(rc)
