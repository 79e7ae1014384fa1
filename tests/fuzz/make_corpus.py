#!/usr/bin/env python3
"""Regenerates the GGUF fuzz seed corpus in tests/fuzz/corpus/ (docs/TESTING.md, "Fuzzing").

    ~/.cache/hotcold/venv/bin/python tests/fuzz/make_corpus.py [OUT_DIR]

Writes small, deterministic files:
  ok-*    valid GGUF files: every metadata value type, arrays of every element type (empty and
          nested), many tensor types and shapes, alignment keys of several integer types,
          GGUF v2, PowerInfer's "PWRI" magic, a tiny llama-like model with a vocabulary, and
          two files written by gguf-py (llama.cpp's own Python writer) as an independent check.
  bad-*   each one broken in one specific way (truncated, bad counts, types, offsets, shapes).
  cut-*   truncations of a valid file at interesting offsets.
Files named crash-* are inputs the fuzzer once crashed on; they are kept (never regenerated here)
and tests/format/gguf_fuzz_regression_test.cpp checks each of them.

Our own little encoder below (not hotcold's writer) is used so the seeds do not inherit a
writer bug, and so broken files can be built field by field.
"""
import math
import os
import struct
import sys

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
SCALAR_FMT = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
              FLOAT32: "<f", BOOL: "<B", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}
# ggml type id -> (block size, bytes per block), as src/core/dtype.cpp
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20),
        "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "Q6_K": (14, 256, 210), "I8": (24, 1, 1),
        "I32": (26, 1, 4), "F64": (28, 1, 8), "BF16": (30, 1, 2), "MXFP4": (39, 32, 17)}
MAGIC_GGUF, MAGIC_PWRI = b"GGUF", b"PWRI"


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    """Encodes one value of GGUF type t; arrays are (elem_type, [items])."""
    if t == STRING:
        return gstr(v)
    if t == ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(value(et, x) for x in items)
    return struct.pack(SCALAR_FMT[t], v)


def kv(key, t, v):
    return gstr(key) + struct.pack("<I", t) + value(t, v)


def tensor_nbytes(type_name, ne):
    _, bs, ts = GGML[type_name]
    n = 1
    for d in ne:
        n *= d
    return n // bs * ts


def gguf(kvs=(), tensors=(), version=3, magic=MAGIC_GGUF, alignment=32, n_kv=None,
         n_tensors=None, pad_end=True):
    """kvs: encoded kv() byte strings; tensors: (name, ne, type_name[, offset]) with
    deterministic data. n_kv / n_tensors override the counts written in the header."""
    out = bytearray(magic + struct.pack("<IQQ", version,
                                        len(tensors) if n_tensors is None else n_tensors,
                                        len(kvs) if n_kv is None else n_kv))
    for e in kvs:
        out += e
    datas, offset = [], 0
    for t in tensors:
        name, ne, tn = t[:3]
        nbytes = tensor_nbytes(tn, ne)
        off = t[3] if len(t) > 3 else offset
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", d) for d in ne)
        out += struct.pack("<IQ", GGML[tn][0], off)
        data = bytes((i * 7 + len(name)) & 0xFF for i in range(nbytes))
        datas.append(data + bytes(-nbytes % alignment))
        offset += len(datas[-1])
    if tensors or pad_end:
        out += bytes(-len(out) % alignment)
    for d in datas:
        out += d
    return bytes(out)


def all_scalars():
    return [
        kv("t.uint8", UINT8, 255), kv("t.int8", INT8, -128), kv("t.uint16", UINT16, 65535),
        kv("t.int16", INT16, -32768), kv("t.uint32", UINT32, 4294967295),
        kv("t.int32", INT32, -2147483648), kv("t.float32", FLOAT32, 1.5),
        kv("t.float32.nan", FLOAT32, math.nan), kv("t.float32.inf", FLOAT32, -math.inf),
        kv("t.bool.true", BOOL, 1), kv("t.bool.false", BOOL, 0), kv("t.string", STRING, "hello"),
        kv("t.string.empty", STRING, ""), kv("t.string.utf8", STRING, "\u2581caf\u00e9 \U0001F600"),
        kv("t.uint64", UINT64, 2**64 - 1), kv("t.int64", INT64, -2**63),
        kv("t.float64", FLOAT64, 1e300), kv("t.small.u32", UINT32, 7), kv("t.neg.i32", INT32, -1),
    ]


def all_arrays():
    samples = {UINT8: [0, 1, 255], INT8: [-1, 0, 127], UINT16: [1, 65535, 2], INT16: [-2, 3, 4],
               UINT32: [1, 2, 2**32 - 1], INT32: [-7, 2**31 - 1, 0], FLOAT32: [0.5, -1.5, 3.0],
               BOOL: [1, 0, 1], STRING: ["a", "", "\u2581b"], UINT64: [2**63, 1, 0],
               INT64: [-2**63, 5, 6], FLOAT64: [1e-300, -2.0, 0.0]}
    out = []
    for t, xs in samples.items():
        out.append(kv(f"a.{t}", ARRAY, (t, xs)))
        out.append(kv(f"a.{t}.empty", ARRAY, (t, [])))
    out.append(kv("a.nested2", ARRAY, (ARRAY, [(INT32, [1, 2]), (STRING, ["x"]), (FLOAT32, [])])))
    deepest = (UINT8, [9])
    for _ in range(4):  # 5 levels of arrays: the deepest the reader accepts
        deepest = (ARRAY, [deepest])
    out.append(kv("a.nested5", ARRAY, deepest))
    out.append(kv("a.nested.empty", ARRAY, (ARRAY, [])))
    return out


TENSORS = [("f32", [4, 3], "F32"), ("f16", [8], "F16"), ("bf16", [2, 2, 2, 2], "BF16"),
           ("q8_0", [32, 2], "Q8_0"), ("q4_0", [64], "Q4_0"), ("q4_1", [32, 1, 1], "Q4_1"),
           ("q4_k", [256], "Q4_K"), ("q6_k", [256], "Q6_K"), ("i8", [5], "I8"),
           ("i32", [3], "I32"), ("f64", [2], "F64"), ("mxfp4", [32], "MXFP4"),
           ("empty", [0, 4], "F32")]


def tiny_llama():
    n_vocab, n_embd, n_ff = 8, 32, 64
    toks = ["<unk>", "<s>", "</s>", "\u2581a", "\u2581b", "c", "<0x0A>", "\u2581ab"]
    kvs = [kv("general.architecture", STRING, "llama"), kv("general.name", STRING, "tiny"),
           kv("llama.context_length", UINT32, 64), kv("llama.embedding_length", UINT32, n_embd),
           kv("llama.feed_forward_length", UINT32, n_ff), kv("llama.block_count", UINT32, 1),
           kv("llama.attention.head_count", UINT32, 4), kv("llama.attention.head_count_kv", UINT32, 2),
           kv("llama.rope.freq_base", FLOAT32, 10000.0),
           kv("llama.attention.layer_norm_rms_epsilon", FLOAT32, 1e-5),
           kv("tokenizer.ggml.model", STRING, "llama"), kv("tokenizer.ggml.pre", STRING, "default"),
           kv("tokenizer.ggml.tokens", ARRAY, (STRING, toks)),
           kv("tokenizer.ggml.scores", ARRAY, (FLOAT32, [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, 0.0, -0.5])),
           kv("tokenizer.ggml.token_type", ARRAY, (INT32, [2, 3, 3, 1, 1, 1, 6, 1])),
           kv("tokenizer.ggml.merges", ARRAY, (STRING, ["\u2581 a", "\u2581a b"])),
           kv("tokenizer.ggml.bos_token_id", UINT32, 1), kv("tokenizer.ggml.eos_token_id", UINT32, 2),
           kv("tokenizer.ggml.add_bos_token", BOOL, 1)]
    ts = [("token_embd.weight", [n_embd, n_vocab], "F32"), ("output_norm.weight", [n_embd], "F32"),
          ("blk.0.attn_norm.weight", [n_embd], "F32"), ("blk.0.attn_q.weight", [n_embd, n_embd], "Q8_0"),
          ("blk.0.attn_k.weight", [n_embd, 16], "Q8_0"), ("blk.0.attn_v.weight", [n_embd, 16], "Q4_0"),
          ("blk.0.attn_output.weight", [n_embd, n_embd], "F16"),
          ("blk.0.ffn_norm.weight", [n_embd], "F32"), ("blk.0.ffn_gate.weight", [n_embd, n_ff], "Q4_1"),
          ("blk.0.ffn_up.weight", [n_embd, n_ff], "Q8_0"), ("blk.0.ffn_down.weight", [n_ff, n_embd], "F16")]
    return kvs, ts


def with_gguf_py(out):
    """Two files from gguf-py, llama.cpp's reference writer (skipped when it is not installed)."""
    try:
        import gguf
        import numpy as np
    except ImportError:
        print("make_corpus: gguf-py not importable, skipping ok-gguf-py-* (use the venv python)")
        return
    path = os.path.join(out, "ok-gguf-py-model.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(64); w.add_embedding_length(32); w.add_block_count(1)
    w.add_head_count(4); w.add_head_count_kv(4); w.add_feed_forward_length(64)
    w.add_layer_norm_rms_eps(1e-5); w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("llama"); w.add_token_list(["<unk>", "<s>", "</s>", "\u2581x"])
    w.add_token_scores([0.0, 0.0, 0.0, -1.0]); w.add_token_types([2, 3, 3, 1])
    w.add_uint64("t.u64", 12345678901234); w.add_int8("t.i8", -3); w.add_float64("t.f64", 0.25)
    w.add_array("t.nested", [[1, 2], [3]])
    w.add_tensor("token_embd.weight", np.arange(32 * 4, dtype=np.float32).reshape(4, 32))
    w.add_tensor("output_norm.weight", np.ones(32, dtype=np.float16))
    w.add_tensor("q8", np.zeros((2, 34), dtype=np.uint8),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    path = os.path.join(out, "ok-gguf-py-align64.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_custom_alignment(64)
    w.add_tensor("a", np.arange(3, dtype=np.float32)); w.add_tensor("b", np.arange(5, dtype=np.int8))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def patch(b, pos, fmt, v):
    b = bytearray(b)
    struct.pack_into(fmt, b, pos, v)
    return bytes(b)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):  # keep crash-* (fuzzer findings); regenerate everything else
        if not name.startswith("crash-"):
            os.remove(os.path.join(out, name))
    files = {}
    files["ok-empty"] = gguf()
    files["ok-empty-unpadded"] = gguf(kvs=[kv("k", UINT8, 1)], pad_end=False)
    files["ok-scalars"] = gguf(all_scalars())
    files["ok-arrays"] = gguf(all_arrays())
    tensors_file = gguf([kv("general.architecture", STRING, "test")], TENSORS)
    files["ok-tensors"] = tensors_file
    for bits, t, a in [(8, UINT8, 8), (16, UINT16, 256), (32, UINT32, 64), (64, UINT64, 128),
                       (32, INT32, 16)]:
        files[f"ok-align{a}-{bits}bit"] = gguf([kv("general.alignment", t, a)],
                                               TENSORS[:3], alignment=a)
    # Fuzzer finding (timeout): a legal 2^30 alignment and no tensors; writing it back pads to 1 GiB.
    files["ok-align2p30-no-tensors"] = gguf([kv("general.alignment", INT32, 2**30)], pad_end=False)
    files["ok-v2"] = gguf(all_scalars()[:4], TENSORS[:2], version=2)
    files["ok-pwri"] = gguf([kv("general.architecture", STRING, "llama"),
                             kv("powerinfer.sparse_threshold", FLOAT32, 0.0)],
                            [("blk.0.fc1.weight", [32, 8], "F16"), ("blk.0.fc2.weight", [8, 32], "F32")],
                            magic=MAGIC_PWRI)
    kvs, ts = tiny_llama()
    files["ok-tiny-llama"] = gguf(kvs, ts)

    # Broken in one way each (offsets below are into the file built on that line).
    hdr = 24  # magic, version, n_tensors, n_kv
    files["bad-magic"] = b"GGUG" + files["ok-empty"][4:]
    files["bad-version1"] = patch(files["ok-scalars"], 4, "<I", 1)
    files["bad-version4"] = patch(files["ok-scalars"], 4, "<I", 4)
    files["bad-n-kv-huge"] = gguf(all_scalars()[:2], n_kv=2**62)
    files["bad-n-kv-one-more"] = gguf(all_scalars()[:2], n_kv=3)
    files["bad-n-tensors-huge"] = gguf(n_tensors=2**63 - 1)
    files["bad-n-tensors-one-more"] = gguf([], TENSORS[:2], n_tensors=3)
    files["bad-key-length"] = patch(gguf(all_scalars()[:1]), hdr, "<Q", 2**64 - 1)
    files["bad-value-type"] = gguf([gstr("k") + struct.pack("<I", 13) + b"\0" * 8])
    files["bad-array-elem-type"] = gguf([gstr("k") + struct.pack("<IIQ", ARRAY, 99, 1) + b"\0" * 8])
    files["bad-array-length"] = gguf([gstr("k") + struct.pack("<IIQ", ARRAY, UINT32, 2**61) + b"\0" * 8])
    files["bad-string-length"] = gguf([gstr("k") + struct.pack("<IQ", STRING, 2**40) + b"abc"])
    files["bad-bool"] = gguf([gstr("k") + struct.pack("<IB", BOOL, 2)])
    deep = (UINT8, [1])
    for _ in range(6):
        deep = (ARRAY, [deep])
    files["bad-nesting6"] = gguf([kv("k", ARRAY, deep)])
    files["bad-duplicate-key"] = gguf([kv("k", UINT8, 1), kv("k", UINT8, 2)])
    files["bad-duplicate-tensor"] = gguf([], [("t", [4], "F32"), ("t", [4], "F32")])
    files["bad-ndims0"] = gguf([], [("t", [], "F32")])
    files["bad-ndims5"] = gguf([], [("t", [1, 1, 1, 1, 1], "F32")])
    # A one-letter tensor name: n_dims at hdr + 9, ne[0] at hdr + 13, then ne[1] or the type.
    files["bad-negative-dim"] = patch(gguf([], [("t", [4, 1], "F32")]), hdr + 9 + 4 + 8, "<q", -1)
    files["bad-shape-overflow"] = patch(patch(gguf([], [("t", [1, 1], "F32")]), hdr + 9 + 4, "<q", 2**40),
                                        hdr + 9 + 4 + 8, "<q", 2**40)
    files["bad-nbytes-overflow"] = patch(gguf([], [("t", [1], "F32")]), hdr + 9 + 4, "<q", 2**62)
    files["bad-nbytes-overflow-f64"] = patch(gguf([], [("t", [1], "F64")]), hdr + 9 + 4, "<q", 2**61)
    # 9e18 Q8_0 elements fit int64, their 9.56e18 bytes do not.
    files["bad-nbytes-over-int64-q8"] = patch(gguf([], [("t", [32], "Q8_0")]), hdr + 9 + 4, "<q", 9 * 10**18)
    files["bad-unknown-tensor-type"] = patch(gguf([], [("t", [4], "F32")]), hdr + 9 + 4 + 8, "<I", 77)
    files["bad-row-not-block-multiple"] = patch(gguf([], [("t", [32], "Q8_0")]), hdr + 9 + 4, "<q", 33)
    files["bad-misaligned-offset"] = gguf([], [("a", [4], "F32"), ("b", [4], "F32", 3)])
    files["bad-offset-out-of-range"] = gguf([], [("a", [4], "F32"), ("b", [4], "F32", 2**30)])
    files["bad-offset-wraps"] = gguf([], [("a", [4], "F32", 2**64 - 32)])
    files["bad-data-past-end"] = gguf([], [("a", [64], "F32")])[:-8]
    for a, t in [(0, UINT32), (3, UINT32), (4, UINT32), (2**40, UINT64), (-32, INT32)]:
        files[f"bad-alignment-{a}"] = gguf([kv("general.alignment", t, a)], TENSORS[:1])
    files["bad-alignment-string"] = gguf([kv("general.alignment", STRING, "32")], TENSORS[:1])
    files["bad-alignment-float"] = gguf([kv("general.alignment", FLOAT32, 32.0)], TENSORS[:1])

    # Truncations of the tensor file: inside the header, a key, a value, a tensor info, the data.
    for n in [0, 3, 7, 15, 23, 30, 60, len(tensors_file) // 3, len(tensors_file) // 2,
              len(tensors_file) - 100, len(tensors_file) - 1]:
        files[f"cut-tensors-{n}"] = tensors_file[:n]
    arrays = gguf(all_arrays(), pad_end=False)  # no tensors: a cut into the padding still parses
    for n in [40, len(arrays) // 2, len(arrays) - 1]:
        files[f"cut-arrays-{n}"] = arrays[:n]

    for name, data in files.items():
        with open(os.path.join(out, name + ".gguf"), "wb") as f:
            f.write(data)
    with_gguf_py(out)
    total = sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out))
    print(f"make_corpus: {len(os.listdir(out))} files, {total} bytes in {out}")


if __name__ == "__main__":
    main()
