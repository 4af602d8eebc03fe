"""A property of the call API, drawn by Hypothesis: ``xegemm.load(...)(a, b, ...)`` over small shapes, orders and
views (C, F, transposed, sliced), element types, layouts and a few epilogues either computes D within the
verifier's bounds or raises an xegemm error with a one-line message, leaving ``out`` as it was.

Bounded: a fixed number of derandomized examples (``XEGEMM_CALL_EXAMPLES``, default 60) and a per-example
deadline; one loaded Gemm for the whole test, so each kernel is built once (and comes from the session's
program cache after that)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import xegemm
from xegemm.errors import XegemmError
from xegemm.library.dtypes import dtype, host_dtype

from test_hostile_state import within

pytestmark = pytest.mark.device

EXAMPLES = int(os.environ.get("XEGEMM_CALL_EXAMPLES", "60"))
CONFIG = """\
name: properties
problem: {m: 64, n: 64, k: 64}
types: {a: bf16, b: bf16, acc: f32, c: f32}
tile: {workgroup: [32, 32, 32], subgroups: [1, 2]}
sweep:
  types: [{a: bf16, b: bf16}, {a: f16, b: f16}]
  layout.a: [row, col]
  layout.b: [row, col]
"""


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    path = tmp_path_factory.mktemp("properties") / "properties.yaml"
    path.write_text(CONFIG)
    return xegemm.load(path)


def arrange(data, array: np.ndarray, label: str) -> np.ndarray:
    """``array``'s values as a C-ordered array, an F-ordered one, a transposed view of its transpose, or a
    strided slice of a larger array (Hypothesis chooses)."""
    how = data.draw(st.sampled_from(["C", "F", "T", "slice"]), label=f"{label} order")
    if how == "F":
        return np.asfortranarray(array)
    if how == "T":
        return np.ascontiguousarray(array.T).T
    if how == "slice":
        big = np.zeros((array.shape[0] * 2, array.shape[1] + 3), array.dtype)
        big[::2, 1:array.shape[1] + 1] = array
        return big[::2, 1:array.shape[1] + 1]
    return np.ascontiguousarray(array)


def values(rng, type_name: str, shape) -> np.ndarray:
    return dtype(type_name).round(rng.uniform(-1, 1, size=shape)).astype(host_dtype(type_name))


@settings(max_examples=EXAMPLES, deadline=20_000, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_every_call_matches_numpy_or_is_refused_with_out_untouched(loaded, data):
    gemm = loaded
    m, n, k = (data.draw(st.integers(1, 70), label=size) for size in "mnk")
    type_a = data.draw(st.sampled_from(["bf16", "f16"]), label="type of A")
    type_b = data.draw(st.sampled_from([type_a] * 7 + ["f32"]), label="type of B")    # f32: refused
    k_b = data.draw(st.sampled_from([k] * 7 + [k + 1]), label="K of B")                 # k + 1: refused
    rng = np.random.default_rng(m * 10_000 + n * 100 + k)
    a = arrange(data, values(rng, type_a, (m, k)), "A")
    b = arrange(data, values(rng, type_b, (k_b, n)), "B")
    epilogue = data.draw(st.sampled_from(["none", "alpha", "beta", "bias"]), label="epilogue")
    kwargs, c, bias = {}, None, None
    if epilogue == "alpha":
        kwargs["alpha"] = data.draw(st.sampled_from([2.0, -0.5, 3.0, "x"]), label="alpha")   # "x": refused
    elif epilogue == "beta":
        c = values(rng, "f32", (m, n))
        kwargs.update(beta=0.5)
    elif epilogue == "bias":
        bias = values(rng, "f32", (data.draw(st.sampled_from([n] * 3 + [n + 2]), label="bias length"),))
    out_shape = data.draw(st.sampled_from([(m, n)] * 3 + [(m, n + 1)]), label="out shape")
    out = np.full(out_shape, 7.0, np.float32) if data.draw(st.booleans(), label="out given") else None
    before = None if out is None else out.copy()
    try:
        d = gemm(a, b, c, bias=bias, out=out, **kwargs)
    except XegemmError as exc:
        text = str(exc)
        assert text and "\n" not in text and "Traceback" not in text, text
        assert out is None or np.array_equal(out, before, equal_nan=True), "a refused call wrote into out"
        event(f"refused: {type(exc).__name__}")
        return
    assert k_b == k and type_b == type_a and kwargs.get("alpha") != "x", "a call that should be refused ran"
    assert bias is None or bias.shape == (n,)
    config = gemm.last_kernel.config
    assert d.shape == (m, n)
    assert within(config, a, b, d, c=c, bias=bias) == 0, (gemm.last_kernel.name, m, n, k, epilogue)
    if out is not None:
        assert d is out or np.shares_memory(d, out)
    event(f"computed: {type_a}, A {config.layout.a}, B {config.layout.b}, {epilogue}")
