"""Every legal DPAS atom's portable lowering, run on the real device against numpy_reference.

For each atom a kernel loads each lane's A, B, C registers from buffers laid out by the Python lane maps
(pack_operand), calls the rendered portable function once per sub-group and stores D's registers, which
unpack_operand turns back into a matrix.  All kernels live in two programs (see BUILDS), built once per
module.  Integer atoms must match exactly; float atoms within tolerance(atom) * (|A||B| + |C|).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from xegemm.atoms.mma import (
    MmaAtom,
    enumerate_mma_atoms,
    error_bound,
    numpy_reference,
    pack_operand,
    round_to,
    unpack_operand,
)
from xegemm.kernel.render import render_mma
from xegemm.runtime.program import build_program, from_device, launch, to_device

pytestmark = pytest.mark.device

ATOMS = list(enumerate_mma_atoms())
TRIALS = 3          # sub-groups per launch, each with its own random matrices


def _kernel(atom: MmaAtom) -> str:
    return f"""
__attribute__((reqd_work_group_size({atom.n}, 1, 1))) __attribute__((intel_reqd_sub_group_size({atom.n})))
__kernel void k_{atom.fn_name}(__global const {atom.a_ctype}* a, __global const {atom.b_ctype}* b,
                                __global const {atom.c_ctype}* c, __global {atom.c_ctype}* d)
{{
    const size_t i = get_global_id(0);
    d[i] = {atom.fn_name}(a[i], b[i], c[i]);
}}
"""


def program_source(atoms) -> str:
    """One OpenCL C program: the portable function of each atom and a kernel that runs it once per sub-group."""
    parts = ["#pragma OPENCL EXTENSION cl_khr_fp16 : enable"]
    for atom in atoms:
        parts.append(render_mma(atom, "portable"))
        parts.append(_kernel(atom))
    return "\n".join(parts)


def random_operand(rng, atom: MmaAtom, operand: str) -> np.ndarray:
    """A random matrix of the operand's shape whose values are exactly representable in its element type."""
    t = atom.element(operand)
    shape = atom.operand_shape(operand)
    if t.kind == "int":
        if t.bits == 32:   # C: mostly moderate, with some values near the int32 limits to exercise wrapping
            v = rng.integers(-(1 << 20), 1 << 20, size=shape)
            edge = rng.random(shape) < 0.1
            return np.where(edge, rng.choice([-(1 << 31), (1 << 31) - 1], size=shape), v)
        lo, hi = (-(1 << (t.bits - 1)), 1 << (t.bits - 1)) if t.signed else (0, 1 << t.bits)
        return rng.integers(lo, hi, size=shape)          # the full range: sign/zero extension matters
    return round_to(t.code, rng.standard_normal(shape) * 2.0)



# Every atom is built without optimisation (-cl-opt-disable: about 4-5 s for all 184 instead of about 30 s),
# and the M = 8 atom of every type family and SIMD width again with the compiler's default optimisation
# (about 6 s), so the code is also checked as a GEMM kernel will compile it.  (Building the two programs on
# two threads saved nothing on the CPU runtime: its builds do not overlap.)
BUILDS = {
    "unoptimised": (ATOMS, "-cl-std=CL3.0 -cl-opt-disable"),
    "optimised": ([atom for atom in ATOMS if atom.m == 8], "-cl-std=CL3.0"),
}


@pytest.fixture(scope="module")
def programs(queue):
    """Build name -> built program (each holds the kernels of its atoms)."""
    return {name: build_program(queue, program_source(atoms), options) for name, (atoms, options) in BUILDS.items()}


def run_atom(queue, program, atom: MmaAtom, a_list, b_list, c_list) -> list[np.ndarray]:
    """Run the atom's kernel on len(a_list) sub-groups; return D per sub-group."""
    images = [np.concatenate([pack_operand(atom, op, x) for x in xs]) for op, xs in
              (("a", a_list), ("b", b_list), ("c", c_list))]
    bufs = [to_device(queue, im) for im in images]
    out = to_device(queue, np.zeros_like(images[2]))
    trials = len(a_list)
    launch(queue, program.get_sycl_kernel(f"k_{atom.fn_name}"), [*bufs, out],
           [atom.n * trials], [atom.n]).wait()
    d = from_device(out, np.uint8, images[2].shape).reshape(trials, atom.n, -1)
    return [unpack_operand(atom, "d", d[t]) for t in range(trials)]


def check_atom(queue, program, atom: MmaAtom):
    """Random inputs (seeded per atom), run, compare: integers exactly, floats within the tolerance."""
    rng = np.random.default_rng(zlib.crc32(atom.name.encode()))
    a_list = [random_operand(rng, atom, "a") for _ in range(TRIALS)]
    b_list = [random_operand(rng, atom, "b") for _ in range(TRIALS)]
    c_list = [random_operand(rng, atom, "c") for _ in range(TRIALS)]
    got = run_atom(queue, program, atom, a_list, b_list, c_list)
    for a, b, c, d in zip(a_list, b_list, c_list, got):
        ref = numpy_reference(atom, a, b, c)
        if atom.is_integer:
            np.testing.assert_array_equal(d, ref, err_msg=atom.name)
        else:
            bound = error_bound(atom, a, b, c)
            bad = np.abs(d - ref) > bound
            assert not bad.any(), (f"{atom.name}: {bad.sum()} elements outside the bound, e.g. at "
                                   f"{np.argwhere(bad)[0]}: got {d[bad][0]}, want {ref[bad][0]} +- {bound[bad][0]}")


@pytest.mark.parametrize("atom", ATOMS, ids=lambda a: a.name)
def test_portable_atom_matches_reference(queue, programs, atom):
    check_atom(queue, programs["unoptimised"], atom)


@pytest.mark.parametrize("atom", BUILDS["optimised"][0], ids=lambda a: a.name)
def test_portable_atom_optimised_matches_reference(queue, programs, atom):
    check_atom(queue, programs["optimised"], atom)


def test_a_wrong_layout_is_caught(queue, programs):
    """The harness can fail: D with its columns shifted by one (lane n read as column n+1) does not match."""
    atom = MmaAtom.parse("XE_8x16x16_F32BF16BF16F32_TT")
    rng = np.random.default_rng(7)
    a, b, c = (random_operand(rng, atom, op) for op in "abc")
    d = run_atom(queue, programs["optimised"], atom, [a], [b], [c])[0]
    ref = numpy_reference(atom, a, b, c)
    assert np.all(np.abs(d - ref) <= error_bound(atom, a, b, c))
    rotated = np.roll(d, 1, axis=1)
    assert np.any(np.abs(rotated - ref) > error_bound(atom, a, b, c))


def test_two_builds_hold_every_atom(programs):
    """The builds dominate this file's run time, so every atom is in one program per build mode: two builds in
    all, each with one kernel per atom (a timing threshold would be no test: it depends on the machine)."""
    assert sorted(programs) == sorted(BUILDS)
    for name, (atoms, _) in BUILDS.items():
        assert all(programs[name].has_sycl_kernel(f"k_{atom.fn_name}") for atom in atoms), name
    assert len(BUILDS["unoptimised"][0]) == len(ATOMS) == 184
