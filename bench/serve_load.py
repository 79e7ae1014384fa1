#!/usr/bin/env python3
"""Load test for `hotcold serve`: N concurrent streaming clients on loopback for a bounded time.

Every stream must end with `data: [DONE]` and carry exactly the greedy text of its prompt
(computed first, one request at a time: decode is batch-invariant, so the text may not depend
on what else runs). The server's resident memory is sampled throughout and must stay bounded.

  bench/serve_load.py -m MODEL.gguf [--bin build/hotcold] [--clients 32] [--duration 30]
                      [--parallel 8] [--max-tokens 32] [--json OUT.json] [-- SERVE FLAGS]

Flags after `--` go to `hotcold serve` as they are (a hybrid placement: `-- -ngl 12 --device
cpu`, `-- --sparsity 0.6 --stats F --device cpu --plan P`).

Prints requests/s, generated tokens/s, latency and time-to-first-token percentiles, and RSS.
Exit status 1 if any request failed, any stream was incomplete or wrong, or RSS grew more
than --max-rss-growth-mib between the end of the warm-up and the end of the run.

  bench/serve_load.py -m MODEL.gguf --repeat-prompt 1000 [--rounds 3] [--max-repeat-ratio 0.3]

--llama-server PATH (or --llama-server native: scripts/build_llama_cpp.sh's build) runs the same
load against llama.cpp's llama-server on the same file (same slots, context, threads; its
prompt cache on, as by default): the ratio of the two runs' tok/s is the comparison. llama-server
is not batch-invariant, so its streams are checked for completeness only (outputs that differ
from its own one-at-a-time text are counted, not failed).

The prompt cache instead: one client sends a prompt of that many tokens (WikiText-2 text, as
token ids), then the same prompt again, then the same prompt with a different last sentence
(a chat's next turn), each streamed, one at a time, in --rounds rounds with other prompts in
between; prints each request's time to first token and the second / first ratio (median over
rounds). Exit status 1 if the outputs of the first two differ or the median ratio is above
--max-repeat-ratio.
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

PROMPTS = [
    "The capital of France is", "Once upon a time, there was a little", "def fibonacci(n):",
    "The three primary colors are", "In the beginning of the universe,", "My favourite food is",
    "The best way to learn a language is", "import numpy as np\n",
]


def rss_mib(pid):
    try:
        m = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
        return int(m.group(1)) / 1024 if m else 0.0
    except OSError:
        return 0.0


def start_llama_server(args):
    path = args.llama_server
    if path == "native":
        root = Path(__file__).resolve().parents[1]
        d = subprocess.run(["bash", str(root / "scripts" / "build_llama_cpp.sh")], check=True,
                           capture_output=True, text=True).stdout.strip()
        path = str(Path(d) / "bin" / "llama-server")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [path, "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
           "-np", str(args.parallel), "-c", str(args.parallel * args.ctx_per_slot),
           "-t", str(args.threads), "-tb", str(args.threads), "--no-webui"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc, "127.0.0.1", port
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"llama-server did not start: {' '.join(cmd)}")


def start_server(args):
    if args.llama_server:
        return start_llama_server(args)
    cmd = [args.bin, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", "0",
           "--parallel", str(args.parallel), "-c", str(args.parallel * args.ctx_per_slot),
           "-t", str(args.threads), "--max-queue", str(args.clients), *args.serve_flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.search(r"listening on http://([^:]+):(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, m.group(1), int(m.group(2))
    raise SystemExit(f"server did not start: {' '.join(cmd)}")


def request(host, port, body, stream):
    """Returns (text, finish_reason, completion_tokens, ttft_s, total_s, complete)."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=300)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    if not stream:
        out = json.loads(resp.read())
        conn.close()
        c = out["choices"][0]
        return c["text"], c["finish_reason"], out["usage"]["completion_tokens"], None, time.perf_counter() - t0, True
    text, finish, n_tok, ttft, complete = [], None, None, None, False
    for raw in resp:
        line = raw.decode().rstrip("\n")
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            complete = True
            break
        ev = json.loads(data)
        if "error" in ev:
            raise RuntimeError(f"error event: {ev['error']}")
        if ev.get("usage"):
            n_tok = ev["usage"]["completion_tokens"]
        for c in ev.get("choices", []):
            if c.get("text"):
                if ttft is None:
                    ttft = time.perf_counter() - t0
                text.append(c["text"])
            finish = c.get("finish_reason") or finish
    conn.close()
    if n_tok is None:  # no usage chunk (llama-server): a streamed chunk per token
        n_tok = len(text)
    return "".join(text), finish, n_tok, ttft, time.perf_counter() - t0, complete


def tokenize(host, port, text):
    conn = http.client.HTTPConnection(host, port, timeout=60)
    conn.request("POST", "/tokenize", json.dumps({"content": text, "add_special": True}),
                 {"Content-Type": "application/json"})
    out = json.loads(conn.getresponse().read())
    conn.close()
    return out["tokens"]


def repeat_prompt(args, host, port):
    """The prompt cache: time to first token of a long prompt, of the same prompt again, and of
    its prefix with a new tail (docstring above)."""
    wiki = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikitext-2" / "wiki.test.raw"
    text = wiki.read_text(encoding="utf-8")
    need = (args.rounds * 7 // 4 + 2) * args.repeat_prompt + 64
    ids = tokenize(host, port, text[:need * 8])  # WikiText: ~4 characters per token
    if len(ids) < need:
        raise SystemExit("not enough text for --repeat-prompt")
    rounds, bad = [], False
    base = {"max_tokens": 8, "temperature": 0, "stream": True}
    for r in range(args.rounds):
        # Each round its own text (the previous rounds' prompts are then cached, not this one's).
        start = r * 7 * args.repeat_prompt // 4
        p = ids[start:start + args.repeat_prompt]
        tail = ids[start + args.repeat_prompt:start + args.repeat_prompt + 40]
        first = request(host, port, {**base, "prompt": p}, stream=True)
        again = request(host, port, {**base, "prompt": p}, stream=True)
        turn = request(host, port, {**base, "prompt": p[:-40] + tail}, stream=True)
        if first[:2] != again[:2]:
            print(f"[prefix] round {r + 1}: the repeated prompt's output differs", file=sys.stderr)
            bad = True
        rounds.append({"ttft_first_s": round(first[3], 4), "ttft_repeat_s": round(again[3], 4),
                       "ttft_new_tail_s": round(turn[3], 4),
                       "repeat_ratio": round(again[3] / first[3], 3),
                       "new_tail_ratio": round(turn[3] / first[3], 3)})
        print(f"[prefix] round {r + 1}: {rounds[-1]}", file=sys.stderr, flush=True)
    out = {"prompt_tokens": args.repeat_prompt, "rounds": rounds,
           "median_repeat_ratio": statistics.median(x["repeat_ratio"] for x in rounds),
           "median_new_tail_ratio": statistics.median(x["new_tail_ratio"] for x in rounds)}
    return out, bad or out["median_repeat_ratio"] > args.max_repeat_ratio


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default=str(Path(__file__).resolve().parents[1] / "build" / "hotcold"))
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of load (new requests stop then)")
    ap.add_argument("--parallel", type=int, default=8, help="server slots (--parallel)")
    ap.add_argument("--ctx-per-slot", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--max-rss-growth-mib", type=float, default=24.0)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("serve_flags", nargs="*",
                    help="after --: more flags for hotcold serve (e.g. -ngl 12 --device cpu)")
    ap.add_argument("--llama-server", default="",
                    help="run the load against llama.cpp's llama-server at this path "
                         "('native': scripts/build_llama_cpp.sh's build)")
    ap.add_argument("--repeat-prompt", type=int, default=0,
                    help="prompt-cache check with a prompt of this many tokens (see above)")
    ap.add_argument("--rounds", type=int, default=3, help="--repeat-prompt: rounds")
    ap.add_argument("--max-repeat-ratio", type=float, default=1.0,
                    help="--repeat-prompt: fail above this median second / first ratio")
    args = ap.parse_args()
    if args.llama_server and args.serve_flags:
        ap.error("flags after -- are for hotcold serve, not llama-server: " + " ".join(args.serve_flags))

    proc, host, port = start_server(args)
    if args.repeat_prompt:
        try:
            out, bad = repeat_prompt(args, host, port)
        finally:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(60)
        print(json.dumps(out, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
        sys.exit(1 if bad or rc != 0 else 0)
    try:
        base = {"max_tokens": args.max_tokens, "temperature": 0}
        expected = {}
        for i, p in enumerate(PROMPTS):
            expected[p] = request(host, port, {**base, "prompt": p}, stream=False)[:2]
            print(f"[load] expected output {i + 1}/{len(PROMPTS)}", file=sys.stderr, flush=True)
        rss_warm = rss_mib(proc.pid)

        stop_at = time.perf_counter() + args.duration
        lock = threading.Lock()
        res = {"ok": 0, "errors": [], "mismatch": 0, "incomplete": 0, "tokens": 0, "lat": [], "ttft": []}
        rss_samples = []
        sampling = threading.Event()

        def sampler():
            while not sampling.is_set():
                rss_samples.append(rss_mib(proc.pid))
                time.sleep(0.25)

        def client(k):
            i = k
            while time.perf_counter() < stop_at:
                p = PROMPTS[i % len(PROMPTS)]
                i += 1
                try:
                    text, finish, n_tok, ttft, total, complete = request(
                        host, port, {**base, "prompt": p, "stream": True,
                                     "stream_options": {"include_usage": True}}, stream=True)
                except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                    with lock:
                        res["errors"].append(repr(e))
                    continue
                with lock:
                    if not complete:
                        res["incomplete"] += 1
                    elif (text, finish) != expected[p]:
                        res["mismatch"] += 1
                    else:
                        res["ok"] += 1
                    res["tokens"] += n_tok or 0
                    res["lat"].append(total)
                    if ttft is not None:
                        res["ttft"].append(ttft)

        threading.Thread(target=sampler, daemon=True).start()
        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
        for t in threads:
            t.start()
        last = 0
        while any(t.is_alive() for t in threads):
            time.sleep(1)
            el = time.perf_counter() - t0
            if int(el) // 5 != last:
                last = int(el) // 5
                with lock:
                    print(f"[load] {el:5.1f} s: {res['ok']} ok, {len(res['errors'])} errors, "
                          f"{res['mismatch']} wrong, {res['tokens']} tokens", file=sys.stderr, flush=True)
        wall = time.perf_counter() - t0
        sampling.set()
        rss_end = rss_mib(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)

    def pct(v, q):
        return statistics.quantiles(v, n=100)[q - 1] if len(v) >= 2 else (v[0] if v else float("nan"))

    n_req = res["ok"] + res["mismatch"] + res["incomplete"]
    out = {
        "clients": args.clients, "parallel": args.parallel, "max_tokens": args.max_tokens,
        "threads": args.threads, "duration_s": round(wall, 2), "requests": n_req,
        "ok": res["ok"], "errors": len(res["errors"]), "wrong": res["mismatch"],
        "incomplete": res["incomplete"], "requests_per_s": round(n_req / wall, 3),
        "tokens_per_s": round(res["tokens"] / wall, 2),
        "latency_p50_s": round(pct(res["lat"], 50), 3), "latency_p95_s": round(pct(res["lat"], 95), 3),
        "ttft_p50_s": round(pct(res["ttft"], 50), 3), "ttft_p95_s": round(pct(res["ttft"], 95), 3),
        "rss_warm_mib": round(rss_warm, 1), "rss_peak_mib": round(max(rss_samples or [0]), 1),
        "rss_end_mib": round(rss_end, 1), "server_exit": rc,
        "engine": "llama-server" if args.llama_server else "hotcold",
    }
    print(json.dumps(out, indent=1))
    for e in res["errors"][:5]:
        print("[load] error:", e, file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    # llama-server: not batch-invariant (outputs under load may differ from one at a time), and
    # its RSS is its own affair; only failures and incomplete streams count.
    strict = not args.llama_server
    bad = (res["errors"] or (strict and res["mismatch"]) or res["incomplete"] or rc != 0
           or n_req == 0 or (strict and rss_end - rss_warm > args.max_rss_growth_mib))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
