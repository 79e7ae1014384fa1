#!/usr/bin/env python3
"""Independent llama2.c -> GGUF converter (Python, `gguf` package), for the reference harness.

Follows the semantics of llama.cpp's examples/convert-llama2c-to-ggml: F32 tensors copied in
their row-major layout (no Q/K permutation: llama2.c rotates adjacent pairs like ggml's
normal RoPE), the shared classifier written out as output.weight, vocab ids 0/1/2 forced to
<unk>/<s>/</s>, ' ' escaped as U+2581, "<0xXX>" pieces typed BYTE, empty pieces CONTROL,
rms eps 1e-5, n_rot = n_embd / n_head.

It lets the harness check llama.cpp on stories260K without depending on `hotcold convert`,
and lets a test tell a converter bug from an inference bug.

    llama2c_to_gguf.py MODEL.bin TOKENIZER.bin OUT.gguf
"""

from __future__ import annotations

import re
import struct
import sys
from pathlib import Path

import numpy as np
import gguf

_BYTE_PIECE = re.compile(rb"^<0x[0-9A-Fa-f]{2}>$")


def read_llama2c(path: str | Path) -> tuple[dict, dict]:
    raw = Path(path).read_bytes()
    dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len = struct.unpack_from("<7i", raw)
    shared = vocab > 0
    vocab = abs(vocab)
    cfg = dict(dim=dim, hidden=hidden, n_layers=n_layers, n_heads=n_heads,
               n_kv_heads=n_kv_heads, vocab=vocab, seq_len=seq_len, shared=shared)
    head = dim // n_heads
    kv_dim = n_kv_heads * head
    f = np.frombuffer(raw, dtype="<f4", offset=28)
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        a = f[off:off + n].reshape(shape)
        off += n
        return a

    w = {}
    w["tok"] = take(vocab, dim)
    w["rms_att"] = take(n_layers, dim)
    w["wq"] = take(n_layers, dim, dim)
    w["wk"] = take(n_layers, kv_dim, dim)
    w["wv"] = take(n_layers, kv_dim, dim)
    w["wo"] = take(n_layers, dim, dim)
    w["rms_ffn"] = take(n_layers, dim)
    w["w1"] = take(n_layers, hidden, dim)
    w["w2"] = take(n_layers, dim, hidden)
    w["w3"] = take(n_layers, hidden, dim)
    w["rms_final"] = take(dim)
    take(seq_len, head // 2)  # freq_cis_real (unused)
    take(seq_len, head // 2)  # freq_cis_imag (unused)
    w["cls"] = w["tok"] if shared else take(vocab, dim)
    if off != f.size:
        raise ValueError(f"{path}: {f.size - off} trailing floats; not a llama2.c v0 file?")
    return cfg, w


def read_tokenizer(path: str | Path, vocab: int):
    raw = Path(path).read_bytes()
    off = 4  # max_token_length (unused)
    tokens, scores, types = [], [], []
    for i in range(vocab):
        score, n = struct.unpack_from("<fi", raw, off)
        off += 8
        text = raw[off:off + n]
        off += n
        ttype = gguf.TokenType.NORMAL
        if i == 0:
            text, ttype = b"<unk>", gguf.TokenType.UNKNOWN
        elif i == 1:
            text, ttype = b"<s>", gguf.TokenType.CONTROL
        elif i == 2:
            text, ttype = b"</s>", gguf.TokenType.CONTROL
        elif not text:
            ttype = gguf.TokenType.CONTROL
        elif _BYTE_PIECE.match(text):
            ttype = gguf.TokenType.BYTE
        tokens.append(text.replace(b" ", "\u2581".encode()))
        scores.append(score)
        types.append(int(ttype))
    return tokens, scores, types


def convert(model: str | Path, tokenizer: str | Path, out: str | Path) -> None:
    cfg, w = read_llama2c(model)
    tokens, scores, types = read_tokenizer(tokenizer, cfg["vocab"])
    wr = gguf.GGUFWriter(str(out), "llama")
    wr.add_name("llama")
    wr.add_context_length(cfg["seq_len"])
    wr.add_embedding_length(cfg["dim"])
    wr.add_feed_forward_length(cfg["hidden"])
    wr.add_head_count(cfg["n_heads"])
    wr.add_head_count_kv(cfg["n_kv_heads"])
    wr.add_block_count(cfg["n_layers"])
    wr.add_rope_dimension_count(cfg["dim"] // cfg["n_heads"])
    wr.add_layer_norm_rms_eps(1e-5)
    wr.add_file_type(gguf.LlamaFileType.ALL_F32)
    wr.add_tokenizer_model("llama")
    wr.add_token_list(tokens)
    wr.add_token_scores(scores)
    wr.add_token_types(types)
    wr.add_unk_token_id(0)
    wr.add_bos_token_id(1)
    wr.add_eos_token_id(2)

    def t(name, a):
        wr.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))

    t("token_embd.weight", w["tok"])
    t("output_norm.weight", w["rms_final"])
    t("output.weight", w["cls"])
    for il in range(cfg["n_layers"]):
        t(f"blk.{il}.attn_q.weight", w["wq"][il])
        t(f"blk.{il}.attn_k.weight", w["wk"][il])
        t(f"blk.{il}.attn_v.weight", w["wv"][il])
        t(f"blk.{il}.attn_output.weight", w["wo"][il])
        t(f"blk.{il}.attn_norm.weight", w["rms_att"][il])
        t(f"blk.{il}.ffn_gate.weight", w["w1"][il])
        t(f"blk.{il}.ffn_down.weight", w["w2"][il])
        t(f"blk.{il}.ffn_up.weight", w["w3"][il])
        t(f"blk.{il}.ffn_norm.weight", w["rms_ffn"][il])
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    convert(*sys.argv[1:])
