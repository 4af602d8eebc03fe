"""The example epilogues of docs/epilogues.md, as plain functions, shared by the host and the device tests of
traced epilogues (tests/test_epilogue_graph.py, tests/test_epilogue_graph_device.py)."""

from xegemm import ops


def bias_gelu(acc, bias):
    """Bias + GELU, the pre-activation as a second output."""
    pre = acc + bias
    return {"d": ops.gelu(pre), "pre": pre}


def residual(acc, c):
    """The residual add (stored as bf16 by the tests)."""
    return acc + c


def gated(acc, up):
    """A gated unit: silu(acc) * up, up an auxiliary input matrix."""
    return ops.silu(acc) * up


def scaled_s8(acc, scale):
    """A per-row scale times acc, clamped (stored as s8 by the tests)."""
    return ops.clamp(scale * acc, -100.0, 100.0)


def row_stats(acc, bias):
    """relu(acc + bias) with its row, column and whole-tile reductions."""
    y = ops.relu(acc + bias)
    return {"d": y, "rowmax": ops.row_max(y), "rowsum": ops.row_sum(y), "colsum": ops.col_sum(y),
            "colmax": ops.col_max(y), "total": ops.sum(y)}


def activations(acc):
    """The five activations of the fixed epilogue, traced in one function (each term kept apart by a weight)."""
    return (ops.relu(acc) + 0.5 * ops.clamp(acc, -0.25, 0.5) + 0.25 * ops.gelu(acc)
            - 0.125 * ops.gelu(acc, approximate="tanh") + 2.0 * ops.silu(acc))


def bias_gelu_dropped(acc, bias):
    """bias_gelu with its GELU lost (a broken kernel for the device tests)."""
    pre = acc + bias
    return {"d": pre, "pre": pre}


def row_stats_wrong_axis(acc, bias):
    """row_stats with its row sum taken over columns (a broken kernel for the device tests)."""
    y = ops.relu(acc + bias)
    return {"d": y, "rowmax": ops.row_max(y), "rowsum": ops.col_sum(y), "colsum": ops.col_sum(y),
            "colmax": ops.col_max(y), "total": ops.sum(y)}


def gated_pre(acc, up):
    """A gated unit that also stores its activation: an auxiliary input and an auxiliary output."""
    act = ops.silu(acc)
    return {"d": act * up, "act": act}
