"""Every Hugging Face model folder a test's dcpctl writes is loaded by transformers (issue 56's oracle:
from_pretrained of every export reports no missing, unexpected or mismatched keys).

testlib.run() calls record() after each dcpctl run that exits 0; testlib.summary() calls
check_recorded() before it prints the test's line. Standard library at import: transformers is
imported once per test process, when the first folder is loaded (or, in an interpreter without
it, the loads run in one process of DCPCTL_VENV's python: `python hf_loadcheck.py LIST.json`).

What is recorded: a local `-o DIR` of consolidate (reshard and cast write DCP; a megatron output
has no .safetensors) that holds config.json and *.safetensors after the run. The folder's files
are copied at once (a test may damage or delete its output later), so the load sees what dcpctl
wrote. What is not loaded is counted, each with its reason, in the line summary() prints:
  - a folder the test loaded with from_pretrained itself (testlib.hf_loaded(DIR) after its own
    check of the keys: the same bytes are not loaded twice), or one with the same bytes as a
    folder already loaded;
  - a folder over MAX_BYTES of safetensors (tiny models only);
  - a PEFT adapter folder (`--lora adapter`: adapter_config.json) the test did not load with PEFT
    itself (hf_loaded): no base model here to load it on;
  - the non-HF side of a `--map` (the input is a Hugging Face folder or .safetensors file, the
    output is torchtitan's or megatron's names);
  - no config.json (a bare weights folder), a model_type transformers does not define, a
    quantization_config whose method cannot be loaded on CPU;
  - an object-storage output (s3://, gs://);
  - a call site that opts out with the reason: run(..., hf_partial="why") (a --select subset, an
    --include filter that leaves a partial model on purpose).
A failed load (an exception, or any missing/unexpected/mismatched key after transformers' own
_keys_to_ignore_on_load_* filtering) is a failed check naming the folder, the command and the keys.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MAX_BYTES = 64 << 20  # safetensors bytes of one folder loaded; larger ones are counted as skipped

# dcpctl's options that take a value (consolidate --help): the first word that is none of these
# nor an option is the input.
_VALUED = {"-o", "--output", "--format", "--iteration", "--max-shard-size", "--include", "--exclude", "--select",
           "--dtype", "--assets", "--threads", "--max-memory", "--keep-dtype", "--io", "--manifest", "--map",
           "--config", "--lora", "--lora-name", "--lora-config", "--lora-alpha", "--lora-base", "--lora-layout",
           "--quantize", "--quantize-block", "--quantize-skip", "--timeout", "--backend", "-w", "--world-size",
           "--layout", "--nproc-per-node", "--nproc_per_node", "--nnodes", "--node-rank", "--master-port",
           "--master-addr", "--rdzv-endpoint", "--rdzv-backend"}


class Recorder:
    def __init__(self) -> None:
        self.records: list[dict] = []       # folders to load: {"dir", "copy", "cmd", "digest"}
        self.skipped: dict[str, int] = {}   # reason -> count
        self.loaded_by_test: set[str] = set()  # digests the test loaded itself
        self.tmp: str | None = None
        self.seconds = 0.0
        self.cpu = 0.0  # CPU seconds, this process and the loader process (resource.getrusage)
        self.lock = threading.Lock()  # run() is called from thread pools (e2e/json_schema_test.py)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    # ------------------------------------------------------------------------------- recording
    def record(self, cmd: list[str], cwd, partial: str | None) -> None:
        """cmd: a command that exited 0; records its HF folder output, if it wrote one."""
        with self.lock:
            t0, c0 = time.monotonic(), _cpu()
            try:
                self._record(cmd, cwd, partial)
            finally:
                self.seconds += time.monotonic() - t0
                self.cpu += _cpu() - c0

    def _record(self, cmd: list[str], cwd, partial: str | None) -> None:
        at = next((i for i, a in enumerate(cmd) if os.path.basename(a).startswith("dcpctl")
                   and os.path.isfile(a) and os.access(a, os.X_OK)), None)
        if at is None or len(cmd) < at + 2 or cmd[at + 1] != "consolidate":
            return
        args = cmd[at + 2:]
        if "-n" in args or "--dry-run" in args:
            return
        out, inp, i = None, None, 0
        while i < len(args):
            a = args[i]
            if a in ("-o", "--output") and i + 1 < len(args):
                out = args[i + 1]
            elif a.startswith("--output="):
                out = a.split("=", 1)[1]
            elif a in _VALUED:
                i += 1
            elif not a.startswith("-") and inp is None:
                inp = a
            i += 1
        if out is None:
            return
        if out.startswith(("s3://", "gs://")):
            self.skip("object-storage output")
            return
        base = Path(cwd) if cwd else Path.cwd()
        d = base / out
        if not d.is_dir():
            return
        names = os.listdir(d)
        st = sorted(n for n in names if n.endswith(".safetensors"))
        if not st:
            return
        if partial:
            self.skip(f"opted out at the call site: {partial}")
            return
        adapter = "adapter_config.json" in names
        if "--map" in args or any(a.startswith("--map=") for a in args):
            src = base / inp if inp and "://" not in inp else None
            if src is not None and (src.suffix == ".safetensors" or
                                    (src.is_dir() and any(src.glob("*.safetensors")) and not (src / ".metadata").exists())):
                self.skip("non-HF side of a --map (a Hugging Face input)")
                return
        if "config.json" not in names and not adapter:
            self.skip("no config.json (a bare weights folder)")
            return
        size = sum((d / n).stat().st_size for n in st)
        if size > MAX_BYTES:
            self.skip(f"over {MAX_BYTES >> 20} MiB of safetensors")
            return
        if self.tmp is None:
            self.tmp = tempfile.mkdtemp(prefix="hf-loadcheck-")
            import atexit
            atexit.register(shutil.rmtree, self.tmp, True)
        copy = Path(tempfile.mkdtemp(dir=self.tmp))
        h = hashlib.sha256()
        for n in sorted(names):
            if (n.endswith(".safetensors") or n.endswith(".json")) and (d / n).is_file() and n != "dcpctl-manifest.json":
                shutil.copyfile(d / n, copy / n)
                h.update(n.encode() + b"\0" + (copy / n).read_bytes())
        self.records.append({"dir": str(d), "copy": str(copy), "cmd": " ".join(cmd[at:])[:400], "digest": h.hexdigest(),
                             "adapter": adapter})

    def loaded(self, folder) -> None:
        """The test loaded this folder with from_pretrained and checked its keys itself."""
        digest = folder_digest(Path(folder))
        with self.lock:
            self.loaded_by_test.add(digest)

    # ------------------------------------------------------------------------------- checking
    def check(self, check) -> None:
        """Loads each recorded folder (check(ok, msg) per folder) and prints the count line."""
        with self.lock:
            self._check(check)

    def _check(self, check) -> None:
        t0, c0 = time.monotonic(), _cpu()
        todo, seen = [], set()
        for r in self.records:
            if r["digest"] in self.loaded_by_test:
                self.skip("loaded by the test itself")
            elif r["adapter"]:
                self.skip("PEFT adapter folder (--lora adapter) the test did not load with PEFT (no base model here)")
            elif r["digest"] in seen:
                self.skip("same bytes as a folder loaded here")
            else:
                seen.add(r["digest"])
                todo.append(r)
        loaded = 0
        try:
            for r, (status, detail) in zip(todo, load_all([r["copy"] for r in todo]) if todo else []):
                if status == "skip":
                    self.skip(detail)
                    continue
                loaded += 1
                check(status == "ok", f"from_pretrained of dcpctl's output {r['dir']} (from `{r['cmd']}`): {detail}")
        finally:
            if self.tmp:
                shutil.rmtree(self.tmp, ignore_errors=True)
                self.tmp = None
        self.seconds += time.monotonic() - t0
        self.cpu += _cpu() - c0
        n_skip = sum(self.skipped.values())
        why = "; ".join(f"{n} {k}" for k, n in sorted(self.skipped.items()))
        if loaded or n_skip:
            print(f"{loaded} HF folders loaded, {n_skip} skipped{': ' + why if why else ''} "
                  f"({self.seconds:.2f} s, {self.cpu:.2f} s of CPU)", flush=True)


def _cpu() -> float:
    import resource
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


def folder_digest(d: Path) -> str:
    h = hashlib.sha256()
    for n in sorted(os.listdir(d)):
        if (n.endswith(".safetensors") or n.endswith(".json")) and (d / n).is_file() and n != "dcpctl-manifest.json":
            h.update(n.encode() + b"\0" + (d / n).read_bytes())
    return h.hexdigest()


def load_all(folders: list[str]) -> list[tuple[str, str]]:
    """("ok"|"fail"|"skip", detail) per folder: in this process when transformers imports here,
    else in one process of DCPCTL_VENV's python."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        venv = os.environ.get("DCPCTL_VENV", "")
        py = os.path.join(venv, "bin", "python") if venv else ""
        if not py or not os.access(py, os.X_OK):
            from skip import strict
            if strict():
                return [("fail", "transformers does not import here and DCPCTL_VENV names no python to load with")
                        for _ in folders]
            return [("skip", "no transformers (no DCPCTL_VENV)") for _ in folders]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(folders, f)
        try:
            p = subprocess.run([py, os.path.abspath(__file__), f.name], capture_output=True, text=True, timeout=1200)
        finally:
            os.unlink(f.name)
        try:
            return [tuple(x) for x in json.loads(p.stdout.strip().splitlines()[-1])]
        except (ValueError, IndexError):
            return [("fail", f"the loader ({py}) exited {p.returncode}: {p.stderr.strip()[-1500:]}") for _ in folders]
    return [_load_or_say(Path(f)) for f in folders]


def _load_or_say(d: Path) -> tuple[str, str]:
    try:
        return load_one(d)
    except Exception as e:  # noqa: BLE001 - the harness's own trouble is a failed check, not a crash
        return ("fail", f"the load check raised {type(e).__name__}: {str(e)[:1500]}")


def _model_class(cfg: dict):
    import transformers
    for a in cfg.get("architectures") or []:
        cls = getattr(transformers, a, None)
        if cls is not None:
            return cls
    from transformers import AutoConfig
    conf = AutoConfig.for_model(**{k: v for k, v in cfg.items() if k == "model_type"})
    for auto in ("AutoModelForCausalLM", "AutoModelForSeq2SeqLM", "AutoModelForImageTextToText", "AutoModel"):
        m = getattr(transformers, auto)
        if type(conf) in m._model_mapping:
            return m
    return None


def load_one(d: Path) -> tuple[str, str]:
    import torch
    import transformers
    from transformers import CONFIG_MAPPING
    try:
        cfg = json.loads((d / "config.json").read_text())
    except ValueError as e:
        return ("fail", f"config.json is not JSON: {e}")
    mt = cfg.get("model_type")
    if mt is None:
        return ("skip", "config.json names no model_type")
    if mt not in CONFIG_MAPPING:
        return ("skip", f"model_type {mt!r} transformers {transformers.__version__} does not define")
    transformers.utils.logging.disable_progress_bar()
    cls = _model_class(cfg)
    if cls is None:
        return ("skip", f"model_type {mt!r}: no model class to load it with")
    kw = {}
    qc = cfg.get("quantization_config")
    if qc:
        method = qc.get("quant_method")
        if method == "fp8":
            from transformers import FineGrainedFP8Config
            kw["quantization_config"] = FineGrainedFP8Config(
                dequantize=True, weight_block_size=tuple(qc.get("weight_block_size") or (128, 128)))
        elif method == "mxfp4":
            from transformers import Mxfp4Config
            kw["quantization_config"] = Mxfp4Config(dequantize=True)
        elif method != "compressed-tensors":
            return ("skip", f"quantization_config quant_method {method!r} not loaded on CPU here")
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # ignore_mismatched_sizes: a shape that disagrees with the config comes back in
            # mismatched_keys, with both shapes, instead of an exception naming none
            model, info = cls.from_pretrained(str(d), dtype=torch.float32, output_loading_info=True,
                                              ignore_mismatched_sizes=True, **kw)
    except Exception as e:  # noqa: BLE001 - any refusal is the finding
        return ("fail", f"{cls.__name__}.from_pretrained raised {type(e).__name__}: {str(e)[:1500]}")
    ignored = _mtp_ignored(type(model), cfg, info.get("unexpected_keys") or [])
    del model
    bad = {k: sorted(map(str, info.get(k) or [])) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    bad["unexpected_keys"] = [k for k in bad["unexpected_keys"] if k not in ignored]
    bad = {k: v for k, v in bad.items() if v}
    if bad:
        return ("fail", f"{cls.__name__}: " + "; ".join(f"{k} ({len(v)}): {v[:8]}" for k, v in bad.items()))
    return ("ok", f"{cls.__name__}: no missing, unexpected or mismatched keys"
                  + (f" ({len(ignored)} MTP keys ignored as its _keys_to_ignore_on_load_unexpected does)" if ignored else ""))


def _mtp_ignored(cls, cfg: dict, unexpected) -> set:
    """The unexpected keys transformers' own _keys_to_ignore_on_load_unexpected drops from the full-size
    release: a class that ignores `model\\.layers\\.61.*` (DeepSeek-V3: its num_hidden_layers, where
    the MTP block sits; GLM-4.5: 92 and 46) means the MTP layers model.layers.{num_hidden_layers + i}
    (i < num_nextn_predict_layers), which a tiny config puts at another index. Those, scaled to this
    config, and nothing else."""
    import re
    pats = [p for p in (getattr(cls, "_keys_to_ignore_on_load_unexpected", None) or [])
            if re.fullmatch(r"model\\\.layers\\\.\d+\.\*", p)]
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    n = text.get("num_hidden_layers")
    if not pats or not isinstance(n, int):
        return set()
    mtp = max(1, int(text.get("num_nextn_predict_layers") or 1))
    want = re.compile(r"model\.layers\.(" + "|".join(str(n + i) for i in range(mtp)) + r")\.")
    return {k for k in map(str, unexpected) if want.match(k)}


if __name__ == "__main__":
    folders = json.loads(Path(sys.argv[1]).read_text())
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    print(json.dumps(load_all(folders)))
