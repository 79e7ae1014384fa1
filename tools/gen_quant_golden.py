#!/usr/bin/env python3
"""Golden files for tests/quant: independent reference values for hotcold's quant layer.

Sources, both independent of hotcold's code:
  * gguf-py (PyPI `gguf`, numpy reference quants): dequantisation of random-but-valid raw blocks
    of every weight type, and quantisation of a fixed float input for the types gguf-py can
    quantise (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1).
  * ggml itself, from the libggml-base / libggml-cpu shipped with llama-cpp-python (optional,
    skipped with a note if missing): quantize_row_*_ref for the types gguf-py cannot quantise
    (Q4_K, Q5_K, Q6_K, Q8_K, Q8_1) and the scalar ggml_vec_dot_*_generic dot products.
    Where both sources cover a case (dequantise, Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 quantise) they are checked
    against each other here.

Everything is little-endian raw data; the seed is fixed, so reruns reproduce the files.
Usage: ~/.cache/hotcold/venv/bin/python tools/gen_quant_golden.py [out_dir]
"""
import ctypes
import pathlib
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

SEED = 20240611
OUT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                   pathlib.Path(__file__).resolve().parent.parent / "tests/quant/golden")

# ggml block sizes / bytes (ggml-common.h). gguf-py's table still lists the old 40-byte Q8_1,
# so the current layouts are spelled out here.
LAYOUT = {"F16": (1, 2), "BF16": (1, 2), "F32": (1, 4), "Q4_0": (32, 18), "Q4_1": (32, 20),
          "Q5_0": (32, 22), "Q5_1": (32, 24),
          "Q8_0": (32, 34), "Q8_1": (32, 36), "Q4_K": (256, 144), "Q5_K": (256, 176),
          "Q6_K": (256, 210), "Q8_K": (256, 292)}
DOT_TYPE = {"Q4_0": "Q8_0", "Q8_0": "Q8_0", "Q4_1": "Q8_1", "Q4_K": "Q8_K", "Q5_K": "Q8_K",
            "Q6_K": "Q8_K"}

rng = np.random.default_rng(SEED)


def write(name, arr):
    path = OUT / name
    path.write_bytes(np.ascontiguousarray(arr).tobytes())
    return path


def f16_bits(values):
    return np.asarray(values, dtype=np.float32).astype(np.float16).view(np.uint16)


def rand_bytes(nb, k):
    return rng.integers(0, 256, size=(nb, k), dtype=np.uint8)


def half_field(vals):
    return f16_bits(vals).view(np.uint8).reshape(-1, 2)


def random_blocks(name, nb):
    """Raw blocks with every bit pattern a file may hold, plus a few edge blocks (zero scale,
    subnormal scale, negative scale)."""
    d = rng.normal(0, 0.05, nb).astype(np.float32)
    d[0], d[1] = 0.0, np.float32(np.float16(2.0 ** -24))  # zero and smallest subnormal scale
    pos = np.abs(rng.normal(0, 0.02, nb)).astype(np.float32)
    if name == "Q4_0":
        return np.hstack([half_field(d), rand_bytes(nb, 16)])
    if name == "Q4_1":
        return np.hstack([half_field(d), half_field(rng.normal(0, 0.1, nb)), rand_bytes(nb, 16)])
    if name == "Q8_0":
        return np.hstack([half_field(d), rand_bytes(nb, 32)])
    if name == "Q5_0":
        return np.hstack([half_field(d), rand_bytes(nb, 4 + 16)])
    if name == "Q5_1":
        return np.hstack([half_field(d), half_field(rng.normal(0, 0.1, nb)), rand_bytes(nb, 4 + 16)])
    if name in ("Q4_K", "Q5_K"):
        extra = 32 if name == "Q5_K" else 0
        return np.hstack([half_field(np.abs(d)), half_field(pos), rand_bytes(nb, 12 + extra + 128)])
    if name == "Q6_K":
        return np.hstack([rand_bytes(nb, 128 + 64 + 16), half_field(d)])
    raise ValueError(name)


def random_halves(name, n):
    bits = rng.integers(0, 65536, size=n, dtype=np.uint16)
    exp_mask = 0x7C00 if name == "F16" else 0x7F80
    bits[(bits & exp_mask) == exp_mask] &= ~np.uint16(0x4000)  # no Inf / NaN
    return bits


def quant_input():
    """24 super-blocks of 256 floats: 9 probing particular regimes of the quantisers, then bulk."""
    blocks = [
        rng.normal(0, 1, 256),
        rng.normal(0, 1, 256) * np.repeat(np.logspace(-3, 2, 8), 32),  # sub-block scales vary
        np.zeros(256),
        rng.uniform(0, 1, 256),        # all positive: K-quant min clamps to 0
        rng.uniform(-1, 0, 256),       # all negative
        np.concatenate([np.full(128, 0.37), np.where(rng.uniform(size=128) < 0.05,
                                                     rng.normal(0, 5, 128), 0.0)]),
        rng.normal(0, 1e-4, 256),
        rng.standard_t(3, 256),
    ]
    # Block 8: with 127 as the largest magnitude Q8_0 gets d = 1 exactly, so x.5 values are
    # exact ties where roundf (away from zero) and round-to-even differ.
    ties = np.arange(-16, 16, dtype=np.float64) + 0.5
    ties[0] = 127.0
    blocks.append(np.tile(ties, 8))
    # Blocks 9..23: bulk data for the K-quant scale searches (Gaussian with random sub-block
    # scales, Laplace, uniform, Student-t).
    for k in range(15):
        kind = k % 4
        if kind == 0:
            blocks.append(rng.normal(0, 1, 256) * np.repeat(rng.lognormal(0, 1, 16), 16))
        elif kind == 1:
            blocks.append(rng.laplace(0, 0.02, 256))
        elif kind == 2:
            blocks.append(rng.uniform(-3, 5, 256))
        else:
            blocks.append(rng.standard_t(4, 256) * 0.1)
    x = np.concatenate(blocks).astype(np.float32)
    x[6 * 256 + 32:6 * 256 + 64] = 0.0  # an all-zero sub-block inside a live super-block
    # Half-precision edge values (ties to even, subnormals, overflow) in block 6.
    specials = [1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 6e-8, 1e-6, -3e-5, 65504.0, 65519.0, 65520.0,
                7e4, -7e4, 2.0 ** -14, 2.0 ** -25, 1.00390625, -0.0]
    x[6 * 256:6 * 256 + len(specials)] = np.array(specials, dtype=np.float32)
    x[7 * 256 + 5] = -np.abs(x[7 * 256:7 * 256 + 32]).max()  # equal |max| of both signs
    x[7 * 256 + 9] = -x[7 * 256 + 5]
    return x


def gguf_quantize(name, x):
    if name == "F16":
        return f16_bits(x)
    return quants.quantize(x.reshape(1, -1), T[name]).reshape(-1)


class Ggml:
    """ctypes view of ggml's reference quantisers and generic dot products."""

    def __init__(self):
        import llama_cpp  # noqa: F401  (locates the bundled libraries)
        lib = pathlib.Path(llama_cpp.__file__).parent / "lib"
        self.base = ctypes.CDLL(str(lib / "libggml-base.so"))
        self.cpu = ctypes.CDLL(str(lib / "libggml-cpu.so"))
        self.cpu.ggml_cpu_init()  # fills the fp16 -> fp32 table the CPU kernels read

    def quantize(self, name, x):
        bs, ts = LAYOUT[name]
        out = np.zeros(x.size // bs * ts, dtype=np.uint8)
        fn = getattr(self.base, f"quantize_row_{name.lower()[:-1]}{name[-1]}_ref")
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn(x.ctypes.data, out.ctypes.data, x.size)
        return out

    def dequantize(self, name, raw, n):
        out = np.zeros(n, dtype=np.float32)
        fn = getattr(self.base, f"dequantize_row_{name.lower()[:-1]}{name[-1]}")
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn(raw.ctypes.data, out.ctypes.data, n)
        return out

    def vec_dot(self, name, n, w, a, generic=True):
        t = lambda s: s.lower()[:-1] + s[-1]  # noqa: E731  Q4_K -> q4_K
        suffix = "_generic" if generic else ""
        fn = getattr(self.cpu, f"ggml_vec_dot_{t(name)}_{t(DOT_TYPE[name])}{suffix}")
        fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                       ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        s = np.zeros(1, dtype=np.float32)
        fn(n, s.ctypes.data, 0, w.ctypes.data, 0, a.ctypes.data, 0, 1)
        return s


def q5_goldens(ggml, x):
    """Q5_0 / Q5_1 (added later, with their own generator so that the files above keep their
    bytes): dequantisation of random raw blocks and quantisation of quant_input() checked
    between gguf-py and ggml, and ggml's generic dot products."""
    global rng
    saved, rng = rng, np.random.default_rng(SEED + 5)
    try:
        for name, at in (("Q5_0", "Q8_0"), ("Q5_1", "Q8_1")):
            blocks = random_blocks(name, 16).reshape(-1)
            deq = quants.dequantize(blocks.copy(), T[name]).reshape(-1).astype(np.float32)
            q = gguf_quantize(name, x)
            if ggml:
                same = ggml.dequantize(name, blocks, deq.size).view(np.uint32) == deq.view(np.uint32)
                assert same.all(), f"gguf-py and ggml disagree dequantising {name}"
                assert (ggml.quantize(name, x) == q.view(np.uint8)).all(), f"{name}: gguf-py != ggml"
            write(f"dequant_{name}.bin", blocks)
            write(f"dequant_{name}.f32", deq)
            write(f"quant_{name}.bin", q)
            if ggml:
                DOT_TYPE[name] = at
                n = blocks.size // LAYOUT[name][1] * LAYOUT[name][0]
                act = ggml.quantize(at, rng.normal(0, 1, n).astype(np.float32))
                write(f"dot_{name}.act", act)
                # ggml_vec_dot_q5_0_q8_0_generic of llama-cpp-python 0.3.36 disagrees with
                # ggml's own dequantisation (a block of q = 0 levels and unit activations
                # gives 7680 = 32 x 240 instead of -512), while its x86 kernel, what llama.cpp
                # runs here, agrees with it: the Q5 goldens come from the x86 kernels.
                write(f"dot_{name}.f32", ggml.vec_dot(name, n, blocks, act, generic=False))
    finally:
        rng = saved


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        ggml = Ggml()
    except (ImportError, OSError) as e:
        ggml = None
        print(f"note: ggml libraries unavailable ({e}); K-quant quantise/dot goldens not written")

    # Dequantisation of random raw data: 16 blocks of 32, 4 super-blocks, 512 halves.
    raw = {}
    for name in ["F16", "BF16", "Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]:
        if name in ("F16", "BF16"):
            blocks = random_halves(name, 512).view(np.uint8)
        else:
            blocks = random_blocks(name, 16 if LAYOUT[name][0] == 32 else 4).reshape(-1)
        raw[name] = blocks
        deq = quants.dequantize(blocks.copy(), T[name]).reshape(-1).astype(np.float32)
        if ggml and name not in ("F16", "BF16"):
            same = ggml.dequantize(name, blocks, deq.size).view(np.uint32) == deq.view(np.uint32)
            assert same.all(), f"gguf-py and ggml disagree dequantising {name}"
        write(f"dequant_{name}.bin", blocks)
        write(f"dequant_{name}.f32", deq)

    # Quantisation of a fixed input.
    x = quant_input()
    write("quant_input.f32", x)
    for name in ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1"]:
        q = gguf_quantize(name, x)
        if ggml and name.startswith("Q"):
            assert (ggml.quantize(name, x) == q.view(np.uint8)).all(), f"{name}: gguf-py != ggml"
        write(f"quant_{name}.bin", q)
    if ggml:
        for name in ["Q4_K", "Q5_K", "Q6_K", "Q8_K", "Q8_1"]:
            write(f"quant_{name}.bin", ggml.quantize(name, x))
        # Dot products: weights = the random blocks above, activations = ggml's quantisation
        # of a fixed vector to the paired type.
        for name, at in DOT_TYPE.items():
            n = raw[name].size // LAYOUT[name][1] * LAYOUT[name][0]
            act = ggml.quantize(at, rng.normal(0, 1, n).astype(np.float32))
            write(f"dot_{name}.act", act)
            write(f"dot_{name}.f32", ggml.vec_dot(name, n, raw[name], act))
    q5_goldens(ggml, x)
    print(f"wrote {len(list(OUT.iterdir()))} files to {OUT}")


if __name__ == "__main__":
    with np.errstate(over="ignore"):  # the F16 edge values overflow to Inf on purpose
        main()
