"""`cmake --install BUILD --prefix PREFIX` gives a hotcold that works from any folder: the binary
on the PATH, its HTTP module (serve), the eval data (eval), and models by name.

Runs the installed binary from a scratch folder that has no ../shared beside it and is not the
checkout, so nothing can be found by the source tree's relative paths."""
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("HOTCOLD_ROOT", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("HOTCOLD_BUILD_DIR", ROOT / "build"))
CMAKE = os.environ.get("HOTCOLD_CMAKE", "cmake")
STORIES = ROOT.parent / "shared" / "models" / "stories260K"


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    p = tmp_path_factory.mktemp("prefix")
    r = subprocess.run([CMAKE, "--install", str(BUILD), "--prefix", str(p)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return p


@pytest.fixture()
def env(prefix, tmp_path):
    """PATH with the installed bin first, a model cache of our own, no HOTCOLD_DATA."""
    e = dict(os.environ)
    e["PATH"] = f"{prefix / 'bin'}:{e.get('PATH', '')}"
    e["HOTCOLD_CACHE"] = str(tmp_path / "cache")
    e["LLAMA_CACHE"] = str(tmp_path / "llama-cache")
    e.pop("HOTCOLD_DATA", None)
    return e


def hotcold(env, cwd, *args, timeout=300):
    return subprocess.run(["hotcold", *map(str, args)], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def stories_model(env, cwd):
    """stories260K converted by the installed binary into the model cache; returns its path."""
    models = Path(env["HOTCOLD_CACHE"]) / "models"
    models.mkdir(parents=True, exist_ok=True)
    out = models / "stories260K.gguf"
    r = hotcold(env, cwd, "convert", "--llama2c", STORIES / "stories260K.bin",
                "--tokenizer", STORIES / "tok512.bin", "-o", out)
    assert r.returncode == 0, r.stderr
    return out


def test_layout(prefix):
    assert os.access(prefix / "bin" / "hotcold", os.X_OK)
    assert (prefix / "lib" / "hotcold" / "libhotcold_http.so").is_file()
    data = prefix / "share" / "hotcold" / "data"
    for f in ["wikitext-2/wiki.test.raw", "tinystories/tinystories_val_head.txt",
              "humaneval/HumanEval.jsonl.gz", "mbpp/mbpp.jsonl", "README.shared.md"]:
        assert (data / f).is_file(), f
    if (BUILD / "libhotcold_cuda.so").exists():
        assert (prefix / "lib" / "hotcold" / "libhotcold_cuda.so").is_file()


def test_run_by_name_from_any_folder(env, tmp_path):
    stories_model(env, tmp_path)
    r = hotcold(env, tmp_path, "run", "-m", "stories260K", "-p", "Once upon a time", "-n", 8,
                "--temp", 0)
    assert r.returncode == 0, r.stderr
    built = subprocess.run([str(BUILD / "hotcold"), "run", "-m",
                            Path(env["HOTCOLD_CACHE"]) / "models" / "stories260K.gguf", "-p",
                            "Once upon a time", "-n", "8", "--temp", "0"],
                           capture_output=True, text=True, timeout=120)
    assert r.stdout == built.stdout and r.stdout.strip(), (r.stdout, built.stdout)
    listed = hotcold(env, tmp_path, "models")
    assert listed.returncode == 0 and re.search(r"^stories260K +1\.1 MiB +F32 +llama$",
                                                listed.stdout, re.M), listed.stdout


def test_serve_finds_its_module(env, tmp_path):
    stories_model(env, tmp_path)
    p = subprocess.Popen(["hotcold", "serve", "-m", "stories260K", "--port", "0"], env=env,
                         cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        deadline = time.time() + 60
        while time.time() < deadline and url is None:
            line = p.stderr.readline()
            if not line:
                break
            m = re.search(r"listening on (http://\S+)", line)
            url = m.group(1) if m else None
        assert url, "serve did not start"
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}).encode()
        req = urllib.request.Request(url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert json.loads(resp.read())["choices"][0]["text"]
    finally:
        p.terminate()
        assert p.wait(60) == 0


def test_eval_finds_installed_data(env, prefix, tmp_path):
    model = stories_model(env, tmp_path)
    r = hotcold(env, tmp_path, "eval", "-m", "stories260K", "--tasks", "wikitext2",
                "--ppl-chunks", 1, "-o", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert "wikitext2" in json.dumps(res)
    # Without the installed data, the error says where it looked and what to do.
    data = prefix / "share" / "hotcold" / "data"
    moved = prefix / "share" / "hotcold" / "data.moved"
    data.rename(moved)
    try:
        r = hotcold(env, tmp_path, "eval", "-m", model, "--tasks", "wikitext2,mbpp", "-o",
                    tmp_path / "out2")
    finally:
        moved.rename(data)
    assert r.returncode == 1, r.stderr
    err = r.stderr
    assert "wikitext-2/wiki.test.raw, mbpp/mbpp.jsonl" in err, err
    assert str(data) in err and "../shared/data" in err, err
    assert "--data DIR" in err and "HOTCOLD_DATA" in err, err
    # HOTCOLD_DATA names another folder.
    shutil.copytree(data / "wikitext-2", tmp_path / "mydata" / "wikitext-2")
    env2 = dict(env, HOTCOLD_DATA=str(tmp_path / "mydata"))
    r = hotcold(env2, tmp_path, "eval", "-m", model, "--tasks", "wikitext2", "--ppl-chunks", 1,
                "-o", tmp_path / "out3")
    assert r.returncode == 0, r.stderr
