"""The web chat page (`GET /` of `hotcold serve`, src/app/web_chat.cpp) driven in headless Chromium.

Uses the venv's Playwright with Debian's chromium ($HOTCOLD_CHROMIUM, default /usr/bin/chromium);
Playwright's own browser downloads are never used. Saves a screenshot of a finished
conversation to $HOTCOLD_ARTIFACTS/web_chat.png (default build/artifacts/web_chat.png).
"""
import json
import os
import re
import struct
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

ROOT = Path(os.environ.get("HOTCOLD_ROOT", Path(__file__).resolve().parents[2]))
CHROMIUM = os.environ.get("HOTCOLD_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("HOTCOLD_ARTIFACTS", ROOT / "build" / "artifacts"))
WAIT_MS = 60_000  # generous: the machine running the tests may be busy


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"missing chromium at {CHROMIUM}: apt-get install chromium or set HOTCOLD_CHROMIUM")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--headless=new"])
        yield b
        b.close()


@pytest.fixture
def page(browser, smollm2_server):
    """A fresh page on the chat UI, model name loaded; fails on any uncaught JS error."""
    ctx = browser.new_context(viewport={"width": 960, "height": 720})
    pg = ctx.new_page()
    pg.set_default_timeout(WAIT_MS)
    js_errors = []
    pg.on("pageerror", lambda e: js_errors.append(str(e)))
    pg.goto(smollm2_server.url + "/")
    expect(pg.locator("#model-name")).not_to_have_text(re.compile("loading"))
    yield pg
    ctx.close()
    assert not js_errors, f"uncaught errors in the page: {js_errors}"


def chat_requests(page):
    """A list that fills with the JSON bodies the page POSTs to /v1/chat/completions."""
    bodies = []

    def on_request(req):
        if req.method == "POST" and req.url.endswith("/v1/chat/completions"):
            bodies.append(json.loads(req.post_data))

    page.on("request", on_request)
    return bodies


def set_settings(page, **values):
    """set_settings(page, max_tokens=24) fills #max-tokens (the settings row opened first)."""
    page.evaluate("document.getElementById('settings').open = true")
    for name, value in values.items():
        page.fill("#" + name.replace("_", "-"), str(value))


def send(page, text):
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")


def finished_reply(page, n):
    """The n-th assistant message (0-based) once its stream has ended."""
    msg = page.locator(".msg.assistant").nth(n)
    expect(msg).to_have_attribute("data-done", "true", timeout=WAIT_MS)
    return msg


def reply_text(msg):
    return msg.locator(".content").text_content()


def test_page_loads_and_shows_model_name(page, smollm2_server):
    status, headers, body = smollm2_server.request("GET", "/")
    assert status == 200
    assert headers.get("Content-Type", "").startswith("text/html"), headers
    assert body.lstrip().lower().startswith(b"<!doctype html")
    status, models = smollm2_server.json("GET", "/v1/models")
    assert status == 200
    expect(page.locator("#model-name")).to_have_text(models["data"][0]["id"])
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator("#stop")).to_be_disabled()
    for sel in ["#messages", "#prompt", "#max-tokens", "#temperature", "#top-p", "#seed", "#system"]:
        expect(page.locator(sel)).to_have_count(1)
    # Self-contained: nothing in the page refers to another origin.
    assert not re.search(rb"""(src|href)\s*=\s*["']?(https?:)?//""", body, re.I)


def test_streamed_reply_matches_non_streaming(page, smollm2_server):
    bodies = chat_requests(page)
    set_settings(page, temperature=0, max_tokens=24)
    prompt = "What is the capital of France? Answer in one sentence."
    send(page, prompt)
    msg = finished_reply(page, 0)
    text = reply_text(msg)
    assert text.strip(), "empty reply"
    assert msg.get_attribute("data-error") is None

    assert len(bodies) == 1
    sent = bodies[0]
    assert sent["stream"] is True
    assert sent["messages"] == [{"role": "user", "content": prompt}]
    assert sent["max_tokens"] == 24 and sent["temperature"] == 0
    status, ref = smollm2_server.json("POST", "/v1/chat/completions", dict(sent, stream=False))
    assert status == 200, ref
    assert text == ref["choices"][0]["message"]["content"]

    meta = msg.locator(".meta").text_content()
    m = re.match(r"(\d+) tokens .* ([\d.]+) tokens/s", meta)
    assert m, meta
    assert 1 <= int(m.group(1)) <= 24 and float(m.group(2)) > 0


def test_multi_turn_sends_history(page, smollm2_server):
    bodies = chat_requests(page)
    set_settings(page, temperature=0, max_tokens=24)
    # Shift+Enter adds a line to the prompt instead of sending it.
    page.fill("#prompt", "My name is Ada.")
    page.press("#prompt", "Shift+Enter")
    page.type("#prompt", "Please greet me.")
    expect(page.locator(".msg")).to_have_count(0)
    page.press("#prompt", "Enter")
    first = reply_text(finished_reply(page, 0))
    assert first.strip()
    assert bodies[0]["messages"] == [{"role": "user", "content": "My name is Ada.\nPlease greet me."}]

    send(page, "What is my name?")
    second = reply_text(finished_reply(page, 1))
    assert second.strip(), "empty second reply"
    assert len(bodies) == 2
    assert [m["role"] for m in bodies[1]["messages"]] == ["user", "assistant", "user"]
    assert bodies[1]["messages"][1]["content"] == first
    assert bodies[1]["messages"][2]["content"] == "What is my name?"

    page.evaluate("document.getElementById('settings').open = false")  # show more of the chat
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    png = ARTIFACTS / "web_chat.png"
    page.screenshot(path=str(png), full_page=True)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 600 and height >= 400, (width, height)
    assert len(data) > 10_000, f"{png}: {len(data)} bytes, suspiciously small"


def test_stop_aborts_long_generation(page, smollm2_server):
    bodies = chat_requests(page)
    set_settings(page, temperature=0, max_tokens=2000)
    send(page, "Write a very long story about a dragon and a knight, with many chapters.")
    content = page.locator(".msg.assistant .content").nth(0)
    expect(content).to_have_text(re.compile(r"\S.{20,}", re.S))  # streaming has begun
    expect(page.locator("#send")).to_be_disabled()
    expect(page.locator("#stop")).to_be_enabled()
    page.click("#stop")

    msg = page.locator(".msg.assistant").nth(0)
    expect(msg).to_have_attribute("data-stopped", "true")
    expect(msg).to_have_attribute("data-done", "true")
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator("#stop")).to_be_disabled()
    partial = content.text_content()
    page.wait_for_timeout(500)
    assert content.text_content() == partial, "text kept arriving after Stop"
    assert len(partial) < 4000, "the whole 2000-token reply arrived before Stop"

    # The page and the server both recover: a new turn works and carries the partial reply.
    assert smollm2_server.json("GET", "/health") == (200, {"status": "ok"})
    set_settings(page, max_tokens=8)
    send(page, "Thanks, that is enough.")
    assert reply_text(finished_reply(page, 1)).strip()
    assert [m["role"] for m in bodies[1]["messages"]] == ["user", "assistant", "user"]
    assert bodies[1]["messages"][1]["content"] == partial


def test_server_error_is_displayed(page, smollm2_server):
    bodies = chat_requests(page)
    set_settings(page, max_tokens=-1)
    send(page, "Hello")
    msg = page.locator(".msg.assistant").nth(0)
    expect(msg).to_have_attribute("data-error", re.compile(r"\S"))

    status, err = smollm2_server.json("POST", "/v1/chat/completions",
                                      {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": -1})
    assert status == 400, err
    message = err["error"]["message"]
    assert msg.get_attribute("data-error") == message
    expect(msg.locator(".error")).to_contain_text(message)
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator("#stop")).to_be_disabled()
    expect(page.locator("#prompt")).to_have_value("Hello")  # given back for a retry

    # Retrying with valid settings works and the failed turn is not in the history.
    set_settings(page, max_tokens=8)
    page.press("#prompt", "Enter")
    assert reply_text(finished_reply(page, 1)).strip()
    assert bodies[1]["messages"] == [{"role": "user", "content": "Hello"}]
