// The web chat page served by `hotcold serve` at `GET /`.
//
// One document with inline CSS and JS so the binary needs no asset directory and the page works
// offline. Model output only ever reaches the DOM through textContent, never innerHTML.
// Stable ids and attributes (tests/server/test_web_chat.py relies on them):
//   #messages, #prompt, #send, #stop, #clear, #model-name, #settings (a <details>), #system,
//   #max-tokens, #temperature, #top-p, #seed; each message is `.msg user` / `.msg assistant`
//   holding `.content` (the text) and, for the assistant, `.meta` (tokens/s) or `.error`.
//   An assistant message gets data-done="true" when its stream ends (data-stopped="true" too if
//   the user pressed Stop) and data-error="<message>" when the request fails.
#include "app/web_chat.h"

namespace hc {
namespace {

constexpr std::string_view kPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>hotcold chat</title>
<style>
:root {
  --bg: #f5f6f8; --panel: #ffffff; --fg: #1c2230; --muted: #6b7280; --border: #d8dce3;
  --user: #e3edff; --accent: #2563eb; --accent-fg: #ffffff; --err: #b42318; --err-bg: #fdecea;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #15181e; --panel: #1d2129; --fg: #e6e8ec; --muted: #9aa3b2; --border: #343a46;
    --user: #23324d; --accent: #3b82f6; --accent-fg: #ffffff; --err: #f97066; --err-bg: #3a1d1b;
  }
}
* { box-sizing: border-box; }
html, body { height: 100%; margin: 0; }
body {
  display: flex; flex-direction: column; background: var(--bg); color: var(--fg);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
}
header {
  display: flex; align-items: baseline; gap: .75rem; padding: .6rem 1rem;
  background: var(--panel); border-bottom: 1px solid var(--border);
}
header h1 { margin: 0; font-size: 1.05rem; font-weight: 600; }
#model-name { color: var(--muted); font: .85rem ui-monospace, SFMono-Regular, Menlo, monospace; }
header .spacer { flex: 1; }
#settings { background: var(--panel); border-bottom: 1px solid var(--border); padding: .35rem 1rem; }
#settings summary { cursor: pointer; color: var(--muted); font-size: .85rem; user-select: none; }
.settings-grid { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: end; padding: .5rem 0 .25rem; }
.settings-grid label { display: flex; flex-direction: column; gap: .15rem; font-size: .78rem; color: var(--muted); }
.settings-grid label.wide { flex: 1 1 100%; }
.settings-grid input { width: 7.5rem; }
input, textarea, button {
  font: inherit; color: var(--fg); background: var(--bg);
  border: 1px solid var(--border); border-radius: .4rem; padding: .35rem .5rem;
}
#system { width: 100%; min-height: 2.4rem; resize: vertical; }
#messages {
  flex: 1; overflow-y: auto; padding: 1rem; display: flex; flex-direction: column; gap: .75rem;
}
#messages:empty::before {
  content: "Type a message below. Enter sends, Shift+Enter starts a new line.";
  color: var(--muted); margin: auto;
}
.msg {
  max-width: min(52rem, 92%); padding: .55rem .85rem; border-radius: .65rem;
  border: 1px solid var(--border); background: var(--panel);
}
.msg.user { align-self: flex-end; background: var(--user); }
.msg.assistant { align-self: flex-start; }
.msg.failed { opacity: .6; }
.msg .role {
  font-size: .7rem; letter-spacing: .06em; text-transform: uppercase; color: var(--muted);
}
.msg .content { white-space: pre-wrap; overflow-wrap: anywhere; }
.msg.assistant:not([data-done]):not([data-error]) .content:empty::after { content: "\2026"; color: var(--muted); }
.msg .meta { margin-top: .3rem; font-size: .75rem; color: var(--muted); }
.msg[data-error] { border-color: var(--err); }
.msg .error {
  margin-top: .3rem; padding: .3rem .5rem; border-radius: .35rem;
  color: var(--err); background: var(--err-bg); white-space: pre-wrap;
}
#composer {
  display: flex; gap: .5rem; align-items: flex-end; padding: .75rem 1rem;
  background: var(--panel); border-top: 1px solid var(--border);
}
#prompt { flex: 1; min-height: 2.7rem; max-height: 40vh; resize: vertical; }
button { cursor: pointer; padding: .45rem 1rem; background: var(--panel); }
button#send { background: var(--accent); border-color: var(--accent); color: var(--accent-fg); }
button:disabled { opacity: .45; cursor: default; }
</style>
</head>
<body>
<header>
  <h1>hotcold chat</h1>
  <span id="model-name">loading model&hellip;</span>
  <span class="spacer"></span>
  <button id="clear" type="button" title="Start a new conversation">New chat</button>
</header>
<details id="settings">
  <summary>Settings</summary>
  <div class="settings-grid">
    <label class="wide">System prompt
      <textarea id="system" rows="2" placeholder="(none)"></textarea></label>
    <label>Max tokens <input id="max-tokens" type="number" step="1" value="512"></label>
    <label>Temperature <input id="temperature" type="number" min="0" step="0.05" value="0.7"></label>
    <label>Top p <input id="top-p" type="number" min="0" max="1" step="0.05" value="0.95"></label>
    <label>Seed <input id="seed" type="number" step="1" placeholder="random"></label>
  </div>
</details>
<main id="messages" aria-live="polite"></main>
<form id="composer">
  <textarea id="prompt" rows="2" placeholder="Message (Enter to send, Shift+Enter for a new line)" autofocus></textarea>
  <button id="send" type="submit">Send</button>
  <button id="stop" type="button" disabled>Stop</button>
</form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const ui = {
  messages: $("messages"), prompt: $("prompt"), send: $("send"), stop: $("stop"),
  clear: $("clear"), model: $("model-name"), composer: $("composer"), system: $("system"),
  maxTokens: $("max-tokens"), temperature: $("temperature"), topP: $("top-p"), seed: $("seed"),
};
let history = [];       // finished turns [{role, content}], without the system prompt
let controller = null;  // AbortController of the request in flight, null when idle
let modelId = null;     // from /v1/models

function setBusy(busy) {
  ui.send.disabled = busy;
  ui.stop.disabled = !busy;
  ui.clear.disabled = busy;
}

// Keeps the newest text in view unless the user has scrolled up to read.
function withScroll(update) {
  const m = ui.messages;
  const atEnd = m.scrollHeight - m.scrollTop - m.clientHeight < 48;
  update();
  if (atEnd) m.scrollTop = m.scrollHeight;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  const label = document.createElement("div");
  label.className = "role";
  label.textContent = role;
  const content = document.createElement("div");
  content.className = "content";
  content.textContent = text;
  div.append(label, content);
  withScroll(() => ui.messages.append(div));
  return div;
}

function addNote(msg, cls, text) {
  const note = document.createElement("div");
  note.className = cls;
  note.textContent = text;
  withScroll(() => msg.append(note));
}

// An empty field is left out of the request so the server's default applies.
function readNumber(input, name) {
  const s = input.value.trim();
  if (s === "") return undefined;
  const v = Number(s);
  if (!Number.isFinite(v)) throw new Error(name + ": expected a number, got '" + s + "'");
  return v;
}

function buildRequest() {
  const messages = [];
  const system = ui.system.value.trim();
  if (system !== "") messages.push({ role: "system", content: system });
  messages.push(...history);
  const body = { messages: messages, stream: true };
  if (modelId) body.model = modelId;
  const fields = [["max_tokens", ui.maxTokens], ["temperature", ui.temperature],
                  ["top_p", ui.topP], ["seed", ui.seed]];
  for (const [name, input] of fields) {
    const v = readNumber(input, name);
    if (v !== undefined) body[name] = v;
  }
  return body;
}

async function errorMessage(resp) {
  const text = await resp.text();
  try {
    const j = JSON.parse(text);
    if (j && j.error) return typeof j.error === "string" ? j.error : (j.error.message || text);
  } catch (_) { /* not JSON: show the raw body */ }
  return "HTTP " + resp.status + " " + resp.statusText + (text ? ": " + text.slice(0, 500) : "");
}

// Reads a Server-Sent Events body and calls onData(data) for each event's data; stops early
// when onData returns false. Reads may end anywhere, even inside a UTF-8 sequence or a line,
// so undecoded bytes stay in the decoder and partial lines stay in `buf` until completed.
async function readEvents(resp, onData) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let data = [];
  const feedLines = () => {
    for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
      let line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {  // a blank line ends the event
        if (data.length > 0) {
          const d = data.join("\n");
          data = [];
          if (onData(d) === false) return false;
        }
        continue;
      }
      if (line.startsWith(":")) continue;  // comment / keep-alive
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") data.push(value);
    }
    return true;
  };
  try {
    for (;;) {
      const { done, value } = await reader.read();
      buf += done ? decoder.decode() : decoder.decode(value, { stream: true });
      if (done) buf += "\n\n";  // a last event without its blank line still counts
      if (feedLines() === false || done) return;
    }
  } finally {
    reader.cancel().catch(() => {});  // frees the connection after [DONE] or an error
  }
}

async function send() {
  if (controller) return;
  const text = ui.prompt.value;
  if (text.trim() === "") return;
  history.push({ role: "user", content: text });
  const userMsg = addMessage("user", text);
  ui.prompt.value = "";
  const msg = addMessage("assistant", "");
  const content = msg.querySelector(".content");
  controller = new AbortController();
  setBusy(true);
  const t0 = performance.now();
  let reply = "", chunks = 0, finish = null, sawDone = false;
  try {
    const resp = await fetch("v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Accept": "text/event-stream" },
      body: JSON.stringify(buildRequest()),
      signal: controller.signal,
    });
    if (!resp.ok) throw new Error(await errorMessage(resp));
    await readEvents(resp, (data) => {
      if (data === "[DONE]") { sawDone = true; return false; }
      const j = JSON.parse(data);
      if (j.error) throw new Error(j.error.message || JSON.stringify(j.error));
      const choice = (j.choices || [])[0];
      if (!choice) return true;
      const piece = choice.delta && choice.delta.content;
      if (typeof piece === "string" && piece !== "") {
        reply += piece;
        chunks += 1;
        withScroll(() => { content.textContent = reply; });
      }
      if (choice.finish_reason) finish = choice.finish_reason;
      return true;
    });
    if (!sawDone && !finish) throw new Error("the connection closed before the reply finished");
    history.push({ role: "assistant", content: reply });
    showStats(msg, chunks, t0, finish);
    msg.dataset.done = "true";
  } catch (e) {
    if (e.name === "AbortError") {
      // Keep the partial reply so the conversation still alternates user / assistant.
      history.push({ role: "assistant", content: reply });
      showStats(msg, chunks, t0, "stopped");
      msg.dataset.stopped = "true";
      msg.dataset.done = "true";
    } else {
      // The failed turn leaves the history; put the text back so it can be retried.
      history.pop();
      userMsg.classList.add("failed");
      if (ui.prompt.value === "") ui.prompt.value = text;
      const message = e.message || String(e);
      addNote(msg, "error", "Error: " + message);
      msg.dataset.error = message;
    }
  } finally {
    controller = null;
    setBusy(false);
    ui.prompt.focus();
  }
}

function showStats(msg, chunks, t0, finish) {
  const secs = (performance.now() - t0) / 1000;
  const rate = secs > 0 ? chunks / secs : 0;
  let text = chunks + " tokens \u00b7 " + secs.toFixed(2) + " s \u00b7 " + rate.toFixed(1) + " tokens/s";
  if (finish === "length") text += " \u00b7 hit max tokens";
  else if (finish === "stopped") text += " \u00b7 stopped";
  addNote(msg, "meta", text);
}

async function loadModel() {
  try {
    const resp = await fetch("v1/models");
    if (!resp.ok) throw new Error(await errorMessage(resp));
    const j = await resp.json();
    modelId = (j.data && j.data[0] && j.data[0].id) || null;
    ui.model.textContent = modelId || "(no model)";
    if (modelId) document.title = modelId + " \u2014 hotcold chat";
  } catch (e) {
    ui.model.textContent = "model unavailable";
    ui.model.title = e.message || String(e);
  }
}

ui.composer.addEventListener("submit", (e) => { e.preventDefault(); send(); });
ui.prompt.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    send();
  }
});
ui.stop.addEventListener("click", () => { if (controller) controller.abort(); });
ui.clear.addEventListener("click", () => {
  if (controller) return;
  history = [];
  ui.messages.replaceChildren();
  ui.prompt.focus();
});
loadModel();
</script>
</body>
</html>
)html";

}  // namespace

std::string_view web_chat_html() { return kPage; }

}  // namespace hc
