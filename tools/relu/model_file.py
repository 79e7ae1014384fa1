#!/usr/bin/env python3
"""A llama-arch model file as tools/relu reads and writes it: its shape (Config) and its GGUF
checkpoint through gguf-py (every tensor dequantised to float32; written back as F32 / F16 with
every metadata key kept and the ReLU markers set). numpy and gguf-py only, no torch: setup's venv
merges the committed adapter with it (lora.py merge)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

GGUF_PY_FALLBACK = Path.home() / ".cache/hotcold/venv/lib/python3.11/site-packages"


def import_gguf():
    try:
        import gguf  # noqa: F401
    except ImportError:
        sys.path.append(str(GGUF_PY_FALLBACK))  # pure Python + numpy: works from the venv
        import gguf  # noqa: F401
    return sys.modules["gguf"]


@dataclass
class Config:
    n_embd: int
    n_ff: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_vocab: int
    n_ctx_train: int
    rope_base: float = 10000.0
    eps: float = 1e-5
    tied: bool = True  # output.weight is token_embd.weight

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head



# ---- GGUF checkpoints ----------------------------------------------------------------

def read_gguf(path: Path) -> tuple[Config, dict[str, np.ndarray], object]:
    gguf = import_gguf()
    r = gguf.GGUFReader(str(path))

    def kv(key, default=None):
        f = r.fields.get(key)
        if f is None:
            if default is None:
                raise KeyError(f"{path}: GGUF key {key} missing")
            return default
        return f.contents()

    arch = kv("general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: architecture {arch!r}, expected 'llama'")
    w = {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]  # GGUF ne order -> row-major
        data = gguf.quants.dequantize(t.data, t.tensor_type)
        w[t.name] = np.array(data, dtype=np.float32).reshape(shape)  # a writable copy
    n_vocab = w["token_embd.weight"].shape[0]
    cfg = Config(n_embd=kv("llama.embedding_length"), n_ff=kv("llama.feed_forward_length"),
                 n_layer=kv("llama.block_count"), n_head=kv("llama.attention.head_count"),
                 n_head_kv=kv("llama.attention.head_count_kv", kv("llama.attention.head_count")),
                 n_vocab=n_vocab, n_ctx_train=kv("llama.context_length"),
                 rope_base=float(kv("llama.rope.freq_base", 10000.0)),
                 eps=float(kv("llama.attention.layer_norm_rms_epsilon")),
                 tied="output.weight" not in w)
    if kv("llama.rope.dimension_count", cfg.head_dim) != cfg.head_dim:
        raise ValueError(f"{path}: partial RoPE is not supported")
    return cfg, w, r


def write_gguf(path: Path, reader, w: dict[str, np.ndarray], name: str, out_type: str) -> None:
    """Copy every metadata key of `reader` (bar general.name / file_type), set the ReLU markers,
    and write `w` as F32 (norms always F32) or F16 tensors in the reader's tensor order."""
    gguf = import_gguf()
    wr = gguf.GGUFWriter(str(path), arch="llama")
    skip = {"general.architecture", "general.name", "general.file_type", "hotcold.ffn_activation"}
    for key, f in reader.fields.items():
        if key.startswith("GGUF.") or key in skip:
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        wr.add_key_value(key, f.contents(), vtype, sub)
    wr.add_name(name)
    wr.add_string("hotcold.ffn_activation", "relu")
    for t in reader.tensors:
        a = w[t.name]
        if out_type == "f16" and a.ndim == 2:
            a = a.astype(np.float16)
        wr.add_tensor(t.name, np.ascontiguousarray(a))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
