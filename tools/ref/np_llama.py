#!/usr/bin/env python3
"""Float64 NumPy forward pass of a small LLaMA-architecture GGUF (F32/F16 tensors only).

A second, independent reference next to llama.cpp: it has no rounding worth the name, so
|llama.cpp - float64| measures how far an fp32 implementation drifts from the exact math,
which is what the fp32 logits tolerance of the stories260K test is derived from.

    np_llama.py MODEL.gguf [TOKEN_ID ...]   -> prints max|logit| of the last token
"""

from __future__ import annotations

import sys

import numpy as np
import gguf


class NpLlama:
    def __init__(self, path: str):
        r = gguf.GGUFReader(path)
        arch = self._kv(r, "general.architecture")
        if arch != "llama":
            raise ValueError(f"np_llama: architecture {arch!r}, expected 'llama'")
        self.n_embd = self._kv(r, "llama.embedding_length")
        self.n_layer = self._kv(r, "llama.block_count")
        self.n_head = self._kv(r, "llama.attention.head_count")
        self.n_head_kv = self._kv(r, "llama.attention.head_count_kv", self.n_head)
        self.eps = self._kv(r, "llama.attention.layer_norm_rms_epsilon")
        self.rope_base = self._kv(r, "llama.rope.freq_base", 10000.0)
        self.head_dim = self.n_embd // self.n_head
        self.n_rot = self._kv(r, "llama.rope.dimension_count", self.head_dim)
        self.w = {}
        for t in r.tensors:
            if t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
                raise ValueError(f"np_llama: tensor {t.name} is {t.tensor_type.name}; "
                                 "only F32/F16 are supported")
            shape = [int(x) for x in reversed(t.shape)]  # GGUF ne order -> row-major
            self.w[t.name] = np.asarray(t.data).reshape(shape).astype(np.float64)
        if "output.weight" not in self.w:
            self.w["output.weight"] = self.w["token_embd.weight"]

    @staticmethod
    def _kv(r, key, default=None):
        f = r.fields.get(key)
        if f is None:
            if default is None:
                raise KeyError(f"np_llama: GGUF key {key} missing")
            return default
        if f.types and f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        v = f.parts[f.data[0]]
        return v.item() if v.size == 1 else v.tolist()

    def _rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def _rope(self, x, pos):  # x: [n_tok, n_heads, head_dim]; ggml "normal" mode: adjacent pairs
        i = np.arange(self.n_rot // 2)
        theta = pos[:, None] * self.rope_base ** (-2.0 * i / self.n_rot)   # [n_tok, n_rot/2]
        c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        x = x.copy()
        x0, x1 = x[..., 0:self.n_rot:2].copy(), x[..., 1:self.n_rot:2].copy()
        x[..., 0:self.n_rot:2] = x0 * c - x1 * s
        x[..., 1:self.n_rot:2] = x0 * s + x1 * c
        return x

    def logits(self, tokens: list[int]) -> np.ndarray:
        """float64 logits [n_tok, n_vocab] of a whole sequence starting at position 0."""
        w, n = self.w, len(tokens)
        pos = np.arange(n, dtype=np.float64)
        x = w["token_embd.weight"][tokens]                                   # [n, n_embd]
        mask = np.triu(np.full((n, n), -np.inf), 1)
        group = self.n_head // self.n_head_kv
        for il in range(self.n_layer):
            p = f"blk.{il}."
            h = self._rms(x, w[p + "attn_norm.weight"])
            q = (h @ w[p + "attn_q.weight"].T).reshape(n, self.n_head, self.head_dim)
            k = (h @ w[p + "attn_k.weight"].T).reshape(n, self.n_head_kv, self.head_dim)
            v = (h @ w[p + "attn_v.weight"].T).reshape(n, self.n_head_kv, self.head_dim)
            q, k = self._rope(q, pos), self._rope(k, pos)
            out = np.empty_like(q)
            for hd in range(self.n_head):
                kh, vh = k[:, hd // group], v[:, hd // group]
                a = q[:, hd] @ kh.T / np.sqrt(self.head_dim) + mask           # [n, n]
                a = np.exp(a - a.max(axis=1, keepdims=True))
                out[:, hd] = (a / a.sum(axis=1, keepdims=True)) @ vh
            x = x + out.reshape(n, -1) @ w[p + "attn_output.weight"].T
            h = self._rms(x, w[p + "ffn_norm.weight"])
            g = h @ w[p + "ffn_gate.weight"].T
            u = h @ w[p + "ffn_up.weight"].T
            x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
        x = self._rms(x, w["output_norm.weight"])
        return x @ w["output.weight"].T


if __name__ == "__main__":
    m = NpLlama(sys.argv[1])
    toks = [int(t) for t in sys.argv[2:]] or [1]
    lg = m.logits(toks)[-1]
    print(f"argmax {int(np.argmax(lg))} max|logit| {np.abs(lg).max():.6f}")
