"""`hotcold serve` over the hot/cold split (issue 22, item 3): the device flags of `hotcold run`
on the CPU device. Every slot has its own device session and the slots' decode steps run in one
batched pass whose every row gets its one-token decode's operations, so concurrent greedy
requests answer exactly what `run` does with the same flags (the host-only sparse FFN too); /metrics counts the device's share of the sparse
FFN and the slots' device KV; an over-full budget is a clear error."""
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import BIN, ROOT, SERVE_KERNELS, SMOLLM2, Server, require_model, run_cli

TEXT = ROOT.parent / "shared" / "data" / "tinystories" / "tinystories_val_head.txt"
PROMPTS = ["The capital of France is", "Once upon a time, there was a little",
           "def fibonacci(n):"]


def metric(server, name):
    _, _, raw = server.request("GET", "/metrics")
    m = re.search(rf"^{re.escape(name)} (\S+)$", raw.decode(), re.M)
    assert m, f"no metric {name}"
    return float(m.group(1))


@pytest.fixture(scope="module")
def hybrid_flags(tmp_path_factory):
    """Sparse flags and a plan that puts hot neurons and some attention on the CPU device (the
    planner told the device is fast: on its measured profile it would place nothing)."""
    require_model(SMOLLM2)
    d = tmp_path_factory.mktemp("hybrid")
    stats, plan = d / "smol.stats.gguf", d / "smol.plan.gguf"
    run_cli("profile", "-m", SMOLLM2, "-f", TEXT, "-o", stats, "-c", 256, "--chunks", 2,
            "--sparsity", 0.6)
    out = run_cli("plan", "-m", SMOLLM2, "--stats", stats, "--vram-budget", 0.03, "-o", plan,
                  "--device", "cpu", "--host-gbps", 5, "--dev-gbps", 500, "--op-us", 1,
                  "--sync-us", 1)
    assert "wrote" in out
    return ["--sparsity", 0.6, "--stats", stats, "--device", "cpu", "--plan", plan]


def complete_all(server, prompts, n, bodies=False):
    def one(p):
        status, body = server.json("POST", "/v1/completions",
                                   {"prompt": p, "max_tokens": n, "temperature": 0})
        assert status == 200, body
        return body if bodies else body["choices"][0]["text"]
    with ThreadPoolExecutor(len(prompts)) as ex:
        return list(ex.map(one, prompts))


def run_texts(flags, prompts, n):
    return [run_cli("run", "-m", SMOLLM2, "-p", p, "-n", n, "--temp", 0, *flags,
                    *SERVE_KERNELS).removesuffix("\n")
            for p in prompts]


def test_hot_cold_split_serves_what_run_answers(hybrid_flags):
    expected = run_texts(hybrid_flags, PROMPTS, 24)
    host_sparse = run_texts(hybrid_flags[:4], PROMPTS[:1], 24)
    srv = Server(SMOLLM2, "--parallel", 3, "-c", 1536, "-t", 2, *hybrid_flags)
    try:
        assert re.search(r"device: cpu device .*[1-9][0-9]* FFN neurons", srv.log), srv.log
        # All at once (three slots decoding together), then again one by one.
        assert complete_all(srv, PROMPTS * 2, 24) == expected * 2
        assert complete_all(srv, PROMPTS[:1], 24) == expected[:1]
        share = metric(srv, "hotcold_fast_device_neuron_share")
        assert 0 < share < 1, share
        assert metric(srv, "hotcold_device_kv_cache_bytes") > 0  # two layers' attention there
        assert metric(srv, "hotcold_generated_tokens_total") == 7 * 24
    finally:
        assert srv.stop() == 0, srv.log
    # The split is real: its arithmetic is not the host-only sparse FFN's on this prompt.
    assert expected[0] != host_sparse[0]


def test_host_sparse_ffn_serves_what_run_answers(hybrid_flags):
    """The sparse FFN without a device, three slots decoding together: each token takes the path
    it takes alone (the dense fallback when its own set passes --sparse-union-max, SwiGLU per
    element), so a batch's union changes no bit and serve answers what run does."""
    flags = hybrid_flags[:4]
    expected = run_texts(flags, PROMPTS, 24)
    srv = Server(SMOLLM2, "--parallel", 3, "-c", 1536, "-t", 2, *flags)
    try:
        assert complete_all(srv, PROMPTS * 2, 24) == expected * 2
        assert 0 < metric(srv, "hotcold_ffn_sparsity") < 1
    finally:
        assert srv.stop() == 0, srv.log


def test_dense_offload_serves_what_run_answers_and_reuses_prefixes():
    """-ngl: attention and dense FFN of the last layers on the device, each slot's KV of those
    layers there; a repeated prompt reuses the slot's own KV, and a prefix both slots gave up
    comes back from the host store with its device layers' KV (copied out and in again)."""
    require_model(SMOLLM2)
    flags = ["-ngl", 12, "--device", "cpu"]
    # Not a repeated sentence: the continuation must depend on what the device layers' KV says.
    long_prompt = (
        "Maria opened the old wooden box she had found in her grandmother's attic. Inside were "
        "letters tied with a faded red ribbon, a brass key, and a photograph of a lighthouse on "
        "a rocky island. On the back of the photograph someone had written a date, 1952, and "
        "two words: remember Ellis. Maria had never heard of anyone called Ellis. She read the "
        "first letter slowly. It spoke of storms, of a keeper who climbed the stairs every "
        "night, and of a promise to return before the winter. The handwriting grew shakier in "
        "the later letters, and the last one was never finished. Maria put the key in her "
        "pocket, took the photograph, and decided that in the spring she would find the island. "
        "When she told her brother about the letters, he laughed and said that")
    expected = run_texts(flags, PROMPTS[:2] + [long_prompt], 24)
    srv = Server(SMOLLM2, "--parallel", 2, "-c", 1024, "-t", 2, *flags)
    try:
        assert complete_all(srv, PROMPTS[:2], 24) == expected[:2]
        kv = metric(srv, "hotcold_device_kv_cache_bytes")
        assert kv > 0
        for _ in range(2):
            assert complete_all(srv, [long_prompt], 24) == expected[2:]
        own = metric(srv, "hotcold_prompt_tokens_reused_total")
        assert own >= 128
        assert metric(srv, "hotcold_prompt_cache_bytes") == 0  # nothing given up yet
        # Both slots taken by other long prompts (their KV overwrites the long prompt's on the
        # device too): the long prompt's prefix goes to the host store.
        others = [" ".join([f"Sentence number {i} is about a {w} in a garden."] * 16)
                  for i, w in ((1, "cat"), (2, "dog"))]
        complete_all(srv, others, 4)
        assert metric(srv, "hotcold_prompt_cache_bytes") > 0
        hits = metric(srv, "hotcold_prompt_cache_hits_total")
        assert complete_all(srv, [long_prompt], 24) == expected[2:]
        assert metric(srv, "hotcold_prompt_cache_hits_total") == hits + 1
        assert metric(srv, "hotcold_prompt_tokens_reused_total") - own >= 128
    finally:
        assert srv.stop() == 0, srv.log


def test_dynamic_migration_serves_under_load(hybrid_flags):
    srv = Server(SMOLLM2, "--parallel", 2, "-c", 1024, "-t", 2, *hybrid_flags,
                 "--dynamic", "--migrate", "--migrate-every", 4)
    try:
        # Thresholds adapt to the traffic, so a reply may end early (EOS): count what came back.
        bodies = complete_all(srv, PROMPTS * 2, 20, bodies=True)
        n = sum(b["usage"]["completion_tokens"] for b in bodies)
        assert all(b["choices"][0]["text"] for b in bodies), bodies
        assert 0 < n <= 6 * 20
        assert metric(srv, "hotcold_generated_tokens_total") == n
    finally:
        assert srv.stop() == 0, srv.log
    assert "dynamic sparsity: thresholds toward recall:0.99 + migration" in srv.log


def test_device_budget_too_small_for_the_slots_is_a_clear_error(hybrid_flags):
    args = ["serve", "-m", SMOLLM2, "--port", 0, "--parallel", 64, "-c", 4096, "--sparsity", 0.6,
            "--stats", hybrid_flags[3], "--device", "cpu", "--vram-budget", 0.01]
    r = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "does not hold the buffers of 64 sessions" in r.stderr, r.stderr
