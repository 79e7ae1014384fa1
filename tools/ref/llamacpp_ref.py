#!/usr/bin/env python3
"""llama.cpp reference harness (through llama-cpp-python's low-level ctypes API).

Importable module and CLI. Everything here is what the hotcold reference tests compare against:

  * greedy continuation: argmax over the full logits row (ties -> lowest id), never
    llama.cpp's sampler chain, so no seed or sampler state is involved;
  * last-prompt-token logits (float32, n_vocab);
  * tokenization with explicit add_special / parse_special;
  * perplexity computed exactly as llama.cpp's tools/perplexity/perplexity.cpp does it.

Numerics: by default the context uses llama.cpp's default F16 KV cache (as hotcold does,
src/model/kv_cache.h) with flash attention off (ggml's CPU flash attention also rounds Q to
F16). `kv_type="f32"` / `--kv-type f32` gives plain fp32 arithmetic for F32 weights: it agrees
with a float64 forward pass to ~6 fp32 ulps of max|logit| on stories260K (measured).

CLI (mirrors the hotcold flags so outputs can be diffed):
  llamacpp_ref.py run        -m M -p TEXT -n N [--ids] [--logits-out FILE]
  llamacpp_ref.py tokenize   -m M (-p TEXT | -f FILE) [--no-bos]
  llamacpp_ref.py perplexity -m M -f FILE [-c 512] [--chunks 20]
  llamacpp_ref.py info       -m M
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import llama_cpp as L

_KV_TYPES = {"f32": L.GGML_TYPE_F32, "f16": L.GGML_TYPE_F16}


@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def _silent_log(level, text, user_data):  # keep llama.cpp quiet (verbose=False)
    pass


_backend_ready = False


def system_info() -> str:
    """llama.cpp's feature line ("CPU : SSE3 = 1 | ... | AVX512 = 1 | ..."): what it was built with."""
    return L.llama_print_system_info().decode(errors="replace").strip()


def check_build() -> None:
    """The reference follows ggml's AVX-512/AVX2 dot products, the arithmetic hotcold matches bit
    for bit. A build with AMX computes quantised matrix products differently (its own weight
    layout, tile and VNNI kernels, another accumulation order) and crashes on some hosts of this
    machine kind (SIGSEGV in ggml_backend_amx_mul_mat on prompt batches): refuse it up front."""
    info = system_info()
    if "AMX" in info:
        raise RuntimeError(
            "the llama.cpp reference was built with AMX (" + info + "); hotcold's goldens follow "
            "its AVX-512/AVX2 path: rerun scripts/setup.sh, which builds it without AMX")


def _init_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        check_build()
        L.llama_log_set(_silent_log, ctypes.c_void_p(0))
        L.llama_backend_init()
        _backend_ready = True


def llama_cpp_version() -> str:
    return getattr(L, "__version__", "unknown")


@dataclass
class Generation:
    prompt_ids: list[int]
    ids: list[int]                  # generated ids; stops before an end-of-generation token
    text_bytes: bytes               # concatenated pieces of `ids` (special tokens not rendered)
    stopped_at_eog: bool
    eog_id: int | None = None       # the EOG token that stopped generation, if any

    @property
    def text(self) -> str:
        return self.text_bytes.decode("utf-8", errors="replace")


@dataclass
class Perplexity:
    ppl: float
    stderr: float                   # "+/-" value llama.cpp prints: ppl * sd(nll)/sqrt(count-1)
    n_tokens: int                   # tokens in the whole file (BOS included when added)
    n_chunks: int
    n_ctx: int
    count: int                      # scored tokens
    chunk_ppl: list[float] = field(default_factory=list)  # running PPL after each chunk

    def final_line(self) -> str:
        return f"Final estimate: PPL = {self.ppl:.4f} +/- {self.stderr:.5f}"


class LlamaRef:
    """One model loaded in llama.cpp; contexts are created on demand per (n_ctx, n_batch)."""

    def __init__(self, model_path: str | Path, n_threads: int = 2, kv_type: str = "f16",
                 flash_attn: bool = False):
        _init_backend()
        self.model_path = str(model_path)
        self.n_threads = n_threads
        self.kv_type = kv_type
        self.flash_attn = flash_attn
        mparams = L.llama_model_default_params()
        mparams.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(self.model_path.encode(), mparams)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load model {self.model_path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.bos = L.llama_vocab_bos(self.vocab)
        self.eos = L.llama_vocab_eos(self.vocab)
        self.add_bos = bool(L.llama_vocab_get_add_bos(self.vocab))
        self.add_eos = bool(L.llama_vocab_get_add_eos(self.vocab))
        self.n_ctx_train = L.llama_model_n_ctx_train(self.model)
        self._ctx = None
        self._ctx_key = None

    def close(self) -> None:
        if self._ctx:
            L.llama_free(self._ctx)
            self._ctx = None
        if self.model:
            L.llama_model_free(self.model)
            self.model = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- vocabulary -------------------------------------------------------------------------

    def tokenize(self, text: str | bytes, add_special: bool = True,
                 parse_special: bool = False) -> list[int]:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        n_max = len(data) + 16
        buf = (L.llama_token * n_max)()
        n = L.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:  # buffer too small: -n is the required size
            n_max = -n
            buf = (L.llama_token * n_max)()
            n = L.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special,
                                 parse_special)
        if n < 0:
            raise RuntimeError(f"llama_tokenize failed ({n})")
        return list(buf[:n])

    def piece(self, token: int, special: bool = False) -> bytes:
        buf = ctypes.create_string_buffer(256)
        n = L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        return bool(L.llama_vocab_is_eog(self.vocab, token))

    def prompt_ids(self, prompt: str) -> list[int]:
        """Prompt tokens as `hotcold run -p` (and llama.cpp's CLI) make them: special tokens
        added per model metadata (BOS), special-token text such as <|im_start|> parsed."""
        return self.tokenize(prompt, add_special=True, parse_special=True)

    # ---- evaluation -------------------------------------------------------------------------

    def _context(self, n_ctx: int, n_batch: int):
        n_ctx = -(-n_ctx // 256) * 256  # llama.cpp pads n_ctx to 256 anyway; reuse contexts
        key = (n_ctx, n_batch)
        if self._ctx is not None and self._ctx_key == key:
            L.llama_memory_clear(L.llama_get_memory(self._ctx), True)
            return self._ctx
        if self._ctx is not None:
            L.llama_free(self._ctx)
            self._ctx = None
        cparams = L.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = 1
        cparams.n_threads = self.n_threads
        cparams.n_threads_batch = self.n_threads
        cparams.type_k = _KV_TYPES[self.kv_type]
        cparams.type_v = _KV_TYPES[self.kv_type]
        cparams.flash_attn_type = (L.LLAMA_FLASH_ATTN_TYPE_ENABLED if self.flash_attn
                                   else L.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        cparams.no_perf = True
        ctx = L.llama_init_from_model(self.model, cparams)
        if not ctx:
            raise RuntimeError(f"llama.cpp could not create a context (n_ctx={n_ctx})")
        self._ctx, self._ctx_key = ctx, key
        return ctx

    def _decode(self, ctx, tokens: list[int], pos0: int, want_logits) -> None:
        """Decode `tokens` at positions pos0.. in one batch; want_logits(pos) -> bool."""
        n = len(tokens)
        batch = L.llama_batch_init(n, 0, 1)
        try:
            for i, tok in enumerate(tokens):
                batch.token[i] = tok
                batch.pos[i] = pos0 + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1 if want_logits(pos0 + i) else 0
            batch.n_tokens = n
            rc = L.llama_decode(ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode failed ({rc})")
        finally:
            L.llama_batch_free(batch)

    def _logits_row(self, ctx, i: int) -> np.ndarray:
        ptr = L.llama_get_logits_ith(ctx, i)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def _prefill(self, ctx, ids: list[int], n_batch: int) -> np.ndarray:
        """Evaluate ids from position 0; return the logits of the last one."""
        last = len(ids) - 1
        for start in range(0, len(ids), n_batch):
            part = ids[start:start + n_batch]
            self._decode(ctx, part, start, lambda p: p == last)
        return self._logits_row(ctx, -1)

    def last_logits(self, prompt: str | None = None, ids: list[int] | None = None,
                    n_batch: int = 512) -> np.ndarray:
        """float32[n_vocab] logits of the last prompt token (what `--logits-out` writes)."""
        if ids is None:
            ids = self.prompt_ids(prompt or "")
        if not ids:
            raise ValueError("empty prompt and the model adds no BOS: nothing to evaluate")
        ctx = self._context(len(ids), n_batch)
        return self._prefill(ctx, ids, n_batch)

    def greedy(self, prompt: str = "", n_predict: int = 32, ids: list[int] | None = None,
               stop_at_eog: bool = True, n_batch: int = 512) -> Generation:
        """Greedy continuation by argmax (lowest id wins ties, as np.argmax does).

        Like llama.cpp's examples, generation stops *before* an end-of-generation token
        (EOS/EOT/<|im_end|>...): it is reported in eog_id but not part of ids or text."""
        if ids is None:
            ids = self.prompt_ids(prompt)
        if not ids:
            raise ValueError("empty prompt and the model adds no BOS: nothing to evaluate")
        ctx = self._context(len(ids) + n_predict, n_batch)
        logits = self._prefill(ctx, ids, n_batch)
        out: list[int] = []
        text = b""
        pos = len(ids)
        for _ in range(n_predict):
            tok = int(np.argmax(logits))
            if stop_at_eog and self.is_eog(tok):
                return Generation(list(ids), out, text, True, tok)
            out.append(tok)
            text += self.piece(tok, special=False)
            if len(out) == n_predict:
                break
            self._decode(ctx, [tok], pos, lambda p: True)
            logits = self._logits_row(ctx, -1)
            pos += 1
        return Generation(list(ids), out, text, False)

    def perplexity(self, text: str | bytes, n_ctx: int = 512, n_chunks: int = -1,
                   strip_one_newline: bool = True) -> Perplexity:
        """llama.cpp's perplexity tool, step for step (tools/perplexity/perplexity.cpp,
        perplexity() with ppl_stride == 0):
          * `-f` drops one trailing '\\n' from the file (common/arg.cpp);
          * tokenize the whole text with add_special=true, parse_special=false;
          * need >= 2*n_ctx tokens; n_chunk = min(n_chunks, n_tokens / n_ctx), non-overlapping;
          * each chunk is evaluated from an empty KV cache, its first token replaced by BOS
            when the vocab adds BOS;
          * first = n_ctx/2; logits at positions first .. n_ctx-2 score the next token
            (n_ctx - first - 1 tokens per chunk);
          * nll_i = max + log(sum exp(l - max)) - l[tok]  (float max/exp, double sum/log);
          * PPL = exp(mean nll); stderr = sqrt((mean(nll^2) - mean^2)/(count-1)) * PPL.
        """
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        if strip_one_newline and data.endswith(b"\n"):
            data = data[:-1]
        if self.add_eos:
            raise RuntimeError("perplexity: llama.cpp asserts the vocab does not add EOS")
        tokens = self.tokenize(data, add_special=True, parse_special=False)
        if len(tokens) < 2 * n_ctx:
            raise ValueError(f"need at least {2 * n_ctx} tokens for n_ctx={n_ctx}, "
                             f"the text has {len(tokens)}")
        n_chunk_max = len(tokens) // n_ctx
        n_chunk = n_chunk_max if n_chunks < 0 else min(n_chunks, n_chunk_max)
        first = n_ctx // 2
        ctx = self._context(n_ctx, n_ctx)
        nll = 0.0
        nll2 = 0.0
        count = 0
        chunk_ppl = []
        for i in range(n_chunk):
            start = i * n_ctx
            chunk = tokens[start:start + n_ctx]
            if self.add_bos:
                chunk[0] = self.bos
            L.llama_memory_clear(L.llama_get_memory(ctx), True)
            self._decode(ctx, chunk, 0, lambda p: p >= first)
            # outputs are the rows for positions first .. n_ctx-1, in order
            ptr = L.llama_get_logits_ith(ctx, first)
            rows = np.ctypeslib.as_array(ptr, shape=(n_ctx - first, self.n_vocab))
            targets = np.asarray(tokens[start + first + 1:start + n_ctx], dtype=np.int64)
            v = _nll_rows(rows[:n_ctx - first - 1], targets)
            nll += float(v.sum())
            nll2 += float((v * v).sum())
            count += n_ctx - first - 1
            chunk_ppl.append(math.exp(nll / count))
        mean = nll / count
        var = nll2 / count - mean * mean
        ppl = math.exp(mean)
        stderr = math.sqrt(var / (count - 1)) * ppl if var > 0 else float("nan")
        return Perplexity(ppl, stderr, len(tokens), n_chunk, n_ctx, count, chunk_ppl)


# llama-quantize's type names (its command line) -> llama_ftype.
QUANT_FTYPES = {
    "q8_0": L.LLAMA_FTYPE_MOSTLY_Q8_0,
    "q4_0": L.LLAMA_FTYPE_MOSTLY_Q4_0,
    "q4_1": L.LLAMA_FTYPE_MOSTLY_Q4_1,
    "q5_0": L.LLAMA_FTYPE_MOSTLY_Q5_0,
    "q5_1": L.LLAMA_FTYPE_MOSTLY_Q5_1,
    "q4_k_s": L.LLAMA_FTYPE_MOSTLY_Q4_K_S,
    "q4_k_m": L.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "q5_k_m": L.LLAMA_FTYPE_MOSTLY_Q5_K_M,
    "q6_k": L.LLAMA_FTYPE_MOSTLY_Q6_K,
    "f16": L.LLAMA_FTYPE_MOSTLY_F16,
}


def quantize(src: str | Path, dst: str | Path, ftype: str, n_threads: int = 1,
             pure: bool = False) -> Path:
    """llama.cpp's own quantiser (llama-quantize: llama_model_quantize) from an F32 / F16 GGUF:
    its per-tensor type rules unless `pure` (4-bit types: the output Q6_K; Q4_K_M: attn_v /
    ffn_down of some layers Q6_K; files with exactly 8 experts (Mixtral): attn_k / attn_v Q8_0;
    ffn_gate_inp routers and 1-D tensors stay F32). Written to dst via a temporary name, so a partial file never appears
    under dst."""
    _init_backend()
    if ftype not in QUANT_FTYPES:
        raise ValueError(f"quantize: unknown type {ftype!r} (expected one of "
                         f"{', '.join(QUANT_FTYPES)})")
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".tmp")
    params = L.llama_model_quantize_default_params()
    params.ftype = QUANT_FTYPES[ftype]
    params.nthread = n_threads
    params.pure = pure
    rc = L.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
    if rc != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"llama_model_quantize({src} -> {ftype}) failed ({rc})")
    tmp.replace(dst)
    return dst


def _nll_rows(rows: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(rows)[targets] with llama.cpp's precision choices (log_softmax())."""
    rows = np.asarray(rows, dtype=np.float32)
    mx = rows.max(axis=1, keepdims=True)                          # float
    sum_exp = np.exp(rows - mx).astype(np.float64).sum(axis=1)    # expf, summed in double
    idx = np.arange(len(targets))
    diff = (rows[idx, targets] - mx[:, 0]).astype(np.float64)     # float subtraction
    return -(diff - np.log(sum_exp))


# ---- CLI ------------------------------------------------------------------------------------

def _read_text(args) -> bytes:
    if args.file:
        return Path(args.file).read_bytes()
    return (args.prompt or "").encode("utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["run", "tokenize", "perplexity", "info"])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-p", "--prompt", default="")
    ap.add_argument("-f", "--file")
    ap.add_argument("-n", "--n-predict", type=int, default=32)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-c", "--ctx-size", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=-1)
    ap.add_argument("--ids", action="store_true", help="run: print generated ids, one a line")
    ap.add_argument("--logits-out", help="run: write last-prompt-token logits (raw f32 LE)")
    ap.add_argument("--no-bos", action="store_true",
                    help="tokenize: add_special=false, parse_special=false")
    ap.add_argument("--kv-type", choices=sorted(_KV_TYPES), default="f16")
    ap.add_argument("--flash-attn", action="store_true")
    ap.add_argument("--json", action="store_true", help="print a JSON result instead")
    args = ap.parse_args(argv)

    with LlamaRef(args.model, n_threads=args.threads, kv_type=args.kv_type,
                  flash_attn=args.flash_attn) as ref:
        if args.command == "info":
            print(json.dumps({"llama_cpp_python": llama_cpp_version(), "n_vocab": ref.n_vocab,
                              "bos": ref.bos, "eos": ref.eos, "add_bos": ref.add_bos,
                              "add_eos": ref.add_eos, "n_ctx_train": ref.n_ctx_train}, indent=1))
        elif args.command == "tokenize":
            data = _read_text(args)
            ids = ref.tokenize(data, add_special=not args.no_bos, parse_special=not args.no_bos)
            print(json.dumps(ids) if args.json else "\n".join(map(str, ids)))
        elif args.command == "run":
            prompt = _read_text(args).decode("utf-8")
            ids = ref.prompt_ids(prompt)
            if args.logits_out:
                ref.last_logits(ids=ids).astype("<f4").tofile(args.logits_out)
            gen = ref.greedy(ids=ids, n_predict=args.n_predict)
            if args.json:
                print(json.dumps({"prompt_ids": gen.prompt_ids, "ids": gen.ids, "text": gen.text,
                                  "stopped_at_eog": gen.stopped_at_eog, "eog_id": gen.eog_id}))
            elif args.ids:
                for t in gen.ids:
                    print(t)
            else:
                sys.stdout.buffer.write(gen.text_bytes)
                sys.stdout.flush()
        elif args.command == "perplexity":
            if not args.file:
                ap.error("perplexity needs -f FILE")
            res = ref.perplexity(Path(args.file).read_bytes(), n_ctx=args.ctx_size,
                                 n_chunks=args.chunks)
            if args.json:
                print(json.dumps(res.__dict__))
            else:
                print("".join(f"[{i + 1}]{p:.4f}," for i, p in enumerate(res.chunk_ppl)))
                print(res.final_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
