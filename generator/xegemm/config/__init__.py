"""The user-facing YAML config: load it safely, validate it with precise errors, expand sweeps, check constraints.

The package: :mod:`~xegemm.config.checks` (value checks and the errors), :mod:`~xegemm.config.schema` (the
keys and the resolved config), :mod:`~xegemm.config.reader` (YAML with file:line:key errors),
:mod:`~xegemm.config.expressions` (constraints, never eval) and :mod:`~xegemm.config.space` (the search
space a tuner samples).

A config describes one GEMM kernel configuration, or a family of them when it has a ``sweep``.  Every key
except ``problem`` has a default; this is the complete list with the defaults::

    name: <file name without .yaml>   # letters, digits, _ . - ; "gemm" for text not read from a file
    description: ""                   # free text, copied into reports
    problem:                          # required: D[batch] = A[batch] (m x k) @ B[batch] (k x n)
      m: <required>                   # positive integers
      n: <required>
      k: <required>
      batch: 1
    types: {a: bf16, b: bf16, acc: f32, c: f32}   # f16 bf16 tf32 f32 f64 s8 u8 s4 u4 s32
      compute: null                   # quantized operands: f16 | bf16, the DPAS input (null: types.a)
    layout: {a: row, b: row, c: row}               # row | col
    quant:                            # B quantized (xegemm.quant, docs/quantization.md); types.b: s8 u8 s4 u4
      format: none                    #   e4m3 e5m2 e2m1; format none | plain | gptq | awq | mx
      group: 128                      # K elements per scale | channel | tensor | block128 (FP8 B)
      scale: f16                      # f16 | bf16 | f32 | e8m0
      zero: none                      # none | u4 | s8 | u8 | f16 | bf16 (quantized units, before the scale)
      scale_layout: kn                # kn = scales[K/group, N] | nk = scales[N, K/group]
    quant_a: {format: none, ...}      # an FP8 A (types.a: e4m3 | e5m2): the same keys, plain only
    tile:
      workgroup: [256, 256, 32]       # BM, BN, BK: the work-group tile
      subgroups: [8, 4]               # SG_M, SG_N: the sub-group grid over BM x BN
      subgroup_size: 16               # 8 | 16 | 32
    atoms:                            # null (or "auto") = the planner picks a legal atom
      mma: null                       # XE_<M>x<N>x<K>_<D><A><B><C>_TT, e.g. XE_8x16x16_F32BF16BF16F32_TT
      a: null                         # XE_2D_[Packed_]<U4|U8|U16|U32|U64|TF32>x<rows>x<cols>_<LD|ST|PF>_<N|T|V>
      b: null
      c: null
    pipeline:
      prefetch: 2                     # k-tiles prefetched ahead of the one being multiplied (0 = none)
    target:
      grf: 256                        # registers per thread: 128 | 256 (-cl-intel-<n>-GRF-per-thread)
    verify:
      seed: 0                         # seed of the random inputs
    profile:
      warmup: 10                      # untimed launches before timing, at least; the warm-up goes on until the
                                      # kernel's time is steady (xegemm.evaluate.timing.warm_up), whatever this says
      repeats: 100                    # timed launches (at least)
      min_time_ms: 0.0                # keep launching until this much time is measured (0 = off)
      rotate: auto                    # time a small problem over rotating copies of its operands, so that it
                                      # is not timed from the cache: auto (below a measured size) | true | false
    sweep: {}                         # dotted key -> list of values; cartesian product
    constraints: []                   # expressions every variant must satisfy

Spelling: dtypes and layouts are case-insensitive and accept aliases that map to the canonical name
(``half``/``fp16``/``float16`` -> f16, ``bfloat16`` -> bf16, ``float``/``fp32``/``float32`` -> f32,
``double``/``fp64``/``float64`` -> f64, ``int8``/``i8`` -> s8, ``uint8`` -> u8, ``int4``/``i4`` -> s4,
``uint4`` -> u4, ``int32``/``i32`` -> s32; ``column``/``col_major``/``column_major`` -> col,
``row_major`` -> row).  A type must be usable where it stands (A and B: a DPAS input type; acc and C: a DPAS
accumulator type), and a named atom must be legal: the error names the hardware rule it breaks.

Loading.  The file is composed with PyYAML's SafeLoader into a node tree and the values are built from the
nodes here, so every value knows its line; only plain YAML scalars (str, int, float, bool, null), lists and
mappings are accepted (any other tag, a merge key ``<<``, a duplicate key or a recursive alias is an
error).  Every problem found is reported, one per line, in a single :class:`ConfigError`::

    configs/x.yaml:7: tile.workgroup: expected a list of 3 positive integers [BM, BN, BK], found [256, 256]
    configs/x.yaml:4: tyeps: unknown key; did you mean 'types'?

Sweeps.  ``sweep`` maps a dotted key (``tile.workgroup``, ``problem.m``, ...) to a non-empty list of values,
each validated exactly like the key it replaces; :func:`expand` yields the cartesian product in file order,
the last key varying fastest.  A section name sweeps several keys together: ``tile: [{workgroup: [256, 256,
32], subgroups: [8, 4]}, {workgroup: [128, 512, 32], subgroups: [4, 8]}]`` (keys left out keep their
value).  Variants with identical resolved values collapse to the first one.

Constraints.  Each entry of ``constraints`` is a Python expression checked with a small evaluator over
:mod:`ast` (never ``eval``): literals, config keys as dotted names with subscripts (``tile.workgroup[0]``,
``problem.k``, ``types.a == 'bf16'``), ``+ - * / // % **`` on numbers, comparisons (chained, ``in``),
``and``/``or``/``not``, ``x if c else y``, tuples/lists and the functions ``min max abs len all any``.
Anything else (other calls, attribute access on non-config values, dunder names, lambdas, comprehensions,
...) is rejected when the file is loaded.  A variant that fails a constraint is kept and marked rejected
with the reason; a constraint that cannot be evaluated for a variant (division by zero, index out of
range, ...) rejects that variant with the error.
"""

from xegemm.config.checks import DTYPES, LAYOUTS, ConfigError, ConfigIssue
from xegemm.config.reader import config_from_text, load_config
from xegemm.config.schema import (
    Atoms,
    Config,
    Constraint,
    Layout,
    Pipeline,
    Problem,
    Moe,
    Profile,
    Quant,
    Target,
    Tile,
    Types,
    Variant,
    Verify,
)
from xegemm.config.space import SearchSpace, expand

__all__ = [
    "Atoms", "Config", "ConfigError", "ConfigIssue", "Constraint", "DTYPES", "LAYOUTS", "Layout", "Pipeline",
    "Moe", "Problem", "Profile", "Quant", "SearchSpace", "Target", "Tile", "Types", "Variant", "Verify", "config_from_text",
    "expand", "load_config",
]
