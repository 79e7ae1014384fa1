"""The llama.cpp reference itself: the build the goldens come from (tools/ref/llamacpp_ref.py).

hotcold's bit-exact tests follow ggml's AVX-512/AVX2 dot products. scripts/setup.sh builds
llama-cpp-python for this CPU without AMX (whose kernels compute differently and crash on some
hosts of this machine kind); the harness refuses any other build with a clear error instead of
a crash or a silently different golden.
"""

from __future__ import annotations

import pytest

import llamacpp_ref  # conftest puts tools/ref on the path


def test_installed_reference_has_no_amx():
    info = llamacpp_ref.system_info()
    assert "CPU" in info, info  # the feature line is there at all
    assert "AMX" not in info, info
    llamacpp_ref.check_build()  # and the harness accepts it


def test_an_amx_build_is_refused(monkeypatch):
    monkeypatch.setattr(llamacpp_ref, "system_info",
                        lambda: "CPU : SSE3 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |")
    with pytest.raises(RuntimeError, match="built with AMX.*rerun scripts/setup.sh"):
        llamacpp_ref.check_build()
