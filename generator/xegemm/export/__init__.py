"""``xegemm export``: kernels a C, C++ or SYCL host program can load and launch without xegemm (docs/use.md).

Per target (``cpu``: the portable lowering for any OpenCL device; ``coopmat``: the coopmat lowering's SPIR-V
module, loaded with clCreateProgramWithIL; ``pvc`` / ``dg2`` ...: the native lowering, built ahead of time with
ocloc) and per kernel of the source (a config, its sweep, or a tune directory's best.yaml): its source and, where
one is built, its binary, named by a short C name (:func:`short_name`; the plan's name is its key).  Beside them:

- ``manifest.json``: per kernel its name and key, entries (the GEMM kernel and, for split K, stream-K and a traced
  epilogue's reductions, its later kernels), each entry's arguments in order with the name of what they take
  (``D``, not the kernel's parameter ``C``), type, meaning and value (:class:`xegemm.kernel.arguments.KernelCall`,
  the description the call API binds through), global sizes as formulas, the local and sub-group sizes, the
  workspace size formula, the pitch and alignment rules, the build options, for binaries the ISA statistics;
  and the dispatch table's rules and what it leaves out;
- ``xegemm_kernels.h``: the kernels' and programs' tables (files and exact build options), per kernel launchers
  of compact operands, of offsets, pitches and batch strides (a strided sub-matrix of a larger buffer) and of
  USM pointers (cl_intel_unified_shared_memory); for grouped and MoE kernels the problem table, the persistent
  grid and the launch; ``xegemm_dispatch``: the call API's device-less ranking over the exported variants
  (:mod:`xegemm.export.dispatch`);
- ``example.c`` and a ``Makefile``: ``make -C DIR run`` builds the example against the OpenCL ICD loader and
  runs every ``cpu`` and ``coopmat`` kernel on generated data against a plain C reference, compact, strided and
  through USM (grouped kernels group by group); ``example run KERNEL DIR`` runs one kernel on operand files and
  ``example dispatch ...`` prints the dispatch's choice.  The Makefile names no path of this machine.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xegemm.aot.build import compile_kernel, compose_options
from xegemm.aot.toolchain import compiler_record
from xegemm.config.sources import load_source
from xegemm.api.dispatch import RULES as DISPATCH_RULES
from xegemm.export.dispatch import dispatch_entries
from xegemm.grouped.problem import from_config as grouped_problem
from xegemm.grouped.table import FIELD
from xegemm.grouped.table import FIELDS as TABLE_FIELDS
from xegemm.kernel.arguments import BUFFERS, SCALARS, KernelCall
from xegemm.kernel.grouped_launch import grouped_launch
from xegemm.library.targets import HW_THREADS
from xegemm.config import expand
from xegemm.library.dtypes import dtype
from xegemm.epilogues.fixed import EpilogueSpec
from xegemm.epilogues.registry import ACTIVATIONS
from xegemm.errors import XegemmError
from xegemm.evaluate import plan_variant, render_variant
from xegemm.evaluate.aot import AotBuilder
from xegemm.library.build_flags import STANDARD as BUILD_OPTIONS
from xegemm.lowering import Lowering, named_lowering
from xegemm.library.targets import AOT_TARGETS
from xegemm.plan.planner import BLOCK2D_SUB_GROUP
from xegemm.kernel.render import environment
from xegemm.files import read_text, write_bytes_atomic, write_json_atomic, write_text_atomic
from xegemm.runtime.spirv import AMX_TARGET, assemble

# cpu (portable OpenCL C), coopmat (the coopmat lowering's SPIR-V module, loaded with clCreateProgramWithIL), and
# every GPU of the target registry (each built by a compiler that knows it)
TARGETS = ("cpu", "coopmat", *AOT_TARGETS)
HOST_TARGETS = ("cpu", "coopmat")      # what example.c runs on the OpenCL CPU runtime
EXAMPLE_TYPES = {"f16", "bf16", "tf32", "f32", "s8", "u8", "s4", "u4"}     # inputs example.c generates
EXAMPLE_ACCUMULATORS = {"f32", "s32"}
VALUES = np.arange(-8, 9) / 8      # example.c's float inputs: k/8, exact in every input type


@dataclass
class Exported:
    """One kernel for one target: its plan's call description, file names and what was built."""

    target: str
    call: KernelCall
    source_file: str
    binary_file: str | None
    options: str
    isa: dict | None
    example: str | None        # why example.c leaves it out, or None when it runs it
    compiler: dict | None = None   # the compiler that built the binary (xegemm.jobs.pipeline.compiler_record)
    short: str = ""                # the C name of its kernels and launchers; the plan's name is the key

    @property
    def key(self) -> str:
        """What makes one launcher: the plan's name, and for the coopmat module its own (B is VNNI-packed)."""
        return self.call.plan.name + ("@coopmat" if self.target == "coopmat" else "")

    def kernel_name(self, entry: str) -> str:
        """The exported name of one of the plan's entries (the GEMM kernel, its ``_reduce``, its reductions)."""
        return entry.replace(self.call.plan.name, self.short, 1)


# each field of a grouped launch's problem table (xegemm.grouped.table.FIELDS) as the C helper fills it for group g
TABLE_EXPRESSIONS = {"m": "m[g]", "n": "n[g]", "k": "k[g]", "tiles_m": "tiles_m", "tiles_n": "tiles_n",
                     "tile_begin": "begin", "a_offset": "a_offset[g]", "b_offset": "b_offset[g]",
                     "c_offset": "d_offset[g]", "lda": "lda[g]", "ldb": "ldb[g]", "ldc": "ldd[g]",
                     "bias_offset": "bias_offset ? bias_offset[g] : 0"}
CORE_BUFFERS = ("A", "B", "D", "C", "bias", "workspace")    # every launcher's buffers, in this order
# the kernel's parameter names of D's pitch and batch stride, as the launchers and the manifest name them
ARGUMENT_NAMES = {"ldc": "ldd", "stride_c": "stride_d"}


def short_name(index: int, config) -> str:
    """A C name for the ``index``-th kernel: its index, types, layouts, work-group tile and walk (split K, stream-K,
    a grouped or MoE launch's); the full key, the plan's name, is in manifest.json and beside each launcher."""
    t, lay = config.types, config.layout
    bm, bn, bk = config.tile.workgroup
    tile = config.tile
    walk = f"_split{tile.split_k}" if tile.split_k > 1 else f"_streamk{tile.stream_k}" if tile.stream_k else ""
    if config.problem.groups or config.moe.experts:
        walk = f"_{'moe' if config.moe.experts else 'grouped'}_{tile.walk}"
    return f"xegemm_k{index}_{t.a}_{t.b}_{t.c}_{lay.a[0]}{lay.b[0]}_{bm}x{bn}x{bk}{walk}"


def _rules(config, target: str) -> list[str]:
    """The pitch and alignment rules of the exported layout on a target (docs/use.md)."""
    rules = ["operands are compact: pitch = the row's width (lda, ldb, ldc are formulas of M, N, K), batch after "
             "batch; 4-bit elements two per byte, lower index in the low nibble, odd rows padded",
             "D and C are row-major; A and B as the kernel's layouts say"]
    if target == "coopmat":
        return rules[:1] + ["A row-major; B VNNI-packed (manifest argument B: per batch [ceil(K/v)][N*v] elements, "
                            "ldb still the bytes of a row of B as a K x N matrix); D and C row-major in the "
                            "accumulator type", "the Intel OpenCL CPU runtime runs it only with an AMX target: "
                            "CL_CONFIG_CPU_TARGET_ARCH=" + AMX_TARGET + " (docs/lowerings.md)"]
    if target == "cpu":
        return rules
    if config.tile.subgroup_size == BLOCK2D_SUB_GROUP:
        rules += ["2D block surfaces: every operand's base 64-byte aligned (each batch too), pitch a multiple of "
                  "16 bytes, row width >= 64 bytes"]
    else:
        rules += ["1D sub-group block messages: rows of A and B 4-byte aligned, rows of C 16-byte aligned"]
    return rules


def _example_skip(config, plan=None) -> str | None:
    t = config.types
    if plan is not None and plan.grouped and plan.quant is not None:
        return "a grouped kernel of quantized experts: example.c's reference does not dequantize them"
    if plan is not None and plan.graph is not None:
        return ("a traced epilogue: example.c's reference does not evaluate its graph (tests/test_export.py runs "
                "its launcher and checks D and its outputs against xegemm's reference)")
    if config.quant.format != "none" or config.quant_a.format != "none":
        return "example.c's reference does not dequantize a quantized operand (the call API's tests verify it)"
    if t.a not in EXAMPLE_TYPES or t.b not in EXAMPLE_TYPES:
        return f"example.c generates no {t.a} x {t.b} inputs"
    if t.acc not in EXAMPLE_ACCUMULATORS:
        return f"example.c's reference has no {t.acc} accumulator (it rounds like the verifier's only for f32 and s32)"
    return None


def export(source, out_dir: Path | str, targets=("cpu",), progress=None, compiler: str | None = None) -> dict:
    """Write the kernels of ``source`` for ``targets`` into ``out_dir``; return the manifest.  The GPU targets'
    binaries are built by ``compiler`` (``system``, ``current``, a path; None: the first that knows each target),
    whose name and versions the manifest records per kernel."""
    out = Path(out_dir)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        raise XegemmError(f"unknown export target {unknown[0]!r}: choose from {', '.join(TARGETS)}")
    if out.exists() and any(out.iterdir()):
        raise XegemmError(f"{out} exists and is not empty: export into a new directory")
    config, best, label = load_source(source)
    exported: list[Exported] = []
    shorts: dict[str, str] = {}       # plan name -> its C name, one per kernel whatever the target
    skipped: list[dict] = []
    gpus = [t for t in targets if t not in HOST_TARGETS]
    builders = {t: AotBuilder(t, out / t, compiler=compiler) for t in gpus}   # unbuildable target: one line, now
    compilers = {t: compiler_record(t, compiler) for t in gpus}
    for target in targets:
        admit = builders.get(target)
        lowering = (named_lowering("portable") if target == "cpu" else named_lowering("coopmat")
                    if target == "coopmat" else named_lowering("native", None, target, admit.compiler))
        seen = set()
        for variant in expand(config):
            if variant.rejected:
                continue
            pv = plan_variant(variant, lowering)
            if pv.plan is None:
                skipped.append({"target": target, "variant": pv.name, "reason": pv.reason})
                continue
            if pv.plan.name in seen:
                continue
            seen.add(pv.plan.name)
            why = admit.admit(pv) if admit else None
            try:
                text = why or render_variant(pv, lowering)
            except XegemmError as exc:
                why = str(exc)
            if why:
                skipped.append({"target": target, "variant": pv.plan.name, "reason": why})
                continue
            key = pv.plan.name + ("@coopmat" if target == "coopmat" else "")
            short = shorts.setdefault(key, short_name(len(shorts), pv.config) + ("_coopmat" if target == "coopmat"
                                                                               else ""))
            exported.append(_write_kernel(out, target, pv, text, progress, admit.compiler if admit else None,
                                          compilers.get(target), short))
    if not exported:
        raise XegemmError(f"{label}: no kernel could be exported for {', '.join(targets)}: "
                          + "; ".join(f"{s['variant']} ({s['target']}): {s['reason']}" for s in skipped[:3]))
    launchers = _unique_launchers(exported)
    index = {e.call.plan.name: i for i, e in enumerate(launchers) if e.target != "coopmat"}
    plain = {e.call.plan.name for e in launchers if _plain(e) and e.target != "coopmat"}
    table, not_dispatched = dispatch_entries(config, best, named_lowering("portable"), index, plain)
    manifest = _manifest(label, exported, skipped, not_dispatched)
    write_json_atomic(out / "manifest.json", manifest)
    env = environment()
    cpu = [e for e in exported if e.target in HOST_TARGETS]
    kernels = [_c_kernel(e, i, [x for x in exported if x.key == e.key]) for i, e in enumerate(launchers)]
    by_name = {e.key: k for e, k in zip(launchers, kernels)}
    context = {"kernels": kernels, "runnable": [by_name[e.key] for e in cpu if e.example is None
                                                and not e.call.plan.grouped],
               "runnable_grouped": [by_name[e.key] for e in cpu if e.example is None
                                    and e.call.plan.grouped],
               "left_out": [(e.short, e.example) for e in cpu if e.example is not None],
               "dispatch": [entry.c_row() for entry in table], "not_dispatched": not_dispatched,
               "max_launches": max(len(k["launches"]) for k in kernels),
               "program_count": sum(len(k["programs"]) for k in kernels),
               "table_fields": TABLE_FIELDS, "field_expr": TABLE_EXPRESSIONS,
               "max_buffers": len(CORE_BUFFERS) + max(len(k["extra_buffers"]) for k in kernels),
               "max_scalars": max(1, max(len(k["extra_scalars"]) for k in kernels)),
               "amx_target": AMX_TARGET, "amx_needed": any(e.target == "coopmat" for e in exported),
               "values": VALUES.tolist(), "f16_bits": VALUES.astype(np.float16).view(np.uint16).tolist(),
               "u32": 2.0 ** -24}
    write_text_atomic(out / "xegemm_kernels.h", env.get_template("export/xegemm_kernels.h.j2").render(**context))
    write_text_atomic(out / "example.c", env.get_template("export/example.c.j2").render(**context))
    write_text_atomic(out / "Makefile", env.get_template("export/Makefile.j2").render(**context))
    return manifest


def _write_kernel(out: Path, target: str, pv, text: str, progress, compiler: str | None = None,
                  record: dict | None = None, short: str = "") -> Exported:
    plan = pv.plan
    name = short
    # the entries take the short name (the plan's name is a prefix of every entry's); the key stays in a comment
    text = f"/* xegemm kernel {short}: {plan.name} */\n" + text.replace(plan.name, short)
    if target == "coopmat":     # SPIR-V assembly, and the module a host loads (clCreateProgramWithIL)
        source_file, binary_file = f"{target}/{name}.spvasm", f"{target}/{name}.spv"
        write_text_atomic(out / source_file, text.replace(f"/* xegemm kernel {short}: {plan.name} */\n",
                                                          f"; xegemm kernel {short}: {plan.name}\n"))
        write_bytes_atomic(out / binary_file, assemble(read_text(out / source_file, 1 << 24, "SPIR-V assembly")))
        return Exported(target, KernelCall.of(plan), source_file, binary_file, "", None,
                        _example_skip(pv.config, plan), record, short)
    source_file = f"{target}/{name}.cl"
    write_text_atomic(out / source_file, text)
    options = BUILD_OPTIONS if target == "cpu" else compose_options(pv.config.target.grf)
    binary_file, isa = None, None
    if target != "cpu":
        if progress:
            print(f"ocloc {target}: {name}", file=progress, flush=True)
        build = compile_kernel(text, target, grf=pv.config.target.grf, workdir=out / target / f".{name}.build",
                               dumps=False, compiler=compiler)
        if not build.ok or build.binary is None:
            raise XegemmError(f"ocloc could not build {name} for {target}: "
                              + next((ln for ln in build.log.splitlines() if "error" in ln), build.log[-300:]))
        binary_file = f"{target}/{name}.bin"
        shutil.copyfile(build.binary, out / binary_file)
        isa = build.stats.to_dict() if build.stats else None
        shutil.rmtree(out / target / f".{name}.build", ignore_errors=True)
    return Exported(target, KernelCall.of(plan), source_file, binary_file, options, isa,
                    _example_skip(pv.config, plan) if target == "cpu" else "not a cpu kernel", record, short)


def _argument(a) -> dict:
    """One argument in manifest.json: ``name`` says what it is (the value it takes: D, not the kernel's ``C``),
    ``parameter`` is the kernel's own name of it."""
    d = a.as_dict()
    d["parameter"] = d["name"]
    d["name"] = ARGUMENT_NAMES.get(a.value, a.value)
    return d


def _manifest(label: str, exported: list[Exported], skipped: list[dict], not_dispatched: list[str]) -> dict:
    kernels = []
    for e in exported:
        plan, call = e.call.plan, e.call
        config = plan.config
        kernels.append({
            "name": e.short, "key": plan.name, "target": e.target, "source": e.source_file, "binary": e.binary_file,
            "launcher": f"{e.short}_launch_grouped" if plan.grouped else f"{e.short}_launch",
            "launchers": {"table": f"{e.short}_grouped_table", "workgroups": f"{e.short}_persistent_workgroups",
                          "grouped": f"{e.short}_launch_grouped"} if plan.grouped else
                         {"compact": f"{e.short}_launch", "strided": f"{e.short}_launch_strided",
                          "usm": f"{e.short}_launch_usm"},
            "types": {"a": config.types.a, "b": config.types.b, "acc": config.types.acc, "c": config.types.c},
            "layout": {"a": config.layout.a, "b": config.layout.b, "c": config.layout.c},
            "epilogue": {"alpha": config.epilogue.alpha, "beta": config.epilogue.beta, "bias": config.epilogue.bias,
                         "activation": config.epilogue.activation, "clamp": list(config.epilogue.clamp)}
            if plan.graph is None else {"traced": plan.graph.describe()},
            "sub_group_size": config.tile.subgroup_size,
            "formulas": [{"name": n, "value": v} for n, v in call.formulas],
            "workspace_bytes": call.workspace,
            "entries": [{"kernel": e.kernel_name(launch.kernel), "arguments": [_argument(a) for a in launch.arguments],
                         "global_size": list(launch.global_size), "local_size": list(launch.local_size)}
                        for launch in call.launches],
            "rules": _rules(config, e.target), "build_options": e.options, "isa": e.isa,
            **({"compiler": e.compiler} if e.compiler else {}),
            "example": "runs" if e.example is None else f"left out: {e.example}"})
    return {"source": label, "formulas_are": "C integer arithmetic over M, N, K, batch (xegemm.library.formula)",
            "kernels": kernels, "skipped": skipped,
            "dispatch": {"function": "xegemm_dispatch", "rules": [r.name for r in DISPATCH_RULES],
                         "left_out": not_dispatched}}


def _unique_launchers(exported: list[Exported]) -> list[Exported]:
    """One launcher per kernel name (the same arguments on every target)."""
    seen, out = set(), []
    for e in exported:
        if e.key not in seen:
            seen.add(e.key)
            out.append(e)
    return out


def _extras(call: KernelCall) -> tuple[list, list]:
    """The buffers and float scalars a kernel takes beyond every launcher's (a quantized B's scales and zeros, an
    FP8 A's scales, a traced epilogue's inputs and outputs), in the order the launches first use them."""
    buffers, scalars = [], []
    for launch in call.launches:
        for a in launch.arguments:
            if a.is_buffer and a.value not in CORE_BUFFERS and a.value not in [b for b, _ in buffers]:
                buffers.append((a.value, a.meaning))
            elif a.ctype == "float" and a.value not in SCALARS and a.value not in [x for x, _ in scalars]:
                scalars.append((a.value, a.meaning))
    return buffers, scalars


def _plain(e: Exported) -> bool:
    """A single GEMM's kernel whose launcher takes every launcher's operands only (what the dispatch can run)."""
    buffers, scalars = _extras(e.call)
    return not buffers and not scalars and not e.call.plan.grouped


def _c_kernel(e: Exported, index: int, programs: list[Exported]) -> dict:
    """What the C templates print for one kernel (``programs``: its exported files, one per target)."""
    plan, call = e.call.plan, e.call
    config = plan.config
    t = config.types
    spec = EpilogueSpec.of(config)
    act = ACTIVATIONS[spec.activation]
    buffers, scalars = _extras(call)
    assert all(b in BUFFERS or b.startswith(("in_", "out_")) for b, _ in buffers), buffers
    if plan.grouped:
        buffers = [(b, m) for b, m in buffers if b not in ("table", "tile_counter")]
    return {"grouped": _grouped(plan) if plan.grouped else None,
            "plain": not buffers and not scalars and not plan.grouped, "name": e.short, "c": e.short, "key": plan.name, "index": index, "source": e.source_file,
            "options": e.options,
            "programs": [{"target": p.target, "source": p.source_file, "binary": p.binary_file, "options": p.options}
                         for p in programs],
            "cpu": next(({"source": p.source_file if p.target == "cpu" else p.binary_file, "options": p.options,
                          "il": p.target == "coopmat"} for p in programs if p.target in HOST_TARGETS), None),
            "vnni": Lowering(config.target.lowering).b_pack_factor(plan) or 0 if config.target.lowering else 0,
            "coopmat": e.target == "coopmat",
            "formulas": call.formulas, "workspace": call.workspace,
            "launches": [{"kernel": e.kernel_name(launch.kernel), "arguments": launch.arguments,
                          "global": launch.global_size, "local": launch.local_size} for launch in call.launches],
            "extra_buffers": buffers, "extra_scalars": scalars,
            "a": dtype(t.a), "b": dtype(t.b), "acc": dtype(t.acc), "c_type": dtype(t.c),
            "layout_a": config.layout.a, "layout_b": config.layout.b,
            "epilogue": plan.graph.describe() if plan.graph is not None else spec.describe(),
            "alpha": spec.alpha, "beta": spec.beta, "bias": spec.bias, "activation": spec.activation,
            "clamp": spec.clamp, "lipschitz": act.lipschitz, "act_error": act.error_units,
            "exact": spec.exact_integer, "quantized": plan.quant is not None,
            "fp8_a": plan.quant is not None and plan.quant.a_spec is not None,
            "problem": (config.problem.m, config.problem.n, config.problem.k, config.problem.batch),
            "splits": config.tile.split_k + (2 * math.ceil(config.problem.k / config.tile.workgroup[2])
                                             if config.tile.stream_k else 0)}


def _grouped(plan) -> dict:
    """What the C templates print for a grouped or MoE kernel: the tile (the table's tile counts), the persistent
    grid's rule (:func:`xegemm.kernel.grouped_launch.persistent_workgroups`) and, for example.c, the config's own
    problem laid out as the call API lays it out (:func:`xegemm.kernel.grouped_launch.grouped_launch`)."""
    config = plan.config
    sgm, sgn = config.tile.subgroups
    problem = grouped_problem(config)
    layout = grouped_launch(plan, problem, 1)
    table = layout.table
    return {"bm": config.tile.workgroup[0], "bn": config.tile.workgroup[1], "fixed": config.tile.persistent,
            "per_unit_gpu": HW_THREADS.get(config.target.grf, 4) / (sgm * sgn), "walk": config.tile.walk,
            "experts": problem.experts,
            "groups": [[int(table[g, FIELD[f]]) for f in ("m", "n", "k", "a_offset", "b_offset", "c_offset", "lda",
                                                          "ldb", "ldc", "bias_offset")]
                       for g in range(len(problem.groups))],
            # a kernel that reads B packed (coopmat): the table's b_offset and B's bytes are the packed B's
            "nbytes": [max(4, layout.nbytes[x]) for x in ("A", "B_packed" if layout.packed_b_offsets else "B", "D")],
            "bias_floats": max(1, layout.nbytes["bias"] // 4)}
