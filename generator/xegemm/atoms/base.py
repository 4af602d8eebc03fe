"""What every copy atom answers: the interface the planner, the lowerings and the kernel name ask of a copy.

Two families implement it: Xe 2D block copies (:class:`xegemm.atoms.copy.CopyAtom`) and 1D sub-group block
tiles (:class:`xegemm.atoms.block1d.Block1DAtom`).  Code that takes a copy atom asks these members and never
the atom's class; what differs between the families (how many messages a tile is, its prefetch, its load
twin, how a lowering spells it) is a member each family defines.  :func:`xegemm.atoms.copy_atom_named` is
the one place that tells the families apart, by the name's prefix.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from xegemm.library.dtypes import c_byte_offset

OPS = ("LD", "ST", "PF")        # load, store, prefetch: the op part of every copy atom's name


class CopyAtomBase(ABC):
    """A copy atom: a block of ``rows`` x ``cols`` elements of ``type_name`` moved by ``op``.

    Subclasses are frozen dataclasses with at least ``type_name``, ``rows``, ``cols`` and ``op``."""

    block2d: ClassVar[bool]     # an Xe 2D block message (True) or rows of 1D sub-group block messages
    type_name: str
    rows: int
    cols: int
    op: str

    # -- names ---------------------------------------------------------------------------------------
    @property
    @abstractmethod
    def name(self) -> str:
        """The atom's full name (``XE_2D_U16x32x32_LD_N``, ``XE_1D_U16x8x16_LD_SG8``)."""

    @property
    @abstractmethod
    def short_name(self) -> str:
        """The atom's part of a kernel name (``u16x32x32n``, ``u16x8x16s8``: xegemm.plan.kernel_name)."""

    @property
    @abstractmethod
    def fn_name(self) -> str:
        """A C identifier for the function that implements the atom."""

    def __str__(self) -> str:
        return self.name

    # -- what moves ----------------------------------------------------------------------------------
    @property
    @abstractmethod
    def elem_bits(self) -> int:
        """Bits of one element of the named type (the lane map's granularity)."""

    @property
    @abstractmethod
    def lanes(self) -> int:
        """The sub-group size the atom's messages run at."""

    @property
    @abstractmethod
    def messages(self) -> int:
        """Messages one tile issues before any native split (a 2D block: one; a 1D tile: one per row)."""

    @property
    def is_load(self) -> bool:
        return self.op == "LD"

    @property
    def is_store(self) -> bool:
        return self.op == "ST"

    @property
    def is_prefetch(self) -> bool:
        return self.op == "PF"

    @property
    def row_bytes(self) -> int:
        """Bytes of one memory row of the block."""
        return self.cols * self.elem_bits // 8

    @property
    def x_bytes(self) -> str:
        """The C byte offset of column ``x`` (in elements of the atom's type) within a row."""
        return c_byte_offset("x", self.elem_bits)

    # -- registers -----------------------------------------------------------------------------------
    @property
    @abstractmethod
    def register_type(self) -> str:
        """The OpenCL C type of one work-item's registers ('' for a prefetch)."""

    @property
    @abstractmethod
    def register_bytes(self) -> int:
        """Bytes of one work-item's registers."""

    # -- legality ------------------------------------------------------------------------------------
    @abstractmethod
    def violations(self) -> list[str]:
        """The rules this atom breaks; empty when it is legal."""

    @property
    def legal(self) -> bool:
        return not self.violations()

    @property
    def quirk(self) -> str | None:
        """How sycl-tla's atom of this name deviates from this model (None when it does not)."""
        return None

    # -- related atoms -------------------------------------------------------------------------------
    @property
    @abstractmethod
    def prefetch(self) -> "CopyAtomBase":
        """The prefetch of the same memory block (an AtomError subclass when no legal one covers it)."""

    @abstractmethod
    def with_op(self, op: str) -> "CopyAtomBase":
        """The atom of the same block and layout with another op (the load twin of a store: ``with_op("LD")``)."""

    @abstractmethod
    def block1d_rows(self) -> "CopyAtomBase | None":
        """The 1D sub-group block tile of the same rows at this atom's sub-group size (None when no 1D message
        moves its elements): what a lowering without the 2D message may issue instead."""

    # -- showing ---------------------------------------------------------------------------------------
    @abstractmethod
    def describe(self) -> dict:
        """Key properties as plain data (``xegemm atoms show --json``)."""

    @abstractmethod
    def headline(self) -> list[str]:
        """The lines ``xegemm atoms show`` prints above the lane map."""
