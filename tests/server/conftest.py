"""Fixtures for the `hotcold serve` tests: start a server on a free port, talk to it, stop it.

The server prints `hotcold serve: listening on http://HOST:PORT` on stderr once it accepts
connections; `--port 0` lets the OS pick the port.
"""
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("HOTCOLD_ROOT", Path(__file__).resolve().parents[2]))
BIN = os.environ.get("HOTCOLD_BIN", str(ROOT / "build" / "hotcold"))
CACHE = Path(os.environ.get("HOTCOLD_CACHE", Path.home() / ".cache" / "hotcold"))
SMOLLM2 = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
STORIES = ROOT.parent / "shared" / "models" / "stories260K"
STORIES_GGUF = CACHE / "models" / "stories260K.gguf"  # converted by scripts/setup.sh
LISTEN_RE = re.compile(r"listening on (http://[^\s]+)")


class Server:
    """A running `hotcold serve`; stderr is collected in `self.log`."""

    def __init__(self, model, *args, timeout=120, port=0):
        self.cmd = [BIN, "serve", "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
                    *map(str, args)]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, errors="replace")
        self.log_lines = []
        self.url = None
        ready = threading.Event()

        def pump():
            for line in self.proc.stderr:
                self.log_lines.append(line)
                m = LISTEN_RE.search(line)
                if m and not ready.is_set():
                    self.url = m.group(1).rstrip("/")
                    ready.set()
            ready.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        if not ready.wait(timeout) or self.url is None:
            self.proc.kill()
            raise RuntimeError(f"server did not start: {' '.join(self.cmd)}\n{self.log}")

    @property
    def log(self):
        return "".join(self.log_lines)

    def request(self, method, path, body=None, headers=None, timeout=120):
        """Returns (status, headers, body bytes); never raises for HTTP error statuses."""
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        h = {"Content-Type": "application/json"} if data is not None else {}
        h.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def json(self, method, path, body=None, **kw):
        status, _, raw = self.request(method, path, body, **kw)
        return status, json.loads(raw) if raw else None

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signals the server and returns its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"server did not exit within {timeout} s of {sig!r}\n{self.log}")
        self._pump.join(5)
        return self.proc.returncode


def require_model(path):
    if not Path(path).exists():
        pytest.fail(f"missing model {path}: run scripts/setup.sh")


# serve computes Q4_1 / Q8_0 in block sums by default (docs/SERVER.md): `run` with these flags
# answers what a default server does, bit for bit.
SERVE_KERNELS = ("--decode-kernels", "fast")


def run_cli(*args, timeout=300):
    """`hotcold ARGS...`; returns stdout (raises on a non-zero exit)."""
    r = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{args}: rc={r.returncode}\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def smollm2_server():
    require_model(SMOLLM2)
    srv = Server(SMOLLM2, "--parallel", 4, "-c", 2048, "-t", 2)
    yield srv
    rc = srv.stop()
    assert rc == 0, f"server exit status {rc}\n{srv.log}"
