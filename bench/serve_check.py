#!/usr/bin/env python3
"""Hybrid serving check: `hotcold serve` with device flags answers what `hotcold run` does.

Starts `hotcold serve -m MODEL --parallel P -c (P x CTX) FLAGS...` on a free port, sends every
prompt at once as a greedy /v1/completions request (the slots decode together), runs
`hotcold run -m MODEL -p PROMPT -n N --temp 0 -c CTX --decode-kernels fast FLAGS...` for each
prompt (serve's default decode kernels, unless FLAGS name --decode-kernels), and compares the
texts. Prints one JSON object: {"equal": bool, "requests": n, "errors": n,
"tokens_per_s": generated tokens / wall time of the concurrent requests, "device_kv_mib": ...,
"device_neuron_share": ..., "mismatches": [...]}. Exit status 0 when every text matched, 1
otherwise, 2 on a usage error. Uses only the standard library (runs on the GPU machine).

  bench/serve_check.py --bin build/hotcold -m MODEL [--parallel 2] [--ctx 512] [-n 16]
                       [--prompt TEXT ...] -- FLAGS...     (e.g. --device cuda -ngl 99)
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

DEFAULT_PROMPTS = ["Once upon a time, there was a little", "The capital of France is",
                   "def fibonacci(n):"]


def start_server(cmd: list[str], timeout: float = 300.0):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            errors="replace")
    lines: list[str] = []
    url: list[str] = []
    ready = threading.Event()

    def pump():
        for line in proc.stderr:
            lines.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m and not url:
                url.append(m.group(1).rstrip("/"))
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    ready.wait(timeout)
    if not url:
        proc.kill()
        raise RuntimeError("server did not start:\n" + "".join(lines))
    return proc, url[0], lines


def post(url: str, body: dict, timeout: float = 600.0) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def metric(url: str, name: str) -> float | None:
    with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
        m = re.search(rf"^{re.escape(name)} (\S+)$", r.read().decode(), re.M)
    return float(m.group(1)) if m else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/hotcold")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=512, help="context per slot (run's -c)")
    ap.add_argument("-n", "--n-predict", type=int, default=16)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    ap.add_argument("flags", nargs="*", help="device / sparse flags for both (after --)")
    a = ap.parse_args()
    prompts = a.prompt or DEFAULT_PROMPTS
    flags = [str(f) for f in a.flags]
    # serve's default decode kernels (block sums, docs/SERVER.md) unless the flags name others.
    run_kernels = [] if "--decode-kernels" in flags else ["--decode-kernels", "fast"]
    serve = [a.bin, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", "0", "-t",
             str(a.threads), "--parallel", str(a.parallel), "-c", str(a.parallel * a.ctx), *flags]
    proc, url, log = start_server(serve)
    out = {"equal": False, "requests": len(prompts), "errors": 0, "mismatches": []}
    try:
        def one(p):
            return post(url + "/v1/completions",
                        {"prompt": p, "max_tokens": a.n_predict, "temperature": 0})
        t0 = time.perf_counter()
        with ThreadPoolExecutor(len(prompts)) as ex:
            results = list(ex.map(lambda p: _safe(one, p), prompts))
        wall = time.perf_counter() - t0
        n_gen = sum(r["usage"]["completion_tokens"] for r in results if "usage" in r)
        out["errors"] = sum(1 for r in results if "usage" not in r)
        out["tokens_per_s"] = round(n_gen / wall, 2) if wall > 0 else None
        kv = metric(url, "hotcold_device_kv_cache_bytes")
        out["device_kv_mib"] = round(kv / 2**20, 2) if kv is not None else None
        out["device_neuron_share"] = metric(url, "hotcold_fast_device_neuron_share")
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    for p, r in zip(prompts, results):
        # run prints the model's bytes as they are; the server's text is complete UTF-8 with
        # U+FFFD for bytes that can never be (a random model's output may contain them).
        want = subprocess.run([a.bin, "run", "-m", a.model, "-p", p, "-n", str(a.n_predict),
                               "--temp", "0", "-c", str(a.ctx), "-t", str(a.threads), *run_kernels,
                               *flags],
                              capture_output=True, text=True, errors="replace", timeout=600)
        got = r.get("choices", [{}])[0].get("text")
        if want.returncode != 0 or got != want.stdout.removesuffix("\n"):
            out["mismatches"].append({"prompt": p, "serve": got, "run": want.stdout,
                                      "run_rc": want.returncode, "error": r.get("error")})
    out["equal"] = not out["mismatches"] and out["errors"] == 0
    print(json.dumps(out))
    return 0 if out["equal"] else 1


def _safe(fn, p):
    try:
        return fn(p)
    except Exception as e:  # reported, not raised: the check goes on
        return {"error": str(e)}


if __name__ == "__main__":
    sys.exit(main())
