"""``xegemm.load(source)`` -> :class:`Gemm`, called on arrays like a function: ``D = gemm(A, B)``.

A :class:`Gemm` holds the variants of its source (a config, its sweep, or a tuned ``best.yaml`` with
``best.json``'s measurements), its device and queue, and what its calls keep: each shape's decision, the built
kernels, :attr:`Gemm.last_kernel`.  Per call, the dispatch (:mod:`xegemm.api.dispatch`) picks a variant for the
call's (M, N, K, batch, types, layouts and epilogue): the tuned winner of that shape if there is one, else the
fastest variant measured at it, else the variant the static model predicts fastest there (refined by the
nearest measurements), else the first legal one (:meth:`Gemm.choose`; :attr:`Gemm.last_kernel`
says which ran and why).  A kernel takes M, N and K at run time, so one build serves every shape it is legal for;
builds come from the persistent program cache (:mod:`xegemm.runtime.program_cache`), and a shape's choice and
argument sizes are worked out on its first call only.

The calls themselves are the call kinds of :mod:`xegemm.api.kinds` (plain, quantized, traced, grouped and MoE),
one class each, selected when the Gemm is made: every check runs before anything is launched and before ``out``
is touched (:mod:`xegemm.api.errors`), and arguments are bound through
:class:`xegemm.kernel.arguments.KernelCall`, the description the exporter prints too.
"""

from __future__ import annotations

import os
from xegemm.api import foreign
from xegemm.api.dispatch import Candidate, Choice, Dispatcher, Request, candidates, ranking_rules
from xegemm.api.errors import LayoutError
from xegemm.api.kinds import LastKernel, Programs, select_kinds
from xegemm.config.sources import load_source
from xegemm.epilogues.config import FIXED_KEYS, graph_of
from xegemm.epilogues.errors import EpilogueLoadError, UndeclaredKindError
from xegemm.epilogues.fixed import BIAS_KINDS
from xegemm.errors import XegemmError
from xegemm.lowering import Lowering, choose_lowering
from xegemm.runtime.spirv import prepare_environment
from xegemm.quant import operand_spec
from xegemm.quant.checkpoint import LayerWeights
from xegemm.runtime.devices import describe, select_sycl_device
from xegemm.runtime.program import make_queue
from xegemm.epilogues.config import allowing_code


def load(source, *, device=None, epilogue=None, lowering: str | None = None, allow_code=False, code_path=()) -> Gemm:
    """A callable GEMM from a config file, a tune output directory (its best.yaml and best.json) or a Config,
    on ``device`` (a dpctl filter string, a dpctl device, or None for xegemm's default device); ``epilogue``: a
    Python function (or ``xegemm.epilogue``) as the traced epilogue instead of the config's (docs/epilogues.md);
    ``lowering``: portable, native or coopmat instead of the device's own (native on a device without the Xe
    builtins: their CPU emulation, a correctness path, docs/lowerings.md; coopmat: B is VNNI-packed, and a quantized
    B dequantized, on the device at each call; the CPU runtime needs its AMX target, set here when the runtime has not started yet).
    ``allow_code``: the config may name a Python function (``epilogue.function``), imported from the installed
    environment or a folder of ``code_path`` (a path or a list of them), never from the config's folder."""
    if lowering is not None and Lowering(lowering).source_kind == "spirv":
        prepare_environment()
    if allow_code:
        with allowing_code([code_path] if isinstance(code_path, (str, os.PathLike)) else code_path):
            config, best, label = load_source(source)
    elif code_path:
        raise XegemmError("xegemm.load: code_path= is where an allowed config's function is imported from; "
                          "it needs allow_code=True")
    else:
        config, best, label = load_source(source)
    if epilogue is not None:
        config = with_traced_epilogue(config, epilogue, label)
    return Gemm(candidates(config, best), device=device, label=label, lowering=lowering)


def with_traced_epilogue(config, epilogue, label: str):
    """``config`` with ``epilogue`` (a function) as its traced epilogue, traced now: the tracer's error (an
    :class:`xegemm.epilogues.errors.EpilogueError`, naming the function's file and line) is raised here, at load,
    not at the first call.  A config with its own fixed epilogue (alpha, beta, bias, activation or clamp set, or
    swept) is refused: the traced function would silently replace it."""
    default = type(config.epilogue)()
    own = [f"{key} {getattr(config.epilogue, key)!r}" for key in FIXED_KEYS
           if getattr(config.epilogue, key) != getattr(default, key)]
    own += [f"a sweep over {axis}" for axis in config.sweep if axis.startswith("epilogue.")
            or (axis == "epilogue")]
    if own:
        raise EpilogueLoadError(f"{label}: the config has its own fixed epilogue ({', '.join(own)}); "
                                "load(..., epilogue=fn) replaces it with the function: compute those in the "
                                "function and remove them from the config's epilogue section")
    config = config.with_overrides({"epilogue.function": epilogue})
    try:
        graph_of(config)
    except UndeclaredKindError:     # an input's kind comes from its array at the call: traced there, with it
        pass
    return config


class Gemm:
    """``gemm(a, b, c=None, *, scales=None, zeros=None, a_scales=None, alpha=None, beta=None, bias=None,
    out=None, g_idx=None, gptq_version=None, copy=True)`` computes ``D = activation(alpha * (A @ B) + beta * C +
    bias)`` with the loaded kernels (see the module docstring).  A quantized B (a ``quant:`` section) is passed as
    its format stores it: ``b`` its qweight, ``scales`` and ``zeros`` (xegemm.api.quantized; a GPTQ checkpoint's
    ``g_idx`` and ``gptq_version`` too), or a :class:`xegemm.quant.LayerWeights`; B is then ``dequantize(b)`` in the
    compute type.  An FP8 A (W8A8, a ``quant_a:`` section) is ``a`` as ml_dtypes float8 values with its scales
    ``a_scales``.  Tensors with ``__dlpack__`` (torch) are read as host views and D is returned in A's framework
    (xegemm.api.foreign); a host operand in a layout the kernels lack is copied (``last_kernel.copies``) unless
    ``copy=False``, which refuses it with the fix."""

    def __init__(self, candidates: list[Candidate], device=None, label: str = "", lowering: str | None = None):
        self.candidates = candidates
        self.label = label
        self.sycl_device = device if hasattr(device, "filter_string") else select_sycl_device(device)
        self.info = describe(self.sycl_device)
        self.lowering: Lowering = choose_lowering(self.info, lowering)
        self.queue = make_queue(self.sycl_device, profiling=True)
        self.last_kernel: LastKernel | None = None
        self.dispatcher = Dispatcher(candidates, label, ranking_rules(candidates, self.info, self.lowering),
                                     self.info.local_mem_bytes)
        self.choices: dict[tuple, object] = {}     # each call kind's decisions, by its dispatch key
        self.programs = Programs(self.sycl_device, self.lowering)
        self.host_types = {(c.config.types.a, c.config.types.b) for c in candidates}
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
        self.kinds = select_kinds(self)     # entry ("call", "grouped", "moe") -> its call kind (xegemm.api.kinds)

    def __repr__(self) -> str:
        return f"<xegemm.Gemm {self.label!r}: {len(self.candidates)} variant(s) on {self.info.filter_string}>"

    def __call__(self, a, b, c=None, *, scales=None, zeros=None, a_scales=None, alpha=None, beta=None, bias=None,
                 out=None, g_idx=None, gptq_version=None, copy=True, **named):
        frameworks = foreign.Frameworks()       # tensors with __dlpack__ (torch): host views, D back in their framework
        a, b, c, scales, zeros, a_scales, bias, g_idx = frameworks.take(a, b, c, scales, zeros, a_scales, bias, g_idx)
        if isinstance(b, LayerWeights):         # xegemm.quant.from_safetensors: the layer's arrays and how to read them
            b, scales, zeros, g_idx, gptq_version = b.call_arrays(scales, zeros, g_idx, gptq_version)
        if frameworks.out_given(out):
            raise LayoutError("out= takes a numpy or device array; with framework tensors the call returns D as one")
        return frameworks.give(self.kinds["call"].call(
            a, b, c, scales=scales, zeros=zeros, a_scales=a_scales, alpha=alpha, beta=beta, bias=bias, out=out,
            g_idx=g_idx, gptq_version=1 if gptq_version is None else gptq_version, copy=copy, **named))

    def grouped(self, a_list, b_list, c_list=None, *, alpha=None, beta=None, bias=None) -> list:
        """One D per group, ``D_g = activation(alpha * A_g @ B_g + beta * C_g + bias_g)``, all groups in one
        launch (xegemm.api.kinds.grouped; ``bias``: one vector per group, of its M or N)."""
        return self.kinds["grouped"].grouped(a_list, b_list, c_list, alpha=alpha, beta=beta, bias=bias)

    def moe(self, a, b, rows_per_expert, c=None, *, scales=None, zeros=None, alpha=None, beta=None, bias=None):
        """An MoE layer's T x N output in one launch: A (T x K) rows sorted by expert, B (E x K x N), rows per
        expert (length E, summing to T; zeros allowed); quantized experts: B, ``scales`` and ``zeros`` as the
        format stores them, E leading (xegemm.api.kinds.grouped), or ``b`` a loaded layer with its expert dimension
        (:func:`xegemm.quant.from_safetensors` of gpt-oss's blocks and scales; its bias is ``bias=weights.bias``)."""
        if isinstance(b, LayerWeights):
            b, scales, zeros, g_idx, _ = b.call_arrays(scales, zeros, None, None)
            if g_idx is not None:
                raise LayoutError("the loaded layer has a GPTQ g_idx (act-order); an MoE call takes experts in group "
                                  "order - repack the checkpoint in group order")
        return self.kinds["moe"].moe(a, b, rows_per_expert, c, scales=scales, zeros=zeros, alpha=alpha, beta=beta,
                                     bias=bias)

    def choose(self, m, n, k, batch, type_a, type_b, layouts_a, layouts_b, alpha=1.0, beta=0.0,
               bias_kind="none", inputs=None) -> Choice:
        """The variant a call of this shape runs, and why (xegemm.api.dispatch); NoKernelError when none is
        legal for it, LayoutError / AlignmentError when the layouts or the target's rules rule them all out."""
        return self.dispatcher.choose(self.lowering, Request(m, n, k, batch, type_a, type_b, layouts_a, layouts_b,
                                                             alpha, beta, bias_kind, inputs))


__all__ = ["Gemm", "LastKernel", "load", "load_source", "BIAS_KINDS"]
