"""SmolLM2-135M-Instruct byte-level BPE tokenization identical to llama.cpp.

`hotcold tokenize -p TEXT`: add_special + parse_special (<|im_start|> is one token);
`--no-bos`: neither (special-token text is plain text). Texts cover Unicode, emoji (ZWJ
sequences, flags, skin tones), CJK, other scripts, code, whitespace runs, CRLF, numbers,
contractions and case. `tokenize -f` on the whole WikiText-2 test file (1.3 MB, CRLF).
"""

from __future__ import annotations

import pytest

from conftest import SHARED, first_difference, hotcold, hotcold_tokenize, require_file
from smollm2_cases import model_refs

TEXTS = [
    "Hello world",
    "",
    " ",
    "   leading spaces and trailing spaces   ",
    "multiple     spaces\tand\t\ttabs\t",
    "\n\n\nnewlines\nand\r\nCRLF\r\n\r\n",
    "Unicode: caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m \u2014 \u201cquotes\u201d "
    "\u2018single\u2019 \u2026 \u00a0non-breaking\u00a0space zero\u200bwidth",
    "Emoji: \U0001F600\U0001F389\U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 "
    "\U0001F1EB\U0001F1F7 \u2764\ufe0f",
    "CJK: \u4f60\u597d\uff0c\u4e16\u754c\uff01\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8"
    "\u3002\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "Scripts: \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0420\u0443\u0441\u0441\u043a"
    "\u0438\u0439 \u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629 "
    "\u0939\u093f\u0928\u094d\u0926\u0940",
    "Numbers: 0 1 12 123 1234 12345 123456789 3.14159 -42 +7 1e10 1,000,000 2024-01-15 "
    "12:30:45 $19.99 50%",
    "def f(x):\n    return x**2 + 1  # comment\n\nclass A:\n\tpass\n",
    "if (a != b && c >= d) { printf(\"%d\\n\", a[i++]); } // C++ <vector>",
    "I'm sure they'll say we've done it, don't you? It's JOHN's and Mary'S.",
    "HELLO World hello WORLD HeLLo",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "URLs: https://example.com/path?q=1&r=2#frag user@example.org C:\\Windows\\path",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|> text with <|im_end|> specials",
]


@pytest.fixture(scope="module")
def q41():
    with model_refs() as get:
        yield get("Q4_1")


@pytest.mark.parametrize("no_bos", [False, True], ids=["special", "no-bos"])
def test_tokenize_texts(hotcold_bin, q41, no_bos):
    path, ref = q41
    failures = []
    for text in TEXTS:
        want = ref.tokenize(text, add_special=not no_bos, parse_special=not no_bos)
        got = hotcold_tokenize(hotcold_bin, path, text, no_bos)
        if got != want:
            failures.append(f"{text!r}:\n  hotcold   {got}\n  llama.cpp {want}")
    assert not failures, f"{len(failures)} of {len(TEXTS)} differ:\n" + "\n".join(failures)


def test_tokenize_whole_file(hotcold_bin, q41, tmp_path):
    path, ref = q41
    src = require_file(SHARED / "data" / "wikitext-2" / "wiki.test.raw", "../shared is missing")
    data = src.read_bytes().rstrip(b"\r\n")  # no trailing newline: no stripping ambiguity
    f = tmp_path / "wiki.txt"
    f.write_bytes(data)
    want = ref.tokenize(data, add_special=True, parse_special=True)
    got = [int(x) for x in hotcold(hotcold_bin, "tokenize", "-m", path, "-f", f).split()]
    assert got == want, first_difference(got, want)
