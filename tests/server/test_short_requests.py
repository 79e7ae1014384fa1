"""No request loses its output (issue 34): hundreds of short greedy requests, streamed and not,
on stories260K at -t 1 and -t 2 with 1, 2 and 8 slots. Each text equals `hotcold run`'s byte for
byte, `usage` counts the text's tokens, logprobs cover every token. Short requests on a tiny model
finish before the response first reads them: the case that lost its text.

Also: a second server on a busy port exits 1 naming the address while the first keeps serving,
and a shutdown in the middle of a stream ends it with an error event before [DONE], after text
that is a prefix of the request's whole greedy text."""
import http.client
import json
import signal
import subprocess
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import BIN, SERVE_KERNELS, STORIES_GGUF, Server, require_model, run_cli

PROMPTS = ["Once upon a time", "The little dog", "One day, Lily went to the park", "Tom had a",
           "She was very happy because", "The sun"]
MAX_N = 12


@pytest.fixture(scope="module")
def expected():
    """(prompt, n) -> (text, number of generated tokens) from `hotcold run` (the tokens: --ids)."""
    require_model(STORIES_GGUF)
    out = {}
    for p in PROMPTS:
        for n in range(1, MAX_N + 1):
            args = ("run", "-m", STORIES_GGUF, "-p", p, "-n", n, "--temp", 0, "-t", 1, *SERVE_KERNELS)
            out[(p, n)] = (run_cli(*args).removesuffix("\n"), len(run_cli(*args, "--ids").split()))
    return out


def stream_completion(url, body, timeout=60):
    """POSTs a streaming completion; returns (status, [decoded data events])."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read().decode()
    conn.close()
    if resp.status != 200:
        return resp.status, raw
    return 200, [l[6:] for l in raw.split("\n") if l.startswith("data: ")]


def check_one(srv, expected, prompt, n, stream, logprobs, stop):
    """One request; returns None if right, else what was wrong."""
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0}
    if logprobs:
        body["logprobs"] = 2
    want_text, want_tokens = expected[(prompt, n)]
    want_finish = "length" if want_tokens == n else "stop"
    if stop is not None:
        body["stop"] = [stop]
        cut = want_text.find(stop)
        if cut >= 0:  # generation ends at the token that completes the stop string
            want_text = want_text[:cut]
            want_tokens = next(k for k in range(1, n + 1) if stop in expected[(prompt, k)][0])
            want_finish = "stop"
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        status, events = stream_completion(srv.url, body)
        if status != 200:
            return f"status {status}: {events}"
        if not events or events[-1] != "[DONE]":
            return f"stream not ended by [DONE]: {events}"
        chunks = [json.loads(e) for e in events[:-1]]
        if any("error" in c for c in chunks):
            return f"error event: {chunks}"
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
        finish = finishes[-1] if finishes else None
        usage = chunks[-1].get("usage")
        probs = [c["choices"][0]["logprobs"] for c in chunks
                 if c["choices"] and c["choices"][0]["logprobs"]]
        tokens = [t for lp in probs for t in lp["tokens"]]
    else:
        status, res = srv.json("POST", "/v1/completions", body)
        if status != 200:
            return f"status {status}: {res}"
        choice = res["choices"][0]
        text, finish, usage = choice["text"], choice["finish_reason"], res["usage"]
        tokens = choice["logprobs"]["tokens"] if choice["logprobs"] else []
    problems = []
    if text != want_text:
        problems.append(f"text {text!r}, run says {want_text!r}")
    if finish != want_finish:
        problems.append(f"finish_reason {finish!r}, expected {want_finish!r}")
    if not usage or usage["completion_tokens"] != want_tokens:
        problems.append(f"usage {usage}, expected {want_tokens} completion tokens")
    if logprobs and (len(tokens) != want_tokens or
                     (stop is None and "".join(tokens) != want_text)):
        problems.append(f"logprobs tokens {tokens!r} for text {want_text!r} ({want_tokens} tokens)")
    return "; ".join(problems) or None


@pytest.mark.parametrize("threads,slots", [(1, 1), (1, 2), (1, 8), (2, 1), (2, 2), (2, 8)])
def test_short_requests_keep_their_text(expected, threads, slots):
    srv = Server(STORIES_GGUF, "-t", threads, "-np", slots, "-c", 256 * slots)
    try:
        cases = []
        for i in range(120):
            prompt = PROMPTS[i % len(PROMPTS)]
            n = 1 + (i * 7) % MAX_N
            stop = None
            if i % 5 == 4:  # a word of the greedy text as the stop string
                words = expected[(prompt, MAX_N)][0].split()
                stop = " " + words[len(words) // 2] if words else "."
                n = MAX_N
            cases.append((prompt, n, i % 2 == 0, i % 3 == 0, stop))
        with ThreadPoolExecutor(max(2, 2 * slots)) as ex:
            results = list(ex.map(lambda c: check_one(srv, expected, *c), cases))
        wrong = [(c, r) for c, r in zip(cases, results) if r]
        assert not wrong, f"{len(wrong)} of {len(cases)} requests wrong, e.g. {wrong[:3]}"
    finally:
        assert srv.stop() == 0, srv.log


def test_busy_port_is_refused():
    require_model(STORIES_GGUF)
    first = Server(STORIES_GGUF, "-np", 1)
    try:
        port = urllib.parse.urlsplit(first.url).port
        r = subprocess.run([BIN, "serve", "-m", str(STORIES_GGUF), "--host", "127.0.0.1",
                            "--port", str(port)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, (r.returncode, r.stderr)
        errors = [l for l in r.stderr.splitlines() if "error" in l]
        assert len(errors) == 1 and f"127.0.0.1:{port}" in errors[0] and "in use" in errors[0], r.stderr
        assert "listening on" not in r.stderr
        # The first still serves, and serves every connection.
        for _ in range(10):
            status, res = first.json("POST", "/v1/completions", {"prompt": "The sun", "max_tokens": 2})
            assert status == 200, res
    finally:
        assert first.stop() == 0, first.log
    # Its port is free again at once (SO_REUSEADDR): a restart on it binds.
    again = Server(STORIES_GGUF, "-np", 1, port=port)
    try:
        assert again.json("GET", "/health") == (200, {"status": "ok"})
    finally:
        assert again.stop() == 0, again.log


@pytest.mark.parametrize("grace", [0, 0.2])
def test_shutdown_mid_stream_ends_with_an_error_event(grace):
    """A stream cut by shutdown says so: text that is a prefix of the whole greedy text, an
    error event, then [DONE]; never a stream that looks finished."""
    require_model(STORIES_GGUF)
    prompt, n = "Once upon a time", 200
    whole = run_cli("run", "-m", STORIES_GGUF, "-p", prompt, "-n", n, "--temp", 0, "--ignore-eos",
                    "-c", 4096, *SERVE_KERNELS).removesuffix("\n")
    srv = Server(STORIES_GGUF, "-np", 2, "-c", 8192, "-t", 1, "--shutdown-grace", grace)
    outs = [{}, {}]

    def read(out):
        out["status"], out["events"] = stream_completion(srv.url, {
            "prompt": prompt, "max_tokens": 100000, "ignore_eos": True, "temperature": 0,
            "stream": True})

    threads = [threading.Thread(target=read, args=(o,)) for o in outs]
    for t in threads:
        t.start()
    deadline = time.time() + 30
    while time.time() < deadline:  # both generating
        _, _, raw = srv.request("GET", "/metrics")
        if "hotcold_active_sessions 2" in raw.decode():
            break
        time.sleep(0.01)
    time.sleep(0.2)
    assert srv.stop(signal.SIGTERM) == 0, srv.log
    for t in threads:
        t.join(60)
    for out in outs:
        assert out["status"] == 200, out
        events = out["events"]
        assert events[-1] == "[DONE]", events[-3:]
        err = json.loads(events[-2])
        assert "cancelled" in err["error"]["message"] or "shutting down" in err["error"]["message"], err
        chunks = [json.loads(e) for e in events[:-2]]
        assert all(c["choices"][0]["finish_reason"] is None for c in chunks), chunks[-1:]
        text = "".join(c["choices"][0]["text"] for c in chunks)
        assert text and (whole.startswith(text) or text.startswith(whole)), (text[:200], whole[:200])
