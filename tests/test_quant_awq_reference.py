"""AWQ weights against AutoAWQ's own dequantization: ``awq.utils.packing_utils.dequantize_gemm`` (AutoAWQ 0.2.9,
the unpacking its GEMM modules fall back to: the int32 words unpacked, AutoAWQ's column order
``[0, 2, 4, 6, 1, 3, 5, 7]`` reversed, ``(q - z) * s`` in f16).  AutoAWQ is installed by `make test` without its
dependencies (``pip install --no-deps autoawq==0.2.9``: its package imports transformers and accelerate, so the one
module, which imports only torch, is loaded from its file).  The arrays are xegemm.quant's AWQ packing of random
weights, on a ragged shape; read with AutoAWQ's order ignored they must not match."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import xegemm
from xegemm.config import config_from_text
from xegemm.quant import dequantize, quantize
from xegemm.quant.codec import QuantizedMatrix
from xegemm.quant.packing import AWQ_ORDER, unpack_words

torch = pytest.importorskip("torch", reason="AutoAWQ runs on torch (pip install torch==2.13.0)")
AWQ_MISSING = ("AutoAWQ is not installed: `make test` installs it (pip install --no-deps --no-build-isolation "
               "autoawq==0.2.9, after torch)")
K, N, M, GROUP = 384, 72, 37, 128
CONFIG = f"""\
problem: {{m: {M}, n: {N}, k: {K}}}
types: {{a: f16, b: u4, acc: f32, c: f32}}
quant: {{format: awq, group: {GROUP}, scale: f16, zero: u4}}
tile: {{workgroup: [16, 64, 32], subgroups: [1, 2], subgroup_size: 16}}
"""


@pytest.fixture(scope="module")
def autoawq():
    spec = importlib.util.find_spec("awq")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(AWQ_MISSING)
    path = Path(next(iter(spec.submodule_search_locations))) / "utils" / "packing_utils.py"
    module_spec = importlib.util.spec_from_file_location("autoawq_packing_utils", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(11)
    return quantize(rng.standard_normal((K, N)), "awq", group=GROUP)


def _reference(autoawq, q: QuantizedMatrix) -> np.ndarray:
    w = autoawq.dequantize_gemm(torch.from_numpy(q.qweight), torch.from_numpy(q.zeros),
                                torch.from_numpy(np.asarray(q.scales)), 4, GROUP)
    assert w.dtype == torch.float16 and tuple(w.shape) == (K, N)
    return w.numpy()


def test_xegemms_awq_values_are_autoawqs_bit_for_bit(autoawq, weights):
    ours = np.asarray(dequantize(weights, "f16"), np.float16)
    theirs = _reference(autoawq, weights)
    assert np.array_equal(ours.view(np.uint16), theirs.view(np.uint16))


def test_the_call_api_on_awq_arrays_matches_autoawqs_weights(autoawq, weights):
    gemm = xegemm.load(config_from_text(CONFIG))
    a = np.random.default_rng(12).standard_normal((M, K)).astype(np.float16)
    d = gemm(a, weights.qweight, scales=weights.scales, zeros=weights.zeros).astype(np.float64)
    w = _reference(autoawq, weights).astype(np.float64)
    want = a.astype(np.float64) @ w
    bound = 2 * (K + 1) * 2.0 ** -24 * (np.abs(a.astype(np.float64)) @ np.abs(w)) + 1e-30   # f32 sums of K products
    assert np.all(np.abs(d - want) <= bound), float(np.max(np.abs(d - want) - bound))


def test_awq_words_read_in_plain_column_order_do_not_match(autoawq, weights):
    """AutoAWQ's codes (its unpacking and order reversal) are xegemm's reading with AWQ's interleave, and not the
    reading without it (the mutant: GPTQ-style in-order columns)."""
    codes, _ = autoawq.reverse_awq_order(*autoawq.unpack_awq(torch.from_numpy(weights.qweight),
                                                             torch.from_numpy(weights.zeros), 4), 4)
    theirs = (codes & 15).numpy()
    assert np.array_equal(unpack_words(weights.qweight, 4, axis=1, order=AWQ_ORDER), theirs)
    assert not np.array_equal(unpack_words(weights.qweight, 4, axis=1), theirs)
