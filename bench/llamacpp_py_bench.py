"""Rough llama.cpp speed through llama-cpp-python (any venv's build): prompt of 512 tokens in one
eval (comparable), then 64 one-token evals (each pays Python and a copy of the logits: a lower
bound for decode, not a ratio).
For a quick ratio where llama-bench is not built (e.g. the AVX2-only build of
tools/ref/avx2_reference.sh); bench/compare_llamacpp.py is the real comparison.

    PYTHON bench/llamacpp_py_bench.py MODEL.gguf [-t THREADS] [-r ROUNDS]
"""
import argparse
import time

import llama_cpp

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("-t", type=int, default=2)
ap.add_argument("-r", type=int, default=2)
a = ap.parse_args()
llm = llama_cpp.Llama(model_path=a.model, n_ctx=1024, n_threads=a.t, n_batch=512, verbose=False)
toks = [1 + (i * 7919) % 40000 for i in range(512)]
print(llama_cpp.llama_print_system_info().decode().strip())
for _ in range(a.r):
    llm.reset()
    t = time.time()
    llm.eval(toks)
    pp = len(toks) / (time.time() - t)
    t = time.time()
    for i in range(64):
        llm.eval([100 + i])
    tg = 64 / (time.time() - t)
    print(f"pp512 {pp:.1f} tok/s  tg64 {tg:.1f} tok/s", flush=True)
