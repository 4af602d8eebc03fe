"""``xegemm.load(source)`` -> :class:`Gemm`, called on arrays like a function: ``D = gemm(A, B)``.

A :class:`Gemm` holds the variants of its source (a config, its sweep, or a tuned ``best.yaml`` with
``best.json``'s measurements) and, per call, picks one for the call's (M, N, K, batch, types, layouts and
epilogue): the tuned winner of that shape if there is one, else the fastest measured variant legal for it,
else the first legal one (:meth:`Gemm.choose`; :attr:`Gemm.last_kernel` says which ran and why).  A kernel
takes M, N and K at run time, so one build serves every shape it is legal for; builds come from the persistent
program cache (:mod:`xegemm.runtime.program_cache`), and a shape's choice and argument sizes are worked out on
its first call only.  Every check runs before anything is launched and before ``out`` is touched
(:mod:`xegemm.api.errors`).

Arguments are bound through :class:`xegemm.kernel.arguments.KernelCall`, the description the exporter prints too:
a new kernel argument is one entry there and one name in the buffers or scalars handed to ``bind``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

import numpy as np

from xegemm.api import grouped as grouped_calls
from xegemm.api.errors import (AlignmentError, DeviceMemoryError, DTypeMismatchError, LayoutError, NoKernelError,
                               ShapeMismatchError)
from xegemm.api import traced
from xegemm.api import foreign
from xegemm.api.operands import Operand, copies, expected_dtype, host_bytes, operand, relayouts
from xegemm.api.quantized import QuantizedB, quantized_a_scales, quantized_b
from xegemm.kernel.arguments import KernelCall
from xegemm.config import Config, ConfigError, Variant, expand
from xegemm.library.dtypes import dtype
from xegemm.epilogues.fixed import BIAS_KINDS
from xegemm.errors import XegemmError
from xegemm.evaluate import plan_variant, render_variant
from xegemm.evaluate.device import device_build_options, submit_in_order
from xegemm.lowering import Lowering, choose_lowering
from xegemm.quant import operand_spec
from xegemm.quant.checkpoint import LayerWeights
from xegemm.runtime.devices import describe, select_sycl_device
from xegemm.runtime.program import BuildError, build_program, from_device, make_queue, read_into, to_device, write_async
from xegemm.runtime.sycl import dpmem
from xegemm.config.shapes import Shape
from xegemm.config.sources import load_source

ML_NAMES = ("bfloat16", "int4", "uint4")
MAX_BOUND = 16             # argument lists kept per shape (one per alpha, beta pair)
DEVICE_ALIGNMENT = 64      # bytes: the base of every device operand (the Xe 2D block surface rule, docs/use.md)
SINGLE = {"problem.groups": (), "moe.experts": 0, "moe.rows": ()}   # a call is one GEMM, whatever the config's groups


@dataclass(frozen=True)
class Candidate:
    """One variant of the source: its config (at its own problem), and what was measured of it there."""

    index: int
    config: Config
    tuned: bool                 # the tuned winner of its own problem (best.json says so)
    gflops: float | None        # measured at its own problem

    @property
    def shape(self) -> Shape:
        p = self.config.problem
        return Shape(p.m, p.n, p.k, p.batch)


@dataclass
class LastKernel:
    """What the last call ran: the kernel(s), the variant it came from, why it was chosen, and its event."""

    name: str
    variant: str
    reason: str
    shape: str
    config: Config = field(repr=False)
    event: object = field(default=None, repr=False)
    copies: tuple[str, ...] = ()   # host conversions before the launch: relayout copies, checkpoint arrays' views

    @property
    def kernel_ms(self) -> float:
        """The device time of the launch(es), from the profiling events."""
        return (self.event.profiling_info_end - self.event.profiling_info_start) * 1e-6


@dataclass
class _Choice:
    """A shape's decision, kept for its later calls: the plan's call description, sizes, layouts, reason."""

    candidate: Candidate
    config: Config
    call: KernelCall
    sizes: dict
    layout_a: str
    layout_b: str
    reason: str
    source: str
    options: str
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    pools: dict = field(default_factory=dict, repr=False)       # queue -> _Pool


class _Pool:
    """A shape's device buffers on one queue (A, B, D, C, bias, workspace) and the argument lists bound to them
    per (alpha, beta)."""

    def __init__(self, queue, choice: _Choice):
        s, batch = choice.sizes, choice.config.problem.batch
        reads_c = choice.config.epilogue.beta != 0.0
        bias = choice.config.epilogue.bias
        length = {"none": 1, "row": choice.config.problem.m, "col": choice.config.problem.n}[bias]
        self.buffers = {"A": to_device(queue, np.zeros(max(4, s["stride_a"] * batch), np.uint8)),
                        "B": to_device(queue, np.zeros(max(4, s["stride_b"] * batch), np.uint8)),
                        "D": to_device(queue, np.zeros(max(4, s["stride_c"] * batch), np.uint8)),
                        "C": to_device(queue, np.zeros(max(4, s["stride_c"] * batch if reads_c else 4), np.uint8)),
                        "bias": to_device(queue, np.zeros(max(4, 4 * length), np.uint8)),
                        "workspace": to_device(queue, np.zeros(max(4, s["workspace_bytes"]), np.uint8))}
        for name, stride in (("scales", "stride_s"), ("zeros", "stride_z"),     # a quantized B's (else unused)
                             ("a_scales", "stride_sa")):                             # an FP8 A's (W8A8)
            self.buffers[name] = to_device(queue, np.zeros(max(4, s.get(stride, 0) * batch), np.uint8))
        self.bound: dict[tuple, list] = {}


def _candidates(config: Config, best: dict) -> list[Candidate]:
    measured = {}
    for entry in (best.get("shapes") or {}).values():
        if isinstance(entry, dict) and entry.get("best") and entry.get("shape"):
            measured[Shape(**entry["shape"])] = entry["best"].get("gflops") or entry["best"].get("value")
    out = []
    for variant in expand(config):
        if variant.rejected:
            continue
        p = variant.config.problem
        shape = Shape(p.m, p.n, p.k, p.batch)
        out.append(Candidate(len(out), variant.config, shape in measured, measured.get(shape)))
    if not out:
        raise XegemmError(f"{config.source}: every variant of the sweep is rejected by its constraints")
    return out


def load(source, *, device=None, epilogue=None) -> Gemm:
    """A callable GEMM from a config file, a tune output directory (its best.yaml and best.json) or a Config,
    on ``device`` (a dpctl filter string, a dpctl device, or None for xegemm's default device); ``epilogue``: a
    Python function (or ``xegemm.epilogue``) as the traced epilogue instead of the config's (docs/epilogues.md)."""
    config, best, label = load_source(source)
    if epilogue is not None:
        config = config.with_overrides({"epilogue.function": epilogue})
    return Gemm(_candidates(config, best), device=device, label=label)


class Gemm:
    """``gemm(a, b, c=None, *, scales=None, zeros=None, a_scales=None, alpha=None, beta=None, bias=None,
    out=None)`` computes ``D = activation(alpha * (A @ B) + beta * C + bias)`` with the loaded kernels (see the
    module docstring).  A quantized B (a ``quant:`` section) is passed as its format stores it: ``b`` its qweight,
    ``scales`` and ``zeros`` (xegemm.api.quantized); B is then ``dequantize(b)`` in the compute type.  An FP8 A
    (W8A8, a ``quant_a:`` section) is ``a`` as ml_dtypes float8 values with its scales ``a_scales``."""

    def __init__(self, candidates: list[Candidate], device=None, label: str = ""):
        self.candidates = candidates
        self.label = label
        self.sycl_device = device if hasattr(device, "filter_string") else select_sycl_device(device)
        self.info = describe(self.sycl_device)
        self.lowering: Lowering = choose_lowering(self.info)
        self.queue = make_queue(self.sycl_device, profiling=True)
        self.last_kernel: LastKernel | None = None
        self._choices: dict[tuple, _Choice] = {}
        self._sources: dict[str, str] = {}
        self._kernels: dict[tuple, list] = {}
        self._grouped: dict[tuple, tuple] = {}         # grouped / MoE calls' variant per types, layouts, epilogue
        self._lock = threading.Lock()
        self._host_types = {(c.config.types.a, c.config.types.b) for c in candidates}
        quant = {operand_spec(c.config, "b") for c in candidates}
        if len(quant) > 1:
            raise XegemmError(f"{label}: the variants quantize B differently ({', '.join(sorted(str(q) for q in quant))}); "
                              "a loaded GEMM takes one description of a quantized B")
        self.quant = next(iter(quant))      # B's QuantSpec (xegemm.quant), or None: B is not quantized
        quant_a = {operand_spec(c.config, "a") for c in candidates}
        if len(quant_a) > 1:
            raise XegemmError(f"{label}: the variants quantize A differently; a loaded GEMM takes one description "
                              "of an FP8 A")
        self.quant_a = next(iter(quant_a))  # an FP8 A's QuantSpec (W8A8), or None

    def __repr__(self) -> str:
        return f"<xegemm.Gemm {self.label!r}: {len(self.candidates)} variant(s) on {self.info.filter_string}>"

    # -- the call -----------------------------------------------------------------------------------------------
    def __call__(self, a, b, c=None, *, scales=None, zeros=None, a_scales=None, alpha=None, beta=None, bias=None,
                 out=None, g_idx=None, gptq_version=None, copy=True, **named):
        frameworks = foreign.Frameworks()       # tensors with __dlpack__ (torch): host views, D back in their framework
        a, b, c, scales, zeros, a_scales, bias, g_idx = frameworks.take(a, b, c, scales, zeros, a_scales, bias, g_idx)
        if isinstance(b, LayerWeights):         # xegemm.quant.from_safetensors: the layer's arrays and how to read them
            b, scales, zeros, g_idx, gptq_version = b.call_arrays(scales, zeros, g_idx, gptq_version)
        if frameworks.out_given(out):
            raise LayoutError("out= takes a numpy or device array; with framework tensors the call returns D as one")
        return frameworks.give(self._call(a, b, c, scales=scales, zeros=zeros, a_scales=a_scales, alpha=alpha,
                                          beta=beta, bias=bias, out=out, g_idx=g_idx,
                                          gptq_version=1 if gptq_version is None else gptq_version, copy=copy,
                                          **named))

    def _call(self, a, b, c=None, *, scales=None, zeros=None, a_scales=None, alpha=None, beta=None, bias=None,
              out=None, g_idx=None, gptq_version=1, copy=True, **named):
        if self.candidates[0].config.epilogue.traced:     # alpha, beta and bias are named inputs like any other
            if self.quant is not None:
                raise XegemmError("a traced epilogue over a quantized B is not callable yet: load the quantized "
                                  "config with the fixed epilogue")
            if out is not None:
                raise XegemmError("a traced epilogue's call returns D (or a dict of D and its extra outputs): no out=")
            given = {"alpha": alpha, "beta": beta, "bias": bias, "scales": scales, "zeros": zeros}
            return self._call_traced(a, b, c, {**{k: v for k, v in given.items() if v is not None}, **named})
        if named:
            raise XegemmError(f"input {sorted(named)[0]!r}: the loaded kernels have the fixed epilogue, which takes "
                              "alpha, beta and bias; named inputs are a traced epilogue's (load(..., epilogue=fn))")
        opa = operand("A", a, "M x K")
        notes: list[str] = []            # host conversions and copies, for last_kernel.copies
        if g_idx is not None and self.quant is None:
            raise ShapeMismatchError("g_idx is a GPTQ checkpoint's; the loaded kernels take B as it is (no quant: section)")
        if self.quant is not None:       # b, scales, zeros: the arrays as the format stores them
            if opa.device:
                raise LayoutError("a quantized B's call takes host (numpy) arrays; A is a device array")
            q = quantized_b(self.quant, b, scales, zeros, opa.shape[2], opa.batched, g_idx=g_idx,
                            gptq_version=gptq_version)
            q = replace(q, a_scales=quantized_a_scales(self.quant_a, a_scales, opa.shape[1],
                                                                   opa.shape[2], q.batch, opa.batched))
            notes += q.notes
            if q.perm is not None:       # act-order: A's columns in the order B's K rows were repacked
                if not copy:
                    raise LayoutError("act-order g_idx permutes A's columns on the host (a copy), and copy=False: "
                                      "allow the copy, or repack the checkpoint in group order")
                opa = operand("A", np.ascontiguousarray(opa.array[..., q.perm]), "M x K")
                notes.append("A: columns permuted for act-order g_idx (a copy)")
            opb = Operand("B", q, (q.batch, opa.shape[2], q.n), q.batched, np.dtype(np.uint8),
                          (self.quant.layout,), False)
        else:
            if scales is not None or zeros is not None or a_scales is not None:
                raise ShapeMismatchError("scales, zeros and a_scales are for quantized operands; the loaded kernels "
                                         "take A and B as they are (no quant: section)")
            opb = operand("B", b, "K x N")
        (ba, m, k), (bb, k2, n) = opa.shape, opb.shape
        if k != k2:
            raise ShapeMismatchError(f"A is {_dims(opa)} and B is {_dims(opb)}: A's columns (K = {k}) must equal "
                                     f"B's rows ({k2})")
        if opa.batched != opb.batched or ba != bb:
            raise ShapeMismatchError(f"A is {_dims(opa)} and B is {_dims(opb)}: both must have the same batch "
                                     "(a leading dimension on both, or on neither)")
        batch, batched = ba, opa.batched
        type_a, type_b = self._types(opa, opb) if self.quant is None else self._types_quantized(opa)
        first = self.candidates[0].config
        alpha = first.epilogue.alpha if alpha is None else float(alpha)
        beta = first.epilogue.beta if beta is None else float(beta)
        bias_kind = self._bias_kind(bias, m, n)
        key = (m, n, k, batch, type_a, type_b, opa.layouts, opb.layouts, alpha != 1.0, beta != 0.0, bias_kind,
               opa.device or opb.device)
        choice = self._choices.get(key)
        if choice is None:
            try:
                choice = self.choose(m, n, k, batch, type_a, type_b, opa.layouts, opb.layouts, alpha, beta, bias_kind)
            except LayoutError:          # a host operand in a layout the kernels lack: copied into one they have
                wide_a, wide_b = relayouts([opa, opb])
                if (wide_a.layouts, wide_b.layouts) == (opa.layouts, opb.layouts):
                    raise
                choice = self.choose(m, n, k, batch, type_a, type_b, wide_a.layouts, wide_b.layouts, alpha, beta,
                                     bias_kind)
            self._check_memory(choice, opa.device or opb.device)
            self._choices[key] = choice
        notes += copies([opa, opb], {"A": choice.layout_a, "B": choice.layout_b}, copy)
        config = choice.config
        d_shape = (batch, m, n) if batched else (m, n)
        c_type = expected_dtype(config.types.c, False)
        reads_c = beta != 0.0
        if reads_c and c is None:
            raise ShapeMismatchError(f"beta = {beta} reads C, but no c was given: pass c ({_shape(d_shape)} of "
                                     f"{c_type}) or beta=0")
        for name, arr in (("c", c if reads_c else None), ("out", out)):
            if arr is not None:
                _check_output_like(name, arr, d_shape, config.types.c)
        if bias is not None:
            _check_bias(bias, m if bias_kind == "row" else n, bias_kind)
        ops_device = [x for x in (opa, opb) if x.device]
        run = self._run_device if ops_device else self._run_host
        result = run(choice, opa, opb, c if reads_c else None, bias, out, d_shape, alpha, beta)
        self.last_kernel.copies = tuple(notes)
        return result

    def _call_traced(self, a, b, c, named: dict):
        """A traced epilogue's call (xegemm.api.traced): host arrays, D or a dict of D and the extra outputs."""
        opa, opb = operand("A", a, "M x K"), operand("B", b, "K x N")
        (ba, m, k), (bb, k2, n) = opa.shape, opb.shape
        if k != k2 or opa.batched != opb.batched or ba != bb:
            raise ShapeMismatchError(f"A is {_dims(opa)} and B is {_dims(opb)}: A's columns must equal B's rows, "
                                     "with the same batch on both (or none)")
        if opa.device or opb.device:
            raise XegemmError("a traced epilogue's call takes host (numpy) arrays")
        batch, batched = ba, opa.batched
        type_a, type_b = self._types(opa, opb)
        inputs = traced.call_inputs(self.candidates[0].config, named, m, n)
        key = (m, n, k, batch, type_a, type_b, opa.layouts, opb.layouts, inputs)
        choice = self._choices.get(key)
        if choice is None:
            choice = self.choose(m, n, k, batch, type_a, type_b, opa.layouts, opb.layouts, inputs=inputs)
            self._check_memory(choice, False)
            self._choices[key] = choice
        config, t, s = choice.config, choice.config.types, choice.sizes
        traced.check_named(config, named, m, n, batch, batched)
        d_shape = (batch, m, n) if batched else (m, n)
        reads_c = choice.call.plan.graph.reads("c")
        if reads_c:
            if c is None:
                raise ShapeMismatchError(f"the epilogue reads c: pass c ({_shape(d_shape)} of {t.c})")
            _check_output_like("c", c, d_shape, t.c)
        arrays, scalars = traced.named_buffers(config, named, batch, m, n)
        q, nothing = self.queue, np.zeros(4, np.uint8)
        outputs = traced.outputs_of(config, d_shape)
        bufs = {"A": to_device(q, host_bytes(opa, choice.layout_a, t.a)),
                "B": to_device(q, host_bytes(opb, choice.layout_b, t.b)),
                "D": to_device(q, np.zeros(max(4, s["stride_c"] * batch), np.uint8)),
                "C": to_device(q, np.ascontiguousarray(c).reshape(-1).view(np.uint8) if reads_c else nothing),
                "bias": to_device(q, nothing), "workspace": to_device(q, np.zeros(max(4, s["workspace_bytes"]), np.uint8)),
                **{param: to_device(q, array) for param, array in arrays.items()},
                **{param: to_device(q, np.zeros(max(4, int(np.prod(shape)) * dtype(type_name).bits // 8), np.uint8))
                   for param, type_name, shape in outputs}}
        kernels = self._kernels_for(q, choice)
        bound = [(kern, args, g, l_) for kern, (_, args, g, l_) in
                 zip(kernels, choice.call.bind(s, bufs, self._scalars(choice, 1.0, 0.0) | scalars))]
        self._launch(q, choice, bufs, 1.0, 0.0, bound)
        d = from_device(bufs["D"], expected_dtype(t.c, False), d_shape)
        if not outputs:
            return d
        return {"d": d, **{param.removeprefix("out_"): from_device(bufs[param], expected_dtype(type_name, False), shape)
                           for param, type_name, shape in outputs}}

    def grouped(self, a_list, b_list, c_list=None, *, alpha=None, beta=None, bias=None) -> list:
        """One D per group, ``D_g = activation(alpha * A_g @ B_g + beta * C_g + bias_g)``, all groups in one
        launch (xegemm.api.grouped; ``bias``: one vector per group, of its M or N)."""
        return grouped_calls.grouped(self, a_list, b_list, c_list, alpha=alpha, beta=beta, bias=bias)

    def moe(self, a, b, rows_per_expert, c=None, *, scales=None, zeros=None, alpha=None, beta=None, bias=None):
        """An MoE layer's T x N output in one launch: A (T x K) rows sorted by expert, B (E x K x N), rows per
        expert (length E, summing to T; zeros allowed); quantized experts: B, ``scales`` and ``zeros`` as the
        format stores them, E leading (xegemm.api.grouped)."""
        return grouped_calls.moe(self, a, b, rows_per_expert, c, scales=scales, zeros=zeros, alpha=alpha, beta=beta,
                                 bias=bias)

    def _grouped_kernel(self, queue, name: str, source: str, options: str):
        """The built grouped kernel ``name`` on ``queue`` (built once, from the persistent program cache)."""
        key = (name, id(queue))
        kernels = self._kernels.get(key)
        if kernels is None:
            with self._lock:
                try:
                    kernels = self._kernels[key] = [build_program(queue, source, options).get_sycl_kernel(name)]
                except BuildError as exc:
                    raise XegemmError(f"{name}: {exc}") from exc
        return kernels[0]

    def _record(self, name: str, reason: str, shape: str, config: Config, event) -> None:
        self.last_kernel = LastKernel(name, reason, reason, shape, config, event)

    def _types(self, opa: Operand, opb: Operand) -> tuple[str, str]:
        """The registry types of A and B from their dtypes, among those the kernels take."""
        for ta, tb in self._host_types:
            if opa.dtype == expected_dtype(ta, opa.device) and opb.dtype == expected_dtype(tb, opb.device):
                return ta, tb
        want = " or ".join(f"A {_dtype_name(ta, opa.device)} with B {_dtype_name(tb, opb.device)}"
                           for ta, tb in sorted(self._host_types))
        raise DTypeMismatchError(f"A has dtype {opa.dtype} and B {opb.dtype}; the loaded kernels take {want}")

    def _types_quantized(self, opa: Operand) -> tuple[str, str]:
        """A's registry type from its dtype and B's from the quantization (its arrays were checked already)."""
        for ta, tb in self._host_types:
            if opa.dtype == expected_dtype(ta, False):
                return ta, tb
        want = " or ".join(_dtype_name(ta, False) for ta, _ in sorted(self._host_types))
        raise DTypeMismatchError(f"A has dtype {opa.dtype}; the loaded kernels take A {want}")

    def _bias_kind(self, bias, m: int, n: int) -> str:
        if bias is None:
            return "none"              # no vector, no bias: the kernel without one runs
        kinds = {c.config.epilogue.bias for c in self.candidates}
        kind = next(iter(kinds)) if len(kinds) == 1 else "none"
        length = int(np.shape(bias)[0]) if np.ndim(bias) == 1 else -1
        if length < 0:
            raise ShapeMismatchError(f"bias has shape {np.shape(bias)}; expected a vector of length M = {m} (per "
                                     f"row) or N = {n} (per column)")
        if kind != "none":
            return kind
        if m == n:
            raise ShapeMismatchError(f"bias of length {length} is ambiguous for M = N = {m} and the loaded kernels "
                                     "add none: set epilogue.bias (row or col) in the config")
        if length in (m, n):
            return "row" if length == m else "col"
        raise ShapeMismatchError(f"bias has length {length}; expected M = {m} (per row) or N = {n} (per column)")

    # -- dispatch -----------------------------------------------------------------------------------------------
    def choose(self, m, n, k, batch, type_a, type_b, layouts_a, layouts_b, alpha=1.0, beta=0.0,
               bias_kind="none", inputs=None) -> _Choice:
        """The variant a call of this shape runs, and why (see the module docstring); NoKernelError when none is
        legal for it, LayoutError / AlignmentError when the layouts or the target's rules rule them all out."""
        shape = Shape(m, n, k, batch)
        typed = [c for c in self.candidates if (c.config.types.a, c.config.types.b) == (type_a, type_b)]
        fits = [c for c in typed if c.config.layout.a in layouts_a and c.config.layout.b in layouts_b]
        if not fits:
            have = sorted({(c.config.layout.a, c.config.layout.b) for c in typed})
            given = f"A {'/'.join(layouts_a)}-major, B {'/'.join(layouts_b)}-major"
            raise LayoutError(f"the loaded kernels for {type_a} x {type_b} take (A, B) layouts "
                              f"{', '.join(f'({x}, {y})' for x, y in have)}; the call gives {given} "
                              "(C-ordered arrays are row-major, F-ordered ones column-major)")
        tuned = [c for c in fits if c.tuned and c.shape == shape]
        measured = sorted((c for c in fits if c.gflops is not None and c not in tuned), key=lambda c: -c.gflops)
        rest = [c for c in fits if c not in tuned and c not in measured]
        why_not = []
        for group, reason in ((tuned, f"the tuned winner of {shape.label}"),
                              (measured, "the fastest measured variant legal for {shape} ({gflops:.1f} GFLOP/s at "
                                         "{own})"),
                              (rest, "the first variant legal for {shape} (no measurement applies)")):
            for cand in group:
                picked = self._legal(cand, shape, alpha, beta, bias_kind, why_not, inputs)
                if picked is not None:
                    config, call, source = picked
                    text = reason.format(shape=shape.label, gflops=cand.gflops or 0.0, own=cand.shape.label)
                    return _Choice(cand, config, call, call.sizes(m, n, k, batch), config.layout.a, config.layout.b,
                                   text, source, device_build_options(self.lowering, config))
        rules = [w for w in why_not if "pitch" in w or "aligned" in w or "wide" in w]
        cls = AlignmentError if rules and len(rules) == len(why_not) else NoKernelError
        raise cls(f"no loaded variant can run {shape.label} ({type_a} x {type_b}): " + "; ".join(why_not))

    def _legal(self, cand: Candidate, shape: Shape, alpha, beta, bias_kind, why_not: list, inputs=None):
        """(config, call, source) of the candidate at the call's shape, or None (the reason added to why_not);
        ``inputs``: a traced epilogue's ``epilogue.inputs`` for the call."""
        traced = {"epilogue.inputs": inputs} if inputs is not None else {}
        try:
            config = cand.config.with_overrides({**shape.overrides(), **SINGLE, "epilogue.alpha": alpha,
                                                 "epilogue.beta": beta, "epilogue.bias": bias_kind, **traced})
        except ConfigError as exc:
            why_not.append(f"variant {cand.index}: {exc}")
            return None
        pv = plan_variant(Variant(config), self.lowering)
        if pv.plan is None:
            why_not.append(f"variant {cand.index}: {pv.reason}")
            return None
        try:
            source = self._sources.get(pv.plan.name) or render_variant(pv, self.lowering)
        except XegemmError as exc:     # the target's surface rules (pitch, width, alignment) or its compiler
            why_not.append(f"variant {cand.index} ({pv.plan.name}): {exc}")
            return None
        self._sources.setdefault(pv.plan.name, source)
        return config, KernelCall.of(pv.plan), self._sources[pv.plan.name]

    def _check_memory(self, choice: _Choice, device_operands: bool) -> None:
        p, t, s = choice.config.problem, choice.config.types, choice.sizes
        parts = {"A": s["stride_a"] * p.batch, "B": s["stride_b"] * p.batch, "D": s["stride_c"] * p.batch,
                 "C": s["stride_c"] * p.batch if choice.config.epilogue.beta else 0,
                 "workspace": s["workspace_bytes"]}
        total = sum(parts.values())
        limit = self.info.global_mem_bytes
        largest = max(parts, key=parts.get)
        per_buffer = int(getattr(self.sycl_device, "max_mem_alloc_size", 0) or 0)
        shape = Shape(p.m, p.n, p.k, p.batch).label
        if limit and total > limit:
            raise DeviceMemoryError(f"{shape} ({t.a} x {t.b} -> {t.c}) needs {total / 2**30:.1f} GiB on the device "
                                    f"({', '.join(f'{k} {v / 2**30:.1f}' for k, v in parts.items() if v)} GiB); "
                                    f"{self.info.filter_string} has {limit / 2**30:.1f} GiB")
        if per_buffer and parts[largest] > per_buffer and not device_operands:
            raise DeviceMemoryError(f"{shape}: {largest} needs {parts[largest] / 2**30:.1f} GiB in one buffer; "
                                    f"{self.info.filter_string} allocates at most {per_buffer / 2**30:.1f} GiB each")

    # -- running ------------------------------------------------------------------------------------------------
    def _kernels_for(self, queue, choice: _Choice) -> list:
        key = (choice.call.plan.name, id(queue))
        kernels = self._kernels.get(key)
        if kernels is None:
            with self._lock:
                try:
                    program = build_program(queue, choice.source, choice.options)
                except BuildError as exc:
                    raise XegemmError(f"{choice.call.plan.name}: {exc}") from exc
                kernels = [program.get_sycl_kernel(launch.kernel) for launch in choice.call.launches]
                self._kernels[key] = kernels
        return kernels

    def _scalars(self, choice: _Choice, alpha: float, beta: float) -> dict:
        lo, hi = choice.config.epilogue.clamp
        return {"alpha": alpha, "beta": beta, "clamp_lo": lo, "clamp_hi": hi}

    def _launch(self, queue, choice: _Choice, buffers: dict, alpha, beta, bound=None, wait: bool = True):
        kernels = self._kernels_for(queue, choice)
        if bound is None:
            bound = [(kern, args, g, l_) for kern, (_, args, g, l_) in
                     zip(kernels, choice.call.bind(choice.sizes, buffers, self._scalars(choice, alpha, beta)))]
        event = submit_in_order(queue, bound)
        if wait:        # (the host path's blocking read of D on the same in-order queue waits instead)
            event.wait()
        p = choice.config.problem
        self.last_kernel = LastKernel(choice.call.plan.name, f"variant {choice.candidate.index} of {self.label}",
                                      choice.reason, Shape(p.m, p.n, p.k, p.batch).label, choice.config, event)
        return bound

    def _run_host(self, choice, opa, opb, c, bias, out, d_shape, alpha, beta):
        """Host arrays: copied into the shape's device buffers (kept between calls, like the argument list bound
        to them: a launch with the same list sets no argument again), launched, D read back."""
        q, t = self.queue, choice.config.types
        with choice.lock:
            pool = choice.pools.get(id(q))
            if pool is None:
                pool = choice.pools[id(q)] = _Pool(q, choice)
            bufs = pool.buffers
            # written without waiting on the in-order queue; kept alive until the blocking read of D below
            quantized = opb.array if isinstance(opb.array, QuantizedB) else None
            written = [write_async(bufs["A"], host_bytes(opa, choice.layout_a, t.a)),
                       write_async(bufs["B"], quantized.qweight if quantized else host_bytes(opb, choice.layout_b, t.b))]
            if quantized:
                written.append(write_async(bufs["scales"], quantized.scales))
                if quantized.zeros is not None:
                    written.append(write_async(bufs["zeros"], quantized.zeros))
                if quantized.a_scales is not None:
                    written.append(write_async(bufs["a_scales"], quantized.a_scales))
            if c is not None:
                written.append(write_async(bufs["C"], c))
            if bias is not None:
                written.append(write_async(bufs["bias"], np.asarray(bias, np.float32)))
            scalars = (alpha, beta)
            if scalars not in pool.bound and len(pool.bound) >= MAX_BOUND:
                pool.bound.clear()
            pool.bound[scalars] = self._launch(q, choice, bufs, alpha, beta, pool.bound.get(scalars),
                                              wait=False)
            host_out = isinstance(out, np.ndarray)
            result = out if host_out else np.empty(d_shape, expected_dtype(t.c, False))
            read_into(bufs["D"], result)
            del written
        if out is None or host_out:
            return result
        _usm_memory(out).copy_from_host(result.reshape(-1).view(np.uint8))
        return out

    def _run_device(self, choice, opa, opb, c, bias, out, d_shape, alpha, beta):
        """Operands on the device: launched on their own queue, where they are (no host round trip)."""
        queue = None
        for op in (opa, opb):
            if op.device:
                queue = _usm_queue(op)
                if queue.sycl_device != self.sycl_device:
                    raise XegemmError(f"{op.name} lives on {queue.sycl_device.filter_string} but this Gemm was loaded "
                                      f"for {self.info.filter_string}: load(..., device=...) on the arrays' device")
        t, s = choice.config.types, choice.sizes
        layouts = {"A": choice.layout_a, "B": choice.layout_b}
        types = {"A": t.a, "B": t.b}
        bufs = {}
        for op in (opa, opb):
            if op.device:
                mem = _usm_memory(op.array)
                _check_aligned(op.name, op.usm["data"][0])
                bufs[op.name] = mem
            else:
                bufs[op.name] = to_device(queue, host_bytes(op, layouts[op.name], types[op.name]))
        nothing = np.zeros(4, np.uint8)
        device_out = out is not None and not isinstance(out, np.ndarray)
        if device_out:
            _check_aligned("out", getattr(out, "__sycl_usm_array_interface__")["data"][0])
            bufs["D"] = _usm_memory(out)
        else:
            bufs["D"] = to_device(queue, np.empty(max(4, s["stride_c"] * choice.config.problem.batch), np.uint8))
        if c is not None and not isinstance(c, np.ndarray):
            _check_aligned("c", getattr(c, "__sycl_usm_array_interface__")["data"][0])
            bufs["C"] = _usm_memory(c)
        else:
            bufs["C"] = to_device(queue, nothing if c is None else np.ascontiguousarray(c))
        bufs["bias"] = _usm_memory(bias) if bias is not None and not isinstance(bias, np.ndarray) else \
            to_device(queue, nothing if bias is None else np.ascontiguousarray(bias, np.float32))
        bufs["workspace"] = to_device(queue, np.zeros(max(4, s["workspace_bytes"]), np.uint8))
        self._launch(queue, choice, bufs, alpha, beta)
        if device_out:
            return out
        result = from_device(bufs["D"], expected_dtype(t.c, False), d_shape)
        if out is None:
            return result
        out[...] = result
        return out


def _dims(op: Operand) -> str:
    b, r, c = op.shape
    return f"{b} x {r} x {c}" if op.batched else f"{r} x {c}"


def _shape(shape) -> str:
    return " x ".join(map(str, shape))


def _dtype_name(type_name: str, device: bool) -> str:
    dt = expected_dtype(type_name, device)
    return f"{type_name} ({'ml_dtypes' if dt.name in ML_NAMES else 'numpy'}.{dt.name})"


def _check_output_like(name: str, arr, shape, type_name: str) -> None:
    device = hasattr(arr, "__sycl_usm_array_interface__")
    got_shape = tuple(arr.__sycl_usm_array_interface__["shape"]) if device else np.shape(arr)
    got_dtype = np.dtype(arr.__sycl_usm_array_interface__["typestr"]) if device else getattr(arr, "dtype", None)
    if tuple(got_shape) != tuple(shape):
        raise ShapeMismatchError(f"{name} is {_shape(got_shape)} but D is {_shape(shape)} (A's rows x B's columns)")
    want = expected_dtype(type_name, device)
    if got_dtype != want:
        raise DTypeMismatchError(f"{name} has dtype {got_dtype}; the kernel's C and D are {_dtype_name(type_name, device)}")
    if device:
        strides = arr.__sycl_usm_array_interface__.get("strides")
        if strides is not None and tuple(strides) != tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape))):
            raise LayoutError(f"{name} must be row-major (C-contiguous): the loaded kernels store D row-major only")
    elif not arr.flags.c_contiguous or not (arr.flags.writeable or name != "out"):
        raise LayoutError(f"{name} must be a{' writable' if name == 'out' else ''} C-contiguous (row-major) array: "
                          "the loaded kernels read C and store D row-major only")


def _check_bias(bias, length: int, kind: str) -> None:
    device = hasattr(bias, "__sycl_usm_array_interface__")
    got = tuple(bias.__sycl_usm_array_interface__["shape"]) if device else np.shape(bias)
    dt = np.dtype(bias.__sycl_usm_array_interface__["typestr"]) if device else np.asarray(bias).dtype
    if got != (length,):
        raise ShapeMismatchError(f"bias has shape {got}; the kernel adds one value per {kind} of D: length {length}")
    if dt != np.float32:
        raise DTypeMismatchError(f"bias has dtype {dt}; expected numpy.float32")


def _check_aligned(name: str, address: int) -> None:
    if address % DEVICE_ALIGNMENT:
        raise AlignmentError(f"{name}'s device address is {address % DEVICE_ALIGNMENT} bytes past a "
                             f"{DEVICE_ALIGNMENT}-byte boundary: device operands must start {DEVICE_ALIGNMENT}-byte "
                             "aligned (the Xe 2D block surface base rule; dpctl allocations are)")


def _usm_memory(array):
    return dpmem.as_usm_memory(array)


def _usm_queue(op: Operand):
    syclobj = op.usm.get("syclobj")
    if hasattr(syclobj, "submit"):
        return syclobj
    return _usm_memory(op.array).sycl_queue


__all__ = ["Gemm", "LastKernel", "load", "load_source", "BIAS_KINDS"]
