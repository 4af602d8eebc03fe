"""The call API for a traced epilogue (docs/epilogues.md): ``gemm(a, b, c=None, **named_inputs)`` returns D, or a
dict of D (``"d"``) and the extra outputs.

A named input's kind is the config's (``epilogue.inputs``, or the function's ``xegemm.epilogue(inputs=...)``)
or, undeclared, the array's (:func:`xegemm.epilogues.tracer.input_kind`: a number is a scalar, (M, 1) a row
vector, (N,) or (1, N) a column vector, (M, N) or (batch, M, N) a matrix); each kind is a kernel of its own, so
the kinds are part of the call's dispatch key.  Vectors and scalars are f32; a matrix is of its declared type
(default C's).  Arrays are host (numpy) arrays, copied to the device per call.
"""

from __future__ import annotations

import inspect

import numpy as np

from xegemm.api.errors import DTypeMismatchError, ShapeMismatchError
from xegemm.api.operands import expected_dtype, is_device_array
from xegemm.config import Config
from xegemm.epilogues.config import function_of
from xegemm.epilogues.graph import RESERVED, Graph, kind_shape
from xegemm.epilogues.tracer import EpilogueFunction, input_kind
from xegemm.epilogues.plan import input_param
from xegemm.errors import XegemmError


def call_inputs(config: Config, named: dict, m: int, n: int) -> tuple:
    """The ``epilogue.inputs`` of a call: the declared kinds, and the kinds of the arrays given for the others."""
    e = config.epilogue
    declared = {name: (kind, t) for name, kind, t in e.inputs}
    if isinstance(e.function, EpilogueFunction):
        for name, spec in e.function.inputs.items():
            kind, t = (spec.get("kind"), spec.get("type")) if isinstance(spec, dict) else (spec, None)
            declared.setdefault(name, (kind, t))
    fn = function_of(config)
    fn = fn.function if isinstance(fn, EpilogueFunction) else fn
    for name in inspect.signature(fn).parameters:
        if name not in RESERVED and name not in named:
            raise ShapeMismatchError(f"epilogue {fn.__qualname__} reads input {name!r}: pass {name}=...")
    for name, value in named.items():
        if is_device_array(value):
            raise XegemmError(f"input {name}: a traced epilogue's inputs are host (numpy) arrays or numbers")
        if name not in declared:
            try:
                declared[name] = (input_kind(value, m, n), None)
            except ValueError as exc:
                raise ShapeMismatchError(f"input {name}: {exc}") from None
    return tuple((name, kind, t) for name, (kind, t) in declared.items())


def check_named(graph: Graph, named: dict, m: int, n: int, batch: int, batched: bool) -> None:
    """Every input the graph (the chosen kernel's plan's) reads is given, with its shape and dtype; nothing else
    is given."""
    wanted = {i.name: i for i in graph.inputs if i.name not in ("acc", "c")}
    extra = sorted(set(named) - set(wanted))
    if extra:
        raise ShapeMismatchError(f"epilogue {graph.function} takes no input {extra[0]!r} (it reads "
                                 f"{', '.join(wanted) or 'no named input'})")
    missing = sorted(set(wanted) - set(named))
    if missing:
        raise ShapeMismatchError(f"epilogue {graph.function} reads input {missing[0]!r}: pass {missing[0]}=...")
    for name, i in wanted.items():
        value = named[name]
        if i.kind == "matrix":
            shapes = [(batch, m, n)] + ([(m, n)] if not batched or batch == 1 else [])
            if np.shape(value) not in shapes:
                raise ShapeMismatchError(f"input {name} is {np.shape(value)}; a matrix input is "
                                         f"{' or '.join(map(str, shapes))}")
            want = expected_dtype(i.type, False)
            if np.asarray(value).dtype != want:
                raise DTypeMismatchError(f"input {name} has dtype {np.asarray(value).dtype}; expected {want} ({i.type})")
        elif i.kind != "scalar" and np.size(value) != (m if i.kind == "row" else n):
            raise ShapeMismatchError(f"input {name} has {np.size(value)} values; a {i.kind} vector has "
                                     f"{m if i.kind == 'row' else n}")


def named_buffers(graph: Graph, named: dict, batch: int, m: int, n: int) -> tuple[dict, dict]:
    """(host arrays by kernel parameter, scalars by kernel parameter) of a call's named inputs."""
    arrays, scalars = {}, {}
    for name, value in named.items():
        i, param = graph.input(name), input_param(name)
        if i.kind == "scalar":
            scalars[param] = float(value)
        elif i.kind == "matrix":
            arrays[param] = np.ascontiguousarray(np.broadcast_to(value, (batch, m, n))).reshape(-1).view(np.uint8)
        else:
            arrays[param] = np.ascontiguousarray(value, np.float32).reshape(-1)
    return arrays, scalars


def outputs_of(graph: Graph, d_shape: tuple) -> list[tuple[str, str, tuple]]:
    """(kernel parameter, type, shape) of each extra output: an auxiliary matrix is shaped as D, a row reduction
    (batch, M), a column reduction (batch, N), a sum (batch,) (without the batch for an unbatched call)."""
    *batch, m, n = d_shape
    return [(f"out_{o.name}", o.type, kind_shape(graph.nodes[o.node].kind, m, n, tuple(batch)))
            for o in graph.outputs[1:]]
