"""The jinja2 templates of generated code (templates/): one environment, StrictUndefined (a missing value is an
error, never blank), and the helpers every renderer uses: one macro of a template, and the typedefs of vector
types OpenCL C lacks."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import jinja2

from xegemm.library.dtypes import OPENCL_VECTOR_SIZES


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The jinja2 environment over the shipped ``templates/`` directory."""
    root = resources.files("xegemm.templates")
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(root)), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def render_macro(template: str, macro: str, *args) -> str:
    """Call one macro of a template (e.g. ``copy/portable.cl.j2``, ``define``) and return its text."""
    module = environment().get_template(template).module
    return str(getattr(module, macro)(*args))


def wide_vector_typedefs(type_names) -> str:
    """``typedef`` lines for vector types OpenCL C lacks (e.g. ``ushort64``), as clang ext vectors."""
    lines = []
    for name in sorted(set(type_names)):
        base = name.rstrip("0123456789")
        digits = name[len(base):]
        if digits and int(digits) not in OPENCL_VECTOR_SIZES:
            lines.append(f"typedef {base} {name} __attribute__((ext_vector_type({digits})));")
    return "\n".join(lines)
