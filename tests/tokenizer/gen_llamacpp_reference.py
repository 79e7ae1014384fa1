#!/usr/bin/env python3
"""Regenerates tests/tokenizer/llamacpp_reference.tsv: token ids llama.cpp produces for cases
the conformance suite does not cover (pre-tokenizers llama-bpe / default / dbrx / mpt / smollm
/ command-r on GPT-2's vocabulary, special-token parsing with BOS/EOS on every conformance
vocabulary, and SmolLM2's and Qwen2's real vocabularies). reference_test.cpp replays it.

Needs llama-cpp-python (the project venv from scripts/setup.sh):
    ~/.cache/hotcold/venv/bin/python tests/tokenizer/gen_llamacpp_reference.py
Run from the project root. The pre-tokenizer variants are written to a temporary directory as
copies of ../shared/tokenizer-conformance/ggml-vocab-gpt-2.gguf with tokenizer.ggml.pre
replaced; the C++ test makes the same change in memory.
"""
import os
import random
import struct
import sys
import tempfile

import llama_cpp

CONF = "../shared/tokenizer-conformance/"
SMOLLM2 = os.path.expanduser("~/.cache/hotcold/models/SmolLM2-135M-Instruct.Q4_1.gguf")
# llama.cpp's Qwen2 conformance vocabulary, which scripts/setup.sh unpacks from the sdist.
QWEN2 = os.path.join(os.environ.get("HOTCOLD_CACHE", os.path.expanduser("~/.cache/hotcold")),
                     "vocab", "ggml-vocab-qwen2.gguf")
OUT = "tests/tokenizer/llamacpp_reference.tsv"

# --- minimal GGUF (no tensors) rewrite: replace one string value ---
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
           10: "Q", 11: "q", 12: "d"}


def _read_value(buf, pos, t):
    if t == 8:
        n, = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + n
    if t == 9:
        et, n = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        for _ in range(n):
            pos = _read_value(buf, pos, et)
        return pos
    return pos + struct.calcsize(_SCALAR[t])


def with_pre(src, dst, pre):
    buf = open(src, "rb").read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    assert magic == b"GGUF" and n_tensors == 0
    pos = 24
    out = bytearray(buf[:24])
    for _ in range(n_kv):
        start = pos
        klen, = struct.unpack_from("<Q", buf, pos)
        key = buf[pos + 8:pos + 8 + klen]
        pos += 8 + klen
        t, = struct.unpack_from("<I", buf, pos)
        end = _read_value(buf, pos + 4, t)
        if key == b"tokenizer.ggml.pre":
            v = pre.encode()
            out += buf[start:pos + 4] + struct.pack("<Q", len(v)) + v
        else:
            out += buf[start:end]
        pos = end
    open(dst, "wb").write(bytes(out))


def tokenize(vocab, text, add_special, parse_special):
    b = text.encode("utf-8")
    n = len(b) * 2 + 16
    arr = (llama_cpp.llama_token * n)()
    r = llama_cpp.llama_tokenize(vocab, b, len(b), arr, n, add_special, parse_special)
    assert r >= 0
    return list(arr[:r])


def load_vocab(path):
    p = llama_cpp.llama_model_default_params()
    p.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(path.encode(), p)
    assert model, path
    return model, llama_cpp.llama_model_get_vocab(model)


def texts(rng):
    palette = (list("abcXYZ019 \t\n\r.,;:!?'\"()[]{}<>-_=+*/\\|`~^$%&#@") +
               ["'s", "'T", "'re", "'VE", "'ll", "'D", "'m", "  ", "\n\n", " \n", "\r\n"] +
               list("\u00e9\u00fc\u00f1\u00df\u00c0\u043d\u0435\u0449\u03b1\u03a9") +
               list("\u6211\u60f3\u5de5\u4f5c\ud55c\uad6d\u65e5\u672c\u30ab\u3072") +
               list("\u1780\u17b6\u0661\u0967\u00b2\u00bd\u2460\u2167") +
               ["\u00a0", "\u3000", "\u2009", "\u200d", "\u0085", "\U0001f680", "\U0001f999",
                "\u2705", "\u00a9", "\u20ac", "\u2192", "\u2026", "\u2014", "\u201c", "\u00bf",
                "\u0301", "\u0378", "\ue000", "\u2ffc", "\u31ef", "\ufffd"])
    out = ["".join(rng.choice(palette) for _ in range(rng.choice([3, 8, 20, 40])))
           for _ in range(30)]
    shakespeare = open("../shared/data/tinyshakespeare/input.txt", encoding="utf-8").read()
    for _ in range(6):
        a = rng.randrange(len(shakespeare) - 200)
        out.append(shakespeare[a:a + 150])
    out += ["def add(a, b):\n    return a + b  # sum\n\n\nprint(add(1, 22), add(333, 4444))\n",
            "1234567890 12.5% 1,000,000 3...3 I'M YOU'RE we'Ve"]
    return out


SPECIAL_TEXTS = [
    "<s>Hi</s> <unk>",
    "<|endoftext|>tail <|endoftext|>",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<|user|>\nHi<|end|>\n<|assistant|>  ok",
    "<fim_prefix>def f(<fim_suffix>):<fim_middle>",
    ">>TITLE<<Abstract>>ABSTRACT<< text",
    "F\u00fchrer <|User|> hi<\uff5cfim\u2581begin\uff5c>x<\uff5cend\u2581of\u2581sentence\uff5c>",
    "",
]


def main():
    rng = random.Random(20240601)
    plain = texts(rng)
    rows = []

    def add(tag, pre, path, cases):
        model, vocab = load_vocab(path)
        for text, add_special, parse_special in cases:
            ids = tokenize(vocab, text, add_special, parse_special)
            rows.append("\t".join([tag, pre, str(int(add_special)), str(int(parse_special)),
                                   text.encode("utf-8").hex(), " ".join(map(str, ids))]))
        llama_cpp.llama_model_free(model)

    with tempfile.TemporaryDirectory() as tmp:
        for pre in ["llama-bpe", "default", "dbrx", "mpt", "smollm", "command-r"]:
            path = os.path.join(tmp, "gpt2-%s.gguf" % pre)
            with_pre(CONF + "ggml-vocab-gpt-2.gguf", path, pre)
            add("gpt-2", pre, path, [(t, False, False) for t in plain] +
                [(t, True, True) for t in SPECIAL_TEXTS])
    for name in ["llama-spm", "gpt-2", "starcoder", "deepseek-coder", "phi-3", "falcon"]:
        add(name, "-", CONF + "ggml-vocab-%s.gguf" % name,
            [(t, a, p) for t in SPECIAL_TEXTS for a, p in [(True, True), (True, False)]])
    if os.path.exists(SMOLLM2):
        add("smollm2", "-", SMOLLM2, [(t, False, False) for t in plain] +
            [(t, a, p) for t in SPECIAL_TEXTS for a, p in [(True, True), (False, False)]])
    else:
        sys.exit("missing " + SMOLLM2)
    if not os.path.exists(QWEN2):
        sys.exit("missing " + QWEN2 + " (scripts/setup.sh unpacks it)")
    add("qwen2", "-", QWEN2, [(t, False, False) for t in plain] +
        [(t, a, p) for t in SPECIAL_TEXTS for a, p in [(True, True), (True, False)]])

    with open(OUT, "w") as f:
        f.write("# Generated by tests/tokenizer/gen_llamacpp_reference.py with "
                "llama-cpp-python %s.\n" % llama_cpp.__version__)
        f.write("# vocab\tpre override\tadd_special\tparse_special\ttext (UTF-8 hex)\tids\n")
        f.write("\n".join(rows) + "\n")
    print("wrote %d cases to %s" % (len(rows), OUT))


if __name__ == "__main__":
    llama_cpp.llama_backend_init()
    main()
