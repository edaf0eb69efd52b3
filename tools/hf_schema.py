#!/usr/bin/env python3
"""Writes src/check/hf_schema.json: what transformers' save_pretrained puts on disk, per model type.

For every model type in transformers' CONFIG_MAPPING_NAMES, the model class a Hugging Face folder of
that type names first (the first of the causal-LM, seq2seq-LM, image-text-to-text, multimodal-LM,
masked-LM and base-model auto mappings that has one taking the type's own config: a class whose
config class is a sub-config's, Llama4ForCausalLM's Llama4TextConfig, is what the auto classes build
from that sub-config, and its folders are the sub-config's type, llama4_text, so Llama 4's folders
name Llama4ForConditionalGeneration; and a model_type such a class saves its folders as, when that
type has none: mllama_text_model, MllamaForCausalLM's) is built on the meta device (no memory, no
weights) from real_config's config: the config class's defaults, completed where they build no
model with what every released config.json holds (head_dim, a missing RoPE, ... : `completed`), with
the layer count cut to at most 8 (every list field as long as the layer count cut with it). A type
no mapping names a class for is in "skipped" with why: a part of a composite model (a tower whose
config is a composite's sub-config: the composite's folders hold its keys) or a model of another task.
What `save_pretrained` would write is derived as it derives it
(modeling_utils.py): the state dict, less `_keys_to_ignore_on_save`, less tied weights
(remove_tied_weights_from_state_dict), through revert_weight_conversion (the reverse of the load-time
renames of conversion_mapping.py), so every name below is an on-disk name.

Per model type the table holds (llama.cpp's per-architecture tensor tables are the model):
  "class"  the class built; "prefix" its base_model_prefix; "class_type" the model type of the
           class's own config class where it is another (a config.json whose model_type the schema
           does not hold is looked up by the class its architectures names: that type's entry);
  "keys"   [pattern, dims, keep, when, required]: the on-disk key with every integer path component written
           `#` (layer, expert, MTP indices), and every index numbered in a name ("named": Inkling's
           `norm_#`); dims, one per dimension, the config field it equals
           ("hidden_size", "text_config.vocab_size", "2*intermediate_size",
           "n_routed_experts+zero_expert_num", "text_config.vocab_size+8": rows past the field's,
           at most MAX_EXTRA_ROWS) or null where no such field was found: found by
           building the model again with each size field of the config or of any sub-config
           ("vision_config.hidden_size", nested: "thinker_config.text_config.hidden_size") doubled,
           one at a time, the config read back from its dict so that what its class derives from
           the field follows it (as from_pretrained reads config.json), and keeping the linear form
           that explains the change; keep, two characters, the dtype
           transformers keeps the tensor in when loading with dtype=bfloat16 then float16 (after its
           load-time renames, so in on-disk names): '-' the target dtype, 'f' float32, 'i' not a
           floating tensor (never cast), "" not derived (a key two size fields or a derived field
           bring); when, "" for a key of the default build, or the boolean
           config field value that brings it ("tie_word_embeddings=false", of any sub-config:
           "vision_config.qkv_bias=true"), or two size fields whose difference brings it
           ("hidden_size!=word_embed_proj_dim": OPT's project_in, found by doubling one size field,
           then both), or a field, null by default, that the config class derives when a doubled
           size field brings the key and config.json then holds ("global_config.encoder_cross_output_size=set":
           BLT-7B's token_embedding_projection); required, 1 for a key
           outside numbered blocks or one every block of its stack holds in the default build (a
           layer's norms, not the MLP of the dense layers only), a key a boolean or optional field
           brings likewise in the build with that field set (Llama's attention_bias=true: every
           layer's q/k/v/o_proj.bias; checked missing where config.json sets the field), else 0.
  "experts" the number of experts the per-expert keys (`experts.#.`) count, as config fields
           ("n_routed_experts+zero_expert_num": LongCat saves its zero experts), null when no
           field explains it; absent for a model without per-expert keys.
  "named"  [[pattern, count], ...]: the indices numbered in names rather than as path components,
           each as the key pattern up to that component ("model.visual.layers.norm_#": Inkling's
           vision layers.norm_0.., written `#` in "keys" too), found where a name family numbered
           0..n-1 changes its n when a size field is doubled or a layer count halved (fc1, ln_2,
           wi_0 do not); count, how many it numbers as config fields
           ("vision_config.num_hidden_layers-1", "num_experts"), null when no field explains it.
  "together" [[pattern, ...], ...]: per numbered block, the keys of one of its modules (the first
           path component after the block number: `mlp`, `self_attn`) that the same blocks of the
           default build hold: a block holding one of them holds them all (an MoE layer's router,
           its expert bias and its experts; a dense layer's MLP).
  "absent" [pattern, when]: keys of the default build that a flipped boolean removes (the head when
           tie_word_embeddings=true): optional under that condition.
  "memory" in-memory names that differ from the on-disk ones (a folder may hold these: transformers
           loads them unrenamed); "renamed" the on-disk ones they stand for.
  "ignore_unexpected", "ignore_missing": the class's _keys_to_ignore_on_load_* regexes.
  "head_untied" true when the class never ties lm_head.weight to the embedding (its
           _tied_weights_keys lacks it): the head loads from the folder whatever tie_word_embeddings says.
  "prefixes" [on-disk prefix, schema prefix]: the prefixes the loader changes (conversion_mapping's
           PrefixChange: Qwen3.5's `model.language_model.` loaded as `model.`).
  "load_renames" [[release pattern, save pattern], ...]: a layout transformers' load-time renames
           (conversion_mapping.py, applied by from_pretrained) read that save_pretrained does not
           write, DeepSeek-V4's published `embed.weight`, `layers.#.attn.wq_a.weight` for
           `model.embed_tokens.weight`, `model.layers.#.attn.wq_a.weight` (load_renames: the
           in-memory names without the base model prefix through revert_weight_conversion, each
           checked to load, as from_pretrained renames it, onto the parameter its save name loads
           onto); absent where the release names are the save names. "load_renames_not_derived":
           why a type with renames has none (a release name no save key pairs with).
  "load_conversions" [[source pattern, conversion class], ...]: the load-time conversions that read
           keys neither save_pretrained writes nor load_renames maps (Dory's LayerPairCollapse of
           `layers.{2i}.mixer`/`layers.{2i+1}.mixer`): a folder key in such a layout is refused
           (exit 5), not called unexpected.
  "checked_in" the builds every dims formula was checked against (settled_form): "default", each
           size field doubled ("hidden_size*2"), the distinct-size configurations
           ("head_dim=160,num_key_value_heads=16"), the sweep's tiny ones ("tiny:d0", refuting
           only), the layer patterns ("first_k_dense_replace=1", with their own doubled and
           distinct builds where they bring keys); "patterns" the layer-pattern fields varied;
           "unchecked" [pattern, dim, why]: the dimensions no formula explains in every build.
  "saved_config" how the config.json save_pretrained writes counts layers where the model counts
           them otherwise (saved_config(): Dory's two blocks a layer, `layer_types` with "mlp" entries
           and its layer counts doubled): checked as the config class reads it back.
  "completed" the fields real_config filled in the class's defaults (they build no model otherwise:
           Ministral's head_dim, Nemotron's num_key_value_heads): the schema's config, as a release's.
"failed": model type -> why it could not be built, its defaults and their completion;
"skipped": model type -> why it was not built (no language-model class: a part of a composite, a
model of another task). "transformers"/"torch": the versions.

The dtype each tensor is kept in is derived as from_pretrained derives it (core_model_loading.py,
convert_and_load_state_dict_in_model): float32 where the class's dtype plan (_get_dtype_plan:
_keep_in_fp32_modules_strict, _keep_in_fp32_modules for float16) matches the in-memory name, else
the dtype the parameter was created in when it is not the target (a float32 buffer), else the target.

Regenerate (one command; the project's virtualenv pins transformers==5.24.0, torch==2.15.0):

    .venv/bin/python tools/hf_schema.py > src/check/hf_schema.json

It runs the model types in 2 worker processes (-j N to change); runtime and size are in
docs/architecture.md.
"""
import argparse
import contextlib
import copy
import io
import json
import logging
import multiprocessing
import re
import sys
import warnings
import zlib

LAYER_CAP = 8
KEEP_TABLE = __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "src", "plan", "keep_in_fp32.json")
HEADS = [
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "MODEL_MAPPING_NAMES",
]
LAYER_FIELDS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "decoder_layers", "encoder_layers",
                "num_decoder_layers")
# Counts of the last layers of a stack, cut with it in proportion (Gemma 3n's num_kv_shared_layers:
# the last 15 of its 35 layers reuse the key/value cache of earlier ones; cut to 8 layers unchanged,
# no layer would make the cache they reuse and its config refuses them).
LAST_LAYERS_FIELDS = ("num_kv_shared_layers",)
# Size fields whose doubling is tried, one at a time (the dims a check can compare with the config).
SIZE_RE = re.compile(r"^(hidden_size|d_model|n_embd|vocab_size|n_vocab|decoder_vocab_size|embedding_size|"
                     r"word_embed_proj_dim|intermediate_size|d_ff|ffn_dim|n_inner|"
                     r"moe_intermediate_size|shared_expert_intermediate_size|expert_ffn_hidden_size|"
                     r"n_routed_experts|num_local_experts|num_experts|moe_num_experts|zero_expert_num|"
                     r"n_shared_experts|num_shared_experts|head_dim|kv_lora_rank|q_lora_rank|"
                     # MLA's head widths (DeepSeek's defaults make qk_nope_head_dim = v_head_dim:
                     # o_proj's input is heads x v_head_dim, not x qk_nope_head_dim)
                     r"qk_nope_head_dim|qk_rope_head_dim|v_head_dim|"
                     r"max_position_embeddings|num_attention_heads|num_key_value_heads|n_head|num_heads|"
                     # A multiplier of a width (Mamba's expand: in_proj and out_proj are
                     # expand*hidden_size wide): doubled too, so a dimension it scales is a product
                     # (no form) rather than 2*hidden_size, true only of the default expand.
                     r"expand|mamba_expand)$")
FIRST_INT = re.compile(r"^(.*?)\.(\d+)\.(.*)$")
INT_COMPONENT = re.compile(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.)")


def quiet():
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    import transformers
    transformers.logging.set_verbosity_error()


# A name component that ends in an index (`norm_3`, `expert_12`, `fc1`): its stem and number.
NAMED_COMPONENT = re.compile(r"^(.*\D)(\d+)$")
# The in-name indices of the type schema_of is building (named_indices): the pattern up to and
# including each such component, its number written `#` ("model.visual.layers.norm_#"). Set per type.
NAMED = [frozenset()]


def pattern_of(key):
    """key with every integer path component written `#` (layer, expert, MTP indices), and every
    index numbered in a name (NAMED: Inkling's vision `layers.norm_3`, NLLB-MoE's `experts.expert_12`)
    likewise (`norm_#`); a fixed name with digits (`fc1`, `conv2d`, `wi_0`) stays as it is."""
    p = INT_COMPONENT.sub("#", key)
    if not NAMED[0]:
        return p
    out = []
    for c in p.split("."):
        m = NAMED_COMPONENT.match(c)
        if m and ".".join(out + [m.group(1) + "#"]) in NAMED[0]:
            c = m.group(1) + "#"
        out.append(c)
    return ".".join(out)


def named_values(keys):
    """{template: the numbers it takes}: per key, each component ending in digits (not all digits)
    written `#`, the key's integer path components `#` and its other components as they are; and
    {template: its pattern up to that component}."""
    out, upto = {}, {}
    for k in keys:
        comps = INT_COMPONENT.sub("#", k).split(".")
        for i, c in enumerate(comps):
            m = NAMED_COMPONENT.match(c)
            if m:
                t = ".".join(comps[:i] + [m.group(1) + "#"] + comps[i + 1:])
                out.setdefault(t, set()).add(int(m.group(2)))
                upto[t] = ".".join(comps[:i] + [m.group(1) + "#"])
    return out, upto


def named_indices(disk, builds):
    """The indices numbered in names, found as a count varying with the config: a template of
    named_values whose numbers are 0..n-1 in every build that has it, n not the same in all (the
    default build `disk` and `builds`: [(field, its value in the default, its value there, that
    build's keys)]). Inkling's vision layers.norm_0..norm_6 (vision_config.num_hidden_layers - 1 of
    them), NLLB-MoE's experts.expert_0..expert_127 (num_experts); not GPT-2's ln_1/ln_2, T5's
    wi_0/wi_1, the same in every build. Returns {template: count}, count the linear form of config
    fields ("vision_config.num_hidden_layers-1", "num_experts") or None where none explains it, keyed
    by the pattern up to the numbered component ("model.visual.layers.norm_#"; its keys' forms agree,
    else None)."""
    base, upto = named_values(disk)
    runs = [(f, v0, v1, named_values(keys)[0]) for f, v0, v1, keys in builds]

    def counted(nums):
        return nums == set(range(len(nums)))

    out = {}
    for t, nums in base.items():
        if not counted(nums):
            continue
        seen = [(f, v0, v1, len(v[t])) for f, v0, v1, v in runs if t in v and counted(v[t])]
        if all(n == len(nums) for *_, n in seen) or any(t in v and not counted(v[t]) for *_, v in runs):
            continue
        n0, terms, total, form = len(nums), [], 0, True
        for f, v0, v1, n1 in seen:
            if n1 == n0:
                continue
            if v1 == v0 or (n1 - n0) % (v1 - v0) or (n1 - n0) // (v1 - v0) not in (1, 2):
                form = False
                break
            c = (n1 - n0) // (v1 - v0)
            terms.append(f if c == 1 else f"{c}*{f}")
            total += c * v0
        rest = n0 - total
        count = ("+".join(terms) + (f"+{rest}" if rest > 0 else f"-{-rest}" if rest < 0 else "")
                 if form and terms and abs(rest) <= MAX_EXTRA_ROWS else None)
        out[upto[t]] = count if out.get(upto[t], count) == count else None
    return out


def layer_counts_halved(cfg):
    """(field path, its value, half of it, the config so edited) per layer count of cfg and its
    sub-configs above 1, each list field as long as the count cut with it (as cut_layers cuts)."""
    out = []
    for prefix, c in sub_configs(cfg):
        for f in LAYER_FIELDS:
            n = vars(c).get(f)
            if not isinstance(n, int) or isinstance(n, bool) or n < 2:
                continue
            c2 = copy.deepcopy(cfg)
            sub = sub_config_at(c2, prefix)
            setattr(sub, f, n // 2)
            for k, v in list(vars(sub).items()):
                if isinstance(v, list) and len(v) == n:
                    setattr(sub, k, v[:n // 2])
            out.append((prefix + f, n, n // 2, rebuilt(c2) if REBUILD[0] else c2))
    return out


def primary_class(model_type):
    """The class a Hugging Face folder of model_type names (classes_of's first), or None."""
    return classes_of(model_type)[0]


def classes_of(model_type):
    """The class a Hugging Face folder of model_type names: the first of the HEADS mappings' classes
    that takes the type's own config. A class whose config class is one of the type's sub-configs'
    (Llama4ForCausalLM's Llama4TextConfig, Llama4Config's text_config) is what transformers' auto
    classes build from that sub-config alone (auto_factory: config.get_text_config()); its folders
    say the sub-config's model_type (llama4_text), not this one: a later head's class that takes the
    type's own config is the one its folders name (Llama4ForConditionalGeneration, as Llama 4's and
    Qwen3.5's config.json say), and the one passed over is returned too, as `part`. Returns
    (class name, part class name or None), (None, None) where no mapping names a class."""
    import transformers
    from transformers.models.auto import modeling_auto
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    try:
        subs = set((getattr(transformers, CONFIG_MAPPING_NAMES[model_type]).sub_configs or {}).values())
    except Exception:
        subs = set()
    first, part = None, None
    for name in HEADS:
        m = getattr(modeling_auto, name, {})
        if model_type not in m:
            continue
        v = m[model_type]
        v = v[0] if isinstance(v, (list, tuple)) else v
        first = first or v
        try:
            own = getattr(getattr(transformers, v), "config_class", None)
        except Exception:
            own = None
        if own is not None and own in subs:
            part = part or v
            continue
        return v, part
    return first, part


def sub_config_of(cfg, cls):
    """(prefix, sub-config) of cfg whose class is cls's config class ("text_config.", "decoder."),
    or ("", cfg) where cls takes cfg itself."""
    own = getattr(cls, "config_class", None)
    if own is None or isinstance(cfg, own):
        return "", cfg
    for prefix, c in sub_configs(cfg)[1:]:
        if type(c) is own:
            return prefix, c
    return "", cfg


def real_config(model_type, cls):
    """model_type's config as a real checkpoint's config.json has it, for the class cls: its config
    class's defaults (the sub-config cls takes, where its config class is a sub-config's: MusicGen's
    decoder for MusicgenForCausalLM, as transformers' auto classes pass the text_config), and where
    those defaults build no model (tried on the meta device, layers cut), completed by the rules of
    `completed`: the fields a released config.json always holds that the class leaves null. The one
    starting point of schema_of and tiny_config, so every type the schema holds is swept as built.
    Returns (config, the fields filled: [] for the defaults as they are); raises where none builds."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    cfg, refused = default_config(getattr(transformers, CONFIG_MAPPING_NAMES[model_type]))
    if cls is None:  # a type no auto mapping gives a class (a model_type another type's class saves)
        return cfg, []
    _, cfg = sub_config_of(cfg, cls)
    errors, before = [], flat_fields(cfg)
    for stage in (0, 1, 2, 3, 4):
        done = completed(cfg, cls, stage) if stage else cfg
        if stage >= 3:
            # A validator's refusal that names the value a field must take is followed.
            done = validator_repairs(done)
        filled = sorted(k for k, v in flat_fields(done).items() if k not in before or before[k] != v)
        if stage in (1, 2) and not filled:
            continue
        for _ in range(4 if stage >= 3 else 1):
            try:
                # Read back from its dict (its class's validators run, as from_pretrained's would).
                c = rebuilt_or_raise(done) if stage or refused else done
                probe = copy.deepcopy(c)
                cut_layers(probe)
                build(cls, probe, torch.bfloat16)
            except Exception as e:
                more = (dividing_heads(done, e) or documented_fills(done, e)) if stage >= 3 else None
                if more is not None:
                    done = more
                    filled = sorted(k for k, v in flat_fields(done).items() if k not in before or before[k] != v)
                    continue
                why = f"{type(e).__name__}: {str(e)[:160]}" + (f" (with {', '.join(filled)} filled)" if filled else "")
                if why not in errors:
                    errors.append(why)
                break
            return c, filled
    # The defaults' refusal and the last completion's (the tries between are on the way to it).
    raise ValueError("; ".join(errors[:1] + errors[-1:] if len(errors) > 2 else errors))


def failing_config(cfg, exc):
    """(prefix in cfg, the config) that the innermost modeling frame raising exc reads (its `config`,
    else its `self.config`), found in cfg by its class (the build's config is a copy); None if none."""
    tb, frame = exc.__traceback__, None
    while tb is not None:
        if "/transformers/models/" in tb.tb_frame.f_code.co_filename:
            frame = tb
        tb = tb.tb_next
    if frame is None:
        return None
    loc = frame.tb_frame.f_locals
    root = loc.get("config")
    if root is None and hasattr(loc.get("self"), "config"):
        root = loc["self"].config
    if root is None or not hasattr(root, "to_dict"):
        return None
    at = next((p for p, x in sub_configs(cfg) if type(x) is type(root)), None)
    return None if at is None else (at, frame, root)


def dividing_heads(cfg, exc):
    """A copy of cfg where exc is a module's refusal of heads that do not divide the width ("embed_dim
    must be divisible by num_heads (got `embed_dim`: 1152 and `num_heads`: 14)": Aya Vision's default
    SigLIP tower), the config it reads given the divisor of its hidden_size nearest its heads, the
    larger on a tie (16: its release's), its key/value heads with them where they were equal; None
    otherwise."""
    if "divisible" not in str(exc):
        return None
    found = failing_config(cfg, exc)
    if found is None:
        return None
    out = copy.deepcopy(cfg)
    sub = sub_config_at(out, found[0])
    f = vars(sub)
    heads, hidden = f.get("num_attention_heads"), f.get("hidden_size")
    if not (isinstance(heads, int) and isinstance(hidden, int) and not isinstance(heads, bool)
            and heads > 0 and hidden % heads):
        return None
    to = min((d for d in range(1, hidden + 1) if hidden % d == 0), key=lambda d: (abs(d - heads), -d))
    if f.get("num_key_value_heads") == heads:
        sub.num_key_value_heads = to
    sub.num_attention_heads = to
    return out


def documented_fills(cfg, exc):
    """A copy of cfg with the null fields that the modeling line raising exc reads (`config.X`,
    `config.vision_config.X`: Granite 4 Vision's `len(config.deepstack_layer_map)`,
    `config.downsample_rate.split("/")`) given the value their class's docstring shows: its example
    (`e.g. "1/4"`), or, for a list of `[a, b]` tuples (`List of [vision_layer_idx, llm_layer_idx]
    pairs`), one such tuple of zeros; None where none is filled."""
    import ast
    import linecache
    found = failing_config(cfg, exc)
    if found is None:
        return None
    at, frame, root = found
    line = linecache.getline(frame.tb_frame.f_code.co_filename, frame.tb_lineno)
    out, changed = copy.deepcopy(cfg), False
    for m in re.finditer(r"\bconfig((?:\.[A-Za-z_]\w*)+)", line):
        # The chain's sub-configs, then the field it reads (`config.downsample_rate.split`: downsample_rate).
        owner, prefix, f = root, at, None
        for n in m.group(1)[1:].split("."):
            v = vars(owner).get(n, 0)
            if hasattr(v, "to_dict"):
                owner, prefix = v, prefix + n + "."
                continue
            f = n
            break
        if f is None or vars(owner).get(f, 0) is not None:
            continue
        doc = type(owner).__doc__ or ""
        entry = re.search(r"^\s*" + re.escape(f) + r" \(.*?\):\n((?:\s{8,}.*\n?)+)", doc, re.M)
        if entry is None:
            continue
        text = " ".join(entry.group(1).split())
        value = None
        ex = re.search(r"e\.g\.\s*`([^`]+)`", text)
        if ex:
            try:
                value = ast.literal_eval(ex.group(1))
            except Exception:
                value = None
        pair = re.search(r"[Ll]ist of `\[([^\]`]+)\]` (?:pairs|tuples)", text)
        if value is None and pair:
            value = [[0] * len(pair.group(1).split(","))]
        if value is None:
            continue
        setattr(sub_config_at(out, prefix), f, value)
        changed = True
    return out if changed else None


def default_config(config_class):
    """(config_class's defaults, False), or where its own validators refuse its defaults (Gemma 4
    Assistant's: `hidden_size_per_layer_input must be 0, got 256`, of its default text_config), the
    defaults made without them and True: real_config reads them back (the validators run) after
    validator_repairs."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return config_class(), False
    except Exception:
        pass
    saved = config_class.__dict__.get("validate")
    config_class.validate = lambda self: None
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return config_class(), True
    finally:
        if saved is None:
            del config_class.validate
        else:
            config_class.validate = saved


# A validator's message naming the one value a field must take: "requires indexer_kv_heads=1",
# "hidden_size_per_layer_input must be 0, got 256", "enable_moe_block must be False".
MUST_RE = re.compile(r"\b([a-z_][a-z0-9_]*)\s*(?:=|must be|must equal|should be)\s*(-?\d+|True|False)\b(?!\s*[%/*])")
# Every `name=number` a message names ("rotary_dim=64, indexer_head_dim=2").
NAMED_RE = re.compile(r"\b([a-z_][a-z0-9_]*)\s*=\s*(-?\d+)\b")


def validator_repairs(cfg, rounds=8):
    """cfg, repaired one field at a time while its config class's validators refuse it, each repair
    taken from the refusal's own message: a field the message says must take one value gets it
    (Qwen4-Exp's "QSA requires indexer_kv_heads=1"; Gemma 4 Assistant's "hidden_size_per_layer_input
    must be 0, got 256"), and a field the message names beside another quantity it must fit is given
    that quantity ("RoPE dimensions must fit the QSA index head: rotary_dim=64, indexer_head_dim=2":
    indexer_head_dim 64). A repair is kept where the config then reads back or is refused at a later
    check (progressed); the fields are looked up in the config (or sub-config) the validator checks."""
    for _ in range(rounds):
        said = []
        err = refusal(cfg, tiny=False, message=said)
        if err is None:
            return cfg
        where, _ = err
        if not isinstance(where, tuple) or len(where) != 3 or where[2] is None:
            return cfg
        msg = said[0]
        prefixes = [p for p, x in sub_configs(cfg) if type(x) is where[2]]
        if not prefixes:
            return cfg
        owner = sub_config_at(cfg, prefixes[0])
        # Also the sub-configs the validator reads through (`text_config.hidden_size_per_layer_input`).
        scopes = [(prefixes[0], owner)] + [(prefixes[0] + k + ".", v) for k, v in sorted(vars(owner).items())
                                           if hasattr(v, "to_dict") and not k.startswith("_")]
        candidates = []
        for m in MUST_RE.finditer(msg):
            candidates.append((m.group(1), m.group(2)))
        named = NAMED_RE.findall(msg)
        for f, _v in named:
            for g, w in named:
                if g != f:
                    candidates.append((f, w))
        fixed = None
        for f, v in candidates:
            value = {"True": True, "False": False}.get(v, None)
            if value is None:
                value = int(v)
            for prefix, scope in scopes:
                cur = vars(scope).get(f, "missing")
                if cur == "missing" or cur == value or isinstance(cur, bool) != isinstance(value, bool):
                    continue
                trial = copy.deepcopy(cfg)
                setattr(sub_config_at(trial, prefix), f, value)
                e2 = refusal(trial, tiny=False)
                if e2 is None or (isinstance(e2[0], tuple) and len(e2[0]) == 3 and progressed(where, e2[0])):
                    fixed = trial
                    break
            if fixed is not None:
                break
        if fixed is None:
            return cfg
        cfg = fixed
    return cfg


def completed(cfg, cls, stage):
    """A copy of cfg with what its class's defaults leave null and a released config.json holds
    filled in, each field by the value its class's docstring or modeling file takes as standard
    (transformers' configs derive the same where they derive them):
      stage 1: head_dim = hidden_size // num_attention_heads (Ministral, HunYuan); num_key_value_heads
        = num_attention_heads (Nemotron); a per-layer-type RoPE missing a layer type the config's
        layer_types holds given the default RoPE (Cohere Compass: layer_types full_attention, its
        rope_parameters {}); an attention sub-config holding no RoPE given its parent's rope_theta (DBRX's
        attn_config, which its modeling reads rope_theta from); a mapping field left null given an
        empty mapping (Chameleon's and Emu3's vocabulary_map: the tokenizer's, no tensor depends on
        it); is_decoder true for a class of the causal-LM mapping (ReformerModelWithLMHead asserts it).
      stage 2 (where stage 1 does not build): the null optional integers of every sub-config given
        small values (the TINY sizes, else 2: Dots1's n_routed_experts and n_shared_experts,
        Diffusion-Gemma's num_experts), as a flag's module is built below. Each candidate is read back
        by real_config (the validators run).
      stage 3 (where stages 1 and 2 do not build), then 4 (3 with stage 2's integers): a null per-layer
        kind list (layer_types, mlp_layer_types) made for the layer count of the kinds layer_kinds
        finds, in turn (LFM2-MoE, DeepSeek-OCR-2). real_config then follows the validators' messages
        (validator_repairs: Qwen4-Exp's indexer sizes, given 2 in stage 4, become one key head and an
        index head as wide as the rotary dimensions) and, where the build still fails, fixes what the
        failing modeling line reads (dividing_heads: Aya Vision; documented_fills: Granite 4 Vision)."""
    from transformers.models.auto import modeling_auto
    c = copy.deepcopy(cfg)
    parents = {}
    for prefix, sub in sub_configs(c):
        for k, v in vars(sub).items():
            if hasattr(v, "to_dict") and not k.startswith("_"):
                parents[id(v)] = sub
    causal = set(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    for prefix, sub in sub_configs(c):
        f = vars(sub)
        heads, hidden = f.get("num_attention_heads"), f.get("hidden_size")
        if "head_dim" in f and f["head_dim"] is None and isinstance(heads, int) and isinstance(hidden, int) and heads:
            sub.head_dim = hidden // heads
        if "num_key_value_heads" in f and f["num_key_value_heads"] is None and isinstance(heads, int):
            sub.num_key_value_heads = heads
        rp, types = f.get("rope_parameters"), f.get("layer_types")
        if isinstance(rp, dict) and isinstance(types, list) and (not rp or set(rp) & set(types)):
            theta = getattr(type(sub), "default_theta", None)
            theta = float(theta) if isinstance(theta, (int, float)) else 10000.0
            for t in sorted(set(types)):
                rp.setdefault(t, {"rope_type": "default", "rope_theta": theta})
        parent = parents.get(id(sub))
        prp = vars(parent).get("rope_parameters") if parent is not None else None
        if (parent is not None and "rope_theta" not in f and "rope_parameters" not in f and isinstance(prp, dict)
                and "rope_theta" in prp and type(sub).__name__.endswith("AttentionConfig")):
            sub.rope_theta = prp["rope_theta"]
        for k, v in list(f.items()):
            if v is None and not k.startswith("_") and "dict" in str(type(sub).__annotations__.get(k, "")) \
                    and k.endswith("_map"):
                setattr(sub, k, {})
        if prefix == "" and f.get("is_decoder") is False and cls.__name__ in causal:
            sub.is_decoder = True
        if stage >= 3:
            n = next((f[g] for g in LAYER_FIELDS if isinstance(f.get(g), int) and not isinstance(f.get(g), bool)), None)
            for k, v in list(f.items()):
                if v is None and n and (k == "layer_types" or k.endswith("_layer_types")):
                    kinds = layer_kinds(cls, k)
                    setattr(sub, k, [kinds[i % len(kinds)] for i in range(n)])
        if stage in (2, 4):
            for g in sorted(optional_ints(type(sub))):
                if g in f and f[g] is None and not g.endswith(("_token_id", "_token_ids")):
                    setattr(sub, g, TINY.get(g, 2))
    return c


def layer_kinds(cls, field):
    """The layer kinds a null per-layer list `field` of cls's config is made of (real_config, stage 3):
    the kinds transformers allows in it (configuration_utils' ALLOWED_MLP_LAYER_TYPES for
    `mlp_layer_types`, ALLOWED_ATTN_LAYER_TYPES for `layer_types` and the others) that cls's modeling
    module names ("conv" and "full_attention": LFM2-MoE's), in transformers' order, with the plain
    kind (full_attention, dense) first where it names fewer than two: the kind its `else` branch
    builds (DeepSeek-OCR-2 tests `mlp_layer_types[i] == "sparse"` only). Each layer takes the next
    kind in turn, so every kind's keys are in the build."""
    import inspect
    from transformers import configuration_utils as cu
    allowed = list(cu.ALLOWED_MLP_LAYER_TYPES if field.startswith("mlp_") else cu.ALLOWED_ATTN_LAYER_TYPES)
    try:
        src = inspect.getsource(sys.modules[cls.__module__])
    except Exception:
        src = ""
    named = [t for t in allowed if f'"{t}"' in src or f"'{t}'" in src]
    plain = next(t for t in allowed if t in ("full_attention", "dense"))
    if len(named) < 2 and plain not in named:
        named = [plain] + named
    return named


def cut_layers(cfg):
    """Cuts the layer count of cfg (and its sub-configs) to LAYER_CAP, list fields with it. A count of
    the stack's last layers (LAST_LAYERS_FIELDS) that the cut count no longer exceeds keeps its share
    of the stack (Gemma 3n's num_kv_shared_layers, 15 of 35, is 3 of 8)."""
    for _, c in sub_configs(cfg):
        for f in LAYER_FIELDS:
            n = vars(c).get(f)
            if isinstance(n, int) and not isinstance(n, bool) and n > LAYER_CAP:
                setattr(c, f, LAYER_CAP)
                for k, v in list(vars(c).items()):
                    if isinstance(v, list) and len(v) == n:
                        setattr(c, k, v[:LAYER_CAP])
                    elif (k in LAST_LAYERS_FIELDS and isinstance(v, int) and not isinstance(v, bool)
                          and LAYER_CAP <= v < n):
                        setattr(c, k, max(1, v * LAYER_CAP // n))
                cut_sections(c, n, LAYER_CAP)


def cut_sections(c, n, m):
    """The counts of consecutive sections of a stack of n layers, fields named *_layers that sum to n
    (Dory's n_input_layers, n_recurrent_layers, n_output_layers: 8 + 20 + 8 of 36, which its
    validator requires to sum to num_hidden_layers), cut in proportion to sum to m; each keeps at
    least one layer where m allows."""
    secs = {k: v for k, v in vars(c).items() if k.endswith("_layers") and k not in LAYER_FIELDS
            and k not in LAST_LAYERS_FIELDS and isinstance(v, int) and not isinstance(v, bool) and 0 < v < n}
    if len(secs) < 2 or sum(secs.values()) != n or m < len(secs):
        return
    cut = {k: max(1, v * m // n) for k, v in secs.items()}
    big = max(sorted(cut), key=lambda k: secs[k])
    cut[big] += m - sum(cut.values())
    if cut[big] >= 1:
        for k, v in cut.items():
            setattr(c, k, v)


def sub_configs(cfg, prefix="", depth=0):
    """cfg and its sub-configs, nested (Qwen3-Omni's thinker_config.text_config.), each with the
    path prefix its fields are written with ("", "vision_config.", "thinker_config.text_config.")."""
    from transformers import PretrainedConfig
    out = [(prefix, cfg)]
    if depth >= SUB_DEPTH:
        return out
    # vars(), not getattr: a heterogeneous config (Gemma 4's text_config) raises on reading a
    # per-layer field (head_dim) through the config.
    for k, v in sorted(vars(cfg).items()):
        if isinstance(v, PretrainedConfig) and not k.startswith("_"):
            out += sub_configs(v, prefix + k + ".", depth + 1)
    return out


# How deep sub-configs are walked (Qwen3-Omni: thinker_config.text_config, two levels).
SUB_DEPTH = 3


def sub_config_at(cfg, prefix):
    """The sub-config a prefix ("vision_config.", "") names in cfg."""
    for name in prefix.split(".")[:-1]:
        cfg = getattr(cfg, name)
    return cfg


def rebuilt(cfg):
    """cfg read back from its dict, as from_pretrained reads a folder's config.json: the config class's
    __post_init__ runs again, so what it derives from the fields edited (BLT's
    global_config.encoder_cross_output_size from encoder_config.hidden_size, BLIP-2's
    qformer_config.encoder_hidden_size from vision_config.hidden_size) follows them, as it would in a
    real folder; cfg itself where its class does not take its own dict back."""
    try:
        return rebuilt_or_raise(cfg)
    except Exception:
        return cfg


def rebuilt_or_raise(cfg, tiny=False):
    """rebuilt, raising where the config class refuses its dict; tiny: the entries keyed by layer
    index cut as tiny_config cuts the config (tiny_layer_keyed)."""
    d = cfg.to_dict()
    cut_layer_keyed(d)
    if tiny:
        tiny_layer_keyed(d)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return type(cfg).from_dict(d)


def saved_config(cfg):
    """How the config.json save_pretrained writes counts layers where it is not as the model does
    (Dory's to_dict writes each layer as two blocks, an attention and an mlp, `layer_types` with an
    "mlp" entry after each layer's kind and the layer counts doubled; its __post_init__ halves them
    back when `layer_types` holds "mlp"): {"per_layer": blocks a layer, "list": the per-block list
    field, "kind": the entry kind only the saved list holds, "fields": the count fields multiplied},
    found by comparing the config's dict with the config; None where they agree."""
    d = cfg.to_dict()
    fields = sorted(f for f, v in vars(cfg).items()
                    if isinstance(v, int) and not isinstance(v, bool) and v > 0 and isinstance(d.get(f), int)
                    and d[f] != v and d[f] % v == 0)
    ratios = {d[f] // getattr(cfg, f) for f in fields}
    if not fields or len(ratios) != 1 or not any(f in LAYER_FIELDS for f in fields):
        return None
    k = ratios.pop()
    for f, v in vars(cfg).items():
        if isinstance(v, list) and isinstance(d.get(f), list) and len(d[f]) == k * len(v) and v:
            kinds = sorted(set(d[f]) - set(v))
            if len(kinds) == 1 and d[f][::k] == v:
                return {"per_layer": k, "list": f, "kind": kinds[0], "fields": fields}
    return None


def cut_layer_keyed(d):
    """In a config's dict (and its sub-configs'), entries keyed by layer index past the layer count
    dropped: Gemma 4's text_config.per_layer_config {"05": ..., "29": ...} after the layers were cut
    to fewer (its class refuses a key past num_hidden_layers)."""
    n = next((d[f] for f in LAYER_FIELDS if isinstance(d.get(f), int) and not isinstance(d.get(f), bool)), None)
    for k, v in list(d.items()):
        if not isinstance(v, dict):
            continue
        if n is not None and v and k not in ("id2label", "label2id") and all(str(i).isdigit() for i in v):
            d[k] = {i: x for i, x in v.items() if int(i) < n}
        else:
            cut_layer_keyed(v)


# Whether schema_of reads edited configs back from their dicts: False for a type whose rebuilt
# default config does not build where the config as made does (Gemma 4 with 8 layers: its
# per-layer overrides then cover layer 5 and not the last layer, which __post_init__ makes full
# attention too); its edits are then set on the config as made, as before.
REBUILD = [True]


def edited(cfg, *edits, rebuild=True):
    """A copy of cfg with each (prefix, field, value) set, read back from its dict (rebuilt) unless
    rebuild is False."""
    c2 = copy.deepcopy(cfg)
    for prefix, f, value in edits:
        setattr(sub_config_at(c2, prefix), f, value)
    return rebuilt(c2) if rebuild and REBUILD[0] else c2


def flat_fields(cfg):
    """{"vision_config.hidden_size": 1152, ...}: every field of cfg and its sub-configs by path."""
    out = {}
    for prefix, c in sub_configs(cfg):
        for f, v in vars(c).items():
            if not f.startswith("_") and not hasattr(v, "to_dict"):
                out[prefix + f] = v
    return out


def build(cls, cfg, dtype):
    import torch
    from transformers.modeling_utils import remove_tied_weights_from_state_dict
    from transformers.core_model_loading import revert_weight_conversion
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        with torch.device("meta"):
            model = cls._from_config(copy.deepcopy(cfg), dtype=dtype)
    sd = model.state_dict()
    memory = {k: (tuple(v.shape), v.dtype) for k, v in sd.items()}
    for k in list(model._keys_to_ignore_on_save or []):
        sd.pop(k, None)
    return model, sd, memory


def disk_keys(model, sd, dtypes=None):
    """save_pretrained's names: tied weights out, load-time renames reverted. dtypes: in-memory key ->
    dtype to give each tensor first (the loaded dtype), so the reverted ones carry it."""
    import torch
    from transformers.modeling_utils import remove_tied_weights_from_state_dict
    from transformers.core_model_loading import revert_weight_conversion
    sd = dict(sd)
    if dtypes is not None:
        for k in sd:
            if k in dtypes and sd[k].dtype != dtypes[k]:
                sd[k] = sd[k].to(dtypes[k])  # meta: a new tensor; tied ones compared through the model
    sd = remove_tied_weights_from_state_dict(sd, model)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        sd = revert_weight_conversion(model, sd)
    return {k: (tuple(v.shape), v.dtype) for k, v in sd.items()}


def loaded_dtypes(model, memory, target, built):
    """The dtype from_pretrained(dtype=target) leaves each in-memory tensor in (core_model_loading.py);
    the model was built with default dtype `built`, which from_pretrained would have made `target`."""
    import torch
    from transformers.core_model_loading import build_glob_alternation
    plan = model._get_dtype_plan(target)
    alt = build_glob_alternation(list(plan.keys()))[0] if plan else None
    out = {}
    for k, (_, d) in memory.items():
        if alt is not None and alt.search(k):
            out[k] = torch.float32
        elif d != built:
            out[k] = d
        else:
            out[k] = target
    return out


def keeps_of(model, sd, memory):
    """On-disk key -> [its keep character under dtype=bfloat16, under float16] (keep_char) of a model
    built in bfloat16 (build)."""
    import torch
    keep = {}
    for target, pos in ((torch.bfloat16, 0), (torch.float16, 1)):
        for k, (_, d) in disk_keys(model, sd, loaded_dtypes(model, memory, target, torch.bfloat16)).items():
            keep.setdefault(k, ["-", "-"])[pos] = keep_char(d, target)
    return keep


def keep_char(d, target):
    import torch
    if not d.is_floating_point:
        return "i"
    if d == target:
        return "-"
    if d == torch.float32:
        return "f"
    return {torch.float64: "d", torch.bfloat16: "b", torch.float16: "h"}.get(d, "?")


def linear_form(base, pert, dim_index, key, extra=None):
    """The config fields that explain dimension dim_index of key: sum of coeff*field, or None.
    extra(key, dim_index, rows): the form's tail for rows the fields leave over ("+qk_rope_head_dim"
    when another field of that value explains them, "+8" when none does), or None."""
    v0 = base[key][0][dim_index]
    terms, total = [], 0
    for field, (f0, f1, shapes) in pert.items():
        if key not in shapes or len(shapes[key][0]) != len(base[key][0]):
            continue
        v1 = shapes[key][0][dim_index]
        if v1 == v0:
            continue
        delta = f1 - f0
        if delta == 0 or (v1 - v0) % delta:
            return None
        c = (v1 - v0) // delta
        terms.append((field, c))
        total += c * f0
    if not terms or any(c not in (1, 2, 3, 4) for _, c in terms):
        return None  # a product (heads * head_dim), or a count the config does not name
    form = "+".join(f if c == 1 else f"{c}*{f}" for f, c in terms)
    if total == v0:
        return form
    if 0 < v0 - total <= MAX_EXTRA_ROWS and extra is not None:
        tail = extra(key, dim_index, v0 - total)  # mllama's vocab_size+8, DeepSeek's kv_lora_rank+qk_rope_head_dim
        return form + tail if tail else None
    return None


# The largest constant a dims formula may add to its fields (special rows: mllama's embedding has
# text_config.vocab_size + 8 rows, moshi's vocab_size + 1).
MAX_EXTRA_ROWS = 64

EXPERT_ID = re.compile(r"(?:^|\.)experts\.(\d+)\.")


def expert_count(keys):
    """How many experts the per-expert keys number (the largest index + 1), or 0."""
    ids = [int(m.group(1)) for k in keys for m in [EXPERT_ID.search(k)] if m]
    return max(ids) + 1 if ids else 0


def count_form(n0, pert):
    """The config fields that explain the per-expert key count n0, as linear_form does for dims."""
    terms, total = [], 0
    for field, (f0, f1, shapes) in pert.items():
        n1 = expert_count(shapes)
        if n1 == n0:
            continue
        delta = f1 - f0
        if delta == 0 or (n1 - n0) % delta:
            return None
        c = (n1 - n0) // delta
        terms.append((field, c))
        total += c * f0
    if not terms or total != n0 or any(c not in (1, 2) for _, c in terms):
        return None  # ERNIE-4.5-VL numbers its text and vision experts in one list: 2*moe_num_experts
    return "+".join(f if c == 1 else f"{c}*{f}" for f, c in terms)


NOT_FLIPPED = {"return_dict", "output_hidden_states", "is_decoder", "output_attentions", "use_cache",
               "is_encoder_decoder", "torchscript", "pretraining_tp", "num_experts_per_tok", "n_group",
               "topk_group", "num_key_value_heads"}


def optional_ints(config_class):
    """The config class's fields annotated `int | None` (through its bases)."""
    out = set()
    for k in reversed(config_class.__mro__):
        for f, a in getattr(k, "__annotations__", {}).items():
            args = getattr(a, "__args__", ())
            if int in args and type(None) in args:
                out.add(f)
    return out


# The reason of a type no auto mapping of HEADS gives a class starts so: main() lists it in "skipped"
# (no language-model class), not in "failed".
NO_CLASS = "no model class in the auto mappings"


def no_class_why(model_type):
    """Why a type no HEADS mapping names a class for is no export of its own: a part of a composite
    type (a tower or text stack whose config is the composite's sub-config: Dots3NoteVisionConfig is
    dots3_note's vision_config; its keys are in the composite's folders, under its prefix, and the
    composite's entry holds them), or a model of another task (the mapping that names its class)."""
    import transformers
    from transformers.models.auto import modeling_auto
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    own = getattr(transformers, CONFIG_MAPPING_NAMES[model_type], None)
    owners = []
    for t, name in sorted(CONFIG_MAPPING_NAMES.items()):
        c = getattr(transformers, name, None)
        for k, v in sorted((getattr(c, "sub_configs", None) or {}).items()):
            if v is own and t != model_type:
                owners.append(f"{t}'s {k}")
    if owners:
        return (f": a part of a composite model ({', '.join(owners)}): no auto mapping names a class of its own; "
                f"its keys are in the composite's folders, which the composite's entry covers where the schema "
                f"has one")
    tasks = sorted(n for n in dir(modeling_auto) if n.endswith("_MAPPING_NAMES") and n not in HEADS
                   and model_type in getattr(modeling_auto, n) and n != "CONFIG_MAPPING_NAMES")
    if tasks:
        v = getattr(modeling_auto, tasks[0])[model_type]
        return f": a model of another task, no language model ({v if isinstance(v, str) else v[0]}, in {tasks[0]})"
    return ": no model of it is a class any auto mapping names (a standalone model, no language model)"


# ---- Formulas that hold for every configuration of a class, not one --------------------------------
#
# A dims formula found by doubling one size field at a time (linear_form) can be true only of the
# configuration it was found in: with head_dim derived from hidden_size / num_attention_heads,
# o_proj's input width doubles with hidden_size and "hidden_size" explains it, yet a released
# config.json that sets head_dim (Qwen3-30B-A3B: hidden 2048, 32 heads x 128) makes it 4096. So
# every formula is checked against more builds of the class: the default, each size field doubled,
# the configurations distinct_configs makes (head_dim set so that heads x head_dim is not the
# width, fewer key/value heads than heads, two ratios), and the layer patterns pattern_configs makes
# (a dense first layer, every other layer MoE). A formula is recorded only when it holds in every
# build whose config has its fields and varies across them; otherwise the next candidate is tried
# (a product of two fields of one config: num_attention_heads*head_dim), and where none holds the
# dimension is left unchecked and listed ("unchecked").

# Head widths of the distinct-size configurations, as fractions of hidden_size / heads: the i-th
# (sub-)config with attention heads takes RATIOS[(2*i + k) % len] in configuration k (tiny: 16 ->
# 20, 28, 24, ...; heads x head_dim then 80 and 112 against a width of 64, no intermediate size of
# TINY's), rounded to even (RoPE halves the head); ratios differ per sub-config, so no two of a
# composite's towers scale alike. Configuration 1 also doubles the heads (a product's two fields
# both vary across the builds that set head_dim).
RATIOS = ((5, 4), (7, 4), (3, 2), (9, 4), (5, 2), (11, 4))
DISTINCT = (0, 1)
# The tiny intermediate sizes of the sweep's distinct configurations (TINY's are 96, 32, 48, 32,
# 96): no two alike, none 2x another or a head product of RATIOS'.
DISTINCT_TINY = ({"intermediate_size": 120, "moe_intermediate_size": 36, "shared_expert_intermediate_size": 52,
                  "expert_ffn_hidden_size": 36, "ffn_hidden_size": 120, "d_ff": 120, "ffn_dim": 120,
                  "vocab_size": 272},
                 {"intermediate_size": 88, "moe_intermediate_size": 44, "shared_expert_intermediate_size": 60,
                  "expert_ffn_hidden_size": 44, "ffn_hidden_size": 88, "d_ff": 88, "ffn_dim": 88,
                  "vocab_size": 304})
HEADS_FIELDS = ("num_attention_heads", "n_head", "num_heads")


def even(x):
    return max(2, x + (x % 2))


def distinct_edits(cfg, k, tiny=False):
    """The edits [(prefix, field, value)] of distinct-size configuration k (0 or 1) of cfg: per
    (sub-)config with a width and attention heads, head_dim set to its RATIOS share of hidden_size
    / heads (whether or not the class names the field: Qwen3-MoE's config has none, yet its
    modeling reads one that config.json sets), num_key_value_heads to heads/2 (k 0) or 1 (k 1), and
    in k 1 twice the heads; tiny: the intermediate sizes and vocabulary of DISTINCT_TINY[k] too,
    where the config has them."""
    edits, i = [], 0
    for prefix, c in sub_configs(cfg):
        fields = vars(c)
        h = next((fields[f] for f in ("hidden_size", "d_model", "n_embd") if isinstance(fields.get(f), int)
                  and not isinstance(fields.get(f), bool)), None)
        heads = next((f for f in HEADS_FIELDS if isinstance(fields.get(f), int) and not isinstance(fields.get(f), bool)),
                     None)
        n = fields[heads] if heads else None
        if h and n and n > 0 and h >= n:
            num, den = RATIOS[(2 * i + k) % len(RATIOS)]
            i += 1
            edits.append((prefix, "head_dim", even((h // n) * num // den)))
            if k == 1:
                edits.append((prefix, heads, 2 * n))
            if "num_key_value_heads" in fields:
                edits.append((prefix, "num_key_value_heads", n // 2 if k == 0 and n % 2 == 0 else 1))
        if tiny:
            for f, v in DISTINCT_TINY[k].items():
                if isinstance(fields.get(f), int) and not isinstance(fields.get(f), bool):
                    edits.append((prefix, f, v))
    return edits


def distinct_configs(cfg, build_ok, tiny=False, ks=None):
    """[(label, config, what build_ok returned)]: the distinct-size configurations of cfg that
    build_ok(config) builds (returns a true value for; raises or returns a false one where not),
    each edit set tried whole, then (where the class refuses it) without the heads doubled, then its
    head_dim edits alone, then its key/value head edits alone, so that a class that requires kv ==
    heads still gets the head_dim one. label: the edits, "head_dim=20,num_key_value_heads=2"."""
    out = []
    for k in DISTINCT if ks is None else ks:
        edits = distinct_edits(cfg, k, tiny)
        if not edits:
            continue
        tries = [edits, [e for e in edits if e[1] not in HEADS_FIELDS],
                 [e for e in edits if e[1] not in HEADS_FIELDS and e[1] != "num_key_value_heads"],
                 [e for e in edits if e[1] == "num_key_value_heads"]]
        seen = []
        for t in tries:
            if not t or t in seen:
                continue
            seen.append(t)
            try:  # a field the class derives as a property (Falcon's head_dim) takes no value
                c2 = copy.deepcopy(cfg)
                for prefix, f, v in t:
                    setattr(sub_config_at(c2, prefix), f, v)
                # read back as from_pretrained reads its config.json: a set its validators refuse
                # is no configuration of the class
                c2 = rebuilt_or_raise(c2, tiny=tiny) if REBUILD[0] else c2
                r = build_ok(c2)
            except Exception:
                continue
            if r:
                out.append((",".join(f"{p}{f}={v}" for p, f, v in t), c2, r))
                break
    return out


# Layer-pattern fields: which layers are dense, MoE, of which attention kind. Each is built with
# another value (pattern_configs), so the keys of every layer kind are in the schema and no key of
# one kind is required of every layer.
PATTERN_INTS = {"first_k_dense_replace": lambda v: 0 if v else 1, "num_dense_layers": lambda v: 0 if v else 1,
                "moe_layer_start_index": lambda v: 0 if v else 1,
                "decoder_sparse_step": lambda v: 2 if v == 1 else 1, "encoder_sparse_step": lambda v: 2 if v == 1 else 1,
                "moe_layer_freq": lambda v: 2 if v == 1 else 1, "moe_layer_interval": lambda v: 2 if v == 1 else 1,
                "interleave_moe_layer_step": lambda v: 2 if v == 1 else 1}


def pattern_configs(cfg, cls):
    """[(label, config)]: cfg with one layer-pattern field changed: the integer ones of PATTERN_INTS
    ("first_k_dense_replace=1": DeepSeek-V2's and Dots1's dense first layer), mlp_only_layers made
    [0] or [], and a per-layer kind list (mlp_layer_types, layer_types) of one kind with its first
    layer given each other kind layer_kinds names."""
    out = []
    for prefix, c in sub_configs(cfg):
        for f, v in sorted(vars(c).items()):
            edit = None
            if f in PATTERN_INTS and isinstance(v, int) and not isinstance(v, bool):
                edit = [PATTERN_INTS[f](v)]
            elif f == "mlp_only_layers" and isinstance(v, list):
                edit = [[] if v else [0]]
            elif f.endswith("layer_types") and isinstance(v, list) and v and all(isinstance(x, str) for x in v) \
                    and len(set(v)) == 1:
                edit = [[kind] + v[1:] for kind in layer_kinds(cls, f) if kind != v[0]][:2]
            for value in edit or []:
                c2 = copy.deepcopy(cfg)
                try:
                    setattr(sub_config_at(c2, prefix), f, value)
                except Exception:
                    continue
                shown = value[0] if isinstance(value, list) and value and isinstance(value[0], str) else value
                out.append((f"{prefix}{f}={json.dumps(shown)}" if not isinstance(value, list) or not value
                            or not isinstance(value[0], str) else f"{prefix}{f}[0]={shown}",
                            rebuilt(c2) if REBUILD[0] else c2))
    return out


TERM_RE = re.compile(r"[+-]")


def sweep_config(cfg, cls, spec, build):
    """The sweep's configuration `spec` of a tiny cfg (tests/interop/hf_schema_sweep_test.py), with
    what build returned for it: "d0"/"d1" the distinct sizes k (distinct_configs, tiny: DISTINCT_TINY's
    intermediate sizes too); "p:FIELD" the layer pattern that changes FIELD (pattern_configs); "" cfg
    itself. Raises where the class builds none (the caller says so)."""
    if not spec:
        return cfg, build(cfg)
    if spec.startswith("d"):
        got = distinct_configs(cfg, build, tiny=True, ks=[int(spec[1:])])
        if not got:
            raise ValueError(f"no distinct-size configuration {spec} of this config builds")
        return got[0][1], got[0][2]
    field = spec[2:]
    for label, c2 in pattern_configs(cfg, cls):
        if label.split("=")[0].split("[")[0].rpartition(".")[2] == field.rpartition(".")[2]:
            return c2, build(c2)
    raise ValueError(f"no layer pattern of {field} in this config")


def evaluate(form, fields):
    """A dims formula from a config's integer fields (flat_ints), as check/hf_schema.cpp's
    evaluate_dims computes it: terms joined by + (a constant may be taken away), each a constant, a
    field, c*field or field*field; None where a field is missing or not an integer."""
    total, at = 0, 0
    for m in list(TERM_RE.finditer(form)) + [None]:
        end = m.start() if m else len(form)
        term = form[at:end]
        sign = -1 if at > 0 and form[at - 1] == "-" else 1
        if term.isdigit():
            total += sign * int(term)
        else:
            if sign < 0:
                return None
            prod = 1
            for factor in term.split("*"):
                if factor.isdigit():
                    prod *= int(factor)
                    continue
                v = fields.get(factor)
                if not isinstance(v, int) or isinstance(v, bool):
                    return None
                prod *= v
            total += prod
        at = end + 1
    return total


def candidate_forms(v, fields):
    """Formulas a dimension of v could be, from one build's fields, simplest first: a field, twice
    one, the product of two fields of one (sub-)config, the sum of two (MLA's kv_lora_rank +
    qk_rope_head_dim)."""
    ints = {f: x for f, x in fields.items() if isinstance(x, int) and not isinstance(x, bool) and x > 0}
    names = sorted(ints)
    out = [f for f in names if ints[f] == v]
    out += [f"{c}*{f}" for c in (2, 3, 4) for f in names if c * ints[f] == v]
    by_prefix = {}
    for f in names:
        by_prefix.setdefault(f.rpartition(".")[0], []).append(f)
    for group in by_prefix.values():
        for i, a in enumerate(group):
            if ints[a] < 2 or v % ints[a]:
                continue
            for b in group[i:]:
                if ints[b] >= 2 and ints[a] * ints[b] == v:
                    out.append(f"{a}*{b}")
    for group in by_prefix.values():
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                if ints[a] + ints[b] == v:
                    out.append(f"{a}+{b}")
    return out


def holds_everywhere(form, observations):
    """Whether form gives the observed size in every observation [(label, fields, size)] that has
    its fields, in at least two of them (not counting the sweep's tiny builds, "tiny:..."), with at
    least two different sizes and two values of each of its fields: a formula no build varied is
    not known to be one."""
    seen, values = set(), {}
    names = [f for f in re.split(r"[+*-]", form) if f and not f.isdigit()]
    for label, fields, size in observations:
        v = evaluate(form, fields)
        if v is None:
            continue
        if v != size:
            return False
        if label.startswith("tiny:"):
            # The sweep's tiny builds only refute: tiny_config cuts many sizes together, so what
            # coincides in the default (Chameleon's VQ mid channels = 2 x embed_dim) still does there.
            continue
        seen.add(size)
        for f in names:
            values.setdefault(f, set()).add(fields[f])
    # Each field varied too: a field no build changed (Qwen2-VL's max_window_layers, 28 as its heads
    # are) proves nothing of its place in the product.
    return len(seen) >= 2 and all(len(values.get(f, ())) >= 2 for f in names)


def settled_form(first, observations):
    """The dims formula of one dimension: `first` (linear_form's, from doubling) when it holds in
    every observation [(label, fields, size)] (the first is the reference build's), else the first
    of candidate_forms that does; (formula, None) or (None, why none)."""
    if first and holds_everywhere(first, observations):
        return first, None
    # Candidates from the reference build first, then from each other (a field the reference's
    # config does not have: Qwen2's head_dim, set only in the distinct-size builds).
    tried = {first}
    for _, fields, size in observations:
        for form in candidate_forms(size, fields):
            if form not in tried:
                tried.add(form)
                if holds_everywhere(form, observations):
                    return form, None
    if first:
        bad = next((label for label, fields, size in observations if evaluate(first, fields) not in (None, size)), None)
        return None, f"{first} does not hold in {bad}" if bad else f"{first}: no build varies it"
    return None, "no formula of config fields holds in every build"


def json_lines(out):
    """The schema as JSON with one model type a line (and each of failed/skipped's entries), so that
    a regeneration's diff shows what changed per type."""
    def dump(v):
        return json.dumps(v, separators=(",", ":"), sort_keys=False)
    lines = ["{"]
    top = [(k, v) for k, v in out.items()]
    for i, (k, v) in enumerate(top):
        end = "," if i + 1 < len(top) else ""
        if isinstance(v, dict) and k in ("types", "failed", "skipped"):
            lines.append(f"{dump(k)}:{{")
            items = list(v.items())
            for j, (t, e) in enumerate(items):
                lines.append(f"{dump(t)}:{dump(e)}" + ("," if j + 1 < len(items) else ""))
            lines.append("}" + end)
        else:
            lines.append(f"{dump(k)}:{dump(v)}{end}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def blocks_of(disk):
    """The stacks of numbered blocks: the key up to its first number -> block number -> the patterns
    of the rest of the keys in that block."""
    blocks = {}
    for k in disk:
        m = FIRST_INT.match(k)
        if m:
            # the rest's pattern as the whole key's (an index numbered in a name is known by its prefix)
            rest = ".".join(pattern_of(k).split(".")[m.group(1).count(".") + 2:])
            blocks.setdefault(m.group(1), {}).setdefault(m.group(2), set()).add(rest)
    return blocks


def core_patterns(disk):
    """The numbered keys every block of their stack holds, as patterns."""
    core = set()
    for stack, per in blocks_of(disk).items():
        for rest in set.intersection(*per.values()):
            core.add(pattern_of(stack) + ".#." + rest)
    return core


def schema_of(model_type):
    """model_type, or (model_type, class name): the schema of that class built from model_type's
    config class (a model_type another type's class saves its folders as)."""
    quiet()
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    part = None
    if isinstance(model_type, tuple):
        model_type, cls_name = model_type
    else:
        cls_name, part = classes_of(model_type)
    if cls_name is None:
        return model_type, None, NO_CLASS + no_class_why(model_type)
    try:
        cfg_cls = getattr(transformers, CONFIG_MAPPING_NAMES[model_type])
        cls = getattr(transformers, cls_name)
    except Exception as e:
        return model_type, None, f"not imported: {type(e).__name__}: {str(e)[:160]}"
    try:
        cfg, filled = real_config(model_type, cls)
    except Exception as e:
        return model_type, None, f"{cls_name} not built from {cfg_cls.__name__}(): {str(e)[:400]}"
    try:
        cut_layers(cfg)
        REBUILD[0] = True
        try:  # what __post_init__ derives from the cut layer counts follows them
            back = rebuilt(cfg)
            model, sd, memory = build(cls, back, torch.bfloat16)
            cfg = back
        except Exception:
            REBUILD[0] = False
            model, sd, memory = build(cls, cfg, torch.bfloat16)
    except Exception as e:
        return model_type, None, f"{cls_name} not built from {cfg_cls.__name__}(): {type(e).__name__}: {str(e)[:160]}"
    NAMED[0] = frozenset()
    disk = disk_keys(model, sd)
    keep = keeps_of(model, sd, memory)
    # Dims: each size field of the config and of every sub-config (a vision or audio tower's, BLT's
    # encoder_config) doubled, one at a time, the config read back from its dict (rebuilt) so that
    # what its class derives from the field follows it.
    def disk_of(c2):
        m2, sd2, _ = build(cls, c2, torch.bfloat16)
        return disk_keys(m2, sd2)

    def doubled(base):
        """{field path: (its value, twice it, the on-disk keys, the config)} for each size field of
        base that builds doubled."""
        out = {}
        for prefix, c in sub_configs(base):
            for f, v in sorted(vars(c).items()):
                if not SIZE_RE.match(f) or not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                    continue
                try:
                    c2 = edited(base, (prefix, f, v * 2))
                    out[prefix + f] = (v, v * 2, disk_of(c2), c2)
                except Exception:
                    continue
        return out

    pert_builds = doubled(cfg)
    pert = {f: (v0, v1, keys2) for f, (v0, v1, keys2, _) in pert_builds.items()}
    pert_fields = {f: flat_fields(c2) for f, (*_, c2) in pert_builds.items()}

    # The builds every formula is checked against (settled_form): [(label, fields, on-disk keys)],
    # the default's first, then each size field doubled, then the distinct-size configurations.
    checks = [("default", flat_ints(cfg), disk)]
    checks += [(f"{f}*2", flat_ints(c2), keys2) for f, (_, _, keys2, c2) in pert_builds.items()]
    distinct = distinct_configs(cfg, disk_of)
    checks += [(label, flat_ints(c2), keys2) for label, c2, keys2 in distinct]
    # The sweep's configurations too (tiny_config's sizes made distinct: hf_schema_sweep_test.py
    # builds its sources so), whose ratios are not the default's: a coincidence of the default
    # sizes (DeepSeek-V4's qk_nope_head_dim = qk_rope_head_dim) does not hold there.
    try:
        tiny = tiny_config(model_type, cls)
    except Exception:
        tiny = None
    for spec in ("d0", "d1") if tiny is not None else ():
        try:
            c2, keys2 = sweep_config(tiny, cls, spec, disk_of)
            checks.append((f"tiny:{spec}", flat_ints(c2), keys2))
        except Exception:
            continue
    # The layer patterns (a dense first layer, MoE every other layer, another attention kind in
    # layer 0): their builds, and for one that brings keys the default lacks, its own doubled and
    # distinct-size builds (the formulas of those keys are found and checked there).
    patterned = []  # (label, config, keys, {field: (v0, v1, keys)} doubled)
    base_raw = set(disk)
    for label, c2 in pattern_configs(cfg, cls):
        try:
            k2 = disk_of(c2)
        except Exception:
            continue
        checks.append((label, flat_ints(c2), k2))
        doubled2 = {}
        if {INT_COMPONENT.sub("#", k) for k in k2} - {INT_COMPONENT.sub("#", k) for k in base_raw}:
            for f, (v0, v1, k3, c3) in doubled(c2).items():
                doubled2[f] = (v0, v1, k3)
                checks.append((f"{label},{f}*2", flat_ints(c3), k3))
            for label3, c3, k3 in distinct_configs(c2, disk_of):
                checks.append((f"{label},{label3}", flat_ints(c3), k3))
        patterned.append((label, c2, k2, doubled2))
    # Indices numbered in names (Inkling's vision layers.norm_N, one per vision layer but the last;
    # NLLB-MoE's experts.expert_N): where the default build has a name family numbered 0..n-1, the
    # builds with a size field doubled and with each layer count halved tell whether n counts with
    # the config; pattern_of writes those `#` from here on, and "counts" holds n as config fields.
    named = {}
    if any(NAMED_COMPONENT.match(c) and int(NAMED_COMPONENT.match(c).group(2)) == 0
           for k in disk for c in k.split(".")):
        builds = [(f, v0, v1, keys) for f, (v0, v1, keys) in pert.items()]
        for f, v0, v1, c2 in layer_counts_halved(cfg):
            try:
                m2, sd2, _ = build(cls, c2, torch.bfloat16)
                builds.append((f, v0, v1, disk_keys(m2, sd2)))
            except Exception:
                pass
        named = named_indices(disk, builds)
        NAMED[0] = frozenset(named)
    # Booleans flipped, optional integers set to None, empty layer lists given layer 0, one at a
    # time: the keys they bring or take away (attention_bias=true brings q_proj.bias; q_lora_rank=null
    # swaps DeepSeek's q_a_proj for q_proj; mlp_only_layers=nonempty brings Qwen3-MoE's dense MLP).
    when, absent = {}, []
    flips = []
    for prefix, c in sub_configs(cfg):
        optional = optional_ints(type(c))
        for f, v in sorted(vars(c).items()):
            if f.startswith("_") or f in NOT_FLIPPED:
                continue
            if isinstance(v, bool):
                flips.append((prefix, f, not v, "true" if not v else "false"))
            elif isinstance(v, int) and f in optional and not f.endswith(("_token_id", "_token_ids")):
                flips.append((prefix, f, None, "null"))
            elif isinstance(v, list) and not v and "layer" in f:
                flips.append((prefix, f, [0], "nonempty"))  # mlp_only_layers=[0]: a dense layer 0
    # Set on the config as made, not read back: a class may override the flag it reads from a
    # config.json (T5Config's __post_init__ forces tie_word_embeddings true, yet from_pretrained of
    # an mT5 folder saying false, with its own lm_head.weight, loads that head untied and clean).
    for prefix, f, value, text in flips:
        try:
            c2 = edited(cfg, (prefix, f, value), rebuild=False)
            m2, sd2, mem2 = build(cls, c2, torch.bfloat16)
            k2 = disk_keys(m2, sd2)
        except Exception:
            # A flag whose module needs sizes the default leaves null (Gemma 4's
            # enable_moe_block=true needs num_experts, top_k_experts, moe_intermediate_size): once
            # more with the sub-config's null optional integers given small values.
            sub = sub_config_at(cfg, prefix)
            fill = [(prefix, g, TINY.get(g, 2)) for g in sorted(optional_ints(type(sub)))
                    if vars(sub).get(g, 0) is None and not g.endswith(("_token_id", "_token_ids"))]
            if not fill or value is None:
                continue
            try:
                c2 = edited(cfg, (prefix, f, value), *fill, rebuild=False)
                m2, sd2, mem2 = build(cls, c2, torch.bfloat16)
                k2 = disk_keys(m2, sd2)
            except Exception:
                continue
        cond = f"{prefix}{f}={text}"
        p1 = {pattern_of(k) for k in disk}
        core2 = core_patterns(k2)
        # The dtype transformers keeps each key of that build in, as for the default build's keys;
        # not derived ("") where transformers' tied-weight check refuses the flipped build's dict (a
        # tie_* flag set on the config as made).
        try:
            keep2 = keeps_of(m2, sd2, mem2)
        except Exception:
            keep2 = None
        for k, s in k2.items():
            p = pattern_of(k)
            if p not in p1:
                # Required under its flag as a key of the default build is: outside numbered blocks,
                # or held by every block of its stack in the build with the flag set (Llama's
                # attention_bias=true: every layer's q/k/v/o_proj.bias). Not under a tie_* flag: a
                # class may override it (T5Config forces tie_word_embeddings), and the heads and
                # embeddings it ties are checked by the tied-head rules.
                need = not f.startswith("tie_") and (not FIRST_INT.match(k) or p in core2)
                when.setdefault(p, (cond, s, 1 if need else 0, "".join(keep2[k]) if keep2 and k in keep2 else ""))
        p2 = {pattern_of(k) for k in k2}
        for p in sorted(p1 - p2):
            absent.append([p, cond])
    # Two size fields that differ: a size field doubled that brings a key the default build lacks,
    # where another field of the same config had the same value, and doubling both takes the key
    # away again: the key exists when the two differ (OPT's project_in/project_out when
    # word_embed_proj_dim != hidden_size, RoFormer's embeddings_project when embedding_size !=
    # hidden_size). Written "A!=B", the two names sorted.
    default_patterns = {pattern_of(k) for k in disk}
    for field, (v0, v1, shapes) in sorted(pert.items()):
        new = {}
        for k, (shape, _) in shapes.items():
            if pattern_of(k) not in default_patterns:
                new.setdefault(pattern_of(k), shape)
        if not new or all(p in when for p in new):
            continue
        prefix, name = (field.rsplit(".", 1)[0] + ".", field.rsplit(".", 1)[1]) if "." in field else ("", field)
        c = sub_config_at(cfg, prefix)
        for g, gv in sorted(vars(c).items()):
            if g == name or g.startswith("_") or not isinstance(gv, int) or isinstance(gv, bool) or gv != v0:
                continue
            try:
                c2 = edited(cfg, (prefix, name, v1), (prefix, g, v1))
                m2, sd2, _ = build(cls, c2, torch.bfloat16)
                both = {pattern_of(k) for k in disk_keys(m2, sd2)}
            except Exception:
                continue
            gone = [p for p in new if p not in both and p not in when]
            if gone:
                cond = "!=".join(sorted([prefix + name, prefix + g]))
                for p in gone:
                    when[p] = (cond, new[p])
                break
        # A field the config class derives from the doubled one, null in the default and set now
        # (BLT's global_config.encoder_cross_output_size, written to config.json, when
        # encoder_config.hidden_size * cross_attn_k differs from global_config.hidden_size: the
        # token_embedding_projection of BLT-7B): the key exists when that field is set ("FIELD=set").
        left = [p for p in new if p not in when]
        if left and field in pert_fields:
            base_fields = flat_fields(cfg)
            became = sorted(k for k, v in pert_fields[field].items()
                            if v is not None and k in base_fields and base_fields[k] is None)
            if len(became) == 1:
                for p in left:
                    when[p] = (f"{became[0]}=set", new[p])
    # Required: a key outside any numbered block, or one every block of its stack holds (the
    # attention and norms of every layer, not the MLP of the dense layers only).
    # Over the default build and the layer patterns' (a key the dense first layer lacks is no
    # key of every layer).
    layered = [disk] + [k2 for _, _, k2, _ in patterned]
    core = set.intersection(*(core_patterns(k) for k in layered))
    # Together: the keys of one module of a block (its first path component: `mlp`, `self_attn`)
    # that the same blocks hold (GLM's MoE router weight, its e_score_correction_bias, the experts
    # and the shared experts of layers 1..7; the dense MLP of layer 0 is another group): a block
    # that holds one holds them all.
    # A key numbered in its name (NLLB-MoE's `experts.expert_99.`: as many as num_experts says) is in no
    # group: a size doubled brings a key of the same name but for its digits.
    def digits_out(p):
        return re.sub(r"\d+", "N", p)
    default_patterns = {pattern_of(k) for k in disk}
    sized = set()
    for _, _, shapes in pert.values():
        sized |= {digits_out(pattern_of(k)) for k in shapes if pattern_of(k) not in default_patterns}
    # A block of each build is a block of its own: keys that come together come together in every
    # layer pattern.
    stacks = {}
    for n, keys_n in enumerate(layered):
        for stack, per in blocks_of(keys_n).items():
            for layer, rests in per.items():
                for rest in rests:
                    stacks.setdefault(stack, {}).setdefault(rest, set()).add((n, layer))
    groups = {}
    for stack, holders in stacks.items():
        for rest, ids in holders.items():
            if digits_out(pattern_of(stack) + ".#." + rest) in sized:
                continue
            groups.setdefault((pattern_of(stack), rest.split(".")[0], frozenset(ids)), []).append(
                pattern_of(stack) + ".#." + rest)
    together = sorted(sorted(g) for g in groups.values() if len(g) > 1)
    # Rows a dims formula's fields leave over: another field of that value, when doubling it
    # changes the dimension by as much (DeepSeek's kv_a_proj_with_mqa: kv_lora_rank +
    # qk_rope_head_dim), else a constant when no field of that value changes it (mllama's
    # embedding: text_config.vocab_size + 8), else unknown.
    doubled = {}

    def extra(key, i, rows):
        v0 = disk[key][0][i]
        for prefix, c in sub_configs(cfg):
            for g, gv in sorted(vars(c).items()):
                if g.startswith("_") or not isinstance(gv, int) or isinstance(gv, bool) or gv != rows:
                    continue
                if prefix + g not in doubled:
                    try:
                        c2 = edited(cfg, (prefix, g, gv * 2))
                        m2, sd2, _ = build(cls, c2, torch.bfloat16)
                        doubled[prefix + g] = disk_keys(m2, sd2)
                    except Exception:
                        doubled[prefix + g] = None
                shapes = doubled[prefix + g]
                if shapes is None or key not in shapes or len(shapes[key][0]) != len(disk[key][0]):
                    continue
                v1 = shapes[key][0][i]
                if v1 == v0:
                    continue
                return f"+{prefix}{g}" if v1 - v0 == rows else None
        return f"+{rows}"

    keys, shape_of = {}, {}
    for k, (shape, _) in disk.items():
        p = pattern_of(k)
        dims = [linear_form(disk, pert, i, k, extra) for i in range(len(shape))]
        if p in keys:
            # One pattern, two shapes or forms (a Sequential's modules: CTRL's ffn.0 and ffn.2):
            # its dims are not one form, so none is given.
            if shape_of[p] != shape or keys[p][1] != dims:
                keys[p][1] = []
            continue
        shape_of[p] = shape
        required = 1 if (not FIRST_INT.match(k) or p in core) else 0
        keys[p] = [p, dims, "".join(keep.get(k, ["-", "-"])), "", required]
    # Every formula checked against every build (settled_form); what no formula explains in all of
    # them is left unchecked, and listed.
    shapes_in = []  # per build of `checks`: pattern -> its shape (None: two shapes in that build)
    for _, _, keys_b in checks:
        per = {}
        for k, (shape, _) in keys_b.items():
            p = pattern_of(k)
            per[p] = shape if per.get(p, shape) == shape else None
        shapes_in.append(per)

    def observed(p, i, first=0):
        order = [first] + [n for n in range(len(checks)) if n != first]
        out = []
        for n in order:
            shape = shapes_in[n].get(p)
            if shape is not None and len(shape) > i:
                out.append((checks[n][0], checks[n][1], shape[i]))
        return out

    unchecked = []

    def settle(p, dims, first=0):
        for i, form in enumerate(dims):
            obs = observed(p, i, first)
            if not obs or obs[0][0] != checks[first][0]:
                dims[i] = None
                continue
            dims[i], why = settled_form(form, obs)
            if dims[i] is None:
                unchecked.append([p, i, why])

    for p, entry in keys.items():
        if entry[1]:
            settle(p, entry[1])
    # The keys a layer pattern brings (the dense MLP of DeepSeek-V2's first layer): no condition
    # (which layers a config makes dense is the config's to say), required of no layer.
    for label, c2, k2, doubled2 in patterned:
        first = next(n for n, c in enumerate(checks) if c[0] == label)
        keep2 = None
        for k, (shape, _) in k2.items():
            p = pattern_of(k)
            if p in keys:
                continue
            if keep2 is None:
                try:
                    m2, sd2, mem2 = build(cls, c2, torch.bfloat16)
                    keep2 = keeps_of(m2, sd2, mem2)
                except Exception:
                    keep2 = {}
            dims = [linear_form(k2, doubled2, i, k) for i in range(len(shape))]
            if shapes_in[first].get(p) is None:
                dims = []
            settle(p, dims, first)
            keys[p] = [p, dims, "".join(keep2[k]) if k in keep2 else "", "", 0]
            when.pop(p, None)
    # A key of another condition (two fields that differ, a derived field set) has no dtype derived: "".
    for p, (cond, shape, *more) in when.items():
        keys.setdefault(p, [p, [None] * len(shape), more[1] if more else "", cond, more[0] if more else 0])
    disk_patterns = {pattern_of(k) for k in disk}
    memory_patterns = {pattern_of(k) for k in memory}
    memory_only = sorted(memory_patterns - disk_patterns)
    renamed = sorted(disk_patterns - memory_patterns)
    out = {
        "class": cls_name,
        "prefix": getattr(cls, "base_model_prefix", "") or "",
        "keys": [keys[p] for p in sorted(keys)],
    }
    # The type of the class's own config class, when another type's (a config's architectures
    # finds the class's own type: LlamaForCausalLM is llama's, not internlm3's).
    own = getattr(getattr(cls, "config_class", None), "model_type", None)
    if own and own != model_type:
        out["class_type"] = own
    if filled:
        out["completed"] = filled  # what real_config filled in the class's defaults (they build no model)
    saved = saved_config(cfg)
    if saved:
        out["saved_config"] = saved
    if part and part != cls_name:
        # The class passed over for this type's own (Llama4ForCausalLM, built from the text_config):
        # its folders are its own config class's type, built too when the schema has no entry for it.
        part_type = getattr(getattr(transformers, part).config_class, "model_type", None)
        if part_type and part_type != model_type:
            out["_part"] = [part_type, part]
    saved_as = getattr(model.config, "model_type", model_type)
    if saved_as and saved_as != model_type:
        out["_saved_as"] = saved_as  # main() builds that type too (popped before writing)
    # The prefixes transformers' loader changes (PrefixChange, which revert_weight_conversion leaves
    # out for a model built from scratch): [on-disk prefix, the schema's].
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import PrefixChange
    prefixes = []
    try:
        for conv in get_model_conversion_mapping(model, add_legacy=False):
            if isinstance(conv, PrefixChange):
                m = conv.model_prefix + "." if conv.model_prefix else ""
                if conv.prefix_to_remove:
                    prefixes.append([m + conv.prefix_to_remove + ".", m])
                elif conv.prefix_to_add:
                    prefixes.append([m, m + conv.prefix_to_add + "."])
    except Exception:
        pass
    # A head the class never ties (its _tied_weights_keys lacks lm_head.weight: BigBirdPegasusForCausalLM
    # loads its own lm_head.weight whatever tie_word_embeddings says).
    if "lm_head.weight" in disk:
        tied = dict(getattr(cls, "_tied_weights_keys", None) or {})
        tied.update(getattr(model, "all_tied_weights_keys", None) or {})
        # Either side of a tie (BLT ties model.local_encoder.embed_tokens.weight to lm_head.weight).
        if not any(k == "lm_head.weight" or re.fullmatch(k, "lm_head.weight") or v == "lm_head.weight"
                   for k, v in tied.items()):
            out["head_untied"] = True
    n0 = expert_count(disk)
    if n0:
        out["experts"] = count_form(n0, pert)
    if named:
        out["named"] = [[p, named[p]] for p in sorted(named)]
    if absent:
        out["absent"] = sorted(absent)
    if together:
        out["together"] = together
    # The configurations the formulas were checked in, and the dimensions none explains in all.
    out["checked_in"] = [c[0] for c in checks]
    if patterned:
        out["patterns"] = sorted({label.split("=")[0].split("[")[0] for label, *_ in patterned})
    if unchecked:
        out["unchecked"] = sorted(unchecked)
    if prefixes:
        out["prefixes"] = prefixes
    if memory_only:
        out["memory"] = memory_only
        out["renamed"] = renamed
    renames, why = load_renames(model, sd)
    if renames:
        out["load_renames"] = renames
    elif why:
        out["load_renames_not_derived"] = why
    unmapped = load_conversions(model, disk, renames)
    if unmapped:
        out["load_conversions"] = unmapped
    for attr, name in (("_keys_to_ignore_on_load_unexpected", "ignore_unexpected"),
                       ("_keys_to_ignore_on_load_missing", "ignore_missing")):
        v = sorted(getattr(model, attr, None) or [])
        if v:
            out[name] = v
    return model_type, out, None


def load_conversions(model, disk, renames):
    """The load-time conversions (conversion_mapping.py) that read keys neither save_pretrained writes
    nor "load_renames" maps: [[source pattern, the conversion's class], ...], each pattern as the
    conversion declares it (dcpctl matches it as transformers does: `*.` any run then a dot, a name
    boundary after a final letter or digit; none with lookbehind or named groups, which std::regex
    does not read). A folder key the schema does not define under any condition that matches one is in a layout transformers converts on load and dcpctl does not:
    refused, exit 5 (Dory's release layout, each layer two blocks `layers.{2i}.mixer` and
    `layers.{2i+1}.mixer`, which LayerPairCollapse folds on load and does not write back)."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import PrefixChange
    try:
        convs = get_model_conversion_mapping(model, add_legacy=False)
    except Exception:
        return []
    release = [r[0].replace("#", "0") for r in renames or []]  # a release key of each load_renames pattern
    out = set()
    for conv in convs:
        if isinstance(conv, PrefixChange):
            continue
        for p in getattr(conv, "source_patterns", None) or []:
            own = getattr(conv, "pattern", None)  # LayerPairCollapse matches its own, narrower pattern
            p = own.pattern if isinstance(own, re.Pattern) else p
            if not isinstance(p, str) or "(?<" in p or "(?P" in p:
                continue
            try:
                rx = re.compile(p)
            except re.error:
                continue
            if any(rx.search(k) for k in disk) or any(rx.search(k) for k in release):
                continue
            out.add((p, type(conv).__name__))
    return sorted([p, c] for p, c in out)


def load_renames(model, sd):
    """The release layout transformers converts on load, as [[release pattern, save pattern], ...]
    (the "load_renames" of the module docstring), or ([], why not) / ([], None) when the type has no
    such layout. The release names are what the load-time renames of conversion_mapping.py were
    written for: the in-memory state dict (tied weights out) with the base model prefix taken off,
    through revert_weight_conversion; every one is then renamed as from_pretrained renames a
    checkpoint key (core_model_loading.rename_source_key, with the base-prefix rule, the model's
    meta state dict and convert_and_load_state_dict_in_model's fallback for a key already among the
    model's names) and must land on a parameter of the model, and each is paired with the
    save_pretrained key (disk_keys) that lands on the same parameter through the same converter
    source with the same indices and shape. Recorded only where some release name differs from its
    save name by more than the base prefix (a type whose renames revert to the names they read,
    Mixtral's per-expert weights, has none to record)."""
    import torch
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import (PrefixChange, WeightConverter, WeightRenaming,
                                                 rename_source_key, revert_weight_conversion)
    from transformers.modeling_utils import remove_tied_weights_from_state_dict
    try:
        mapping = get_model_conversion_mapping(model, add_legacy=False)
    except Exception as e:
        return [], f"get_model_conversion_mapping: {type(e).__name__}: {str(e)[:160]}"
    load = [c for c in mapping or [] if not isinstance(c, PrefixChange)]
    if not any(isinstance(c, WeightRenaming) for c in load):
        return [], None  # converters only: save_pretrained reverts them to the names they read
    prefix = getattr(model, "base_model_prefix", "") or ""
    dot = prefix + "." if prefix else ""
    meta = model.state_dict()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            kept = remove_tied_weights_from_state_dict(dict(sd), model)
            save = revert_weight_conversion(model, dict(kept))
            release = revert_weight_conversion(
                model, {k[len(dot):] if dot and k.startswith(dot) else k: v for k, v in kept.items()})
    except Exception as e:
        return [], f"revert_weight_conversion: {type(e).__name__}: {str(e)[:160]}"
    # Fresh transforms, as from_pretrained builds them, for the forward renames.
    fresh = get_model_conversion_mapping(model, add_legacy=False)
    renamings = [c for c in fresh if isinstance(c, WeightRenaming)]
    converters = [c for c in fresh if isinstance(c, WeightConverter)]

    def lands(key):
        renamed, source = rename_source_key(key, renamings, converters, prefix or None, meta)
        if renamed not in meta and key in meta:  # the loader's own fallback: a model name is kept
            renamed, source = rename_source_key(key, [], [], prefix or None, meta)
        return (renamed, source, tuple(INT_COMPONENT.findall(key))) if renamed in meta else None
    by_landing = {}
    for k, v in save.items():
        at = lands(k)
        if at is None:
            return [], f"save_pretrained's {k} does not load back (rename_source_key)"
        by_landing.setdefault(at, []).append((k, tuple(v.shape)))
    pairs, beyond_prefix = {}, False
    for k, v in release.items():
        at = lands(k)
        if at is None:
            return [], f"the release name {k} is not loaded by from_pretrained's renames"
        found = by_landing.get(at, [])
        if len(found) != 1 or found[0][1] != tuple(v.shape):
            return [], f"the release name {k} pairs with {len(found)} save_pretrained keys"
        s = found[0][0]
        if k != s:
            pairs[pattern_of(k)] = pattern_of(s)
            if (dot + k) != s:
                beyond_prefix = True
    if not beyond_prefix:
        return [], None
    return [[r, pairs[r]] for r in sorted(pairs)], None

# Tiny configs, for tests that save real (CPU) models of every type: every size field made small,
# the layer count cut to TINY_LAYERS. A type this cannot shrink is left out by its caller.
TINY_LAYERS = 4
TINY = {
    "hidden_size": 64, "d_model": 64, "n_embd": 64, "embed_dim": 64, "dim": 64,
    "intermediate_size": 96, "d_ff": 96, "ffn_dim": 96, "n_inner": 96, "encoder_ffn_dim": 96,
    "decoder_ffn_dim": 96, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
    "expert_ffn_hidden_size": 32, "ffn_hidden_size": 96,
    "num_attention_heads": 4, "n_head": 4, "num_heads": 4, "encoder_attention_heads": 4,
    "decoder_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "d_kv": 16,
    "kv_lora_rank": 16, "q_lora_rank": 24, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "v_head_dim": 16, "qk_head_dim": 16,
    "n_routed_experts": 4, "num_local_experts": 4, "num_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_k": 2, "top_k": 2, "n_group": 1, "topk_group": 1,
    "n_shared_experts": 1, "num_shared_experts": 1, "zero_expert_num": 2,
    "vocab_size": 256,
}


# Size fields TINY does not name, by name, each with the most it may keep: a tower's widths
# (VibeVoice's acoustic and semantic tokenizers are num_filters * 2**stage wide, 2048 at the last of
# 7 stages; Gemma 4's per-layer input embedding, vocab_size_per_layer_input x hidden_size_per_layer_input
# per layer; BLT's hash embedding of encoder_hash_byte_group_vocab rows; XLM's emb_dim; Janus's
# projection_dim and VQ codebook). A list of widths (MuseSpark audio's hidden_sizes [256, ..., 2048],
# Florence-2 vision's embed_dim) is divided by one power of two, its ratios kept. tiny_config tries
# the cut without them where the cut with them is refused.
TINY_PATTERNS = [
    (re.compile(r"vocab"), 256),
    (re.compile(r"^num_embeddings$"), 256),
    (re.compile(r"(hidden_size|hidden_dim|embed_dim|emb_dim|projection_dim)s?(_|$)"), 64),
    (re.compile(r"^num_filters$"), 4),
    (re.compile(r"(^|_)channels$"), 32),  # Janus's VQ base_channels (x channel_multiplier 4), latent_channels
]


def tiny_pattern_cap(f):
    if f in TINY:
        return TINY[f]  # a list of them (Florence-2 vision's embed_dim per stage): the int is TINY's cut
    if f.endswith(("_token_id", "_token_ids", "_id")):
        return None
    for rx, cap in TINY_PATTERNS:
        if rx.search(f):
            return cap
    return None


def tiny_patterns(cfg):
    """cfg (cut in place) with the size fields TINY_PATTERNS names made small."""
    for _, c in sub_configs(cfg):
        for f, v in list(vars(c).items()):
            cap = None if f.startswith("_") else tiny_pattern_cap(f)
            if cap is None:
                continue
            if isinstance(v, int) and not isinstance(v, bool) and v > cap and f not in TINY:
                setattr(c, f, cap)  # (TINY's own ints are tiny_cut's: its relations kept there)
            elif isinstance(v, (list, tuple)) and v and \
                    all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v) and max(v) > cap:
                d = 1
                while max(v) // d > cap:
                    d *= 2
                if all(x % d == 0 for x in v):
                    setattr(c, f, [x // d for x in v])
    return cfg


def tiny_config(model_type, cls=None, build=None):
    """A small config of model_type (its class defaults, sizes cut), or raises. The cut config is read
    back from its dict (rebuilt), as from_pretrained reads the folder's config.json, so that what the
    config class derives in __post_init__ follows the cut sizes (BLIP's text_config.encoder_hidden_size,
    T5Gemma's decoder.cross_attention_hidden_size, MiniMax-M3-VL's merged_hidden_size): the model built
    is the one its own folder reloads as. Its starting point is real_config's, as the schema's (cls:
    the class built, primary_class's by default).

    build: a function that builds the model of a config (raises when it cannot); given, a config its
    class cannot be built from is retried as one its validators refuse is (below), and the result is
    (config, what build returned). Without it, the config.

    The cut (tiny_cut) makes the size fields TINY names small, then those TINY_PATTERNS names by
    name (tried without them where refused). Where the cut config is refused (its class's
    validators, read back; or build), it is retried with
    the relations the validators check kept (tiny_repairs), then with the layer count cut to LAYER_CAP
    rather than TINY_LAYERS (Zamba's shared attention needs two hybrid layers, the first at 2 and one
    every attn_layer_period after). Where every try fails, the cut config unchecked (as before: the
    caller's build or its reload reports why)."""
    import transformers
    if cls is None:
        name = primary_class(model_type)
        cls = getattr(transformers, name) if name else None
    cfg, _ = real_config(model_type, cls)  # the schema's starting point: its class defaults, completed
    first = None
    for layers in (TINY_LAYERS, LAYER_CAP):
        cut = tiny_cut(cfg, layers)
        if first is None:
            first = cut
        elif config_dict(cut) == config_dict(first):
            break  # no layer count past TINY_LAYERS: nothing more to try
        for patterns in (True, False):
            if patterns:
                c0 = tiny_patterns(copy.deepcopy(cut))
                if config_dict(c0) == config_dict(cut):
                    continue  # nothing TINY_PATTERNS names: the same as the cut without them
            else:
                c0 = cut
            for c in tiny_repairs(c0, cfg, build):
                try:
                    back = rebuilt_or_raise(c, tiny=True)
                    return (back, build(back)) if build is not None else back
                except Exception:
                    continue
    back = rebuilt(first)
    return (back, build(back)) if build is not None else back


def config_dict(cfg):
    try:
        return cfg.to_dict()
    except Exception:
        return None


def tiny_cut(cfg, layers):
    """cfg (a copy) with its layer counts cut to `layers` and every size field TINY names made small,
    the token ids kept inside the cut vocabulary and a multimodal RoPE's sections summing to half the
    cut head_dim."""
    # Sub-configs (towers, a multimodal model's language model) with as many key/value heads as
    # attention heads by default keep them equal: transformers' own conversions may assume it
    # (NeMo Speech-LM's audio encoders load q, k and v from one fused tensor split in three equal
    # parts: a tiny tower of 4 heads and 2 key/value heads saves 160 rows that reload as 54, 54, 52).
    # The top-level model keeps TINY's 2 key/value heads for 4 (grouped-query attention).
    mha = {p for p, x in sub_configs(cfg) if p and vars(x).get("num_key_value_heads") is not None
           and vars(x).get("num_key_value_heads") == vars(x).get("num_attention_heads")}
    cfg = copy.deepcopy(cfg)
    global LAYER_CAP
    saved, LAYER_CAP = LAYER_CAP, layers
    try:
        cut_layers(cfg)
    finally:
        LAYER_CAP = saved
    for p, c in sub_configs(cfg):
        for f, v in list(vars(c).items()):
            if f in TINY and isinstance(v, int) and not isinstance(v, bool) and v > TINY[f]:
                setattr(c, f, TINY[f])
        fields = vars(c)  # not getattr: a per-layer field of a heterogeneous config raises there
        if isinstance(fields.get("num_key_value_heads"), int) and isinstance(fields.get("num_attention_heads"), int):
            kv, heads = fields["num_key_value_heads"], fields["num_attention_heads"]
            if p in mha or (kv and heads % kv):
                c.num_key_value_heads = fields["num_attention_heads"]
        tiny_token_ids(c, fields.get("vocab_size"))
        tiny_mrope(c)
    return cfg


def tiny_token_ids(c, vocab):
    """Every token id field of config c (`pad_token_id`, `audio_pad_token_id`, `image_token_id`, lists
    of them) past the cut vocabulary brought inside it (the last 8 ids; Kyutai's embedding pads at
    audio_pad_token_id)."""
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab <= 8:
        return
    for f, v in list(vars(c).items()):
        if not f.endswith(("_token_id", "_token_ids")):
            continue
        if isinstance(v, int) and not isinstance(v, bool) and v >= vocab:
            setattr(c, f, vocab - 1 - zlib.crc32(f.encode()) % 8)
        elif isinstance(v, list) and all(isinstance(x, int) for x in v):
            setattr(c, f, [x if x < vocab else vocab - 1 for x in v])


def tiny_mrope(c):
    """A multimodal RoPE's sections summing to half the cut head_dim (Cosmos3-Edge's mrope_section
    [24, 20, 20] for head_dim 128 becomes [4, 2, 2] for 16; ERNIE-4.5-VL's [22, 22, 20] sizes its
    inverse frequencies at build, unchecked by its validators)."""
    fields = vars(c)
    # MLA's rotary part is qk_rope_head_dim wide (HY-V4-VL's text model: its sections sum to half it)
    rp, hd = fields.get("rope_parameters"), fields.get("qk_rope_head_dim") or fields.get("head_dim")
    if not isinstance(hd, int) and isinstance(fields.get("hidden_size"), int) and \
            isinstance(fields.get("num_attention_heads"), int) and fields["num_attention_heads"]:
        hd = fields["hidden_size"] // fields["num_attention_heads"]
    if isinstance(rp, dict) and isinstance(rp.get("mrope_section"), list) and isinstance(hd, int):
        sec, half = rp["mrope_section"], hd // 2
        if sum(sec) != half and len(sec) <= half:
            scaled = [max(1, x * half // sum(sec)) for x in sec]
            scaled[0] += half - sum(scaled)
            rp["mrope_section"] = scaled


def tiny_layer_keyed(d):
    """In a config's dict, the entries keyed by layer index (Dots-3-Note's per_layer_config: each
    sliding layer's heads, ranks and head sizes) cut as the config's own fields are: every size TINY
    names made small, as many key/value heads as attention heads where the entry had."""
    for k, v in list(d.items()):
        if not isinstance(v, dict):
            continue
        if v and k not in ("id2label", "label2id") and all(str(i).isdigit() for i in v):
            for entry in v.values():
                if not isinstance(entry, dict):
                    continue
                mha = entry.get("num_key_value_heads") is not None and \
                    entry.get("num_key_value_heads") == entry.get("num_attention_heads")
                for f, x in list(entry.items()):
                    if f in TINY and isinstance(x, int) and not isinstance(x, bool) and x > TINY[f]:
                        entry[f] = TINY[f]
                if mha:
                    entry["num_key_value_heads"] = entry["num_attention_heads"]
        else:
            tiny_layer_keyed(v)


def tiny_repairs(cut, default, build=None, rounds=6):
    """The cut config, then copies of it its config class (or build) refuses less: yields cut, then
    (where it is refused) cut with the relations its default held kept, one repair after another:
      - as many key/value heads as attention heads where the default had (GLM-5-Next's validator);
      - a field the failing validator reads set to what keeps the relation its default held
        (repair_refused);
      - where the refusal is not a validator's (build): a multimodal RoPE given sections for the cut
        head_dim where its class takes them (`mrope_section` among its rope keys) and its
        rope_parameters leave them to the modeling code's default for the default head_dim
        (ERNIE-4.5-VL: [22, 22, 20] of 64, 8 wide when cut); then every integer field the cut left at
        its default that equalled a field the cut changed in the same config follows that field
        (Mimi's upsample_groups, its hidden_size: a depthwise convolution, 512 of 512 by default).
    build, given: a config that reads back but does not build is repaired as a refused one."""
    yield cut
    c = copy.deepcopy(cut)
    mha = {p for p, x in sub_configs(default) if vars(x).get("num_key_value_heads") is not None
           and vars(x).get("num_key_value_heads") == vars(x).get("num_attention_heads")}
    for p, x in sub_configs(c):
        if p in mha and isinstance(vars(x).get("num_attention_heads"), int):
            x.num_key_value_heads = vars(x)["num_attention_heads"]
    yield c
    c = yield from repair_refused(c, default, build, rounds)
    for fix in (mrope_for_class, follow_equal):
        c2 = fix(c, default)
        if c2 is None:
            continue
        c = c2
        yield c
        c = yield from repair_refused(c, default, build, rounds)


def repair_refused(c, default, build, rounds):
    """Yields c repaired, one field at a time, while the config class refuses it; returns the last.
    The failing validator's own source names the fields (`self.vision_config.out_hidden_size`,
    `self.text_config.hidden_size`); a field among them is given its default value times the ratios
    the cut gave one, two or three of the others (granite_docling's vision_config.out_hidden_size
    follows text_config.hidden_size; fun_asr_nano's adaptor_config.intermediate_size is
    text_config.hidden_size // 4 by default, 256 of 1024, and becomes 16 of 64; XLNet's d_head,
    d_model // n_head; Mamba-2's expand in hidden_size * expand == num_heads * head_dim), a list of
    layer indices scaled with the layer count it indexes (Molmo2's adapter_config.vision_feature_layer
    [24, 18] of 25 vision layers, [3, 2] of 4). Fields the cut left at their default are tried first,
    values that shrink before values that grow; a repair is kept where the config then reads back, or
    is refused at a later check of the same validator or by another config class's (the next
    relation); `rounds` repairs at most."""
    base = flat_ints(default)
    for _ in range(rounds):
        err = refusal(c, build)
        if err is None or not err[1]:
            return c
        where, fields = err
        now = flat_ints(c)
        fixed = None
        for path, value in repair_candidates(fields, base, now):
            trial = copy.deepcopy(c)
            set_path(trial, path, value)
            e2 = refusal(trial, build)
            if e2 is None or progressed(where, e2[0]):
                fixed = trial
                break
        if fixed is None:
            return c
        c = fixed
        yield c
    return c


def mrope_for_class(c, default):
    """c with RoPE sections for its cut head_dim where a config class takes `mrope_section` (its
    ignore_keys_at_rope_validation) and its rope_parameters have none; None where none changed."""
    out, changed = copy.deepcopy(c), False
    for _, x in sub_configs(out):
        rp = vars(x).get("rope_parameters")
        if not isinstance(rp, dict) or "mrope_section" in rp or \
                "mrope_section" not in (getattr(type(x), "ignore_keys_at_rope_validation", None) or ()):
            continue
        fields = vars(x)
        hd = fields.get("head_dim")
        if not isinstance(hd, int) and isinstance(fields.get("hidden_size"), int) and fields.get("num_attention_heads"):
            hd = fields["hidden_size"] // fields["num_attention_heads"]
        if isinstance(hd, int) and hd >= 6:
            half = hd // 2
            rp["mrope_section"] = [half - 2 * (half // 3), half // 3, half // 3]
            changed = True
    return out if changed else None


def follow_equal(c, default):
    """c with each integer field the cut left at its default that equalled, in the same config, a
    field the cut changed, set to that field's cut value; None where none changed."""
    out, changed = copy.deepcopy(c), False
    cuts = dict(sub_configs(default))
    for p, x in sub_configs(out):
        d = cuts.get(p)
        if d is None:
            continue
        dv, nv = vars(d), vars(x)
        moved = {}
        for f, v in nv.items():
            v0 = dv.get(f)
            if f.startswith("_") or isinstance(v, bool) or not isinstance(v, int) or not isinstance(v0, int):
                continue
            if v != v0 and v0 > 1:
                moved.setdefault(v0, v)
        for f, v in list(nv.items()):
            if f.startswith("_") or isinstance(v, bool) or not isinstance(v, int) or f.endswith(("_token_id", "_id")):
                continue
            if dv.get(f) == v and v in moved and moved[v] < v:
                setattr(x, f, moved[v])
                changed = True
    return out if changed else None


def flat_ints(cfg):
    """{"vision_config.out_hidden_size": 1024, "adapter_config.vision_feature_layer": [24, 18], ...}:
    the integer fields (and lists of integers) of cfg and its sub-configs by path."""
    out = {}
    for prefix, c in sub_configs(cfg):
        for f, v in vars(c).items():
            if f.startswith("_") or isinstance(v, bool):
                continue
            if isinstance(v, tuple):
                v = list(v)  # Reformer's axial_pos_embds_dim (64, 192)
            if isinstance(v, int) or (isinstance(v, list) and v and all(
                    isinstance(x, int) and not isinstance(x, bool) for x in v)):
                out[prefix + f] = v
    return out


def set_path(cfg, path, value):
    prefix, _, f = path.rpartition(".")
    setattr(sub_config_at(cfg, prefix + "." if prefix else ""), f, value)


def refusal(cfg, build=None, tiny=True, message=None):
    """None where cfg reads back from its dict (and builds, with build), else (where, fields): where the
    refusal was raised (the validator's code object, line and config class), and the paths in cfg of
    the fields the raising validator reads (`self.a.b` in its source, self the config it validates,
    found in cfg by its class). tiny: read back as tiny_config's (rebuilt_or_raise's tiny); message, a
    list: the refusal's message appended."""
    import inspect
    try:
        back = rebuilt_or_raise(cfg, tiny=tiny)
        if build is not None:
            build(back)
        return None
    except Exception as e:
        cause = e.__cause__ if e.__cause__ is not None else e
        if message is not None:
            message.append(str(cause))
        # The innermost frame validating a config (its `self`), else the innermost reading one (a
        # module's __init__ checking its `config`: Reformer's axial position embeddings).
        tb, frame, name = cause.__traceback__, None, "self"
        reader = None
        while tb is not None:
            loc = tb.tb_frame.f_locals
            if "self" in loc and hasattr(loc["self"], "to_dict"):
                frame = tb
            elif "config" in loc and hasattr(loc["config"], "to_dict"):
                reader = tb
            tb = tb.tb_next
        if frame is None and reader is not None:
            frame, name = reader, "config"
        if frame is None:
            return (str(e)[:200], None, None), []
        owner = frame.tb_frame.f_locals[name]
        code = frame.tb_frame.f_code
        try:
            src = inspect.getsource(code)
        except Exception:
            src = ""
        prefixes = [p for p, x in sub_configs(cfg) if type(x) is type(owner)]
        fields = []
        chains = re.finditer(r"\b" + name + r"((?:\.[A-Za-z_]\w*)+)", src)
        for chain in dict.fromkeys(m.group(1)[1:] for m in chains):
            for p in prefixes[:1]:
                fields.append(p + chain)
        return (code, frame.tb_lineno, type(owner)), fields


def progressed(where, now):
    """Whether a refusal at `now` is past the one at `where`: a later line of the same validator, or
    another config class's validator (a sub-config's refusal fixed, its parent's next)."""
    code, line, owner = where
    code2, line2, owner2 = now
    if code2 is code:
        return line2 > line
    return owner2 is not owner and owner2 is not None


def repair_candidates(fields, base, now):
    """(path, value) candidates, in the order repair tries them (see tiny_repairs)."""
    from itertools import combinations, product
    ints = [f for f in fields if isinstance(now.get(f), int) and isinstance(base.get(f), int)
            and base[f] > 0 and now[f] > 0]
    ratios = {f: (now[f], base[f]) for f in ints if now[f] != base[f]}
    out = []
    for f in fields:
        if f not in now or f not in base:
            continue
        if isinstance(now[f], list):
            # Layer indices: scaled with the layer count among the fields that the cut changed;
            # sizes (Reformer's axial_pos_embds_dim, which sums to hidden_size): scaled with a size.
            for g, (n1, n0) in ratios.items():
                if g.rsplit(".", 1)[-1] in LAYER_FIELDS and n0 > n1:
                    v = [x * n1 // n0 if x >= 0 else max(x, -n1) for x in base[f]]
                elif all(x > 0 and x * n1 % n0 == 0 for x in base[f]):
                    v = [x * n1 // n0 for x in base[f]]
                else:
                    continue
                if v != now[f]:
                    out.append((0, 0, 1, f, v))
            continue
        if f not in ints:
            continue
        others = [g for g in ratios if g != f]
        if now[f] != base[f]:
            out.append((1, 0 if base[f] < now[f] else 1, 0, f, base[f]))  # its default again
        for k in (1, 2, 3):
            for gs in combinations(others, k):
                for es in product((1, -1), repeat=k):
                    num, den = base[f], 1
                    for g, e in zip(gs, es):
                        n1, n0 = ratios[g]
                        num, den = (num * n1, den * n0) if e > 0 else (num * n0, den * n1)
                    if num % den:
                        continue
                    v = num // den
                    if v <= 0 or v == now[f]:
                        continue
                    out.append((0 if now[f] == base[f] else 1, 0 if v < now[f] else 1, k, f, v))
    out.sort(key=lambda x: x[:3])
    seen = set()
    for *_, f, v in out:
        key = (f, repr(v))
        if key not in seen:
            seen.add(key)
            yield f, v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-j", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("types", nargs="*", help="only these model types (default: all)")
    args = ap.parse_args()
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    skipped = {}
    if args.types:
        types = args.types
    else:
        # The model types a Hugging Face export is of: a language-model class (causal, seq2seq,
        # image-text-to-text, multimodal), or a keep-in-float32 list (src/plan/keep_in_fp32.json's).
        from transformers.models.auto import modeling_auto
        lm = set()
        for name in HEADS[:4]:
            lm |= set(getattr(modeling_auto, name))
        keep = json.load(open(KEEP_TABLE))
        lm |= set(keep["strict"]) | set(keep["fp16"])
        types = sorted(t for t in CONFIG_MAPPING_NAMES if t in lm)
        skipped = {t: "no language-model class and no keep-in-float32 list: not built" for t in sorted(CONFIG_MAPPING_NAMES)
                   if t not in lm}
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(args.j, maxtasksperchild=200) as pool:
        results = []
        for r in pool.imap_unordered(schema_of, types, chunksize=1):
            results.append(r)
            print(f"hf_schema: {len(results)}/{len(types)} {r[0]}", file=sys.stderr, flush=True)
        # A class whose folders say another model_type than the one it was built for
        # (MllamaForCausalLM from MllamaConfig saves a mllama_text_model config.json): that
        # type too, when it is not one of the types above, the class built from its own config.
        more = {(r[1].pop("_saved_as"), r[1]["class"]) for r in results if r[1] and "_saved_as" in r[1]}
        more |= {tuple(r[1].pop("_part")) for r in results if r[1] and "_part" in r[1]}
        more = sorted(more)
        more = [m for m in more if m[0] not in types and m[0] in CONFIG_MAPPING_NAMES]
        for r in pool.imap_unordered(schema_of, more, chunksize=1):
            if r[1]:
                r[1].pop("_saved_as", None)
                r[1].pop("_part", None)
            results.append(r)
            skipped.pop(r[0], None)
            print(f"hf_schema: {r[0]} (the model_type {dict(more)[r[0]]} saves)", file=sys.stderr, flush=True)
        results.sort(key=lambda r: r[0])
    schema, failed = {}, {}
    for t, s, why in results:
        if s is None and why.startswith(NO_CLASS):
            skipped[t] = why  # a part of a composite type, or a model of another task: no export of its own
        elif s is None:
            failed[t] = why
            print(f"hf_schema: {t}: {why}", file=sys.stderr)
        else:
            schema[t] = s
    out = {
        "schema": "dcpctl-hf-schema/1",
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
        "source": "tools/hf_schema.py: save_pretrained's on-disk keys of each model type's primary class, built on the meta device",
        "types": schema,
        "failed": failed,
        "skipped": dict(sorted(skipped.items())),
    }
    sys.stdout.write(json_lines(out))


if __name__ == "__main__":
    main()
