"""The numpy reference of a traced epilogue: every node in float64 with how far the device's f32 value may be
from it, then each output's conversion of both ends of that interval (xegemm.epilogues.outputs' conversions:
round to nearest even, integers saturate), as :func:`xegemm.epilogues.fixed.reference_bounds` does for the fixed
epilogue.  Each op's share of the tolerance is its error rule in :mod:`.registry` (its slope and its
rounding).  Reductions are summed exactly in float64 whatever order the device adds in; their tolerance
counts every addition, and the device's fixed order makes its result the same on every run.
"""

from __future__ import annotations

import numpy as np

from xegemm.library.dtypes import dtype
from xegemm.epilogues.outputs import Bounds, U32, round_to as _round_to
from xegemm.epilogues.graph import Graph
from xegemm.epilogues.registry import OPS, REDUCTIONS

TINY = float(np.finfo(np.float32).tiny)
EXACT_F32 = 2 ** 24     # integers beyond this lose bits when an s32 value is read as f32


def _placed(kind: str, value) -> np.ndarray:
    """An input as an array that broadcasts over (batch, M, N)."""
    v = np.asarray(value, dtype=np.float64)
    if kind == "scalar":
        return v.reshape(())
    if kind == "row":
        return v.reshape(1, -1, 1)
    if kind == "col":
        return v.reshape(1, 1, -1)
    return v if v.ndim == 3 else v[None]


def node_values(graph: Graph, acc: np.ndarray, acc_tol=0.0, inputs: dict | None = None) -> list[tuple]:
    """Per node, (value, tolerance) as float64 arrays that broadcast over (batch, M, N); for a comparison,
    (condition, where it may flip within its operands' tolerances)."""
    inputs = dict(inputs or {})
    u = U32
    out: list[tuple] = []
    with np.errstate(all="ignore"):
        for node in graph.nodes:
            args = [out[a] for a in node.args]
            if node.op == "const":
                out.append((np.float64(node.attr), 0.0))
                continue
            if node.op == "input":
                spec = graph.input(node.attr)
                if node.attr == "acc":
                    x = np.asarray(acc, dtype=np.float64)
                    t = acc_tol + (u * np.abs(x) if dtype(spec.type).is_int else 0.0)
                else:
                    if node.attr not in inputs:
                        raise KeyError(f"epilogue {graph.function} reads input {node.attr!r}, which was not given")
                    x = _placed(spec.kind, inputs[node.attr])
                    if spec.kind != "matrix":
                        x = dtype("f32").round(x)
                    t = u * np.abs(x) * (np.abs(x) > EXACT_F32) if dtype(spec.type).is_int else 0.0
                out.append((x, t))
                continue
            if node.op in REDUCTIONS:
                out.append(_reduce(REDUCTIONS[node.op], *args[0], acc))
                continue
            out.append(_apply(node, args, u))
    return out


def _apply(node, args, u):
    op = OPS[node.op]
    values = [a[0] for a in args]
    tols = [a[1] for a in args]
    rule = op.rule
    if rule == "cast":
        (x,), (t,) = values, tols
        target = dtype(node.attr)
        y = _round_to(target, x)
        spread = np.maximum(y - _round_to(target, x - t), _round_to(target, x + t) - y)
        return y, spread + (u * np.abs(y) if target.is_int and target.bits > 24 else 0.0)
    if rule == "compare":
        (a, b), (ta, tb) = values, tols
        slack = ta + tb     # exact operands compare exactly, equal ones too
        return op.numpy(a, b), (np.abs(a - b) <= slack) & (slack > 0)
    if rule == "where":
        (cond, a, b), (unsure, ta, tb) = values, tols
        chosen = np.where(cond, ta, tb)
        return np.where(cond, a, b), np.where(unsure, np.abs(a - b) + np.maximum(ta, tb), chosen)
    y = op.numpy(*values)
    if rule == "max":
        return y, np.maximum.reduce([np.broadcast_to(t, np.shape(y)) for t in tols]) if len(tols) > 1 else tols[0]
    if rule == "lipschitz":
        a = op.activation
        return y, a.lipschitz * tols[0] + a.error_units * u * (np.abs(y) + 1.0)
    if rule == "monotone":
        (x,), (t,) = values, tols
        spread = np.maximum(np.abs(op.numpy(x + t) - y), np.abs(op.numpy(x - t) - y))
        propagated = np.where(np.isnan(spread), np.inf, spread)
    elif rule == "add":
        propagated = tols[0] + tols[1]
    elif rule == "mul":
        (a, b), (ta, tb) = values, tols
        propagated = np.abs(a) * tb + np.abs(b) * ta + ta * tb
    elif rule == "div":
        (a, b), (ta, tb) = values, tols
        margin = np.abs(b) - tb
        propagated = np.where(margin > 0, (ta + np.abs(y) * tb) / np.where(margin > 0, margin, 1.0), np.inf)
    else:   # pragma: no cover - a registry entry with a rule this module does not know
        raise ValueError(f"op {op.name}: unknown error rule {rule!r}")
    return y, propagated + op.units * u * (np.abs(y) + propagated)


def _reduce(reduction, x, t, acc):
    """A reduction over (batch, M, N) of x known to within t."""
    shape = np.broadcast_shapes(np.shape(acc), np.shape(x))
    x, t = np.broadcast_to(x, shape), np.broadcast_to(t, shape)
    y = reduction.numpy(x)
    if reduction.combine == "max":
        return y, np.max(t, axis=reduction.axes, keepdims=True)
    count = int(np.prod([shape[a] for a in reduction.axes]))
    return y, np.sum(t, axis=reduction.axes, keepdims=True) \
        + 2 * count * U32 * np.sum(np.abs(x), axis=reduction.axes, keepdims=True)


def reference(graph: Graph, acc: np.ndarray, acc_tol=0.0, inputs: dict | None = None) -> dict[str, Bounds]:
    """What each output may be, given the exact accumulator ``acc`` ((batch, M, N) float64 or int64), how far the
    device's accumulator may be from it (``acc_tol``), and the named inputs (``c`` and the others: arrays as
    :func:`xegemm.epilogues.tracer.input_kind` describes them, or numbers).  D and auxiliary matrices are
    (batch, M, N); row reductions (batch, M), column reductions (batch, N), sums (batch,)."""
    acc = np.asarray(acc)
    shape = acc.shape
    if graph.exact_integer:
        y = acc.astype(np.float64)
        for node in graph.nodes[1:]:
            y = OPS[node.op].numpy(y)
        expected = _round_to(dtype(graph.out), y)
        return {"d": Bounds(expected, expected, expected)}
    values = node_values(graph, acc, acc_tol, inputs)
    bounds = {}
    for o in graph.outputs:
        y, t = values[o.node]
        with np.errstate(all="ignore"):     # a NaN or an infinity is what the device must give: exactly that
            t = np.where(np.isfinite(y), t + TINY, 0.0)
            node = graph.nodes[o.node]
            target = dtype(o.type)
            ends = [_round_to(target, v) for v in (y, y - t, y + t)]
        if node.op in REDUCTIONS:
            ends = [np.reshape(e, (shape[0], -1)) if node.kind != "scalar" else np.reshape(e, (shape[0],))
                    for e in ends]
        else:
            ends = [np.broadcast_to(e, shape).copy() for e in ends]
        bounds[o.name] = Bounds(*ends)
    return bounds


def mismatches(bounds: Bounds, got: np.ndarray) -> int:
    """How many elements of ``got`` lie outside [low, high] (a NaN or a shape that differs counts as all)."""
    got = np.asarray(got, dtype=np.float64)
    if got.shape != bounds.expected.shape:
        return max(got.size, bounds.expected.size)
    return int(np.count_nonzero(~within(bounds, got)))


def within(bounds: Bounds, got: np.ndarray) -> np.ndarray:
    """Per element, whether ``got`` lies in [low, high]; a NaN passes only where the reference is NaN (as numpy
    computes it: a NaN operand propagates), an infinity only where the bounds reach it."""
    with np.errstate(invalid="ignore"):
        return ((got >= bounds.low) & (got <= bounds.high)) | (np.isnan(got) & np.isnan(bounds.expected))
