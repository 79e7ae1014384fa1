#!/usr/bin/env python3
"""relufy: turn a SwiGLU LLaMA checkpoint into a sparse ReGLU model (ProSparse-style).

    h = silu(gate(x)) * up(x)    ->    h = relu(gate(x)) * up(x)

then fine-tune on plain text with the language-model loss plus an optional L1 penalty on the
FFN intermediate activations h (ramped up from 0, as ProSparse's progressive sparsity
regularisation), and write a GGUF that hotcold runs as ReGLU.

Inputs (one of):
  --llama2c MODEL.bin --tokenizer TOK.bin   llama2.c legacy v0 export (stories260K). The result is
                                            written back as a v0 .bin and converted with
                                            `hotcold convert --name NAME` (NAME contains "relu",
                                            which makes hotcold pick ReGLU).
  --gguf MODEL.gguf                         a llama-arch GGUF (SmolLM2-135M: GQA, tied embeddings,
                                            any quant type gguf-py can dequantize). The result is
                                            an F32/F16 GGUF with all metadata copied, plus
                                            hotcold.ffn_activation = "relu". Needs gguf-py.

Text is tokenised by the engine (`hotcold tokenize`), the reference tokenizer. The data file is
split by lines: the last --heldout-frac of its lines (moved forward to the next blank line) are
held out for evaluation, the rest is the training stream. Perplexity uses hotcold's (llama.cpp's)
method on the held-out text, in torch and in the engine: non-overlapping chunks of --eval-ctx
tokens whose first token is BOS, scoring the second half of each chunk.

Sparsity = share of FFN intermediate activations h that are exactly 0, over every position of
the held-out chunks, per layer and averaged over layers.

Runs with Debian's python3-torch (CPU) or any torch >= 1.13; --device cuda for a GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lora  # noqa: E402  (tools/relu/lora.py: the adapter file and its merge)
from model_file import Config, import_gguf, read_gguf, write_gguf  # noqa: E402



def log(msg: str) -> None:
    print(msg, flush=True)


# ---- model ------------------------------------------------------------------------------------

def layer_names(il: int) -> list[str]:
    p = f"blk.{il}."
    return [p + n + ".weight" for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                        "ffn_norm", "ffn_gate", "ffn_down", "ffn_up")]


class Llama(torch.nn.Module):
    """LLaMA forward as llama2.c / ggml "normal" RoPE: rotate adjacent pairs (x[2i], x[2i+1]).

    Weights keep their GGUF names ('.' replaced by '_' for nn.ParameterDict) and row-major
    [n_out, n_in] shapes. act is "silu" (SwiGLU) or "relu" (ReGLU)."""

    def __init__(self, cfg: Config, weights: dict[str, np.ndarray], act: str, lora_rank: int = 0,
                 lora_alpha: float = 0.0, seed: int = 0, init: dict | None = None):
        """lora_rank > 0: the weights are frozen and every linear layer trains a low-rank delta
        (alpha / r) B A instead (tools/relu/lora.py), A Kaiming-uniform, B zero (the delta starts
        at 0), or from `init` ({weight name: (A, B)}: an earlier adapter, to train on from). The
        weights' storage is shared with `weights` (torch.from_numpy)."""
        super().__init__()
        self.cfg, self.act = cfg, act
        self.l1_target = "gate"  # L1 on relu(gate) ("gate") or on h = relu(gate) * up ("h")
        self.w = torch.nn.ParameterDict(
            {k.replace(".", "_"): torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)),
                                                     requires_grad=lora_rank == 0)
             for k, v in weights.items() if not (cfg.tied and k == "output.weight")})
        self.lora_rank = lora_rank
        self.lora_scale = (lora_alpha or lora_rank) / lora_rank if lora_rank else 0.0
        self.lora = torch.nn.ParameterDict()
        if lora_rank:
            g = torch.Generator().manual_seed(seed)
            for n in lora.targets(cfg.n_layer):
                n_out, n_in = weights[n].shape
                bound = 1.0 / math.sqrt(n_in)  # nn.Linear's Kaiming-uniform, a = sqrt(5)
                a = (torch.rand(lora_rank, n_in, generator=g) * 2 - 1) * bound
                b = torch.zeros(n_out, lora_rank)
                if init is not None:
                    if n not in init or init[n][0].shape != (lora_rank, n_in) or init[n][1].shape != (n_out, lora_rank):
                        raise SystemExit(f"relufy: --init-adapter has no rank-{lora_rank} factors of {n}")
                    a = torch.from_numpy(init[n][0].astype(np.float32))
                    b = torch.from_numpy(init[n][1].astype(np.float32))
                self.lora[n.replace(".", "_") + "_a"] = torch.nn.Parameter(a)
                self.lora[n.replace(".", "_") + "_b"] = torch.nn.Parameter(b)
        hd = cfg.head_dim
        inv = cfg.rope_base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)  # [hd/2]
        self.register_buffer("inv_freq", inv, persistent=False)

    def p(self, name: str) -> torch.Tensor:
        return self.w[name.replace(".", "_")]

    def lin(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """x @ W.T, plus the LoRA delta's (x @ A.T) @ B.T * scale when the model has one."""
        y = x @ self.p(name).T
        if self.lora_rank:
            k = name.replace(".", "_")
            y = y + ((x @ self.lora[k + "_a"].T) @ self.lora[k + "_b"].T) * self.lora_scale
        return y

    def lora_factors(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """{weight name: (A, B)} as trained (the delta is (alpha / r) B A: lora.py merge)."""
        out = {}
        for n in lora.targets(self.cfg.n_layer):
            k = n.replace(".", "_")
            out[n] = (self.lora[k + "_a"].detach().float().cpu().numpy(),
                      self.lora[k + "_b"].detach().float().cpu().numpy())
        return out

    def rope(self, x: torch.Tensor) -> torch.Tensor:  # x [B, T, H, hd]
        T = x.shape[1]
        ang = torch.arange(T, dtype=torch.float64, device=x.device)[:, None] * self.inv_freq[None, :]
        c = torch.cos(ang).to(x.dtype)[None, :, None, :]  # [1, T, 1, hd/2]
        s = torch.sin(ang).to(x.dtype)[None, :, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)

    def rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg.eps) * w

    def forward(self, tokens: torch.Tensor, stats: dict | None = None,
                shift: float = 0.0) -> torch.Tensor:
        """tokens [B, T] -> logits [B, T, n_vocab]. If stats is a dict, fills stats["l1"] (mean
        |relu(gate)| or |h| over layers, a differentiable scalar), stats["zero"] ([n_layer] count of h == 0) and
        stats["n"] (elements per layer). shift > 0 trains with relu(g - shift) (not exported)."""
        cfg = self.cfg
        B, T = tokens.shape
        H, Hkv, hd = cfg.n_head, cfg.n_head_kv, cfg.head_dim
        x = F.embedding(tokens, self.p("token_embd.weight"))  # [B, T, n_embd]
        mask = torch.full((T, T), float("-inf"), device=x.device).triu(1)
        l1, zeros = 0.0, []
        for il in range(cfg.n_layer):
            pre = f"blk.{il}."
            h = self.rms(x, self.p(pre + "attn_norm.weight"))
            q = self.rope(self.lin(h, pre + "attn_q.weight").view(B, T, H, hd)).transpose(1, 2)
            k = self.rope(self.lin(h, pre + "attn_k.weight").view(B, T, Hkv, hd)).transpose(1, 2)
            v = self.lin(h, pre + "attn_v.weight").view(B, T, Hkv, hd).transpose(1, 2)
            if Hkv != H:  # GQA: query head j uses kv head j // (H / Hkv)
                k = k.repeat_interleave(H // Hkv, dim=1)
                v = v.repeat_interleave(H // Hkv, dim=1)
            a = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + mask  # [B, H, T, T]
            o = (a.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * hd)
            x = x + self.lin(o, pre + "attn_output.weight")
            h = self.rms(x, self.p(pre + "ffn_norm.weight"))
            g = self.lin(h, pre + "ffn_gate.weight")  # [B, T, n_ff]
            u = self.lin(h, pre + "ffn_up.weight")
            if self.act == "silu":
                r = F.silu(g)
            else:
                r = F.relu(g - shift) if shift else F.relu(g)
            f = r * u
            if stats is not None:
                l1 = l1 + (r.abs().mean() if self.l1_target == "gate" else f.abs().mean())
                zeros.append((f == 0).sum().detach())
            x = x + self.lin(f, pre + "ffn_down.weight")
        x = self.rms(x, self.p("output_norm.weight"))
        out_w = self.p("token_embd.weight") if cfg.tied else self.p("output.weight")
        if stats is not None:
            stats["l1"] = l1 / cfg.n_layer
            stats["zero"] = torch.stack(zeros).float()
            stats["n"] = B * T * cfg.n_ff
        return x @ out_w.T


# ---- llama2.c v0 checkpoints -------------------------------------------------------------------

def read_llama2c(path: Path) -> tuple[Config, dict[str, np.ndarray], dict]:
    raw = path.read_bytes()
    dim, hidden, n_layer, n_head, n_kv, vocab, seq = struct.unpack("<7i", raw[:28])
    cfg = Config(dim, hidden, n_layer, n_head, n_kv, abs(vocab), seq, tied=vocab > 0)
    kv = n_kv * (dim // n_head)
    a = np.frombuffer(raw, dtype="<f4", offset=28)
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        if off + n > a.size:
            raise ValueError(f"{path}: truncated (need {off + n} floats, have {a.size})")
        t = a[off:off + n].reshape(shape).copy()
        off += n
        return t

    L = n_layer
    w = {"token_embd.weight": take(cfg.n_vocab, dim)}
    per = {"attn_norm": take(L, dim), "attn_q": take(L, dim, dim), "attn_k": take(L, kv, dim),
           "attn_v": take(L, kv, dim), "attn_output": take(L, dim, dim), "ffn_norm": take(L, dim),
           "ffn_gate": take(L, hidden, dim), "ffn_down": take(L, dim, hidden),
           "ffn_up": take(L, hidden, dim)}
    w["output_norm.weight"] = take(dim)
    hd = dim // n_head
    freq = {"real": take(seq, hd // 2), "imag": take(seq, hd // 2)}
    if not cfg.tied:
        w["output.weight"] = take(cfg.n_vocab, dim)
    if off != a.size:
        raise ValueError(f"{path}: {a.size - off} trailing floats after the weights")
    for il in range(L):
        for n, t in per.items():
            w[f"blk.{il}.{n}.weight"] = t[il]
    return cfg, w, freq


def write_llama2c(path: Path, cfg: Config, w: dict[str, np.ndarray], freq: dict) -> None:
    L = cfg.n_layer
    hdr = struct.pack("<7i", cfg.n_embd, cfg.n_ff, L, cfg.n_head, cfg.n_head_kv,
                      cfg.n_vocab if cfg.tied else -cfg.n_vocab, cfg.n_ctx_train)
    parts = [w["token_embd.weight"]]
    for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
              "ffn_down", "ffn_up"):
        parts.append(np.stack([w[f"blk.{il}.{n}.weight"] for il in range(L)]))
    parts += [w["output_norm.weight"], freq["real"], freq["imag"]]
    if not cfg.tied:
        parts.append(w["output.weight"])
    with open(path, "wb") as f:
        f.write(hdr)
        for p in parts:
            f.write(np.ascontiguousarray(p, dtype="<f4").tobytes())


# ---- engine ------------------------------------------------------------------------------------

def run_engine(args: list, **kw) -> str:
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return p.stdout


def engine_tokenize(hotcold: Path, gguf: Path, text_file: Path) -> np.ndarray:
    out = run_engine([hotcold, "tokenize", "-m", gguf, "-f", text_file, "--no-parse-special"])
    return np.array([int(s) for s in out.split()], dtype=np.int64)


def engine_perplexity(hotcold: Path, gguf: Path, text_file: Path, ctx: int, threads: int,
                      chunks: int) -> float:
    out = run_engine([hotcold, "perplexity", "-m", gguf, "-f", text_file, "-c", ctx,
                      "-t", threads, "--chunks", chunks])
    for line in out.splitlines():
        if line.startswith("Final estimate: PPL = "):
            return float(line.split()[4])
    raise RuntimeError(f"no 'Final estimate' in hotcold perplexity output: {out!r}")


# ---- data --------------------------------------------------------------------------------------

def split_text(data: Path, heldout_frac: float, max_train_lines: int) -> tuple[str, str, dict]:
    lines = data.read_text(encoding="utf-8").split("\n")
    cut = int(len(lines) * (1.0 - heldout_frac))
    while cut < len(lines) and lines[cut].strip():  # start the held-out part at a paragraph
        cut += 1
    train = lines[:cut] if max_train_lines <= 0 else lines[:min(cut, max_train_lines)]
    info = {"lines": len(lines), "train_lines": [0, len(train)], "heldout_lines": [cut, len(lines)]}
    return "\n".join(train), "\n".join(lines[cut:]), info


# ---- evaluation --------------------------------------------------------------------------------

@torch.no_grad()
def evaluate(model: Llama, tokens: np.ndarray, ctx: int, chunks: int, bos: int | None, device,
             batch: int = 8) -> dict:
    """hotcold/llama.cpp perplexity on `tokens` (the whole held-out text, BOS first) and the
    share of h == 0 per layer over every position of the scored chunks."""
    model.eval()
    n_chunk = len(tokens) // ctx
    if chunks > 0:
        n_chunk = min(n_chunk, chunks)
    if n_chunk < 1:
        raise ValueError(f"held-out text has {len(tokens)} tokens, fewer than --eval-ctx {ctx}")
    nll, count = 0.0, 0
    zero = torch.zeros(model.cfg.n_layer, dtype=torch.float64)
    n_elem = 0
    first = ctx // 2
    for c0 in range(0, n_chunk, batch):
        cs = range(c0, min(n_chunk, c0 + batch))
        x = torch.from_numpy(np.stack([tokens[c * ctx:(c + 1) * ctx] for c in cs])).to(device)
        if bos is not None:  # llama.cpp's perplexity: BOS on each chunk when the vocab adds one
            x[:, 0] = bos
        st: dict = {}
        logits = model(x, st).double()  # [b, ctx, n_vocab]
        lp = logits[:, first:ctx - 1].log_softmax(-1)
        tgt = x[:, first + 1:ctx]  # position 0 (now BOS) is never a target
        nll -= lp.gather(-1, tgt[..., None]).sum().item()
        count += tgt.numel()
        zero += st["zero"].double().cpu()
        n_elem += st["n"]
    model.train()
    per_layer = (zero / n_elem).tolist()
    return {"ppl": math.exp(nll / count), "tokens_scored": count, "chunks": n_chunk,
            "sparsity": sum(per_layer) / len(per_layer), "sparsity_per_layer": per_layer}


# ---- training ----------------------------------------------------------------------------------

def lr_at(step: int, steps: int, lr: float, warmup: int, min_frac: float = 0.1) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * (min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * t)))


def ramp(step: int, steps: int, frac: float) -> float:
    """0 -> 1 linearly over the first `frac` of the steps (ProSparse's progressive L1)."""
    return 1.0 if frac <= 0 else min(1.0, step / (frac * steps))


def run_key(a) -> dict:
    """What a checkpoint must agree on to be resumed: the model, data and recipe (not --steps,
    which a resumed run may raise, nor the time limit or logging)."""
    keep = ("llama2c", "gguf", "data", "max_train_lines", "heldout_frac", "lr", "warmup",
            "weight_decay", "clip", "l1", "l1_target", "l1_ramp", "shift", "shift_anneal", "seq",
            "batch", "seed", "lora", "lora_alpha", "kl", "init_adapter")
    return {k: str(getattr(a, k)) for k in keep}


def save_checkpoint(path: Path, model: Llama, opt, g: torch.Generator, step: int, hist: list,
                    a) -> None:
    trainable = {k: v.detach().cpu() for k, v in model.named_parameters() if v.requires_grad}
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save({"step": step, "params": trainable, "opt": opt.state_dict(), "rng": g.get_state(),
                "hist": hist, "key": run_key(a)}, tmp)
    os.replace(tmp, path)  # a run stopped mid-write keeps the previous checkpoint


def train(model: Llama, train_tokens: np.ndarray, a, bos: int | None, device,
          teacher: Llama | None = None) -> list[dict]:
    """--steps optimiser steps (from the checkpoint's step with --resume), stopping early after
    --max-seconds; the checkpoint (--ckpt) is written every --save-every steps and at the end.
    With a teacher, the loss adds --kl times KL(teacher || student) per token."""
    g = torch.Generator().manual_seed(a.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=a.weight_decay)
    data = torch.from_numpy(train_tokens)
    hist: list[dict] = []
    start = 0
    if a.resume:  # main() checked that the checkpoint is this recipe's
        ck = torch.load(a.ckpt)
        named = dict(model.named_parameters())
        with torch.no_grad():
            for k, v in ck["params"].items():
                named[k].copy_(v)
        opt.load_state_dict(ck["opt"])
        g.set_state(ck["rng"])
        start, hist = int(ck["step"]), list(ck["hist"])
        log(f"resumed {a.ckpt} at step {start}")
    t0 = time.time()
    model.train()
    step = start
    for step in range(start, a.steps):
        if a.max_seconds > 0 and time.time() - t0 > a.max_seconds:
            log(f"--max-seconds {a.max_seconds} reached at step {step}: stopping (resume later)")
            break
        ix = torch.randint(len(data) - a.seq - 1, (a.batch,), generator=g)
        xy = torch.stack([data[i:i + a.seq + 1] for i in ix]).to(device)
        x, y = xy[:, :-1].clone(), xy[:, 1:]
        if bos is not None:
            x[:, 0] = bos  # as the evaluation (and hotcold perplexity) sees chunks
        lr = lr_at(step, a.steps, a.lr, a.warmup)
        for pg in opt.param_groups:
            pg["lr"] = lr
        l1c = a.l1 * ramp(step, a.steps, a.l1_ramp)
        shift = a.shift * (1.0 - ramp(step, a.steps, a.shift_anneal)) if a.shift else 0.0
        st: dict = {}
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=a.bf16):
            logits = model(x, st, shift=shift)
            t_logits = None
            if teacher is not None:
                with torch.no_grad():
                    t_logits = teacher(x)
        flat = logits.float().reshape(-1, logits.shape[-1])
        ce = F.cross_entropy(flat, y.reshape(-1))
        loss = ce + l1c * st["l1"]
        kl = torch.zeros(())
        if t_logits is not None:  # KL(teacher || student), per token
            kl = F.kl_div(flat.log_softmax(-1), t_logits.float().reshape(flat.shape).log_softmax(-1),
                          log_target=True, reduction="batchmean")
            loss = loss + a.kl * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.clip)
        opt.step()
        sp = (st["zero"].sum() / (st["n"] * model.cfg.n_layer)).item()
        rec = {"step": step + 1, "ce": ce.item(), "kl": kl.item(), "l1": float(st["l1"]),
               "l1_coef": l1c, "shift": shift, "lr": lr, "batch_sparsity": sp,
               "tokens": (step + 1) * a.batch * a.seq}
        hist.append(rec)
        if (step + 1) % a.log_every == 0 or step == start or step + 1 == a.steps:
            log(f"step {step + 1:5d}/{a.steps}  ce {rec['ce']:.4f}  kl {rec['kl']:.4f}  "
                f"l1 {rec['l1']:.4f} (coef {l1c:.3g})  shift {shift:.3f}  lr {lr:.2e}  "
                f"sparsity {sp:.3f}  {time.time() - t0:6.1f} s")
        if a.ckpt and a.save_every > 0 and (step + 1) % a.save_every == 0:
            save_checkpoint(a.ckpt, model, opt, g, step + 1, hist, a)
    done = hist[-1]["step"] if hist else start
    if a.ckpt:
        save_checkpoint(a.ckpt, model, opt, g, done, hist, a)
    model.eval()
    return hist


# ---- main --------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--llama2c", type=Path, help="llama2.c legacy v0 checkpoint (.bin)")
    src.add_argument("--gguf", type=Path, help="llama-arch GGUF checkpoint")
    p.add_argument("--tokenizer", type=Path, help="llama2.c tokenizer.bin (with --llama2c)")
    p.add_argument("--data", type=Path, required=True, help="UTF-8 text for training + held-out")
    p.add_argument("-o", "--output", type=Path, required=True, help="output GGUF")
    p.add_argument("--hotcold", type=Path, required=True, help="the hotcold binary")
    p.add_argument("--name", default=None, help="general.name (default: input stem + '-relu'); "
                   "must contain 'relu' for --llama2c")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=50, help="linear LR warm-up steps")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--clip", type=float, default=1.0, help="gradient-norm clip (0: off)")
    p.add_argument("--l1", type=float, default=0.0,
                   help="L1 coefficient on the mean FFN activation (see --l1-target)")
    p.add_argument("--l1-target", choices=("gate", "h"), default="gate",
                   help="penalise |relu(gate(x))| (default: only the gate decides sparsity) "
                   "or |h| = |relu(gate(x)) * up(x)|")
    p.add_argument("--l1-ramp", type=float, default=0.5,
                   help="fraction of steps over which the L1 coefficient ramps 0 -> --l1")
    p.add_argument("--shift", type=float, default=0.0,
                   help="train with relu(g - shift), annealed to 0 (the export is plain relu)")
    p.add_argument("--shift-anneal", type=float, default=0.5,
                   help="fraction of steps over which --shift anneals to 0")
    p.add_argument("--seq", type=int, default=256, help="training sequence length")
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument("--heldout-frac", type=float, default=0.15)
    p.add_argument("--max-train-lines", type=int, default=0, help="use at most N training lines")
    p.add_argument("--eval-ctx", type=int, default=512, help="perplexity context (hotcold -c)")
    p.add_argument("--eval-chunks", type=int, default=0, help="score at most N chunks (0: all)")
    p.add_argument("--threads", type=int, default=1, help="torch and hotcold threads")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1, ...")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast for training (GPU)")
    p.add_argument("--out-type", choices=("f32", "f16"), default="f32", help="GGUF tensors (--gguf)")
    p.add_argument("--no-engine-ppl", action="store_true", help="skip `hotcold perplexity`")
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--lora", type=int, default=0, metavar="R",
                   help="train a rank-R LoRA adapter on every linear layer, the weights frozen "
                        "(0: fine-tune every weight)")
    p.add_argument("--lora-alpha", type=float, default=0.0, help="LoRA alpha (0: = R, scale 1)")
    p.add_argument("--adapter-out", type=Path, default=None, metavar="PREFIX",
                   help="with --lora: write the adapter as PREFIX-0000K-of-0000N.gguf shards and "
                        "PREFIX.json (tools/relu/lora.py); the output GGUF is its merge")
    p.add_argument("--max-shard-mib", type=float, default=16.0)
    p.add_argument("--init-adapter", type=Path, default=None, metavar="MANIFEST",
                   help="with --lora: start from this adapter (its rank and alpha; a fresh "
                        "optimiser): another session's adapter trained on")
    p.add_argument("--kl", type=float, default=0.0,
                   help="weight of KL(SwiGLU original || ReGLU student) per token (self-distillation)")
    p.add_argument("--ckpt", type=Path, default=None, help="training checkpoint (written at the "
                   "end and every --save-every steps)")
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue from --ckpt (same recipe; "
                   "--steps is the total)")
    p.add_argument("--max-seconds", type=float, default=0.0,
                   help="stop training after this long (then evaluate and write as usual)")
    a = p.parse_args(argv)
    if a.llama2c and not a.tokenizer:
        p.error("--llama2c needs --tokenizer")
    if a.name is None:
        stem = (a.llama2c or a.gguf).stem
        a.name = stem + "-relu"
    if a.adapter_out and not a.lora:
        p.error("--adapter-out needs --lora")
    if a.init_adapter and not a.lora:
        p.error("--init-adapter needs --lora")
    if a.llama2c and "relu" not in a.name.lower():
        p.error("--name must contain 'relu' (that is how hotcold picks ReGLU for a llama2.c model)")
    return a


MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "1000000000", "MALLOC_TRIM_THRESHOLD_": "4000000000"}


def main(argv=None) -> int:
    a = parse_args(argv)
    if argv is None and any(k not in os.environ for k in MALLOC_ENV):
        # glibc hands large freed blocks (the [B, H, T, T] attention scores) back to the kernel
        # and faults them in again every step: keep them (measured 2-3x less system time).
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **MALLOC_ENV})
    if a.resume:  # a checkpoint of another recipe is refused before any work
        if not a.ckpt or not a.ckpt.exists():
            raise SystemExit(f"relufy: --resume needs the checkpoint --ckpt {a.ckpt} (not found)")
        key = torch.load(a.ckpt)["key"]
        if key != run_key(a):
            diff = {k: (key.get(k), v) for k, v in run_key(a).items() if key.get(k) != v}
            raise SystemExit(f"relufy: {a.ckpt} was made by another run (checkpoint, now): {diff}")
    t_start = time.time()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    out = a.output
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="relufy-", dir=out.parent))

    # 1. the original model, and a GGUF of it for the engine (tokenizer + reference ppl)
    if a.llama2c:
        cfg, weights, extra = read_llama2c(a.llama2c)
        orig_gguf = work / "original.gguf"
        run_engine([a.hotcold, "convert", "--llama2c", a.llama2c, "--tokenizer", a.tokenizer,
                    "--name", a.llama2c.stem, "-o", orig_gguf])
    else:
        cfg, weights, extra = read_gguf(a.gguf)
        orig_gguf = a.gguf
    log(f"model: {asdict(cfg)}")

    # 2. data: deterministic line split, tokenised by the engine
    train_text, held_text, split = split_text(a.data, a.heldout_frac, a.max_train_lines)
    held_file = out.with_suffix(".heldout.txt")
    held_file.write_text(held_text, encoding="utf-8")
    (work / "train.txt").write_text(train_text, encoding="utf-8")
    train_tok = engine_tokenize(a.hotcold, orig_gguf, work / "train.txt")
    held_tok = engine_tokenize(a.hotcold, orig_gguf, held_file)
    # The tokenizer adds BOS (stories260K) or not (SmolLM2: add_bos_token false): only then does
    # hotcold's (llama.cpp's) perplexity put it at each chunk's start, and so do we.
    gguf_r = import_gguf().GGUFReader(str(orig_gguf))
    bos_field = gguf_r.fields.get("tokenizer.ggml.bos_token_id")
    bos_id = int(bos_field.contents()) if bos_field is not None else None
    bos = int(held_tok[0]) if bos_id is not None and int(held_tok[0]) == bos_id else None
    del gguf_r
    log(f"data: {split}, {len(train_tok)} training tokens, {len(held_tok)} held-out tokens, "
        f"BOS {bos}; held-out text in {held_file}")

    # 3. baselines
    # With LoRA the weights are frozen and shared with `weights` (and with the teacher); a full
    # fine-tune with a teacher trains a copy.
    base = weights if a.lora or not a.kl else {k: v.copy() for k, v in weights.items()}
    init = None
    if a.init_adapter:
        alpha0, rank0, init = lora.read_adapter(a.init_adapter)
        if rank0 != a.lora or abs(alpha0 - (a.lora_alpha or a.lora)) > 1e-6:
            raise SystemExit(f"relufy: {a.init_adapter} is rank {rank0}, alpha {alpha0}; this run "
                             f"asks for --lora {a.lora} --lora-alpha {a.lora_alpha or a.lora}")
        log(f"starting from the adapter {a.init_adapter}")
    model = Llama(cfg, base, "silu", a.lora, a.lora_alpha, a.seed, init).to(device)
    teacher = Llama(cfg, weights, "silu").to(device).eval() if a.kl else None
    if teacher is not None:
        for p_ in teacher.parameters():
            p_.requires_grad_(False)
    # The original: the teacher, or the untrained weights (a model started from an adapter is not).
    orig = teacher if teacher is not None else (
        Llama(cfg, weights, "silu").to(device) if a.init_adapter else model)
    ev_orig = evaluate(orig, held_tok, a.eval_ctx, a.eval_chunks, bos, device)
    log(f"original (SwiGLU) torch ppl {ev_orig['ppl']:.4f}")
    model.act, model.l1_target = "relu", a.l1_target
    ev_step0 = evaluate(model, held_tok, a.eval_ctx, a.eval_chunks, bos, device)
    log(f"ReGLU before fine-tuning: torch ppl {ev_step0['ppl']:.4f}, "
        f"sparsity {ev_step0['sparsity']:.4f}")

    # 4. fine-tune
    t_train = time.time()
    hist = train(model, train_tok, a, bos, device, teacher)
    train_s = time.time() - t_train

    # 5. the weights written: trained, or the base with the adapter merged (as lora.py merge
    # does, from the adapter's F16 factors as written), then evaluated as written
    adapter = None
    if a.lora:
        factors = model.lora_factors()
        if a.adapter_out:
            adapter = lora.write_adapter(a.adapter_out, factors, model.lora_scale * a.lora,
                                         max_shard_mib=a.max_shard_mib,
                                         meta={"name": a.name, "steps": hist[-1]["step"] if hist else 0,
                                               "tokens": hist[-1]["tokens"] if hist else 0})
            alpha, rank, factors = lora.read_adapter(adapter)
            log(f"wrote the adapter {adapter}")
        else:
            alpha, rank = model.lora_scale * a.lora, a.lora
            factors = {n: (f[0].astype(np.float16), f[1].astype(np.float16)) for n, f in factors.items()}
        new_w = {n: v.copy() for n, v in weights.items() if not (cfg.tied and n == "output.weight")}
        lora.merge(new_w, factors, alpha, rank)
        model = Llama(cfg, new_w, "relu").to(device)
        model.l1_target = a.l1_target
    else:
        new_w = {n: model.p(n).detach().float().cpu().numpy()
                 for n in weights if not (cfg.tied and n == "output.weight")}
    ev_relu = evaluate(model, held_tok, a.eval_ctx, a.eval_chunks, bos, device)
    if a.llama2c:
        bin_path = out.with_suffix(".bin")
        write_llama2c(bin_path, cfg, new_w, extra)
        run_engine([a.hotcold, "convert", "--llama2c", bin_path, "--tokenizer", a.tokenizer,
                    "--name", a.name, "-o", out])
    else:
        write_gguf(out, extra, new_w, a.name, a.out_type)
    log(f"wrote {out}")

    # 6. engine perplexity on the same held-out text and context
    eng = {}
    if not a.no_engine_ppl:
        ch = a.eval_chunks if a.eval_chunks > 0 else -1
        eng["original"] = engine_perplexity(a.hotcold, orig_gguf, held_file, a.eval_ctx, a.threads, ch)
        eng["relu"] = engine_perplexity(a.hotcold, out, held_file, a.eval_ctx, a.threads, ch)

    wall = time.time() - t_start
    report = {
        "name": a.name, "output": str(out), "args": {k: str(v) for k, v in vars(a).items()},
        "config": asdict(cfg), "split": split, "train_tokens": int(len(train_tok)),
        "heldout_tokens": int(len(held_tok)),
        "torch": {"original": ev_orig, "relu_step0": ev_step0, "relu": ev_relu},
        "engine_ppl": eng, "ppl_ratio_torch": ev_relu["ppl"] / ev_orig["ppl"],
        "ppl_ratio_engine": (eng["relu"] / eng["original"]) if eng else None,
        "train_seconds": train_s, "wall_seconds": wall, "threads": a.threads,
        "trained_steps": hist[-1]["step"] if hist else 0,
        "trained_tokens": hist[-1]["tokens"] if hist else 0,
        "adapter": str(adapter) if adapter else None,
        "device": str(device), "torch_version": torch.__version__,
        "history": hist[:: max(1, a.log_every)] + hist[-1:],
    }
    rep_path = out.with_suffix(".json")
    rep_path.write_text(json.dumps(report, indent=1))
    for f in work.iterdir():
        f.unlink()
    work.rmdir()

    log("---- result ----")
    log(f"original ppl (torch)      {ev_orig['ppl']:.4f}" +
        (f"   engine {eng['original']:.4f}" if eng else ""))
    log(f"relu ppl (torch)          {ev_relu['ppl']:.4f}" +
        (f"   engine {eng['relu']:.4f}" if eng else ""))
    log(f"ratio relu/original       {report['ppl_ratio_torch']:.4f} (torch)" +
        (f"   {report['ppl_ratio_engine']:.4f} (engine)" if eng else ""))
    log(f"FFN sparsity (held-out)   {ev_relu['sparsity']:.4f}  (step 0: {ev_step0['sparsity']:.4f})")
    log("per layer                 " + " ".join(f"{s:.4f}" for s in ev_relu["sparsity_per_layer"]))
    log(f"wall time                 {wall:.1f} s (training {train_s:.1f} s), "
        f"{a.threads} thread(s), device {device}")
    log(f"report                    {rep_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
