#!/usr/bin/env python3
"""llama-quantize's work through llama.cpp's own library: `llama_model_quantize`, the function the
llama-quantize tool calls, from the llama-cpp-python 0.3.36 that tools/gguf_oracle.py build makes
(the oracle's portable CPU build: no -march=native, no x86 extensions; ggml's quantizers then run
their plain C rows). bench/gguf.sh's stand-in when bench/build_llama_quantize.sh has not built
the native tool.

    llama_quantize.py SITE IN.gguf OUT.gguf TYPE [--pure]    SITE: gguf_oracle.py build's directory; TYPE: Q8_0, ...
                                                              --pure: llama-quantize --pure (every tensor TYPE)
"""
import ctypes
import sys

if len(sys.argv) not in (5, 6) or sys.argv[5:] not in ([], ["--pure"]):
    sys.exit(__doc__)
sys.path.insert(0, sys.argv[1])
import llama_cpp  # noqa: E402

p = llama_cpp.llama_model_quantize_default_params()
# The K-quants have no plain ftype: llama-quantize names Q4_K Q4_K_M, Q5_K Q5_K_M (the mix's main type, all of it under --pure).
word = {"Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}.get(sys.argv[4].upper(), sys.argv[4].upper())
p.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{word}")
p.pure = sys.argv[5:] == ["--pure"]
p.nthread = 0  # llama-quantize's default: std::thread::hardware_concurrency()
sys.exit(llama_cpp.llama_model_quantize(sys.argv[2].encode(), sys.argv[3].encode(), ctypes.byref(p)))
