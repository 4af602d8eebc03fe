"""Build OpenCL C ahead of time for a real Xe GPU with ``ocloc`` and read the machine code back.

One build = ``ocloc compile`` (with IGC's shader dumps switched on) + ``ocloc disasm``; the result keeps
the binary, the per-kernel disassembly, the dumps' ``.asm`` headers, the log and :class:`IsaStats`.
A failed compile is a result (``status == "failed_build"`` with the log), not an exception: callers such
as the compiler-profile probe need to look at it.  So is a compile stopped at its time limit
(``status == "timed_out"``, with the dumps IGC had written by then).  Facts: docs/compilers.md "What Debian's IGC issues".
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from xegemm.aot.errors import IgaMissingError, OclocToolError
from xegemm.aot.isa import KERNEL_HEADER, SYMBOL_TABLE_KERNEL, IsaStats, dump_kernel_stats, isa_stats, parse_shader_dump
from xegemm.aot.toolchain import OCLOC_TIMEOUT, aot_target, build_compiler, run_ocloc
from xegemm.library.build_flags import LARGE_GRF, ocloc_options
from xegemm.library.targets import UnknownTargetError

SOURCE_NAME = "kernel.cl"


@dataclass
class AotBuild:
    """One ahead-of-time build: inputs, artefacts, log, status ("ok" / "failed_build" / "timed_out") and stats."""

    target: str
    grf: int
    source: str
    options: str  # the full -options string given to ocloc
    workdir: Path
    status: str
    log: str
    binary: Path | None = None
    kernel_asm: dict[str, str] = field(default_factory=dict)  # kernel name -> IGA disassembly
    dumps: dict[str, str] = field(default_factory=dict)  # IGC dump file name -> its .asm text
    stats: IsaStats | None = None
    seconds: float = 0.0
    compiler: str | None = None   # the compiler that built it: "system", "current" or a path
    isa_source: str = "disassembly"   # where ``stats`` come from: "disassembly" of the binary, or IGC's "dumps"

    @property
    def ok(self) -> bool:
        """True if ocloc built the program (which alone proves little: check ``stats``)."""
        return self.status == "ok"

    @property
    def disassembly(self) -> str:
        """All kernels' disassembly, each after a ``// ==== kernel NAME ====`` line."""
        return "".join(f"{KERNEL_HEADER.format(name)}\n{asm}\n" for name, asm in self.kernel_asm.items())


def compose_options(grf: int, options: str = "") -> str:
    """The ``-options`` string: feature macros old ocloc needs, the GRF mode, then the caller's options."""
    if LARGE_GRF in options.split():
        raise UnknownTargetError(f"select the large register file with grf=256, not {LARGE_GRF} in options")
    return ocloc_options(grf, options)


def _fresh_dir(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


# How ``ocloc disasm -dump DIR`` names each kernel's disassembly: ocloc 22.43 (a patchtoken binary)
# ``<kernel>_KernelHeap.asm``; ocloc 26.x (a zebin ELF) ``.text.<kernel>.asm``, a hidden file beside
# ``sections.txt`` and the other sections (and it warns "unexpected padding at end of kernel", harmlessly).
_DISASM_NAMES = (("", "_KernelHeap.asm"), (".text.", ".asm"))


def disassemble(binary: Path, device: str, out_dir: Path, compiler: str | None = None) -> tuple[dict[str, str], str]:
    """``ocloc disasm`` a binary: (kernel name -> IGA asm, log); raise if IGA could not be loaded."""
    done = run_ocloc(["disasm", "-file", str(binary), "-device", device, "-dump", str(_fresh_dir(out_dir))],
                     cwd=out_dir.parent, compiler=compiler)
    kernels = {p.name[len(prefix): -len(suffix)]: p.read_text(errors="replace")
               for prefix, suffix in _DISASM_NAMES for p in sorted(out_dir.glob(f"{prefix}*{suffix}"))}
    if "couldn't load iga" in done.stdout.lower() or (not kernels and any(out_dir.glob("*_KernelHeap.dat"))):
        raise IgaMissingError(done.stdout)
    if done.returncode != 0 or not kernels:
        raise OclocToolError(f"`ocloc disasm` of {binary} gave no kernels (exit {done.returncode})", done.stdout)
    return kernels, done.stdout


def read_dumps(dump_dir: Path) -> dict[str, str]:
    """IGC's per-kernel ``.asm`` dumps in ``dump_dir`` (file name -> text)."""
    return {p.name: p.read_text(errors="replace") for p in sorted(dump_dir.glob("*.asm"))}


def compile_kernel(source: str, target: str, grf: int = 128, options: str = "",
                   workdir: Path | None = None, *, dumps: bool = True, timeout: float = OCLOC_TIMEOUT,
                   compiler: str | None = None, il: bytes | None = None) -> AotBuild:
    """Compile OpenCL C for ``target`` (pvc, bmg, lnl, ptl, dg2) in GRF mode 128/256 and read back its ISA.

    ``workdir`` keeps the source, binary, disassembly and dumps (a new temporary folder if None, left in
    place for inspection).  ``dumps=False`` skips IGC's shader dumps (faster; no numGRF/spill data).  A compile
still running after ``timeout`` seconds is killed: status "timed_out", ``dumps`` what IGC had written.
    ``compiler``: ``"system"``, ``"current"`` or a path; None: :func:`xegemm.aot.toolchain.build_compiler`'s
    choice (``$XEGEMM_COMPILER``, else the first compiler that knows the target).  ``il``: a SPIR-V module to
    compile instead (``ocloc compile -spirv_input``; ``source`` is then its assembly text, kept beside it)."""
    compiler = build_compiler(target, compiler)
    t = aot_target(target, compiler)
    full_options = compose_options(grf, options)
    # absolute: ocloc runs in `work`, so a relative dump or output path would resolve against it instead
    work = (Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="xegemm-aot-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    inputs = ["-file", SOURCE_NAME]
    if il is None:
        (work / SOURCE_NAME).write_text(source)
    else:
        (work / "kernel.spvasm").write_text(source)
        (work / "kernel.spv").write_bytes(il)
        inputs = ["-spirv_input", "-file", "kernel.spv"]
    bin_dir, dump_dir = _fresh_dir(work / "bin"), _fresh_dir(work / "dumps")
    # IGC names its dumps <dir>/OCL_asm<hash>_<stage>_<kernel name>...: with long kernel names (epilogue and
    # split-K suffixes) a deep directory pushes the path past what IGC takes (ocloc dies with
    # std::length_error), so IGC dumps into a short temporary directory, moved into the work directory after.
    igc_dumps = Path(tempfile.mkdtemp(prefix="xd")) if dumps else None
    env = {"IGC_ShaderDumpEnable": "1", "IGC_DumpToCustomDir": str(igc_dumps)} if dumps else {}
    start = time.perf_counter()
    try:
        done = run_ocloc(["compile", *inputs, "-device", t.ocloc_device, "-out_dir", str(bin_dir),
                          "-output", "kernel", "-options", full_options], cwd=work, env=env, timeout=timeout,
                         compiler=compiler)
    except subprocess.TimeoutExpired as exc:
        done = None
        log = exc.output if isinstance(exc.output, str) else (exc.output or b"").decode(errors="replace")
    if igc_dumps is not None:
        for item in igc_dumps.iterdir():
            shutil.move(str(item), dump_dir / item.name)
        shutil.rmtree(igc_dumps, ignore_errors=True)
    if done is None:
        return AotBuild(target=t.name, grf=grf, source=source, options=full_options, workdir=work,
                        status="timed_out", log=f"{log}\nocloc stopped after {timeout:g} s",
                        dumps=read_dumps(dump_dir) if dumps else {}, seconds=time.perf_counter() - start,
                        compiler=compiler)
    binaries = sorted(bin_dir.glob("*.bin"))
    build = AotBuild(target=t.name, grf=grf, source=source, options=full_options, workdir=work,
                     status="ok", log=done.stdout, compiler=compiler)
    if done.returncode != 0 or not binaries:
        build.status = "failed_build"
        build.seconds = time.perf_counter() - start
        return build
    build.binary = binaries[0]
    build.dumps = read_dumps(dump_dir) if dumps else {}
    try:
        build.kernel_asm, disasm_log = disassemble(build.binary, t.ocloc_device, work / "disasm", compiler)
    except OclocToolError:
        # `ocloc disasm` wrote no kernel code (a zebin whose sections it did not dump): the dumps' listings are
        # the same machine code (their figures equal the disassembly's wherever both exist: xegemm.aot.isa)
        build.stats = stats_from_dumps(build.dumps, t.name, grf)
        if build.stats is None:
            raise
        build.isa_source = "dumps"
        build.seconds = time.perf_counter() - start
        return build
    build.log += disasm_log
    build.stats = isa_stats(build.kernel_asm, build.dumps, target=t.name, grf=grf)
    build.seconds = time.perf_counter() - start
    return build


def stats_from_dumps(dumps: dict[str, str], target: str, grf: int) -> IsaStats | None:
    """:class:`IsaStats` of a binary from IGC's dumps alone: one dump per kernel (a kernel compiled twice, a retry,
    leaves which variant is in the binary unknown, so then None, as without dumps)."""
    parsed = [d for d in (parse_shader_dump(name, text) for name, text in dumps.items())
              if d is not None and d.kernel != SYMBOL_TABLE_KERNEL]
    kernels = [d.kernel for d in parsed]
    if not parsed or len(set(kernels)) != len(kernels):
        return None
    per = {d.kernel: dump_kernel_stats(d, target, grf) for d in parsed}
    ks = list(per.values())
    total = IsaStats(target=target, grf=max(k.grf or 0 for k in ks) or grf,
                     instructions=sum(k.instructions for k in ks), dpas=sum(k.dpas for k in ks),
                     load_block2d=sum(k.load_block2d for k in ks), store_block2d=sum(k.store_block2d for k in ks),
                     prefetch_block2d=sum(k.prefetch_block2d for k in ks), sends=sum(k.sends for k in ks),
                     spill_bytes=sum(k.spill_bytes or 0 for k in ks), kernels=per,
                     dpas_workaround=sum(k.dpas_workaround for k in ks))
    for k in ks:
        for kind, n in k.messages.items():
            total.messages[kind] = total.messages.get(kind, 0) + n
        for kind, n in k.conversions.items():
            total.conversions[kind] = total.conversions.get(kind, 0) + n
    return total
