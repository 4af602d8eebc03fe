"""Every f32 bit pattern through the kernels' f16 and bf16 conversions, on the device, against numpy.

``python -m bench.conversions [--chunk-bits N] [--step S]`` renders the conversion helpers of both lowerings
(templates/convert.cl.j2: the portable lowering's integer spellings, the native lowering's ``vstore_half_rte`` /
``vload_half``) into one program, converts all 2^32 f32 bit patterns (or every ``S``-th) on the default device,
chunk by chunk, with the kernels' build options, and compares:

- f32 -> f16: portable against the builtin, bit for bit, every pattern; both against numpy's float32 ->
  float16 (IEEE round to nearest even) for every non-NaN pattern; every NaN must come out a quiet NaN;
- f32 -> bf16 (one spelling in both lowerings) against ml_dtypes' bfloat16 for every non-NaN pattern;
- f16 -> f32: portable against the builtin and numpy's float16 -> float32 on all 65536 patterns.

It prints the counts of mismatches (with the first few) and exits 1 if the portable spelling differs from the
builtin anywhere, or from numpy on a number.  A sweep, not a unit test: tests/test_epilogue.py checks a few
thousand patterns in a second.
"""

from __future__ import annotations

import argparse
import sys
import time

import ml_dtypes
import numpy as np

from xegemm.library.build_flags import STANDARD
from xegemm.kernel.render import environment

KERNEL = """
__kernel void f32_patterns(const global uint* x, global ushort* hf_new, global ushort* hf_old, global ushort* bf)
{
    const uint u = x[get_global_id(0)];
    hf_new[get_global_id(0)] = xe_f32_to_f16_rne(as_float(u));
    hf_old[get_global_id(0)] = builtin_f32_to_f16_rne(as_float(u));
    bf[get_global_id(0)] = xe_f32_to_bf16_rne(as_float(u));
}

__kernel void f16_patterns(global uint* f_new, global uint* f_old)
{
    const ushort h = (ushort)get_global_id(0);
    f_new[get_global_id(0)] = as_uint(xe_f16_to_f32(h));
    f_old[get_global_id(0)] = as_uint(builtin_f16_to_f32(h));
}
"""


def source() -> str:
    """One program with both lowerings' f16 helpers (the native ones renamed ``builtin_*``) and bf16's."""
    convert = environment().get_template("convert.cl.j2").module
    builtin = str(convert.f16_rne("native")).replace("XE_F32_TO_F16_RNE", "BUILTIN_F32_TO_F16_RNE") \
        .replace("xe_f32_to_f16_rne", "builtin_f32_to_f16_rne").replace("xe_f16_to_f32", "builtin_f16_to_f32")
    return f"{convert.bf16_rne()}\n{convert.f16_rne('portable')}\n{builtin}\n{KERNEL}"


class Converter:
    """The conversions of :func:`source`, built once on a device with the kernels' build options."""

    def __init__(self, sycl_device):
        from xegemm.runtime.program import build_program, make_queue      # noqa: PLC0415 - opens the device
        self.queue = make_queue(sycl_device, profiling=False)
        self.program = build_program(self.queue, source(), STANDARD)   # a + b must not fuse into something else

    def f32(self, patterns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """uint32 f32 bit patterns -> (f16 portable, f16 builtin, bf16) bits."""
        from xegemm.runtime.program import from_device, launch, to_device     # noqa: PLC0415
        padded = np.zeros(-(-patterns.size // 64) * 64, np.uint32)      # whole work-groups of 64
        padded[: patterns.size] = patterns
        out = [to_device(self.queue, np.zeros(padded.size, np.uint16)) for _ in range(3)]
        launch(self.queue, self.program.get_sycl_kernel("f32_patterns"), [to_device(self.queue, padded), *out],
               (padded.size, 1, 1), (64, 1, 1)).wait()
        return tuple(from_device(m, np.uint16, padded.shape)[: patterns.size] for m in out)

    def f16(self) -> tuple[np.ndarray, np.ndarray]:
        """All 65536 f16 bit patterns -> (f32 portable, f32 builtin) bits."""
        from xegemm.runtime.program import from_device, launch, to_device     # noqa: PLC0415
        out = [to_device(self.queue, np.zeros(1 << 16, np.uint32)) for _ in range(2)]
        launch(self.queue, self.program.get_sycl_kernel("f16_patterns"), out, (1 << 16, 1, 1), (64, 1, 1)).wait()
        return tuple(from_device(m, np.uint32, (1 << 16,)) for m in out)


def f32_mismatches(patterns: np.ndarray, new: np.ndarray, old: np.ndarray, bf: np.ndarray) -> dict[str, np.ndarray]:
    """Per comparison, the patterns where it fails: portable against the builtin (every pattern, NaNs too), both
    against numpy and bf16 against ml_dtypes (numbers only: numpy keeps a signalling NaN's bits, the kernels and
    ml_dtypes give a quiet NaN)."""
    x = patterns.astype(np.uint32).view(np.float32)
    number = ~np.isnan(x)
    with np.errstate(over="ignore", invalid="ignore"):
        want_hf = x.astype(np.float16).view(np.uint16)
        want_bf = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    return {"f32->f16 portable != builtin": new != old,
            "f32->f16 portable != numpy": (new != want_hf) & number,
            "f32->f16 builtin != numpy": (old != want_hf) & number,
            "f32->bf16 != ml_dtypes": (bf != want_bf) & number,
            "f32->f16 NaN not quiet": ~number & ((new & 0x7E00) != 0x7E00),
            "f32->bf16 NaN not quiet": ~number & ((bf & 0x7FC0) != 0x7FC0)}


def f16_mismatches(new: np.ndarray, old: np.ndarray) -> dict[str, np.ndarray]:
    """f16 -> f32 over all 65536 patterns: portable against the builtin (all) and numpy (numbers)."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    want = halves.astype(np.float32).view(np.uint32)
    return {"f16->f32 portable != builtin": new != old,
            "f16->f32 portable != numpy": (new != want) & ~np.isnan(halves)}


def check(chunk_bits: int = 24, step: int = 1) -> dict:
    from xegemm.runtime import select_sycl_device                       # noqa: PLC0415 - opens the device

    converter = Converter(select_sycl_device())
    failures: dict[str, dict] = {}

    def record(found: dict[str, np.ndarray], patterns: np.ndarray) -> None:
        for name, bad in found.items():
            entry = failures.setdefault(name, {"count": 0, "examples": []})
            entry["count"] += int(bad.sum())
            entry["examples"] += [f"0x{int(p):08x}" for p in patterns[bad][: 4 - len(entry["examples"])]]

    t0 = time.perf_counter()
    span = (1 << chunk_bits) * step
    for base in range(0, 1 << 32, span):
        patterns = (np.arange(base, min(base + span, 1 << 32), step, dtype=np.uint64)).astype(np.uint32)
        record(f32_mismatches(patterns, *converter.f32(patterns)), patterns)
    seconds = time.perf_counter() - t0
    record(f16_mismatches(*converter.f16()), np.arange(1 << 16, dtype=np.uint32))
    return {"patterns": len(range(0, 1 << 32, step)), "seconds": seconds,
            "failures": {k: v for k, v in failures.items() if v["count"]}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunk-bits", type=int, default=24, help="patterns per launch: 2^N (default 24)")
    parser.add_argument("--step", type=int, default=1, help="every S-th pattern (default 1: all 2^32)")
    args = parser.parse_args(argv)
    result = check(args.chunk_bits, args.step)
    print(f"{result['patterns']} f32 patterns in {result['seconds']:.0f} s, all 65536 f16 patterns")
    for name, entry in result["failures"].items():
        print(f"  {name}: {entry['count']} mismatches, e.g. {', '.join(entry['examples'])}")
    portable = [n for n in result["failures"] if "portable" in n or "quiet" in n]
    print("  portable spellings: " + ("DIFFER" if portable else "identical to the builtins and numpy on every number"))
    return 1 if portable else 0


if __name__ == "__main__":
    sys.exit(main())
