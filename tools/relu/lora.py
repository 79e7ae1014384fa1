#!/usr/bin/env python3
"""LoRA adapters of relufy (tools/relu/relufy.py --lora): low-rank deltas on every linear layer of
a llama-arch model, stored as llama.cpp's LoRA GGUF and merged into a base GGUF.

    W' = W + (alpha / r) * B @ A        A [r, n_in], B [n_out, r]

File format: llama.cpp's (convert_lora_to_gguf.py): general.architecture = the base's,
general.type = "adapter", adapter.type = "lora", adapter.lora.alpha (float32); tensors
"<base tensor name>.lora_a" (ggml ne [n_in, r]) and ".lora_b" (ne [r, n_out]), F16 here. The
adapter is split by layers into shards of at most --max-shard-mib (each shard a valid adapter
file with some of the layers), listed with their sha256 in a manifest (JSON) beside them.

The merge is the one place the delta is formed, in float64 from the F16 factors and rounded once
to float32 (then to F16 if asked), so relufy's own output and `lora.py merge` give the same file.

    python3 tools/relu/lora.py merge --base BASE.gguf --adapter ADAPTER.json -o OUT.gguf \\
        [--name NAME] [--out-type f16|f32]

writes OUT.gguf: BASE's metadata and tensors with the deltas added, general.name = NAME and
hotcold.ffn_activation = "relu" (the adapter was trained for ReGLU), after checking every shard
against the manifest's checksum.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_file import import_gguf, read_gguf, write_gguf  # noqa: E402

LINEAR = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def targets(n_layer: int) -> list[str]:
    """The weights an adapter covers: every linear layer of every block."""
    return [f"blk.{il}.{k}.weight" for il in range(n_layer) for k in LINEAR]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_adapter(prefix: Path, factors: dict[str, tuple[np.ndarray, np.ndarray]], alpha: float,
                  arch: str = "llama", max_shard_mib: float = 16.0, meta: dict | None = None) -> Path:
    """Writes prefix-0000K-of-0000N.gguf shards (whole layers each, F16 factors) and prefix.json,
    the manifest (rank, alpha, shards with sha256 and their tensors, meta); returns its path."""
    gguf = import_gguf()
    names = sorted(factors, key=lambda n: (int(n.split(".")[1]), LINEAR.index(n.split(".")[2])))
    ranks = {factors[n][0].shape[0] for n in names}
    if len(ranks) != 1:
        raise ValueError(f"adapter ranks differ: {sorted(ranks)}")
    limit = int(max_shard_mib * (1 << 20)) - (1 << 16)  # room for the header
    layers: dict[int, list[str]] = {}
    for n in names:
        layers.setdefault(int(n.split(".")[1]), []).append(n)
    shards: list[list[str]] = [[]]
    size = 0
    for il in sorted(layers):
        b = sum(2 * (factors[n][0].size + factors[n][1].size) for n in layers[il])
        if b > limit:
            raise ValueError(f"layer {il}'s factors ({b} bytes) exceed a shard of {max_shard_mib} MiB")
        if shards[-1] and size + b > limit:
            shards.append([])
            size = 0
        shards[-1].extend(layers[il])
        size += b
    prefix.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for k, group in enumerate(shards):
        path = prefix.parent / f"{prefix.name}-{k + 1:05d}-of-{len(shards):05d}.gguf"
        wr = gguf.GGUFWriter(str(path), arch=arch)
        wr.add_string("general.type", "adapter")
        wr.add_string("adapter.type", "lora")
        wr.add_float32("adapter.lora.alpha", float(alpha))
        for n in group:
            a, b = factors[n]
            wr.add_tensor(n + ".lora_a", np.ascontiguousarray(a, dtype=np.float16))
            wr.add_tensor(n + ".lora_b", np.ascontiguousarray(b, dtype=np.float16))
        wr.write_header_to_file()
        wr.write_kv_data_to_file()
        wr.write_tensors_to_file()
        wr.close()
        out.append({"file": path.name, "sha256": sha256(path), "bytes": path.stat().st_size,
                    "tensors": group})
    manifest = prefix.parent / f"{prefix.name}.json"
    manifest.write_text(json.dumps({"format": "llama.cpp LoRA GGUF (F16 factors)",
                                    "rank": ranks.pop(), "alpha": float(alpha), "shards": out,
                                    "meta": meta or {}}, indent=1) + "\n")
    return manifest


def read_adapter(manifest: Path) -> tuple[float, int, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """alpha, rank and {weight name: (A, B)} (float16 arrays) of a manifest's shards, each checked
    against its sha256; a missing or changed shard is an error naming it."""
    gguf = import_gguf()
    m = json.loads(manifest.read_text())
    factors: dict[str, list] = {}
    for s in m["shards"]:
        path = manifest.parent / s["file"]
        if not path.exists():
            raise FileNotFoundError(f"{manifest}: shard {path} is missing")
        got = sha256(path)
        if got != s["sha256"]:
            raise ValueError(f"{path}: sha256 {got}, the manifest says {s['sha256']}")
        r = gguf.GGUFReader(str(path))
        kind = r.fields.get("adapter.type")
        if kind is None or kind.contents() != "lora":
            raise ValueError(f"{path}: not a LoRA adapter (adapter.type {kind and kind.contents()!r})")
        for t in r.tensors:
            shape = [int(x) for x in reversed(t.shape)]
            arr = np.array(t.data, dtype=np.float16).reshape(shape)
            base, part = t.name.rsplit(".", 1)
            slot = factors.setdefault(base, [None, None])
            slot[0 if part == "lora_a" else 1] = arr
    out = {}
    for n, (a, b) in factors.items():
        if a is None or b is None or a.shape[0] != b.shape[1]:
            raise ValueError(f"{manifest}: {n} lacks a factor or its ranks disagree")
        out[n] = (a, b)
    return float(m["alpha"]), int(m["rank"]), out


def low_rank_product(b: np.ndarray, a: np.ndarray) -> np.ndarray:
    """B @ A in float64, summed over the rank in index order, one exactly rounded product and one
    exactly rounded add per term: the same bits on every machine and numpy (a BLAS matmul may
    block or fuse the sum differently per CPU, and setup checks the merged file's sha256)."""
    b64 = b.astype(np.float64)
    a64 = a.astype(np.float64)
    out = np.zeros((b64.shape[0], a64.shape[1]), dtype=np.float64)
    term = np.empty_like(out)
    for r in range(a64.shape[0]):
        np.multiply(b64[:, r:r + 1], a64[r:r + 1, :], out=term)
        out += term
    return out


def merge(weights: dict[str, np.ndarray], factors: dict, alpha: float, rank: int) -> None:
    """weights[n] += (alpha / rank) * B @ A for every adapted weight, in float64, rounded once."""
    scale = alpha / rank
    for n, (a, b) in factors.items():
        if n not in weights:
            raise KeyError(f"adapter weight {n} is not in the base model")
        w = weights[n]
        if b.shape[1] != a.shape[0] or (b.shape[0], a.shape[1]) != w.shape:
            raise ValueError(f"{n}: delta {(b.shape[0], a.shape[1])}, weight {w.shape}")
        delta = low_rank_product(b, a)
        weights[n] = (w.astype(np.float64) + scale * delta).astype(np.float32)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    mp = sub.add_parser("merge", help="merge an adapter into a base GGUF")
    mp.add_argument("--base", type=Path, required=True)
    mp.add_argument("--adapter", type=Path, required=True, help="the adapter's manifest (.json)")
    mp.add_argument("-o", "--output", type=Path, required=True)
    mp.add_argument("--name", default=None, help="general.name (default: the output's stem)")
    mp.add_argument("--out-type", choices=("f16", "f32"), default="f16")
    a = p.parse_args(argv)
    _, weights, reader = read_gguf(a.base)
    alpha, rank, factors = read_adapter(a.adapter)
    merge(weights, factors, alpha, rank)
    write_gguf(a.output, reader, weights, a.name or a.output.stem, a.out_type)
    print(f"lora.py: wrote {a.output} ({len(factors)} weights adapted, rank {rank}, alpha {alpha})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
