"""The native lowering on the CPU: each shipped config's native kernel, its text unchanged, built with the CPU
emulation of the Xe builtins (xegemm.lowering.emulation) and verified against numpy element by element; each
emulated builtin against the lane maps (2D block reads, writes) and the DPAS numpy reference (atoms/mma.py); and
mutants of the emulation that verification must catch.

One variant per config (the first the planner accepts) at a small problem whose M, N and K are not multiples of
the work-group tile, so edge tiles and out-of-bounds block elements are exercised.
"""

import json
from pathlib import Path

import numpy as np
import pytest

import xegemm
from xegemm.atoms.mma import MmaAtom, error_bound, numpy_reference, pack_operand, unpack_operand
from xegemm.config import load_config
from xegemm.errors import XegemmError
from xegemm.evaluate import plan_variants, render_variant
from xegemm.jobs.pipeline import run, run_variant
from xegemm.kernel.render import render_kernel
from xegemm.library.build_flags import STANDARD
from xegemm.lowering import EmulatedNativeLowering, choose_lowering
from xegemm.lowering import emulation
from xegemm.lowering.emulation import NOTE, block_atom, called_builtins, cpu_source
from xegemm.lowering.native import native_capabilities
from xegemm.aot.capabilities import DEBIAN_CAPABILITIES
from xegemm.runtime import describe
from xegemm.runtime.program import build_program, from_device, launch, scalar, to_device

pytestmark = pytest.mark.device

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))
# smaller problems than the config's own where it is large, still ragged against the variant's tile (the emulated
# DPAS runs element by element)
SHAPES = {"layouts": (136, 136, 72), "xe_reference": (264, 264, 64), "split_k": (64, 96, 1024),
          "stream_k": (64, 96, 1024), "default": (72, 80, 88), "llm": (8, 136, 264), "llm_gptq": (20, 320, 384)}
# the variant verified where the config's first one is slow to build through the emulation: llm_gptq's 8x128x128
# tile (8 k-chunks of dequantized B per k-step) took 97 s of the suite; its 16x64x32 tile takes the same format
PICKS = {"llm_gptq": lambda pv: pv.config.tile.workgroup[2] == 32}
# (This emulation found that the native lowering gave a 4-bit VNNI load's x coordinate (XE_2D_U4x32x32_LD_V) in
# nibbles while its 8-bit message, read_transform_8b_32r16x1c, takes bytes: awq, w4a16, mxfp4 and moe_w4a16 failed
# verification here until Message.x_units counted transforms' units like every other message's.)
SHIPPED_NATIVE = ROOT / "kernels" / "native"


@pytest.fixture(scope="module")
def lowering(sycl_device):
    low = choose_lowering(describe(sycl_device), "native")
    if not low.emulated:
        pytest.skip(f"{sycl_device.filter_string} has the Xe builtins itself: the native lowering runs natively")
    return low


def _planned(name: str, low, shape=None, pick=None):
    config = load_config(ROOT / "configs" / f"{name}.yaml").with_overrides({"profile.warmup": 0,
                                                                            "profile.repeats": 1})
    shape = shape or SHAPES.get(name)
    if shape:
        config = config.at_problems([dict(zip("mnk", shape), batch=1)])
    planned = [pv for pv in plan_variants(config, low) if pv.plan is not None and (pick is None or pick(pv))]
    assert planned, f"{name}: no variant is planned for the native lowering"
    return planned[0]


# ---- every shipped config, verified -------------------------------------------------------------------------

@pytest.mark.parametrize("name", CONFIGS)
def test_the_configs_native_kernel_verifies_through_the_emulation(name, session, lowering):
    pv = _planned(name, lowering, pick=PICKS.get(name))
    source = render_variant(pv, lowering)
    kernel = render_kernel(pv.plan, lowering)           # the native lowering's text
    assert source == cpu_source(kernel) and source.endswith("\n#line 1\n" + kernel), \
        "the kernel text must follow the emulation unchanged"
    shipped = SHIPPED_NATIVE / f"{pv.name}.cl"
    # the config's own problem: the kernel of kernels/native itself (unless another shipped config has a variant of
    # the same name, whose header, written last, names that config and its problem)
    if name not in SHAPES and shipped.exists() and f" from {name}.yaml " in shipped.read_text()[:400]:
        assert source.endswith(shipped.read_text())
    result = run_variant(pv, session, lowering)
    assert result.status == "ok", f"{pv.name} ({pv.config.problem.label}): {result.status}: {result.reason}"


@pytest.mark.parametrize("name", ["default", "layouts"])
def test_the_igc_spelling_verifies_through_the_emulation(name, session, lowering):
    """The capability set of Debian's IGC spells the block messages as __builtin_IB_* (declared by the kernel
    itself): emulated as well, the kernel text unchanged."""
    ib = EmulatedNativeLowering("native", native_capabilities(DEBIAN_CAPABILITIES))
    pv = _planned(name, ib, pick=lambda pv: pv.plan.a.atom.layout == "T" if name == "layouts" else True)
    kernel = render_kernel(pv.plan, ib)
    assert "__builtin_IB_subgroup_block_read_flat" in kernel and render_variant(pv, ib) == cpu_source(kernel)
    result = run_variant(pv, session, ib)
    assert result.status == "ok", f"{pv.name}: {result.status}: {result.reason}"


def test_the_emulated_lowering_says_what_it_is(lowering):
    assert isinstance(lowering, EmulatedNativeLowering) and lowering.name == "native" and lowering.note == NOTE
    assert "correctness path, not a speed path" in NOTE
    assert lowering.build_options(256) == STANDARD        # no GPU register-file option on the CPU


def test_load_with_the_native_lowering_computes_the_product(sycl_device, lowering):
    gemm = xegemm.load(ROOT / "configs" / "tf32.yaml", device=sycl_device, lowering="native")
    assert gemm.lowering.emulated and gemm.lowering.note == NOTE
    rng = np.random.default_rng(3)
    a = rng.standard_normal((40, 56)).astype(np.float32)
    b = rng.standard_normal((56, 48)).astype(np.float32)
    d = np.asarray(gemm(a, b), np.float64)
    ta, tb = ((x.view(np.uint32) & np.uint32(0xffffe000)).view(np.float32).astype(np.float64) for x in (a, b))
    bound = 2 * (56 + 1) * 2.0 ** -24 * (np.abs(ta) @ np.abs(tb))     # f32 sums of exact tf32 products
    assert (np.abs(d - ta @ tb) <= bound).all()


def test_run_says_it_runs_the_emulation(tmp_path, sycl_device, lowering):
    out = tmp_path / "run"
    text = []
    run(ROOT / "configs" / "tf32.yaml", device=sycl_device.filter_string, out_dir=out,
                             lowering="native", progress=_Lines(text), reference_repeats=1)
    assert any(NOTE in line for line in text)
    data = json.loads((out / "results.json").read_text())
    assert data["lowering"] == "native" and data["lowering_note"] == NOTE
    assert [v["status"] for v in data["variants"]] == ["ok"]
    assert NOTE in (out / "report.md").read_text()


class _Lines:
    def __init__(self, lines):
        self.lines = lines

    def write(self, text):
        self.lines.extend(t for t in text.splitlines() if t)

    def flush(self):
        pass


def test_a_builtin_without_an_exact_emulation_is_refused():
    with pytest.raises(XegemmError, match="not a documented DPAS builtin"):
        cpu_source("__attribute__((intel_reqd_sub_group_size(16))) kernel void k() "
                   "{ intel_sub_group_tf32_tf32_matrix_mad_k8_f32(a, b, c); }")


# ---- each 2D block builtin against its lane map ---------------------------------------------------------------

SURFACE_ROWS, PITCH = 48, 320
KERNEL_ATTRS = "__attribute__((intel_reqd_sub_group_size(16))) __attribute__((reqd_work_group_size(16, 1, 1)))"
IB_EXTRA = ("__builtin_IB_subgroup_block_read_flat_u16_m8k16v2", "__builtin_IB_subgroup_block_read_flat_transform_u16_k16",
            "__builtin_IB_subgroup_block_read_flat_transpose_u32_k8", "__builtin_IB_subgroup_block_write_flat_u32_m8k16v1")


def _shipped_block_builtins():
    names = set()
    for path in SHIPPED_NATIVE.glob("*.cl"):
        names.update(called_builtins(path.read_text())[0])
    return sorted(names)


BLOCKS = [n for n in _shipped_block_builtins() if "prefetch" not in n] + list(IB_EXTRA)


def _block_kernel(name: str, index: int) -> str:
    atom = block_atom(name)
    bits, n = atom.message.elem_bits, atom.lane_map.length
    elem = {8: "uchar", 16: "ushort", 32: "uint"}[bits]
    if name.startswith("__builtin_IB_"):
        from xegemm.aot.builtins import parse_block2d_builtin
        b = parse_block2d_builtin(name)
        call_args = "(long)src, w - 1, h - 1, pitch - 1, (int2)(x, y)"
        if atom.is_load:
            return f"""{KERNEL_ATTRS}
__kernel void t{index}(global uchar* src, int w, int h, int pitch, int x, int y, global uchar* out) {{
    union {{ {b.lane_type} v; {elem} e[{n}]; }} r;
    r.v = {name}({call_args});
    for (int i = 0; i < {n}; ++i) ((global {elem}*)out)[get_sub_group_local_id() * {n} + i] = r.e[i];
}}"""
        return f"""{KERNEL_ATTRS}
__kernel void t{index}(global uchar* src, int w, int h, int pitch, int x, int y, global uchar* in) {{
    union {{ {b.lane_type} v; {elem} e[{n}]; }} r;
    for (int i = 0; i < {n}; ++i) r.e[i] = ((global {elem}*)in)[get_sub_group_local_id() * {n} + i];
    {name}({call_args}, r.v);
}}"""
    if atom.is_load:
        return f"""{KERNEL_ATTRS}
__kernel void t{index}(global uchar* src, int w, int h, int pitch, int x, int y, global uchar* out) {{
    union {{ {elem} e[{n}]; uint pad; }} r;
    {name}((global void*)src, w, h, pitch, (int2)(x, y), (private void*)r.e);
    for (int i = 0; i < {n}; ++i) ((global {elem}*)out)[get_sub_group_local_id() * {n} + i] = r.e[i];
}}"""
    return f"""{KERNEL_ATTRS}
__kernel void t{index}(global uchar* src, int w, int h, int pitch, int x, int y, global uchar* in) {{
    union {{ {elem} e[{n}]; uint pad; }} r;
    for (int i = 0; i < {n}; ++i) r.e[i] = ((global {elem}*)in)[get_sub_group_local_id() * {n} + i];
    {name}((global void*)src, w, h, pitch, (int2)(x, y), (private void*)r.e);
}}"""


@pytest.fixture(scope="module")
def block_program(queue):
    source = "\n".join(_block_kernel(name, i) for i, name in enumerate(BLOCKS))
    return build_program(queue, cpu_source(source), STANDARD)


def _cases(atom):
    """(surface width in bytes, x, y): inside; hanging over the right edge; over the bottom edge."""
    bits = atom.message.elem_bits
    block_bytes = atom.row_bytes
    yield PITCH, 0, 0
    yield PITCH // 2, (PITCH // 2 - block_bytes // 2) * 8 // bits // 4 * 4, 1
    yield PITCH, 4 * 32 // bits, SURFACE_ROWS - max(1, atom.rows // 2)


def _expected_read(atom, surface, width, x, y):
    bits = atom.message.elem_bits
    elems = surface.view({8: np.uint8, 16: np.uint16, 32: np.uint32}[bits])
    out = np.zeros((16, atom.lane_map.length), np.uint64)
    for lane, coords in enumerate(atom.lane_map.map):
        for i, c in enumerate(coords):
            if c is None:
                continue
            r, col = y + c[0], x + c[1]
            if r < SURFACE_ROWS and (col + 1) * bits // 8 <= width:
                out[lane, i] = elems[r, col]
    return out


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=BLOCKS)
def test_a_block_builtin_moves_each_lanes_elements_of_its_lane_map(index, queue, block_program):
    name = BLOCKS[index]
    atom = block_atom(name)            # the model's own lane map, not the emulation's table
    bits, n = atom.message.elem_bits, atom.lane_map.length
    dtype = {8: np.uint8, 16: np.uint16, 32: np.uint32}[bits]
    kernel = block_program.get_sycl_kernel(f"t{index}")
    rng = np.random.default_rng(index)
    for width, x, y in _cases(atom):
        args = [scalar(width), scalar(PITCH), scalar(x), scalar(y)]
        if atom.is_load:
            surface = rng.integers(1, 255, (SURFACE_ROWS, PITCH), dtype=np.uint8)
            src, out = to_device(queue, surface), to_device(queue, np.zeros(16 * n, dtype))
            launch(queue, kernel, [src, scalar(width), scalar(SURFACE_ROWS), *args[1:], out], (16,), (16,)).wait()
            got = from_device(out, dtype, (16, n)).astype(np.uint64)
            want = _expected_read(atom, surface, width, x, y)
            assert np.array_equal(got, want), f"{name} at x={x}, y={y}, width={width}: lanes " \
                f"{sorted(set(np.nonzero(got != want)[0]))} differ from the lane map"
        else:
            sentinel = np.full((SURFACE_ROWS, PITCH), 0xA5, np.uint8)
            values = rng.integers(1, 2 ** bits - 1, (16, n), dtype=np.uint64).astype(dtype)
            dst, inp = to_device(queue, sentinel), to_device(queue, values)
            launch(queue, kernel, [dst, scalar(width), scalar(SURFACE_ROWS), *args[1:], inp], (16,), (16,)).wait()
            got = from_device(dst, np.uint8, (SURFACE_ROWS, PITCH)).copy()
            want = sentinel.copy()
            we = want.view(dtype)
            for lane, coords in enumerate(atom.lane_map.map):
                for i, c in enumerate(coords):
                    if c is not None and y + c[0] < SURFACE_ROWS and (x + c[1] + 1) * bits // 8 <= width:
                        we[y + c[0], x + c[1]] = values[lane, i]
            assert np.array_equal(got, want), f"{name} at x={x}, y={y}, width={width}: memory differs"


def test_a_block_read_that_breaks_a_surface_rule_reads_all_ones(queue, block_program):
    index = BLOCKS.index("intel_sub_group_2d_block_read_16b_8r16x1c") if \
        "intel_sub_group_2d_block_read_16b_8r16x1c" in BLOCKS else 0
    atom = block_atom(BLOCKS[index])
    n, bits = atom.lane_map.length, atom.message.elem_bits
    dtype = {8: np.uint8, 16: np.uint16, 32: np.uint32}[bits]
    kernel = block_program.get_sycl_kernel(f"t{index}")
    surface = np.ones((SURFACE_ROWS, PITCH), np.uint8)
    for width, height, pitch, why in ((PITCH, SURFACE_ROWS, PITCH - 8, "pitch not a multiple of 16"),
                                      (32, SURFACE_ROWS, PITCH, "width under 64 bytes"),
                                      (PITCH, 0, PITCH, "height 0")):
        src, out = to_device(queue, surface), to_device(queue, np.zeros(16 * n, dtype))
        launch(queue, kernel, [src, scalar(width), scalar(height), scalar(pitch), scalar(0), scalar(0), out],
               (16,), (16,)).wait()
        assert (from_device(out, dtype, (16, n)) == np.iinfo(dtype).max).all(), why


# ---- DPAS against the numpy reference ------------------------------------------------------------------------

MMA_CASES = [("BF16", "BF16", "F32", 8, 16), ("BF16", "BF16", "F32", 1, 16), ("F16", "F16", "F32", 8, 16),
             ("F16", "F16", "F16", 8, 16), ("BF16", "BF16", "BF16", 8, 16), ("TF32", "TF32", "F32", 8, 16),
             ("S8", "S8", "S32", 8, 16), ("S8", "U8", "S32", 8, 16), ("U8", "S8", "S32", 4, 16),
             ("U8", "U8", "S32", 8, 16), ("S4", "S4", "S32", 8, 16), ("S4", "U4", "S32", 8, 16),
             ("U4", "S4", "S32", 2, 16), ("U4", "U4", "S32", 8, 16),
             ("BF16", "BF16", "F32", 8, 8), ("F16", "F16", "F32", 8, 8), ("S8", "U8", "S32", 8, 8),
             ("S4", "U4", "S32", 8, 8)]
MMA_ATOMS = [MmaAtom.of(a, b, c, m=m, n=n) for a, b, c, m, n in MMA_CASES]


def _mma_kernel(atom: MmaAtom, index: int) -> str:
    ab, bb, cb = (atom.register_bytes(x) for x in "abc")
    return f"""__attribute__((intel_reqd_sub_group_size({atom.n}))) __attribute__((reqd_work_group_size({atom.n}, 1, 1)))
__kernel void m{index}(const global uchar* a, const global uchar* b, const global uchar* c, global uchar* d) {{
    const int lane = get_sub_group_local_id();
    union {{ {atom.a_ctype} v; uchar x[{ab}]; }} ua;
    union {{ {atom.b_ctype} v; uchar x[{bb}]; }} ub;
    union {{ {atom.c_ctype} v; uchar x[{cb}]; }} uc, ud;
    for (int i = 0; i < {ab}; ++i) ua.x[i] = a[lane * {ab} + i];
    for (int i = 0; i < {bb}; ++i) ub.x[i] = b[lane * {bb} + i];
    for (int i = 0; i < {cb}; ++i) uc.x[i] = c[lane * {cb} + i];
    ud.v = {atom.builtin}(ua.v, ub.v, uc.v);
    for (int i = 0; i < {cb}; ++i) d[lane * {cb} + i] = ud.x[i];
}}"""


@pytest.fixture(scope="module")
def mma_programs(queue):
    programs = {}
    for n in (16, 8):       # one sub-group size per program (the emulation takes the kernels' one size)
        source = "\n".join(_mma_kernel(a, i) for i, a in enumerate(MMA_ATOMS) if a.n == n)
        programs[n] = build_program(queue, cpu_source(source), STANDARD)
    return programs


def _operand(rng, atom, which):
    t = atom.element(which)
    shape = atom.operand_shape(which)
    if t.kind == "int":
        lo, hi = t.value_range if which != "c" else (-2 ** 20, 2 ** 20)
        return rng.integers(lo, hi + 1, shape)
    return rng.standard_normal(shape) * (4 if which == "c" else 1)


@pytest.mark.parametrize("index", range(len(MMA_ATOMS)), ids=[a.name for a in MMA_ATOMS])
def test_dpas_matches_the_numpy_reference(index, queue, mma_programs):
    atom = MMA_ATOMS[index]
    rng = np.random.default_rng(100 + index)
    a, b, c = (_operand(rng, atom, x) for x in "abc")
    bufs = [to_device(queue, pack_operand(atom, x, v)) for x, v in zip("abc", (a, b, c))]
    out = to_device(queue, np.zeros(atom.n * atom.register_bytes("d"), np.uint8))
    kernel = mma_programs[atom.n].get_sycl_kernel(f"m{index}")
    launch(queue, kernel, [*bufs, out], (atom.n,), (atom.n,)).wait()
    got = unpack_operand(atom, "d", from_device(out, np.uint8, (atom.n, atom.register_bytes("d"))))
    want = numpy_reference(atom, a, b, c)
    if atom.is_integer:
        assert np.array_equal(got, want)
    else:
        bound = error_bound(atom, a, b, c)
        assert (np.abs(got - want) <= bound).all(), f"largest error {np.max(np.abs(got - want) - bound):g} over the bound"


# ---- mutants of the emulation: verification must catch each -------------------------------------------------

def _swap_lanes(name, _real=emulation.builtin_lane_map):
    """Work-items 0 and 1 exchange their elements in every block read."""
    lm = _real(name)
    if "read" not in name:
        return lm
    rows = list(lm.map)
    rows[0], rows[1] = rows[1], rows[0]
    return type(lm)(tuple(rows))


def _not_transposed(name, _real=emulation.builtin_lane_map):
    """The transposing read of a 16 x 8 block of dwords done as the plain read of the same block."""
    if name == "intel_sub_group_2d_block_read_transpose_32b_16r8x1c":
        return _real("intel_sub_group_2d_block_read_32b_16r8x1c")
    return _real(name)


def _not_transformed(name, _real=emulation.builtin_lane_map):
    """The VNNI read of 32 rows x 2 blocks of 16 ushorts done without its transform: each dword holds two
    adjacent columns of one row, as memory holds them (the plain 32-bit read of the same bytes), instead of two
    adjacent rows of one column.  (Per work-item, a plain 16-bit read of 16-wide blocks has the VNNI layout's
    bytes already: one column per work-item, rows in order.)"""
    if name != "intel_sub_group_2d_block_read_transform_16b_32r16x2c":
        return _real(name)
    plain = _real("intel_sub_group_2d_block_read_32b_32r8x2c")
    return type(plain)(tuple(tuple(None if c is None else (c[0], 2 * c[1] + h) for c in lane for h in (0, 1))
                             for lane in plain.map))


def _fill(value: str):
    def mutate(text: str) -> str:
        old = "return 0u;   /* out of bounds: reads 0 */"
        assert old in text, "the mutant's text is not in the emulation"
        return text.replace(old, f"return {value};   /* out of bounds: reads {value} */")
    return mutate


# name -> (the emulation bug it stands for, the config, builtin_lane_map's replacement or a change of the text,
# a builtin the kernel must call for the mutant to change it)
MUTANTS = {
    "swapped lane": ("work-items 0 and 1 exchanged in every block read", "default", _swap_lanes, None),
    "out-of-bounds fill 1": ("elements outside the surface read 1 instead of 0", "int8", _fill("1u"), None),
    "out-of-bounds fill bf16 1.0": ("elements outside the surface read 0x3f80 (bf16 1.0) instead of 0", "default",
                                    _fill("0x3f80u"), None),
    "transpose skipped": ("the transposing block read done as a plain read of the same block", "layouts",
                          _not_transposed, "intel_sub_group_2d_block_read_transpose_32b_16r8x1c"),
    "VNNI transform skipped": ("the VNNI read done without packing rows into dwords", "default", _not_transformed,
                               "intel_sub_group_2d_block_read_transform_16b_32r16x2c"),
}


@pytest.fixture
def fresh_emulation():
    emulation.emulation_for.cache_clear()
    yield
    emulation.emulation_for.cache_clear()


def _mutant_variant(mutant, lowering):
    pick = (lambda pv: pv.plan.a.atom.layout == "T") if mutant == "transpose skipped" else None
    return _planned(MUTANTS[mutant][1], lowering, pick=pick)


@pytest.mark.parametrize("mutant", ["transpose skipped", "out-of-bounds fill 1", "swapped lane"])
def test_the_mutants_variant_verifies_unmutated(mutant, session, lowering):
    """The control: each mutant's kernel (default's, int8's, layouts' column-major A) verifies as it is."""
    pv = _mutant_variant(mutant, lowering)
    result = run_variant(pv, session, lowering)
    assert result.status == "ok", f"{pv.name}: {result.status}: {result.reason}"


@pytest.mark.parametrize("mutant", MUTANTS)
def test_verification_catches_the_emulation_mutant(mutant, session, lowering, monkeypatch, fresh_emulation):
    _, _, change, called = MUTANTS[mutant]
    if change.__name__ == "mutate":
        real = emulation.emulation_text
        monkeypatch.setattr(emulation, "emulation_text", lambda source: change(real(source)))
    else:
        monkeypatch.setattr(emulation, "builtin_lane_map", change)
    pv = _mutant_variant(mutant, lowering)
    source = render_variant(pv, lowering)
    if called:
        assert called in source.partition("#line 1")[2], f"{pv.name} does not call {called}: the mutant tests nothing"
    result = run_variant(pv, session, lowering)
    assert result.status == "failed_verify", f"{mutant}: {result.status} ({result.reason})"
