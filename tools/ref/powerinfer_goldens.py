#!/usr/bin/env python3
"""PowerInfer reference numbers for tests/reference/test_powerinfer_parity.py.

CI cannot build or download PowerInfer, so its results on a fixed set of hc-synth-model fixtures
are committed as tests/reference/powerinfer_goldens.json; this script regenerates that file
(stdlib only):

    tools/ref/powerinfer_goldens.py --synth build/hc-synth-model [--out FILE] [--no-build]

Steps: tools/ref/powerinfer_build.sh (PowerInfer at commit d3ebd7c, CPU only, into
${HOTCOLD_CACHE:-~/.cache/hotcold}/powerinfer; skipped when already built, or with --no-build),
then for every fixture of FIXTURES: hc-synth-model writes it (deterministic: same arguments,
same bytes; its sha256 is recorded so the test notices a changed generator), PowerInfer's
`perplexity` scores a slice of WikiText-2 test (../shared) and its `main` continues PROMPTS
greedily. Every PowerInfer command runs --repeat times (default 2) and must give identical
results. PowerInfer runs with -t 1: ggml's sparse down projection
(ggml_compute_forward_mul_mat_axpy) adds each thread's partial sums into the output without a
lock, and with -t 2 identical runs of a PWRI file gave perplexities 0.1% apart.

What PowerInfer's CPU build needs to run a PWRI file: nothing beyond the file. Without CUDA
llm_load_gpu_split skips the GPU index (.gpuidx / .generated.gpuidx, the `activation`
directory and the python solver are CUDA-only) and llama_model_offload_ffn_split gives every
layer an all-zero gpu_idx (every neuron on the CPU). The predictor threshold is the file's
powerinfer.sparse_threshold unless LLAMA_SPARSE_PRED_THRESHOLD is set, which this script
removes from PowerInfer's environment. Supported PWRI weight types on the CPU: F16 and Q4_0
only (the sparse down projection reads other types' rows as F16; a Q8_0 PWRI file segfaults),
and n_ff must exceed 1000: below that ggml.c picks ggml_compute_forward_mul_mat_sparse_head,
which ignores the threshold and indexes one predictor value per 128 neurons of the first token.

Greedy decoding: `main --temp 0` (llama_sample_token_greedy: argmax, lowest id on ties) with the
repetition penalty off (--repeat-last-n 0 --repeat-penalty 1); the ids come from the YAML log
main writes with --logdir (prompt_tokens, output_tokens). main tokenizes its prompt with
special-token parsing on, which in this llama.cpp adds no leading space (llama_tokenize_internal,
LLAMA_VOCAB_TYPE_SPM), unlike `perplexity` and hotcold: main is given " " + prompt so both
see the same ids (the test checks hotcold's tokenization against prompt_tokens). main lists an
end-of-text token it samples; hotcold stops before it, so a trailing EOS is dropped here.
main prints no logits: powerinfer_margins (tools/ref/powerinfer_margins.cpp, built with
PowerInfer) replays each continuation through PowerInfer's libllama and records the gap
between the two largest logits before every generated token (top2_gap); its argmax must be
main's token at every step. The test uses the gap to tell a near-tie flipped by rounding from
a real difference where hotcold's greedy tokens leave PowerInfer's.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("HOTCOLD_SHARED", ROOT.parent / "shared"))
CACHE = Path(os.environ.get("HOTCOLD_CACHE", Path.home() / ".cache" / "hotcold"))
MIRROR = "/work/.mirror/SJTU-IPADS+PowerInfer/repo"

# Every fixture: tiny shape (n_embd 256, 4/2 heads, synthetic 512-token vocabulary) with
# n_ff 1024 (> 1000: PowerInfer's real sparse kernels, see above), 3 layers, norm weights
# 1 +- 0.25 (with all-ones norms a predictor fed the normed or the un-normed FFN input makes the
# same decisions at threshold 0: relu(fc1 . x) is positively homogeneous), seed 1. OPT has 4/4
# heads (no head_count_kv: n_head_kv = n_head) and 2050 learned positions, biases N(0, 0.05^2).
COMMON = ["--shape", "tiny", "--n-ff", "1024", "--layers", "3", "--norm-jitter", "0.25",
          "--seed", "1", "-t", "2"]
# PWRI files come with two kinds of predictors (hc-synth-model --pred-kind):
#   rand  random, rank 64: about half the neurons predicted, unrelated to their gates, so
#         firing neurons are dropped and non-firing ones computed. Many logits lie near the
#         threshold, which makes the model a discontinuous function of its input: computing h
#         in F32 instead of F16 inside PowerInfer's own down projection moves its logits by up
#         to 0.14 (F16) / 0.69 (Q4_0) and its perplexity by up to 0.13%.
#   gate  exact, built from ffn_norm and ffn_gate (logit = rms(x) * gate): PowerInfer then
#         computes the dense ReLU / dReLU FFN, with the dense model's numerical noise; fed the
#         normed FFN input instead of PowerInfer's un-normed one, such a predictor misses many
#         firing neurons (norm weights are not 1). Falcon: built from attn_norm (LayerNorm,
#         its bias 0 in these files) and ffn_up, logit = std(x) * up(attn_norm(x)), fed the
#         layer input x (build_falcon: the predictor reads inpL), rank 2 n_embd + 64; PowerInfer
#         computes the dense ReLU falcon FFN relu(up(attn_norm(x))). OPT: the same construction
#         from ffn_norm and ffn_up (both biases 0 in these files), fed ffn_inp = x + attention
#         (build_opt), logit = std(ffn_inp) * up(ffn_norm(ffn_inp)).
# PowerInfer's quantize makes a Q4_0 model's predictors Q4_0 too; F16 files have F16 ones (its
# converter).
RAND = ["--powerinfer", "--pred-kind", "random", "--pred-rank", "64"]
GATE = ["--powerinfer", "--pred-kind", "gate"]
# name: (hc-synth-model arguments, the fixture with the same weights in the dense layout or
# None). F16 transposes exactly, so the PWRI file's ffn_down_t is the dense file's ffn_down:
# hotcold's dense FFN on the PWRI file must match PowerInfer on its dense twin. (Quantised
# twins differ: the transpose is quantised along the other axis.)
FIXTURES: dict[str, tuple[list[str], str | None]] = {}
for _arch in ("llama", "bamboo", "falcon", "opt"):
    _a = ["--arch", _arch] if _arch != "llama" else []
    # PowerInfer d3ebd7c runs no dense falcon file: build_falcon's dense branch multiplies by
    # layer.ffn_down_t, which only a PWRI file has (segfault), and applies ReLU, not GELU.
    # OPT runs dense too (hc-synth-model --arch opt without --powerinfer: llm_load_tensors
    # binds ffn_down and its bias, build_opt's dense branch uses them).
    for _t in ("f16", "q8_0", "q4_0") if _arch != "falcon" else ():
        FIXTURES[f"{_arch}-{_t}"] = (_a + ["--type", _t], None)
    for _kind, _args in (("rand", RAND), ("gate", GATE)):
        for _t in ("f16", "q4_0"):  # PowerInfer's CPU sparse kernels take no other type
            FIXTURES[f"{_arch}-pwri-{_kind}-{_t}"] = (
                _a + ["--type", _t] + _args + ["--pred-type", _t],
                f"{_arch}-f16" if (_kind, _t) == ("rand", "f16") and _arch in ("bamboo", "opt")
                else None)

TEXT = {"path": "data/wikitext-2/wiki.test.raw", "bytes": 4096}  # ~3000 tokens of this vocab
PPL = {"ctx": 256, "chunks": 4, "batch": 512}
PROMPTS = [
    "Once upon a time",
    "The meaning of life is",
    "Robert Boulter is an English film , television and theatre actor .",
]
GREEDY = {"n_predict": 24, "seed": 1, "ctx": 512, "batch": 512}
# PowerInfer runs on one thread: with more, its sparse down projection races (each thread adds
# its partial sums into the shared output without a lock, ggml.c
# ggml_compute_forward_mul_mat_axpy), and a PWRI perplexity measured with -t 2 moved by 0.1%
# between identical runs. With one thread every run is bitwise the same.
THREADS = 1
EOS = 2  # the synthetic vocabulary's </s>


T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"powerinfer_goldens: [{time.monotonic() - T0:6.1f} s] {msg}", file=sys.stderr,
          flush=True)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run(cmd: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        err = p.stderr.decode("utf-8", "replace")[-3000:]
        raise SystemExit(f"exit status {p.returncode}: {' '.join(cmd)}\n{err}")
    return p


def shown(cmd: list[str], work: Path) -> list[str]:
    """A command as recorded: PowerInfer's binaries as powerinfer/bin/NAME (under the cache),
    paths inside the work directory by file name."""
    out = []
    for a in cmd:
        if a.startswith(str(CACHE / "powerinfer" / "bin") + os.sep):
            a = "powerinfer/bin/" + Path(a).name
        elif a.startswith(str(work) + os.sep):
            a = a[len(str(work)) + 1:]
        out.append(a)
    return out


def dump(obj) -> str:
    """JSON with one line per flat list (token ids, arguments, chunk values): short diffs."""
    text = json.dumps(obj, indent=1, ensure_ascii=False)
    return re.sub(r"\[[^\[\]{}]*\]", lambda m: re.sub(r"\s*\n\s*", " ", m.group(0))
                  .replace("[ ", "[").replace(" ]", "]"), text) + "\n"


# ---- PowerInfer -------------------------------------------------------------------------------

def pi_env() -> dict:
    env = dict(os.environ)
    env.pop("LLAMA_SPARSE_PRED_THRESHOLD", None)
    return env


_CHUNK = re.compile(rb"\[(\d+)\]([-+0-9.eEnaif]+),")
_FINAL = re.compile(rb"Final estimate: PPL = ([0-9.eE+-]+) \+/- ([0-9.eE+-]+)")


def pi_perplexity(bin_dir: Path, model: Path, text: Path, work: Path) -> dict:
    cmd = [str(bin_dir / "perplexity"), "-m", str(model), "-f", str(text),
           "-c", str(PPL["ctx"]), "-b", str(PPL["batch"]), "--chunks", str(PPL["chunks"]),
           "-t", str(THREADS)]
    p = run(cmd, work, pi_env())
    final = _FINAL.search(p.stdout)
    if not final:
        raise SystemExit(f"no 'Final estimate' in the output of {' '.join(cmd)}:\n"
                         f"{p.stdout.decode(errors='replace')[-2000:]}")
    chunks = [float(v) for _, v in _CHUNK.findall(p.stdout)]
    if len(chunks) != PPL["chunks"]:
        raise SystemExit(f"expected {PPL['chunks']} chunk values, found {len(chunks)}")
    return {"command": shown(cmd, work), "ppl": float(final.group(1)),
            "stderr": float(final.group(2)), "chunk_ppl": chunks}


def yaml_ids(text: str, key: str) -> list[int]:
    m = re.search(rf"^{key}: \[([^\]]*)\]", text, re.M)
    if not m:
        raise SystemExit(f"no '{key}' in main's YAML log")
    return [int(v) for v in m.group(1).split(",") if v.strip()]


def pi_greedy(bin_dir: Path, model: Path, prompt: str, work: Path) -> dict:
    with tempfile.TemporaryDirectory(dir=work) as logdir:
        cmd = [str(bin_dir / "main"), "-m", str(model), "-p", " " + prompt,
               "-n", str(GREEDY["n_predict"]), "--temp", "0", "--repeat-last-n", "0",
               "--repeat-penalty", "1.0", "-s", str(GREEDY["seed"]), "-c", str(GREEDY["ctx"]),
               "-b", str(GREEDY["batch"]), "-t", str(THREADS), "--logdir", logdir]
        run(cmd, work, pi_env())
        logs = glob.glob(os.path.join(logdir, "*.yml"))
        if len(logs) != 1:
            raise SystemExit(f"expected one YAML log from main in {logdir}, found {logs}")
        log = Path(logs[0]).read_bytes().decode("utf-8", "replace")
    ids = yaml_ids(log, "output_tokens")
    prompt_ids = yaml_ids(log, "prompt_tokens")
    eos = bool(ids) and ids[-1] == EOS
    gaps = pi_margins(bin_dir, model, prompt_ids, ids, work)
    return {"prompt": prompt, "powerinfer_prompt": " " + prompt,
            "command": shown(cmd[:-2], work) + ["--logdir", "LOGDIR"],
            "prompt_ids": prompt_ids,
            "ids": ids[:-1] if eos else ids, "stopped_at_eos": eos,
            "top2_gap": gaps[:len(ids) - 1] if eos else gaps[:len(ids)]}


def pi_margins(bin_dir: Path, model: Path, prompt_ids: list[int], ids: list[int],
               work: Path) -> list[float]:
    """PowerInfer's top1 - top2 logit gap before each of `ids` (powerinfer_margins, teacher-
    forced along main's tokens); checks that its argmax is main's token at every step."""
    cmd = [str(bin_dir / "powerinfer_margins"), str(model), str(THREADS), str(GREEDY["ctx"]),
           ",".join(map(str, prompt_ids)), ",".join(map(str, ids))]
    rows = [line.split() for line in run(cmd, work, pi_env()).stdout.decode().splitlines()]
    if len(rows) != len(ids) + 1:
        raise SystemExit(f"powerinfer_margins gave {len(rows)} rows for {len(ids)} tokens")
    for k, tok in enumerate(ids):
        if int(rows[k][1]) != tok:
            raise SystemExit(f"{model.name}: powerinfer_margins' argmax at step {k} is "
                             f"{rows[k][1]}, main generated {tok}")
    return [round(float(r[2]) - float(r[3]), 6) for r in rows[:len(ids)]]


def repeated(what: str, n: int, fn):
    first = fn()
    for _ in range(n - 1):
        again = fn()
        if again != first:
            raise SystemExit(f"{what}: PowerInfer gave different results on identical runs:\n"
                             f"{first}\n{again}")
    return first


def system_info(bin_dir: Path, model: Path, work: Path) -> str:
    """ggml's feature line (AVX2 / AVX512 / ...): what the numbers were computed with."""
    p = run([str(bin_dir / "main"), "-m", str(model), "-p", " a", "-n", "1", "--temp", "0",
             "-t", str(THREADS)], work, pi_env())
    m = re.search(rb"^system_info: (.*)$", p.stderr, re.M)
    return m.group(1).decode().strip() if m else ""


# ---- main -------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--synth",
                    default=os.environ.get("HC_SYNTH_BIN", ROOT / "build" / "hc-synth-model"),
                    help="hc-synth-model binary (default build/hc-synth-model or $HC_SYNTH_BIN)")
    ap.add_argument("--powerinfer-git", default=os.environ.get("POWERINFER_GIT", MIRROR),
                    help="git directory holding PowerInfer (for powerinfer_build.sh)")
    ap.add_argument("--no-build", action="store_true",
                    help="use the PowerInfer already built in the cache")
    ap.add_argument("--out", default=ROOT / "tests" / "reference" / "powerinfer_goldens.json")
    ap.add_argument("--repeat", type=int, default=2,
                    help="runs of every PowerInfer command, which must agree (default 2)")
    ap.add_argument("--work", help="keep the fixtures in this directory (default: a temporary one)")
    args = ap.parse_args()

    if not args.no_build:
        subprocess.run([str(ROOT / "tools" / "ref" / "powerinfer_build.sh"), args.powerinfer_git],
                       check=True)
    bin_dir = CACHE / "powerinfer" / "bin"
    commit_file = bin_dir / "COMMIT"
    if not commit_file.is_file():
        raise SystemExit(f"{commit_file} missing: run tools/ref/powerinfer_build.sh")
    commit = commit_file.read_text().strip()
    synth = Path(args.synth)
    if not synth.is_file():
        raise SystemExit(f"{synth} not found: build the hc-synth-model target or pass --synth")

    tmp = None if args.work else tempfile.TemporaryDirectory(prefix="pi-goldens-")
    work = Path(args.work or tmp.name).resolve()
    work.mkdir(parents=True, exist_ok=True)

    raw = (SHARED / TEXT["path"]).read_bytes()[:TEXT["bytes"]]
    text = work / "wikitext-2-test-head.txt"
    text.write_bytes(raw)

    fixtures = {}
    sysinfo = ""
    for name, (extra, twin) in FIXTURES.items():
        synth_args = COMMON + extra
        model = work / f"{name}.gguf"
        run([str(synth), *synth_args, "-o", str(model)], work)
        data = model.read_bytes()
        if not sysinfo:
            sysinfo = system_info(bin_dir, model, work)
        say(f"{name}: perplexity")
        ppl = repeated(f"{name} perplexity", args.repeat,
                       lambda: pi_perplexity(bin_dir, model, text, work))
        greedy = []
        for prompt in PROMPTS:
            say(f"{name}: greedy {prompt!r}")
            greedy.append(repeated(f"{name} greedy {prompt!r}", args.repeat,
                                   lambda: pi_greedy(bin_dir, model, prompt, work)))
        fixtures[name] = {
            "synth_args": synth_args,
            "synth_command": " ".join(["hc-synth-model", *synth_args, "-o", model.name]),
            "file": model.name, "bytes": len(data), "sha256": sha256(data),
            "layout": "pwri" if "--powerinfer" in extra else "gguf",
            "predictor": extra[extra.index("--pred-kind") + 1] if "--pred-kind" in extra else None,
            "dense_twin": twin,
            "perplexity": ppl,
            "greedy": greedy,
        }
        say(f"{name}: PPL {ppl['ppl']:.4f}")

    out = {
        "about": "PowerInfer's results on hc-synth-model fixtures, written by "
                 "tools/ref/powerinfer_goldens.py; checked by "
                 "tests/reference/test_powerinfer_parity.py. Do not edit by hand.",
        "powerinfer": {"repo": "SJTU-IPADS/PowerInfer", "commit": commit,
                       "build": "tools/ref/powerinfer_build.sh: Release, LLAMA_CUBLAS=OFF, "
                                "-march=native", "system_info": sysinfo, "threads": THREADS,
                       "runs_per_command": args.repeat},
        "text": {**TEXT, "sha256": sha256(raw), "file": text.name},
        "perplexity_args": PPL,
        "greedy_args": {**GREEDY, "prompts": PROMPTS, "eos": EOS},
        "fixtures": fixtures,
    }
    Path(args.out).write_text(dump(out))
    say(f"wrote {args.out}")
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
