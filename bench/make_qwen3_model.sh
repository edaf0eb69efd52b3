#!/usr/bin/env bash
# The model of bench/gguf_rows.sh and bench/gguf_speed.sh, made once into DIR and kept (DIR/done):
# Qwen/Qwen3-1.7B's config.json as released (1.72 B parameters, its 151,936 x 2,048 embedding tied
# to the head, bfloat16; about 3.44 GB), random weights (torch.manual_seed(0), transformers' init)
# saved by transformers' save_pretrained as one safetensors file, and Qwen2's tokenizer rebuilt
# from llama.cpp's vocabulary (tools/gguf_oracle.py tokenizer qwen2).
#
#   bench/make_qwen3_model.sh DIR      (PYTHON or DCPCTL_VENV: the project's .venv, torch and transformers)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-${DCPCTL_VENV:-$ROOT/.venv}/bin/python}
MODEL=${1:?usage: make_qwen3_model.sh DIR}
if [ ! -f "$MODEL/done" ]; then
  rm -rf "$MODEL"
  mkdir -p "$MODEL"
  # Qwen/Qwen3-1.7B's config.json, verbatim.
  cat >"$MODEL/config.json" <<'EOF'
{
  "architectures": [
    "Qwen3ForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 6144,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
}
EOF
  "$PY" - "$MODEL" "$ROOT/tools" <<'EOF'
import json, shutil, sys, tempfile
from pathlib import Path
import torch, transformers
model_dir, tools = Path(sys.argv[1]), sys.argv[2]
sys.path.insert(0, tools)
import gguf_oracle
config = transformers.AutoConfig.from_pretrained(model_dir)
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
with tempfile.TemporaryDirectory() as tmp:  # save_pretrained rewrites config.json: keep the release's
    model.save_pretrained(tmp, max_shard_size="100GB")
    for f in Path(tmp).glob("*.safetensors"):
        shutil.move(str(f), model_dir / f.name)
gguf_oracle.tokenizer("qwen2", str(model_dir))
print("params", sum(p.numel() for p in model.parameters()), file=sys.stderr)
EOF
  touch "$MODEL/done"
fi
