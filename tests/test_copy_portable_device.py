"""The portable lowering of every legal copy atom, run on the device, against the Python lane map.

For each atom a kernel moves one block with the atom's portable function; the registers each work-item
ends up with (loads) or the memory it writes (stores) must equal, element by element, what the lane map
of xegemm.atoms.copy says, for a block inside the surface and for blocks hanging over its right and
bottom edges (out-of-bounds elements read as 0; out-of-bounds stores are dropped).

Every atom is built without optimisation (-cl-opt-disable: about 10 s for all loads on the AVX2 code path
instead of about 4 minutes), and the atoms the shipped configs use again with the compiler's default
optimisation, so the code is also checked as a GEMM kernel compiles it (the GEMM tests verify those too); the
optimised loads are called as a GEMM kernel calls them, through ``_into`` (the register as an array).  Every
load is also run through ``_into_local`` (the register in the sub-group's local memory, lane-strided, as the
staged k-step keeps it: xegemm.lowering.portable.LocalRegisters), and every store through ``_from_local`` (as
the rolled epilogue stores D from local memory), unoptimised, and the shipped ones optimised.
"""

import zlib
from pathlib import Path

import numpy as np
import pytest

from xegemm.atoms.copy import enumerate_copy_atoms
from xegemm.config import load_config
from xegemm.evaluate import plan_variants
from xegemm.lowering.portable import copy_plan
from xegemm.kernel.render import render_macro, wide_vector_typedefs
from xegemm.runtime.program import build_program, from_device, launch, to_device

pytestmark = pytest.mark.device

ATOMS = [a for a in enumerate_copy_atoms(include_quirks=False) if not a.is_prefetch]
LOADS = [a for a in ATOMS if a.is_load]
STORES = [a for a in ATOMS if a.is_store]
PREFETCHES = [a for a in enumerate_copy_atoms(include_quirks=False) if a.is_prefetch]
SHIPPED = {atom.name for config in sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
           for pv in plan_variants(load_config(config)) if pv.plan is not None
           for atom in (pv.plan.a.atom, pv.plan.b.atom, pv.plan.c.atom)}
UNOPTIMISED, OPTIMISED = "-cl-std=CL3.0 -cl-opt-disable", "-cl-std=CL3.0"
BUILDS = {"unoptimised": UNOPTIMISED, "optimised": OPTIMISED}

SURFACE_ROWS, PITCH = 48, 320          # pitch in bytes; the surface width varies per case
KERNEL_ATTRS = "__attribute__((intel_reqd_sub_group_size(16))) __attribute__((reqd_work_group_size(16, 1, 1)))"


def _program_source(atoms, into: str = "") -> str:
    """One test kernel per atom.  A load returns its register through the atom's vector form (the builtin's
    signature), or with ``into`` through the form a GEMM kernel calls: ``"private"``, ``_into`` (its register
    as an array), or ``"local"``, ``_into_local`` (its register in local memory, component i at [i * 16]); a
    store with ``into`` ``"local"`` stores through ``_from_local`` (its register in local memory alike)."""
    parts = [render_macro("copy/portable.cl.j2", "prelude"),
             wide_vector_typedefs(a.register_type for a in atoms if a.register_type)]
    for a in atoms:
        parts.append(render_macro("copy/portable.cl.j2", "define", a, copy_plan(a)))
        rb = a.register_bytes
        if a.is_load and into == "local":
            parts.append(f"""{KERNEL_ATTRS}
__kernel void t_{a.fn_name}(const global uchar* src, int w, int h, int pitch, int x, int y, global uchar* out) {{
    local {a.register_elem_ctype} v[{a.register_length * 16}];
    const int lane = get_sub_group_local_id();
    {a.fn_name}_into_local(src, w, h, pitch, x, y, v + lane);
    global {a.register_elem_ctype}* o = (global {a.register_elem_ctype}*)(out + lane * {rb});
    for (int i = 0; i < {a.register_length}; ++i) o[i] = v[i * 16 + lane];
}}""")
        elif a.is_load and into:
            parts.append(f"""{KERNEL_ATTRS}
__kernel void t_{a.fn_name}(const global uchar* src, int w, int h, int pitch, int x, int y, global uchar* out) {{
    {a.register_elem_ctype} v[{a.register_length}];
    {a.fn_name}_into(src, w, h, pitch, x, y, v);
    global {a.register_elem_ctype}* o = (global {a.register_elem_ctype}*)(out + get_sub_group_local_id() * {rb});
    for (int i = 0; i < {a.register_length}; ++i) o[i] = v[i];
}}""")
        elif a.is_load:
            parts.append(f"""{KERNEL_ATTRS}
__kernel void t_{a.fn_name}(const global uchar* src, int w, int h, int pitch, int x, int y, global uchar* out) {{
    union {{ {a.register_type} v; uchar b[{rb}]; }} u;
    u.v = {a.fn_name}(src, w, h, pitch, x, y);
    for (int i = 0; i < {rb}; ++i) out[get_sub_group_local_id() * {rb} + i] = u.b[i];
}}""")
        elif a.is_store and into == "local":
            parts.append(f"""{KERNEL_ATTRS}
__kernel void t_{a.fn_name}(global uchar* dst, int w, int h, int pitch, int x, int y, const global uchar* in) {{
    local {a.register_elem_ctype} v[{a.register_length * 16}];
    const int lane = get_sub_group_local_id();
    const global {a.register_elem_ctype}* r = (const global {a.register_elem_ctype}*)(in + lane * {rb});
    for (int i = 0; i < {a.register_length}; ++i) v[i * 16 + lane] = r[i];
    {a.fn_name}_from_local(dst, w, h, pitch, x, y, v + lane);
}}""")
        elif a.is_store:
            parts.append(f"""{KERNEL_ATTRS}
__kernel void t_{a.fn_name}(global uchar* dst, int w, int h, int pitch, int x, int y, const global uchar* in) {{
    union {{ {a.register_type} v; uchar b[{rb}]; }} u;
    for (int i = 0; i < {rb}; ++i) u.b[i] = in[get_sub_group_local_id() * {rb} + i];
    {a.fn_name}(dst, w, h, pitch, x, y, u.v);
}}""")
        else:
            parts.append(f"""{KERNEL_ATTRS}
__kernel void t_{a.fn_name}(const global uchar* src, int w, int h, int pitch, int x, int y) {{
    {a.fn_name}(src, w, h, pitch, x, y);
}}""")
    return "\n".join(parts)


def _elements(raw: np.ndarray, bits: int) -> np.ndarray:
    """Little-endian elements of `bits` bits from a byte array (the register image's element order)."""
    if bits == 4:
        return np.stack([raw & 15, raw >> 4], axis=-1).reshape(*raw.shape[:-1], -1).astype(np.uint64)
    return raw.view({8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]).astype(np.uint64)


def _surface_value(elems: np.ndarray, bits: int, width_bytes: int, row: int, col: int) -> int:
    """Element (row, col) of the surface as the hardware reads it: 0 outside the surface."""
    if row >= elems.shape[0] or col * bits // 8 >= width_bytes:
        return 0
    return int(elems[row, col])


def _cases(atom):
    """(surface width in bytes, x, y): inside, hanging over the right edge, over the bottom edge; and for a
    load whose fast path reads several elements at once (``align``), inside at a column that is not aligned
    for those reads (the exact path must take it)."""
    full = PITCH
    right_x = max(0, (full // 2) * 8 // atom.elem_bits - atom.cols // 2)
    yield full, 0, 0
    yield full // 2, right_x, 1
    yield full, atom.cols if atom.row_bytes <= full // 2 else 0, SURFACE_ROWS - max(1, atom.rows // 2)
    if atom.is_load and copy_plan(atom)["align"]:
        yield full, 1, 2



@pytest.fixture(scope="module")
def load_program(queue):
    return {"unoptimised": build_program(queue, _program_source(LOADS), UNOPTIMISED),
            # the form the GEMM kernels call (the vector form wraps it; optimised, those 17 loads built in
            # 59 s through the vector form and 28 s through _into, before the packed loads' wide reads)
            "optimised": build_program(queue, _program_source([a for a in LOADS if a.name in SHIPPED], "private"),
                                       OPTIMISED),
            "local unoptimised": build_program(queue, _program_source(LOADS, "local"), UNOPTIMISED),
            "local optimised": build_program(queue, _program_source([a for a in LOADS if a.name in SHIPPED],
                                                                    "local"), OPTIMISED)}


@pytest.fixture(scope="module")
def store_program(queue):
    shipped = [a for a in STORES if a.name in SHIPPED]
    return {"unoptimised": build_program(queue, _program_source(STORES + PREFETCHES), UNOPTIMISED),
            "optimised": build_program(queue, _program_source(shipped), OPTIMISED),
            "local unoptimised": build_program(queue, _program_source(STORES, "local"), UNOPTIMISED),
            "local optimised": build_program(queue, _program_source(shipped, "local"), OPTIMISED)}


def test_enumeration_covers_every_kind():
    kinds = {a.message.kind for a in ATOMS}
    assert kinds == {"load", "transform", "transpose", "store"}
    assert len(LOADS) > 300 and len(STORES) > 100
    assert any(a.name in SHIPPED for a in LOADS) and any(a.name in SHIPPED for a in STORES)


LOAD_CASES = [(a, b) for b in (*BUILDS, "local unoptimised", "local optimised") for a in LOADS
              if b.endswith("unoptimised") or a.name in SHIPPED]
STORE_CASES = [(a, b) for b in (*BUILDS, "local unoptimised", "local optimised") for a in STORES
               if b.endswith("unoptimised") or a.name in SHIPPED]


@pytest.mark.parametrize("atom, build", LOAD_CASES, ids=lambda x: getattr(x, "name", x))
def test_portable_load_matches_lane_map(atom, build, queue, load_program):
    rng = np.random.default_rng(zlib.crc32(atom.name.encode()))
    surface = rng.integers(0, 256, size=(SURFACE_ROWS, PITCH), dtype=np.uint8)
    elems = _elements(surface, atom.elem_bits)
    src = to_device(queue, surface)
    kernel = load_program[build].get_sycl_kernel(f"t_{atom.fn_name}")
    for width_bytes, x, y in _cases(atom):
        out = to_device(queue, np.full(16 * atom.register_bytes, 0x5A, np.uint8))
        launch(queue, kernel, [src, _i(width_bytes), _i(SURFACE_ROWS), _i(PITCH),
                               _i(x), _i(y), out], [16], [16]).wait()
        got = _elements(from_device(out, np.uint8, (16, atom.register_bytes)), atom.elem_bits)
        for lane, coords in enumerate(atom.lane_map.map):
            want = [0 if c is None else
                    _surface_value(elems, atom.elem_bits, width_bytes, y + c[0], x + c[1])
                    for c in coords]
            assert list(got[lane]) == want, f"{atom.name} lane {lane}, surface width {width_bytes} B, x={x}, y={y}"


@pytest.mark.parametrize("atom, build", STORE_CASES, ids=lambda x: getattr(x, "name", x))
def test_portable_store_matches_lane_map(atom, build, queue, store_program):
    rng = np.random.default_rng(zlib.crc32(atom.name.encode()))
    regs = rng.integers(0, 256, size=(16, atom.register_bytes), dtype=np.uint8)
    values = _elements(regs, atom.elem_bits)
    kernel = store_program[build].get_sycl_kernel(f"t_{atom.fn_name}")
    for width_bytes, x, y in _cases(atom):
        sentinel = np.full((SURFACE_ROWS, PITCH), 0xA5, np.uint8)
        dst = to_device(queue, sentinel)
        launch(queue, kernel, [dst, _i(width_bytes), _i(SURFACE_ROWS), _i(PITCH), _i(x), _i(y),
                               to_device(queue, regs)], [16], [16]).wait()
        got = from_device(dst, np.uint8, sentinel.shape)
        want = sentinel.copy()
        for lane, coords in enumerate(atom.lane_map.map):
            for k, c in enumerate(coords):
                if c is None:
                    continue
                row, col = y + c[0], x + c[1]
                byte = col * atom.elem_bits // 8
                if row >= SURFACE_ROWS or byte >= width_bytes:
                    continue  # dropped, as on the hardware
                _put(want[row], atom.elem_bits, col, int(values[lane][k]))
        assert np.array_equal(got, want), f"{atom.name}, surface width {width_bytes} B, x={x}, y={y}: " \
            f"{int((got != want).sum())} bytes differ"


def test_portable_prefetches_build_and_run(queue, store_program):
    """A prefetch over the surface's last row and beyond its width runs and changes no byte of memory."""
    surface = np.random.default_rng(3).integers(0, 256, size=(SURFACE_ROWS, PITCH), dtype=np.uint8)
    src = to_device(queue, surface)
    assert PREFETCHES
    for atom in PREFETCHES:
        kernel = store_program["unoptimised"].get_sycl_kernel(f"t_{atom.fn_name}")
        launch(queue, kernel, [src, _i(PITCH // 2), _i(SURFACE_ROWS), _i(PITCH), _i(0), _i(SURFACE_ROWS - 1)],
               [16], [16]).wait()
        assert np.array_equal(from_device(src, np.uint8, surface.shape), surface), atom.name


def _i(v):
    import ctypes

    return ctypes.c_int(int(v))


def _put(row: np.ndarray, bits: int, col: int, value: int) -> None:
    if bits == 4:
        b = col // 2
        row[b] = (row[b] & 0xF0) | value if col % 2 == 0 else (row[b] & 0x0F) | (value << 4)
        return
    nbytes = bits // 8
    row[col * nbytes:(col + 1) * nbytes] = np.frombuffer(int(value).to_bytes(nbytes, "little"), np.uint8)
