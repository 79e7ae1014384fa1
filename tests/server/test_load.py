"""The loopback load test (bench/serve_load.py), short: 32 concurrent streaming clients, no
errors, every stream complete and equal to its prompt's greedy text, memory bounded."""
import json
import subprocess
import sys

from conftest import BIN, ROOT, SMOLLM2, require_model


def test_32_streaming_clients(tmp_path):
    require_model(SMOLLM2)
    out = tmp_path / "load.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "serve_load.py"), "-m", str(SMOLLM2),
                        "--bin", BIN, "--clients", "32", "--parallel", "8", "--duration", "15",
                        "--max-tokens", "16", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(out.read_text())
    assert res["requests"] >= 32 and res["ok"] == res["requests"], res
    assert res["errors"] == 0 and res["wrong"] == 0 and res["incomplete"] == 0, res
    assert res["server_exit"] == 0
