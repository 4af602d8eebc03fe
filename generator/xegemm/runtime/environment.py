"""Make the pip-installed Intel OpenCL CPU runtime visible before dpctl is first imported.

The ``intel-opencl-rt`` wheel installs ``<prefix>/lib/libintelocl.so`` but its ICD file
(``<prefix>/etc/OpenCL/vendors/intel-cpu.icd``) holds a placeholder path from the package build
(``/opt/anaconda1anaconda2anaconda3/lib/libintelocl.so``), so the OpenCL ICD loader finds nothing and
dpctl lists no device.  Naming the library in ``OCL_ICD_FILENAMES`` before the loader first runs fixes
that without touching any file (docs/compilers.md "The runtime pins").  A user never has to set it by hand.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path

CPU_RUNTIME_LIBRARY = "libintelocl.so"
ICD_VARIABLE = "OCL_ICD_FILENAMES"
# Point xegemm at another CPU runtime (e.g. a system oneAPI install); an empty value disables it.
OVERRIDE_VARIABLE = "XEGEMM_OPENCL_CPU_RUNTIME"


def find_cpu_runtime() -> Path | None:
    """Return the path of the Intel OpenCL CPU runtime library installed by ``intel-opencl-rt``, if any.

    ``XEGEMM_OPENCL_CPU_RUNTIME`` overrides the search (a path, or empty for none).
    """
    if OVERRIDE_VARIABLE in os.environ:
        override = Path(os.environ[OVERRIDE_VARIABLE])
        return override.resolve() if os.environ[OVERRIDE_VARIABLE] and override.is_file() else None
    candidates = [Path(sys.prefix) / "lib" / CPU_RUNTIME_LIBRARY]
    try:
        dist = metadata.distribution("intel-opencl-rt")
        for f in dist.files or ():
            if f.name == CPU_RUNTIME_LIBRARY:
                candidates.append(Path(dist.locate_file(f)))
    except metadata.PackageNotFoundError:
        pass
    for path in candidates:
        if path.is_file():
            return path.resolve()
    return None


def prepare_opencl_environment(environ: dict | None = None) -> Path | None:
    """Add the CPU runtime to ``OCL_ICD_FILENAMES`` (idempotent); return the library path or None.

    Must run before dpctl (and so the OpenCL ICD loader) is first imported in the process; the
    runtime package calls it on import.  Entries the user already put in the variable are kept.
    """
    env = os.environ if environ is None else environ
    library = find_cpu_runtime()
    if library is None:
        return None
    entries = [e for e in env.get(ICD_VARIABLE, "").split(os.pathsep) if e]
    if str(library) not in entries:
        env[ICD_VARIABLE] = os.pathsep.join([str(library), *entries])
    return library
