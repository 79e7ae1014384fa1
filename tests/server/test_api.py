"""`hotcold serve` through the official `openai` client and raw HTTP: completions, chat,
streaming, greedy equality with `hotcold run`, limits, cancellation, metrics."""
import http.client
import json
import re
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from conftest import SERVE_KERNELS, SMOLLM2, Server, run_cli

PROMPTS = ["The capital of France is", "Once upon a time, there was a little",
           "def fibonacci(n):", "The three primary colors are"]


@pytest.fixture(scope="module")
def client(smollm2_server):
    return openai.OpenAI(base_url=smollm2_server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def model_id(smollm2_server):
    status, body = smollm2_server.json("GET", "/v1/models")
    assert status == 200
    return body["data"][0]["id"]


def test_models_and_health(smollm2_server, client, model_id):
    assert model_id == "SmolLM2-135M-Instruct.Q4_1"
    assert [m.id for m in client.models.list().data] == [model_id]
    assert smollm2_server.json("GET", "/health") == (200, {"status": "ok"})


def test_completion_greedy_equals_run(client, model_id):
    for prompt in PROMPTS[:2]:
        expected = run_cli("run", "-m", SMOLLM2, "-p", prompt, "-n", 32, "--temp", 0, *SERVE_KERNELS)
        r = client.completions.create(model=model_id, prompt=prompt, max_tokens=32, temperature=0)
        assert r.choices[0].text == expected.removesuffix("\n")
        assert r.usage.completion_tokens == 32 and r.choices[0].finish_reason == "length"
        assert r.usage.prompt_tokens == len(run_cli("tokenize", "-m", SMOLLM2, "-p", prompt).split())


def test_exact_decode_kernels_serve_what_default_run_answers():
    """`serve --decode-kernels exact` decodes in ggml's order, as `run` does by default (llama.cpp's
    bits at batch 1), with its slots decoding together."""
    prompts = PROMPTS[:3]
    expected = [run_cli("run", "-m", SMOLLM2, "-p", p, "-n", 24, "--temp", 0).removesuffix("\n")
                for p in prompts]
    srv = Server(SMOLLM2, "--parallel", 3, "-c", 768, "-t", 2, "--decode-kernels", "exact")
    try:
        def one(p):
            status, body = srv.json("POST", "/v1/completions",
                                    {"prompt": p, "max_tokens": 24, "temperature": 0})
            assert status == 200, body
            return body["choices"][0]["text"]
        with ThreadPoolExecutor(len(prompts)) as ex:
            assert list(ex.map(one, prompts)) == expected
    finally:
        assert srv.stop() == 0, srv.log


def test_completion_stream_equals_non_stream(client, model_id):
    full = client.completions.create(model=model_id, prompt=PROMPTS[2], max_tokens=40, temperature=0)
    pieces, finish = [], None
    for chunk in client.completions.create(model=model_id, prompt=PROMPTS[2], max_tokens=40,
                                           temperature=0, stream=True):
        pieces.append(chunk.choices[0].text)
        finish = chunk.choices[0].finish_reason or finish
    assert len(pieces) > 5  # streamed, not sent at once
    assert "".join(pieces) == full.choices[0].text
    assert finish == full.choices[0].finish_reason


def test_chat_and_chat_stream(client, model_id):
    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the capital of France?"}]
    r = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=48, temperature=0)
    text = r.choices[0].message.content
    assert r.choices[0].message.role == "assistant"
    assert "Paris" in text
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    stream = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=48,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    roles, pieces, usage = [], [], None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            if c.delta.content:
                pieces.append(c.delta.content)
    assert roles == ["assistant"]
    assert "".join(pieces) == text
    assert usage is not None and usage.completion_tokens == r.usage.completion_tokens


def test_sampling_is_seeded(client, model_id):
    kw = dict(model=model_id, prompt=PROMPTS[1], max_tokens=24, temperature=1.0, top_p=0.9)
    a = client.completions.create(seed=1234, **kw).choices[0].text
    b = client.completions.create(seed=1234, **kw).choices[0].text
    expected = run_cli("run", "-m", SMOLLM2, "-p", PROMPTS[1], "-n", 24, "--temp", 1.0,
                       "--top-p", 0.9, "--seed", 1234, *SERVE_KERNELS)
    assert a == b == expected.removesuffix("\n")


def test_stop_strings(client, model_id):
    full = client.completions.create(model=model_id, prompt=PROMPTS[0], max_tokens=32,
                                     temperature=0).choices[0].text
    cut = full.index(".")  # " Paris." ...: stop at the first period
    r = client.completions.create(model=model_id, prompt=PROMPTS[0], max_tokens=32, temperature=0,
                                  stop=[".", "never-there"])
    assert r.choices[0].text == full[:cut]
    assert r.choices[0].finish_reason == "stop"


def test_concurrent_requests_match_sequential(client, model_id):
    """Batched decode is batch-invariant: the same greedy text alone or with others."""
    def one(p):
        return client.completions.create(model=model_id, prompt=p, max_tokens=40,
                                         temperature=0).choices[0].text
    alone = [one(p) for p in PROMPTS]
    with ThreadPoolExecutor(len(PROMPTS) * 2) as ex:
        together = list(ex.map(one, PROMPTS * 2))
    assert together == alone * 2


def test_context_limit_ends_with_length(smollm2_server):
    # A slot holds 2048 / 4 = 512 tokens: a long generation stops when it is full.
    status, body = smollm2_server.json("POST", "/v1/completions", {
        "prompt": "Count: 1, 2, 3,", "max_tokens": 100000, "temperature": 0, "ignore_eos": True})
    assert status == 200, body
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["total_tokens"] == 512


def stream_lines(url, body, n_lines):
    """Opens a streaming request, reads n_lines SSE data lines, then drops the connection."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    got = 0
    while got < n_lines:
        line = resp.readline()
        if line.startswith(b"data: "):
            got += 1
    conn.sock.close()
    conn.close()


def metric(server, name):
    _, _, raw = server.request("GET", "/metrics")
    m = re.search(rf"^{re.escape(name)} (\S+)$", raw.decode(), re.M)
    assert m, f"no metric {name}"
    return float(m.group(1))


def test_client_disconnect_cancels(smollm2_server):
    before = metric(smollm2_server, 'hotcold_generation_requests_total{outcome="cancelled"}')
    stream_lines(smollm2_server.url, {"prompt": "Tell me a story.", "max_tokens": 5000,
                                      "ignore_eos": True, "stream": True}, 3)
    deadline = time.time() + 10
    while time.time() < deadline:
        if metric(smollm2_server, 'hotcold_generation_requests_total{outcome="cancelled"}') > before:
            break
        time.sleep(0.05)
    assert metric(smollm2_server, 'hotcold_generation_requests_total{outcome="cancelled"}') == before + 1
    assert metric(smollm2_server, "hotcold_active_sessions") == 0


def test_metrics(smollm2_server):
    status, headers, raw = smollm2_server.request("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    text = raw.decode()
    for name in ["hotcold_http_requests_total", "hotcold_tokens_per_second", "hotcold_queue_depth",
                 "hotcold_active_sessions", "hotcold_ffn_sparsity", "hotcold_fast_device_neuron_share",
                 "hotcold_generated_tokens_total", "hotcold_prompt_mixed_passes_total"]:
        assert f"# TYPE {name} " in text, name
    # Every sample line is NAME{labels} VALUE with a numeric value.
    for line in text.splitlines():
        if not line.startswith("#"):
            assert re.fullmatch(r"[a-z_]+(\{[^}]*\})? -?[0-9.e+-]+", line), line
    assert metric(smollm2_server, "hotcold_generated_tokens_total") > 0
    assert metric(smollm2_server, 'hotcold_http_requests_total{route="/v1/completions",status="200"}') > 0
    assert metric(smollm2_server, "hotcold_slots") == 4


def test_prompt_cache_reuses_kv_and_changes_no_output(smollm2_server, client, model_id):
    """A repeated long prompt reuses its KV (whole 128-token micro-batches of it: the prompt
    cache's grid) and still gives exactly `hotcold run`'s greedy text; a request can opt out."""
    prompt = " ".join(["The quick brown fox jumps over the lazy dog near the river bank."] * 24)
    n_prompt = len(run_cli("tokenize", "-m", SMOLLM2, "-p", prompt).split())
    assert 300 < n_prompt < 480  # fits a 512-token slot with the generation
    expected = run_cli("run", "-m", SMOLLM2, "-p", prompt, "-n", 16, "--temp", 0,
                       *SERVE_KERNELS).removesuffix("\n")
    before = metric(smollm2_server, "hotcold_prompt_tokens_reused_total")
    hits = metric(smollm2_server, "hotcold_prompt_cache_hits_total")
    texts = [client.completions.create(model=model_id, prompt=prompt, max_tokens=16,
                                       temperature=0).choices[0].text for _ in range(2)]
    assert texts == [expected, expected]
    reused = metric(smollm2_server, "hotcold_prompt_tokens_reused_total") - before
    assert reused == (n_prompt - 1) // 128 * 128
    assert metric(smollm2_server, "hotcold_prompt_cache_hits_total") == hits + 1
    status, body = smollm2_server.json("POST", "/v1/completions", {
        "prompt": prompt, "max_tokens": 16, "temperature": 0, "cache_prompt": False})
    assert status == 200 and body["choices"][0]["text"] == expected
    assert metric(smollm2_server, "hotcold_prompt_tokens_reused_total") - before == reused
    assert metric(smollm2_server, "hotcold_prompt_cache_bytes") >= 0


def test_logprobs_completion_and_chat(client, model_id):
    """OpenAI's logprobs: per generated token its log probability and the top candidates',
    most likely first; greedy picks the top one; streamed chunks carry their tokens' too."""
    import math
    r = client.completions.create(model=model_id, prompt=PROMPTS[0], max_tokens=8, temperature=0,
                                  logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset == [sum(len(t.encode()) for t in lp.tokens[:i]) for i in range(8)]
    for tok, val, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert val <= 0 and len(top) == 3
        assert math.isclose(max(top.values()), val, abs_tol=1e-6)  # greedy: the top candidate
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-6
    streamed = []
    for chunk in client.completions.create(model=model_id, prompt=PROMPTS[0], max_tokens=8,
                                           temperature=0, logprobs=3, stream=True):
        if chunk.choices and chunk.choices[0].logprobs:
            streamed += chunk.choices[0].logprobs.token_logprobs
    assert streamed == lp.token_logprobs
    c = client.chat.completions.create(model=model_id, max_tokens=6, temperature=0, logprobs=True,
                                       top_logprobs=2,
                                       messages=[{"role": "user", "content": "Say hello."}])
    content = c.choices[0].logprobs.content
    assert len(content) == 6
    assert b"".join(bytes(t.bytes) for t in content).decode() == c.choices[0].message.content
    for t in content:
        assert len(t.top_logprobs) == 2 and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
        assert math.isclose(t.top_logprobs[0].logprob, t.logprob, abs_tol=1e-6)
    plain = client.chat.completions.create(model=model_id, max_tokens=2, temperature=0,
                                           messages=[{"role": "user", "content": "Say hello."}])
    assert plain.choices[0].logprobs is None


def test_web_page_served(smollm2_server):
    status, headers, raw = smollm2_server.request("GET", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b"<html" in raw.lower() and b"chat/completions" in raw


def test_tokenize_and_detokenize(smollm2_server):
    """llama.cpp server's /tokenize and /detokenize: the CLI's tokens, a byte-exact round trip,
    pieces that are strings or (not valid UTF-8 on their own) byte lists, and 400s."""
    text = "Hello world, caf\u00e9 \U0001F600 <|im_start|>"
    status, body = smollm2_server.json("POST", "/tokenize", {"content": text, "add_special": True})
    assert status == 200
    assert body["tokens"] == [int(t) for t in run_cli("tokenize", "-m", SMOLLM2, "-p", text).split()]
    status, plain = smollm2_server.json("POST", "/tokenize", {"content": text})
    assert status == 200 and len(plain["tokens"]) >= 8
    assert 1 in plain["tokens"]  # <|im_start|> parsed as the special token (parse_special)
    status, back = smollm2_server.json("POST", "/detokenize", {"tokens": plain["tokens"]})
    assert status == 200 and back == {"content": text}
    status, pieces = smollm2_server.json("POST", "/tokenize",
                                         {"content": text, "with_pieces": True})
    assert status == 200
    assert [p["id"] for p in pieces["tokens"]] == plain["tokens"]
    joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"])
                      for p in pieces["tokens"])
    assert joined == text.encode()
    assert any(isinstance(p["piece"], list) for p in pieces["tokens"])  # the emoji's bytes
    for path, req, msg in [("/tokenize", {"content": 3}, "'content': expected a string"),
                           ("/detokenize", {"tokens": [10 ** 9]}, "'tokens[0]'"),
                           ("/detokenize", {"tokens": "x"}, "'tokens': expected an array")]:
        status, err = smollm2_server.json("POST", path, req)
        assert status == 400 and msg in err["error"]["message"], (path, err)
