"""`hotcold quantize` against llama.cpp's own quantiser (llama_model_quantize through
llama-cpp-python) on SmolLM2-135M-Instruct's F16 file (made by scripts/setup.sh): for each target,
every tensor of the two files has the same type and the same bytes. SmolLM2's rows of 576 are not
a multiple of 256, so the K-quant mixes exercise llama.cpp's per-tensor rules and its fallbacks
(Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0) as well as every quantiser involved."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import MODELS, hotcold, llamacpp_ref

gguf = pytest.importorskip("gguf")

TARGETS = ["Q4_K_M", "Q5_K_M", "Q4_0", "Q5_0", "Q5_1", "Q8_0"]


@pytest.fixture(scope="module")
def f16_model():
    path = MODELS / "SmolLM2-135M-Instruct.F16.gguf"
    if not path.is_file():
        pytest.skip(f"{path.name} not present (scripts/setup.sh makes it with hotcold quantize)")
    return path


@pytest.mark.parametrize("target", TARGETS)
def test_same_types_and_bytes_as_llamacpp(hotcold_bin, f16_model, tmp_path, target):
    ours = tmp_path / f"hotcold.{target}.gguf"
    theirs = tmp_path / f"llamacpp.{target}.gguf"
    hotcold(hotcold_bin, "quantize", "-m", f16_model, "-o", ours, "--type", target, "-t", 2)
    llamacpp_ref.quantize(f16_model, theirs, target.lower(), n_threads=2)
    a = {t.name: t for t in gguf.GGUFReader(str(ours)).tensors}
    b = {t.name: t for t in gguf.GGUFReader(str(theirs)).tensors}
    assert sorted(a) == sorted(b)
    wrong_type = [f"{n}: {a[n].tensor_type.name} vs {b[n].tensor_type.name}"
                  for n in sorted(a) if a[n].tensor_type != b[n].tensor_type]
    assert not wrong_type, f"{target}: tensor types differ from llama.cpp's:\n" + "\n".join(wrong_type)
    wrong_bytes = [n for n in sorted(a)
                   if not np.array_equal(np.asarray(a[n].data).view(np.uint8).ravel(),
                                         np.asarray(b[n].data).view(np.uint8).ravel())]
    assert not wrong_bytes, f"{target}: bytes differ from llama.cpp's in {len(wrong_bytes)} " \
                            f"tensors, first {wrong_bytes[:5]}"
    types = sorted({t.tensor_type.name for t in a.values()})
    print(f"{target}: {len(a)} tensors identical to llama.cpp's ({', '.join(types)})")
