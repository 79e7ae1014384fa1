#!/usr/bin/env python3
"""Float64 NumPy forward pass of a small llama-family GGUF (F32/F16 tensors only): llama (with
or without Mixtral-style experts), qwen2, qwen3, qwen3moe.

A second, independent reference next to llama.cpp: it has no rounding worth the name, so
|llama.cpp - float64| measures how far an fp32 implementation drifts from the exact math,
which is what the fp32 logits tolerances of the stories260K and MoE / qwen tests are derived
from. The pieces (f16, rope, attention, read_gguf) also serve other float64 models
(tests/reference/test_falcon.py's NpFalcon).

    np_llama.py MODEL.gguf [TOKEN_ID ...]   -> prints max|logit| of the last token
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import gguf

ARCHS = ("llama", "qwen2", "qwen3", "qwen3moe")


def f16(a: np.ndarray) -> np.ndarray:
    """a rounded to fp16 (through fp32, as ggml converts), back in float64."""
    return a.astype(np.float32).astype(np.float16).astype(np.float64)


def gguf_kv(r: gguf.GGUFReader, key: str, default=None):
    """The value of metadata key `key`; `default` when it is missing (KeyError without one)."""
    f = r.fields.get(key)
    if f is None:
        if default is None:
            raise KeyError(f"np_llama: GGUF key {key} missing")
        return default
    if f.types and f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    v = f.parts[f.data[0]]
    return v.item() if v.size == 1 else v.tolist()


def read_gguf(path: str | Path) -> tuple[gguf.GGUFReader, dict[str, np.ndarray]]:
    """The reader and every tensor as a float64 row-major array (F32 / F16 tensors only)."""
    r = gguf.GGUFReader(str(path))
    w = {}
    for t in r.tensors:
        if t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            raise ValueError(f"np_llama: tensor {t.name} is {t.tensor_type.name}; "
                             "only F32/F16 are supported")
        shape = [int(x) for x in reversed(t.shape)]  # GGUF ne order -> row-major
        w[t.name] = np.asarray(t.data).reshape(shape).astype(np.float64)
    return r, w


def rope(x: np.ndarray, pos: np.ndarray, base: float, n_rot: int, neox: bool) -> np.ndarray:
    """ggml's RoPE of x [n_tok, n_heads, head_dim] on its first n_rot elements: "normal" mode
    rotates adjacent pairs (2i, 2i + 1), NEOX mode element i with element i + n_rot / 2."""
    half = n_rot // 2
    theta = pos[:, None] * base ** (-2.0 * np.arange(half) / n_rot)      # [n_tok, n_rot/2]
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x = x.copy()
    if neox:
        x0, x1 = x[..., :half].copy(), x[..., half:n_rot].copy()
        x[..., :half], x[..., half:n_rot] = x0 * c - x1 * s, x0 * s + x1 * c
    else:
        x0, x1 = x[..., 0:n_rot:2].copy(), x[..., 1:n_rot:2].copy()
        x[..., 0:n_rot:2], x[..., 1:n_rot:2] = x0 * c - x1 * s, x0 * s + x1 * c
    return x


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, kv16: bool = False) -> np.ndarray:
    """Causal softmax(q k^T / sqrt(head_dim)) v of q [n, n_head, hd] on k, v [n, n_head_kv, hd]
    (query head h reads K/V head h // (n_head / n_head_kv)) -> [n, n_head * hd]. kv16: ggml's
    roundings with an F16 KV cache (K, V, and Q and the softmax as the F16 products' other
    operand, to fp16)."""
    n, n_head, hd = q.shape
    group = n_head // k.shape[1]
    if kv16:
        q, k, v = f16(q), f16(k), f16(v)
    mask = np.triu(np.full((n, n), -np.inf), 1)
    out = np.empty_like(q)
    for head in range(n_head):
        s = q[:, head] @ k[:, head // group].T / np.sqrt(hd) + mask         # [n, n]
        s = np.exp(s - s.max(axis=1, keepdims=True))
        s = s / s.sum(axis=1, keepdims=True)
        out[:, head] = (f16(s) if kv16 else s) @ v[:, head // group]
    return out.reshape(n, -1)


class NpLlama:
    """llama.cpp's graphs (src/models/llama.cpp, qwen2.cpp, qwen3.cpp, qwen3moe.cpp;
    llm_graph_context::build_moe_ffn):
      x = token_embd[t]; per layer
        h = rms(x) * attn_norm
        q, k, v = h Wq^T (+ bq), h Wk^T (+ bk), h Wv^T (+ bv)            (biases: qwen2)
        q, k = rms_head(q) * attn_q_norm, rms_head(k) * attn_k_norm      (qwen3, qwen3moe)
        q, k = rope(q), rope(k): llama "normal" (pairs 2i, 2i + 1), qwen NEOX (i, i + d/2)
        x += softmax(q k^T / sqrt(head_dim) + causal) v Wo^T
        h = rms(x) * ffn_norm
        dense: x += (silu(h Wg^T) * (h Wu^T)) Wd^T
        MoE:   p = softmax(h Wr^T) over all experts; S = the k largest p, in descending order;
               w = p[S] / max(sum p[S], 6.103515625e-5); x += sum_{i in S} w_i expert_i(h)
      logits = (rms(x) * output_norm) output^T.
    After logits(), `token_gaps[t]` is the smallest gap between the k-th and (k+1)-th router
    logit of token t over the layers (inf for dense files), `route_gap` their minimum and
    `routes` the chosen experts [n_layer][n_tok, k]."""

    def __init__(self, path: str | Path):
        r, self.w = read_gguf(path)
        self.arch = gguf_kv(r, "general.architecture")
        if self.arch not in ARCHS:
            raise ValueError(f"np_llama: architecture {self.arch!r}, expected one of {ARCHS}")

        def kv(key, default=None):
            return gguf_kv(r, f"{self.arch}.{key}", default)
        self.n_embd = kv("embedding_length")
        self.n_layer = kv("block_count")
        self.n_head = kv("attention.head_count")
        self.n_head_kv = kv("attention.head_count_kv", self.n_head)
        self.eps = kv("attention.layer_norm_rms_epsilon")
        self.rope_base = kv("rope.freq_base", 10000.0)
        self.head_dim = kv("attention.key_length", self.n_embd // self.n_head)
        self.n_rot = kv("rope.dimension_count", self.head_dim)
        self.n_expert, self.n_expert_used = kv("expert_count", 0), kv("expert_used_count", 0)
        self.neox = self.arch.startswith("qwen")
        if "output.weight" not in self.w:
            self.w["output.weight"] = self.w["token_embd.weight"]
        self.route_gap, self.token_gaps, self.routes = np.inf, None, []

    def _rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    @staticmethod
    def _glu(g, u, act):
        return (np.maximum(g, 0.0) if act == "relu" else g / (1 + np.exp(-g))) * u

    def _moe(self, h, p, act, norm_w):
        w, k = self.w, self.n_expert_used
        logits = h @ w[p + "ffn_gate_inp.weight"].T                          # [n, n_expert]
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        order = np.argsort(-probs, axis=1, kind="stable")
        sel = order[:, :k]                                                   # [n, k]
        ranked = np.take_along_axis(logits, order, axis=1)
        self.token_gaps = np.minimum(self.token_gaps, ranked[:, k - 1] - ranked[:, k])
        self.routes.append(sel)
        wts = np.take_along_axis(probs, sel, axis=1)                         # [n, k]
        if norm_w:
            wts = wts / np.maximum(wts.sum(axis=1, keepdims=True), 6.103515625e-5)
        out = np.zeros_like(h)
        gate, up, down = (w[p + f"ffn_{t}_exps.weight"] for t in ("gate", "up", "down"))
        for t in range(h.shape[0]):
            for i in range(k):  # in top-k order, as ggml adds the expert views
                e = sel[t, i]
                a = self._glu(gate[e] @ h[t], up[e] @ h[t], act)            # [n_ff_exp]
                out[t] += wts[t, i] * (down[e] @ a)
        return out

    def logits(self, tokens: list[int], act: str = "silu", kv16: bool = False,
               qk_norm: bool = True, bias: bool = True, norm_w: bool = True,
               neox: bool | None = None) -> np.ndarray:
        """float64 logits [n_tok, n_vocab] of a whole sequence starting at position 0.
        act "relu": ReGLU instead of SwiGLU. kv16: ggml's roundings with an F16 KV cache
        (attention()). qk_norm / bias / norm_w = False drop the Q/K norms, the QKV biases, the
        top-k normalisation; neox overrides the RoPE mode."""
        w, n, hd = self.w, len(tokens), self.head_dim
        neox = self.neox if neox is None else neox
        self.token_gaps, self.routes = np.full(n, np.inf), []
        pos = np.arange(n, dtype=np.float64)
        x = w["token_embd.weight"][tokens]                                   # [n, n_embd]
        for il in range(self.n_layer):
            p = f"blk.{il}."
            h = self._rms(x, w[p + "attn_norm.weight"])
            qkv = []
            for t, heads in (("q", self.n_head), ("k", self.n_head_kv), ("v", self.n_head_kv)):
                y = h @ w[p + f"attn_{t}.weight"].T
                if bias and p + f"attn_{t}.bias" in w:
                    y = y + w[p + f"attn_{t}.bias"]
                y = y.reshape(n, heads, hd)
                if t != "v" and qk_norm and p + f"attn_{t}_norm.weight" in w:
                    y = self._rms(y, w[p + f"attn_{t}_norm.weight"])
                qkv.append(rope(y, pos, self.rope_base, self.n_rot, neox) if t != "v" else y)
            x = x + attention(*qkv, kv16=kv16) @ w[p + "attn_output.weight"].T
            h = self._rms(x, w[p + "ffn_norm.weight"])
            if p + "ffn_gate_inp.weight" in w:
                x = x + self._moe(h, p, act, norm_w)
            else:
                a = self._glu(h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T, act)
                x = x + a @ w[p + "ffn_down.weight"].T
        self.route_gap = float(self.token_gaps.min())
        return self._rms(x, w["output_norm.weight"]) @ w["output.weight"].T


if __name__ == "__main__":
    m = NpLlama(sys.argv[1])
    toks = [int(t) for t in sys.argv[2:]] or [1]
    lg = m.logits(toks)[-1]
    print(f"argmax {int(np.argmax(lg))} max|logit| {np.abs(lg).max():.6f}")
