"""Compiler capabilities: which block-message spellings the installed ocloc really turns into messages.

A spelling is *supported* only if its probe kernel builds AND the expected message appears in that
kernel's ISA, writing back at least the data it should carry, with a block shape (decoded from the message
header) that covers the one asked for and obeys the hardware rules (docs/atoms.md §2); a build that succeeds
but drops or mangles the call counts as not supported (docs/compilers.md "ocloc").  All probes of a target go into ONE program (one kernel
per spelling); if the build fails, the compiler's error lines are mapped back to the probes that caused
them and the rest is rebuilt, so a probe costs a few ocloc calls, not one per spelling.

Probed capability sets are cached as JSON keyed by the compiler version (``ocloc query OCL_DRIVER_VERSION`` plus
IGC's package version), the target and the probe catalog's digest: each compiler (``system``, ``current`` or a
path: xegemm.aot.toolchain) gets its own.  Named capability sets can be forced instead of probing (argument or
``$XEGEMM_COMPILER_CAPABILITIES``): ``igc-1.0.12504`` (measured on Debian 12's ocloc), ``igc-2.40.14`` (measured on
the current compiler, Debian unstable's ocloc 26.27) and ``cl_intel_subgroup_2d_block_io`` (the full set newer
drivers provide: docs/atoms.md §1.6, §1.7).  :data:`COMPILER_CAPABILITIES` names the measured set of each named
compiler, for generating without it (``xegemm support``).

Two things IGC 2.x does are not a missing message (docs/compilers.md "The current compiler"): a 32-register
response is encoded ``rd:31`` (the send descriptor's 5-bit response length has no 32), and a one-row read or a
prefetch of two blocks is issued as one block twice as wide (the same bytes, the same registers).  The checks
below accept both.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from xegemm.aot.build import compile_kernel
from xegemm.aot.builtins import block2d_violation
from xegemm.aot.errors import CapabilitiesError
from xegemm.aot.isa import block2d_shapes, parse_instructions
from xegemm.aot.probes import Probe, ProbeProgram, catalog_digest, probe_catalog, probe_program
from xegemm.aot.toolchain import aot_target, build_compiler, compiler_version
from xegemm.files import CONFIG_BYTES, FileRefused, read_text
from xegemm.library.targets import EXT_2D_BLOCK_IO, Target, get_target

CAPABILITIES_ENV = "XEGEMM_COMPILER_CAPABILITIES"
MODERN_CAPABILITIES = EXT_2D_BLOCK_IO   # a driver with the extension: every documented function
DEBIAN_CAPABILITIES = "igc-1.0.12504"
CURRENT_CAPABILITIES = "igc-2.40.14"
NAMED_CAPABILITIES = (DEBIAN_CAPABILITIES, CURRENT_CAPABILITIES, MODERN_CAPABILITIES)
# the measured set of each named compiler (xegemm.aot.toolchain.COMPILERS), what `xegemm support` shows for it
COMPILER_CAPABILITIES = {"system": DEBIAN_CAPABILITIES, "current": CURRENT_CAPABILITIES}
MAX_RESPONSE_FIELD = 31   # the largest response length a send descriptor encodes (5 bits): IGC 2.x writes 31 for 32
_ERROR_LINE = re.compile(r"^(?:.*?:)?(\d+):\d+: (?:fatal )?error:")  # "1:490:3: error: ..." (line 490)
BLOCK2D_MESSAGES = ("load_block2d", "store_block2d", "prefetch_block2d")


@dataclass(frozen=True)
class ProbeResult:
    """The verdict on one spelling."""

    name: str
    family: str
    message: str  # the message kind the ISA had to show
    built: bool
    found: int  # messages of that kind in the probe kernel
    response_grfs: int  # registers those messages write back (reads)
    supported: bool
    detail: str
    hardware: bool = True  # the target has the hardware for this message (no 2D block on Xe-HPG)
    shape: str | None = None  # 2D block the compiler issued, "WIDTHxHEIGHTxCOUNT", if readable from the ISA
    exact: bool | None = None  # that block is the one asked for (False: legal, but more blocks: over-fetch)


@dataclass
class CompilerCapabilities:
    """Which spellings work for one compiler and target; ``supports(name)`` is the question to ask."""

    name: str
    target: str
    origin: str  # "probed" or "named"
    compiler: dict = field(default_factory=dict)  # {"driver": ..., "igc": ...} when probed
    catalog: str = ""  # digest of the probe catalog the results belong to
    results: dict[str, ProbeResult] = field(default_factory=dict)
    probe_seconds: float | None = None
    ocloc_calls: int | None = None

    def supports(self, name: str) -> bool:
        """True if ``name`` builds and produces its message; CapabilitiesError if it was never probed."""
        try:
            return self.results[name].supported
        except KeyError:
            raise CapabilitiesError(f"{name!r} is not in the probe catalog of capability set {self.name!r}") from None

    @property
    def supported(self) -> list[str]:
        """Spellings that work."""
        return [n for n, r in self.results.items() if r.supported]

    @property
    def dropped(self) -> list[str]:
        """Spellings that build but give no usable message: missing, too small, or an illegal block."""
        return [n for n, r in self.results.items() if r.built and r.hardware and not r.supported]

    @property
    def failed(self) -> list[str]:
        """Spellings the compiler rejects (on hardware that has their message)."""
        return [n for n, r in self.results.items() if not r.built and r.hardware]

    def to_json(self) -> str:
        """The capability set as JSON text."""
        data = asdict(self)
        data["results"] = [asdict(r) for r in self.results.values()]
        return json.dumps(data, indent=1)

    @classmethod
    def from_json(cls, text: str) -> CompilerCapabilities:
        """Inverse of :meth:`to_json`."""
        try:
            data = json.loads(text)
            data["results"] = {r["name"]: ProbeResult(**r) for r in data["results"]}
            return cls(**data)
        except (ValueError, KeyError, TypeError) as exc:
            raise CapabilitiesError(f"not a compiler capability set: {exc}") from exc

    def save(self, path: Path) -> None:
        """Write atomically (a concurrent reader never sees half a file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(self.to_json())
        os.replace(tmp, path)


def _shape_text(shape: tuple[int, int, int] | None) -> str | None:
    return None if shape is None else "{}x{}x{}".format(*shape)


def block_grfs(shape: tuple[int, int, int], elem_bits: int, grf_bytes: int) -> int:
    """Registers a 2D block read of ``shape`` (width, height, count) writes back: each block rounded up to whole
    registers (docs/atoms.md §1.5)."""
    w, h, c = shape
    return c * math.ceil(w * h * elem_bits // 8 / grf_bytes)


def delivered_grfs(ins, shape: tuple[int, int, int] | None, elem_bits: int, grf_bytes: int) -> int:
    """Registers a read really writes back: its ``rd:``, except that IGC 2.x encodes a 32-register response as
    ``rd:31`` (the descriptor's 5-bit field), which the decoded block then shows to be 32."""
    rd = ins.response_grfs or 0
    if rd == MAX_RESPONSE_FIELD and shape is not None and elem_bits and block_grfs(shape, elem_bits, grf_bytes) == 32:
        return 32
    return rd


def _evaluate(probe: Probe, asm: str | None, target: Target) -> ProbeResult:
    """Verdict on one probe kernel: message present, all data delivered, legal block shape."""
    hardware = target.block2d or probe.message not in BLOCK2D_MESSAGES
    if asm is None:
        return ProbeResult(probe.name, probe.family, probe.message, True, 0, 0, False,
                           "built, but the kernel is missing from the binary", hardware)
    instructions = parse_instructions(asm)
    hits = [i for i in instructions if i.message_kind == probe.message]
    shaped = {id(ins): shape for ins, shape in block2d_shapes(instructions)}
    # a header the ISA does not set by an immediate leaves the block unknown: the asked one stands for it
    rd = sum(delivered_grfs(i, shaped.get(id(i)) or probe.shape, probe.elem_bits, target.grf_bytes) for i in hits)
    need = math.ceil(probe.payload_bytes / target.grf_bytes)
    shapes = [shaped[id(ins)] for ins in hits if shaped.get(id(ins)) is not None]
    shape = shapes[0] if shapes else None
    supported, exact = bool(hits) and rd >= need, None
    if not hits:
        detail = f"built, but no {probe.message} in the ISA: the compiler dropped the call"
    elif rd < need:
        detail = f"{probe.message} writes back {rd} GRFs, the data needs {need}: the compiler shrank the call"
    else:
        detail = f"{len(hits)} x {probe.message}" + (f", {rd} GRFs back" if need else "")
    if hits and shape is not None and probe.shape is not None:
        w, h, c = shape
        ew, eh, ec = probe.shape
        op = {"store_block2d": "write"}.get(probe.message, "read")
        why = block2d_violation(shape, probe.elem_bits, probe.layout, op)
        detail += f"; block {_shape_text(shape)} (asked {_shape_text(probe.shape)})"
        if why:  # e.g. IGC 1.0.12504 issues every plain read with 2 blocks, so u32 16-wide rows become 128 B
            supported, detail = False, detail + f": illegal message, {why} (docs/atoms.md §2)"
        elif c < ec and h == eh and w * c == ew * ec and (h == 1 or probe.message == "prefetch_block2d"):
            # IGC 2.x: a one-row read (or a prefetch) of two blocks as one block twice as wide: the same bytes,
            # which the compiler hands back as the builtin's value; nothing missing
            exact = True
            detail += f": issued as one block {w} wide, the same bytes"
        elif (w, h) != (ew, eh) or c < ec:  # e.g. IGC 1.0.12504 builds transform_u16_k32 as 16 rows
            supported, detail = False, detail + ": not the asked block, data missing"
        else:
            exact = c == ec
            if not exact:
                detail += f": reads {c // ec}x the data asked (over-fetch)"
    if not hardware:
        # The compiler may emit the message anyway, but the hardware has none (docs/atoms.md §2 "platforms").
        supported = False
        detail += f"; {target.arch} has no 2D block messages (docs/atoms.md §2): not usable"
    return ProbeResult(probe.name, probe.family, probe.message, True, len(hits), rd, supported, detail, hardware,
                       _shape_text(shape), exact)


def _blame(log: str, program: ProbeProgram) -> dict[str, list[str]]:
    """Kernel name -> the compiler's error lines that fall in that probe's source lines."""
    blamed: dict[str, list[str]] = {}
    for text in log.splitlines():
        m = _ERROR_LINE.match(text.strip())
        if not m:
            continue
        line = int(m.group(1))
        for kname, (first, last) in program.lines.items():
            if first <= line <= last:
                blamed.setdefault(kname, []).append(text.strip())
    return blamed


def run_probes(probes: list[Probe], target: str = "pvc", compiler: str | None = None) -> tuple[dict[str, ProbeResult], int]:
    """Probe ``probes`` for ``target`` with ``compiler`` (xegemm.aot.toolchain.build_compiler) without caching:
    (probe name -> result, number of ocloc builds)."""
    compiler = build_compiler(target, compiler)
    t = aot_target(target, compiler)
    results: dict[str, ProbeResult] = {}
    calls = [0]
    # a target without 2D block hardware (dg2) cannot use a 2D message whatever the compiler does with it: those
    # probes are not built (the current compiler rejects most of them there, which took 52 builds to place)
    wanted = [p for p in probes if t.block2d or p.message not in BLOCK2D_MESSAGES]
    for p in probes:
        if p not in wanted:
            results[p.name] = ProbeResult(p.name, p.family, p.message, False, 0, 0, False,
                                          f"not probed: {t.arch} has no 2D block messages (docs/atoms.md §2)", False)
    with tempfile.TemporaryDirectory(prefix="xegemm-probe-") as tmp:
        if wanted:
            _run_probes(wanted, t, Path(tmp), results, calls, compiler)
    return {p.name: results[p.name] for p in probes}, calls[0]


def _run_probes(probes: list[Probe], target: Target, root: Path, results: dict[str, ProbeResult],
                calls: list[int], compiler: str) -> None:
    program = probe_program(probes)
    calls[0] += 1
    build = compile_kernel(program.source, target.name, 128, workdir=root / f"call{calls[0]:02d}", dumps=False,
                           compiler=compiler)
    if build.ok:
        for kname, probe in program.kernels.items():
            results[probe.name] = _evaluate(probe, build.kernel_asm.get(kname), target)
        return
    blamed = _blame(build.log, program)
    if len(probes) == 1 and not blamed:
        blamed = {next(iter(program.kernels)): [build.log.strip().splitlines()[-1] if build.log.strip() else ""]}
    for kname, errors in blamed.items():
        probe = program.kernels[kname]
        results[probe.name] = ProbeResult(probe.name, probe.family, probe.message, False, 0, 0, False,
                                          "build failed: " + errors[0],
                                          target.block2d or probe.message not in BLOCK2D_MESSAGES)
    rest = [p for k, p in program.kernels.items() if k not in blamed]
    if not rest:
        return
    if blamed:
        _run_probes(rest, target, root, results, calls, compiler)
    else:  # an error the log does not place: split and retry both halves
        half = len(rest) // 2
        _run_probes(rest[:half], target, root, results, calls, compiler)
        _run_probes(rest[half:], target, root, results, calls, compiler)


def default_cache_dir() -> Path:
    """``$XEGEMM_CACHE_DIR`` or ``$XDG_CACHE_HOME/xegemm`` (``~/.cache/xegemm``), + ``compiler-capabilities``."""
    base = os.environ.get("XEGEMM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "xegemm")
    return Path(base) / "compiler-capabilities"


def probe_compiler_capabilities(target: str = "pvc", *, cache_dir: Path | None = None, refresh: bool = False,
                                compiler: str | None = None) -> CompilerCapabilities:
    """Probe (or load from the cache, one file per compiler version and target) which spellings ``compiler``
    (``system``, ``current``, a path; None: xegemm.aot.toolchain.build_compiler's choice) supports for ``target``."""
    compiler = build_compiler(target, compiler)
    t = aot_target(target, compiler)
    version = compiler_version(compiler)
    catalog = probe_catalog()
    digest = catalog_digest(catalog)
    path = Path(cache_dir or default_cache_dir()) / f"{version.key}_{t.name}.json"
    if not refresh and path.exists():
        try:
            cached = CompilerCapabilities.from_json(read_text(path, CONFIG_BYTES, "capability cache"))
        except (CapabilitiesError, FileRefused):
            cached = None
        if cached is not None and cached.catalog == digest and cached.target == t.name:
            return cached
    start = time.perf_counter()
    results, calls = run_probes(catalog, t.name, compiler)
    caps = CompilerCapabilities(
        name=f"probed:{version.key}", target=t.name, origin="probed",
        compiler={"driver": version.driver, "igc": version.igc}, catalog=digest, results=results,
        probe_seconds=round(time.perf_counter() - start, 3), ocloc_calls=calls)
    caps.save(path)
    return caps


# Measured with probe_compiler_capabilities on Debian 12's ocloc 22.43.24595 / IGC 1.0.12504.6 (2026-11-22), pvc:
# spelling -> exact (False = legal but over-fetching).  This IGC issues EVERY plain 2D read with 2 blocks,
# whatever the v of the name: v1 reads of 8/16-bit data are legal but fetch twice the data; u16 k32 and
# u32 k16 reads become illegal 128-B rows; reads taller than 8 rows, every write and every read_prefetch
# builtin are dropped; transform_u16_k32[v2] is issued as the 16-row k16 message; the public
# cl_intel_subgroup_2d_block_io names are undeclared.  dg2 got the same messages, but has no 2D block
# hardware, so only the 1D block write and the LSC prefetch are usable there.
_COMMON_12504 = {"__builtin_IB_lsc_prefetch_global_uint": None, "intel_sub_group_block_write8": None}
_IGC_1_0_12504_SUPPORTED: dict[str, dict[str, bool | None]] = {
    "pvc": {
        **{f"__builtin_IB_subgroup_block_read_flat_u{b}_m{h}k{k}v{v}": v == 2
           for b, k in ((8, 16), (8, 32), (16, 16)) for v in (1, 2) for h in (1, 2, 4, 8)},
        **{f"__builtin_IB_subgroup_block_read_flat_{s}": True for s in ("transform_u16_k16", "transform_u8_k32",
                                                                        "transpose_u32_k8")},
        **{f"intel_subgroup_block_read_{s}": True for s in ("u16_m8k16v2", "u8_m8k32v2", "transform_u16_k16",
                                                            "transform_u8_k32", "transpose_u32_k8")},
        **_COMMON_12504},
    "dg2": dict(_COMMON_12504),
}


# Measured with probe_compiler_capabilities on Debian unstable's ocloc 26.27.039122 / IGC 2.40.14 (2026-12-02) for
# pvc, bmg, lnl and ptl: every spelling of the catalog builds and issues its message, exactly the asked block
# (with the two IGC 2.x forms above read as what they are).  For dg2, which has no 2D block hardware, it declares
# no cl_intel_subgroup_2d_block_io function and rejects the 32-row builtins; the 1D block write and the LSC
# prefetch, the only messages with hardware there, work.  tests/test_compiler_profiles.py probes again where it is installed.
_IGC_2_40_TARGETS = ("pvc", "bmg", "lnl", "ptl", "dg2")


def _named_capabilities(name: str, target: Target) -> CompilerCapabilities:
    catalog = probe_catalog()
    if name == CURRENT_CAPABILITIES:
        if target.name not in _IGC_2_40_TARGETS:
            raise CapabilitiesError(f"{name} was measured for {', '.join(_IGC_2_40_TARGETS)}, not {target.name}")
        table = {p.name: (True if p.shape is not None else None) for p in catalog
                 if target.block2d or p.message not in BLOCK2D_MESSAGES}
        why = "measured on Debian unstable ocloc 26.27.039122 / IGC 2.40.14"
    elif name == MODERN_CAPABILITIES:
        # Newer drivers accept every shape in the catalog (docs/atoms.md §1.6 table, §1.7 grammar), exactly —
        # on hardware with 2D block messages; DG2 has none (docs/atoms.md §2 "platforms").
        table = {p.name: (True if p.shape is not None else None) for p in catalog
                 if target.block2d or p.message not in BLOCK2D_MESSAGES}
        why = "assumed: a cl_intel_subgroup_2d_block_io driver (not measured here)"
    elif name == DEBIAN_CAPABILITIES:
        if target.name not in _IGC_1_0_12504_SUPPORTED:
            raise CapabilitiesError(f"{name} (Debian 12's compiler) does not build for {target.name} ({target.arch}): "
                                    f"it knows {', '.join(_IGC_1_0_12504_SUPPORTED)}")
        table = _IGC_1_0_12504_SUPPORTED[target.name]
        why = "measured on Debian 12 ocloc 22.43.24595 / IGC 1.0.12504.6"
    else:
        raise CapabilitiesError(f"unknown compiler capability set {name!r}; named capability sets: {', '.join(NAMED_CAPABILITIES)}")
    results = {}
    for p in catalog:
        ok = p.name in table
        results[p.name] = ProbeResult(p.name, p.family, p.message, built=ok, found=int(ok), response_grfs=0,
                                      supported=ok, detail=why,
                                      hardware=target.block2d or p.message not in BLOCK2D_MESSAGES,
                                      exact=table.get(p.name))
    return CompilerCapabilities(name=name, target=target.name, origin="named", catalog=catalog_digest(catalog),
                           results=results)


def load_capabilities(name_or_path: str | Path, target: str = "pvc") -> CompilerCapabilities:
    """A named capability set (:data:`NAMED_CAPABILITIES`) for ``target``, or a capability set JSON file."""
    t = get_target(target)
    if str(name_or_path) in NAMED_CAPABILITIES:
        return _named_capabilities(str(name_or_path), t)
    path = Path(name_or_path)
    if path.suffix == ".json" and path.exists():
        caps = CompilerCapabilities.from_json(read_text(path, CONFIG_BYTES, "capabilities file"))
        if caps.target != t.name:
            raise CapabilitiesError(f"{path} is a capability set for {caps.target}, not {t.name}")
        return caps
    raise CapabilitiesError(f"unknown compiler capability set {str(name_or_path)!r}: give one of {', '.join(NAMED_CAPABILITIES)} "
                       "or the path of a capability set .json file")


def compiler_capabilities(target: str = "pvc", name: str | None = None, compiler: str | None = None,
                          **probe_kwargs) -> CompilerCapabilities:
    """The capability set to generate code with: ``name`` if given, else ``$XEGEMM_COMPILER_CAPABILITIES``, else a
    (cached) probe of ``compiler`` (xegemm.aot.toolchain.build_compiler's choice when None)."""
    forced = name or os.environ.get(CAPABILITIES_ENV)
    if forced:
        return load_capabilities(forced, target)
    return probe_compiler_capabilities(target, compiler=compiler, **probe_kwargs)
