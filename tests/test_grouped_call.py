"""``Gemm.grouped`` and ``Gemm.moe`` on the CPU device: one launch per call, results against numpy per group,
and the call's mistakes as one-line errors before anything is launched.  Two builds (one grouped kernel, one
MoE kernel); the smallest tile keeps each to seconds."""

import ml_dtypes
import numpy as np
import pytest

import xegemm
from xegemm.api.errors import LayoutError, ShapeMismatchError
from xegemm.config import config_from_text

BF16 = ml_dtypes.bfloat16
CONFIG = """\
problem: {m: 64, n: 64, k: 64}
types: {a: bf16, b: bf16, acc: f32, c: f32}
tile: {workgroup: [8, 16, 16], subgroups: [1, 1], split_k: 2}
sweep: {layout.b: [row, col]}
"""


@pytest.fixture(scope="module")
def gemm(sycl_device):
    # split_k of the loaded variant gives way to the persistent walk in grouped calls
    return xegemm.load(config_from_text(CONFIG), device=sycl_device)


def _bf16(rng, shape):
    return rng.standard_normal(shape).astype(BF16)


def _close(got, want, k):
    # bf16 inputs are exact in f32; only the f32 accumulation order differs from numpy's
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * k * max(1.0, np.abs(want).max(initial=0)))


@pytest.mark.device
def test_grouped_computes_every_group_in_one_launch(gemm):
    rng = np.random.default_rng(1)
    shapes = [(40, 24, 40), (0, 32, 32), (17, 9, 33), (1, 1, 8), (33, 70, 20)]
    a = [_bf16(rng, (m, k)) for m, n, k in shapes]
    b = [_bf16(rng, (k, n)) for m, n, k in shapes]
    c = [rng.standard_normal((m, n)).astype(np.float32) for m, n, k in shapes]
    bias = [rng.standard_normal(m).astype(np.float32) for m, n, k in shapes]
    d = gemm.grouped(a, b, c, alpha=0.5, beta=2.0, bias=bias)
    assert gemm.last_kernel.name.endswith("_alpha_beta_biasrow_groupedstatic")
    assert [x.shape for x in d] == [(m, n) for m, n, k in shapes]
    for (m, n, k), ai, bi, ci, vi, di in zip(shapes, a, b, c, bias, d):
        want = 0.5 * (ai.astype(np.float64) @ bi.astype(np.float64)) + 2.0 * ci + vi[:, None]
        _close(di, want, k)


@pytest.mark.device
def test_moe_computes_every_expert_from_the_rows_per_expert(gemm):
    rng = np.random.default_rng(2)
    rows = [0, 70, 3, 0, 0, 129, 1, 0]
    t, k, n, e = sum(rows), 48, 40, len(rows)
    a = _bf16(rng, (t, k))
    b = np.swapaxes(_bf16(rng, (e, n, k)), 1, 2)         # E x N x K in memory: column-major B per expert
    bias = rng.standard_normal((e, n)).astype(np.float32)
    d = gemm.moe(a, b, rows, bias=bias)
    assert "_tnt_" in gemm.last_kernel.name and gemm.last_kernel.name.endswith("_biascol_groupedstatic")
    offsets = np.cumsum([0, *rows])
    want = np.concatenate([a[offsets[x]:offsets[x + 1]].astype(np.float64) @ b[x].astype(np.float64) + bias[x]
                           for x in range(e)])
    assert d.shape == (t, n)
    _close(d, want, k)


def test_a_grouped_call_names_the_mistake(gemm):
    rng = np.random.default_rng(3)
    a, b = _bf16(rng, (4, 8)), _bf16(rng, (8, 5))
    with pytest.raises(ShapeMismatchError, match="group 1: A is 4 x 8 but B is 7 x 5: K differs"):
        gemm.grouped([a, a], [b, _bf16(rng, (7, 5))])
    with pytest.raises(ShapeMismatchError, match="rows_per_expert sums to 3 but A has 4 rows"):
        gemm.moe(a, _bf16(rng, (2, 8, 5)), [1, 2])
    with pytest.raises(ShapeMismatchError, match="rows_per_expert has 3 entries but B holds 2 experts"):
        gemm.moe(a, _bf16(rng, (2, 8, 5)), [1, 2, 1])
    with pytest.raises(LayoutError, match="mix row-major and column-major"):
        gemm.grouped([a, np.asfortranarray(_bf16(rng, (6, 8)))], [b, b])
    with pytest.raises(ShapeMismatchError, match="bias has 1 entries for 2 groups"):
        gemm.grouped([a, a], [b, b], bias=[np.zeros(4, np.float32)])
    with pytest.raises(ShapeMismatchError, match="bias has shape"):
        gemm.moe(a, _bf16(rng, (2, 8, 5)), [1, 3], bias=np.zeros(3, np.float32))
