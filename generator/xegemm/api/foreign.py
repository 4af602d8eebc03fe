"""A call's arguments from other frameworks (xegemm.library.dlpack): any object with ``__dlpack__`` is read as a numpy
view of its memory (no copy), and D goes back to the framework of the call's A (torch in, torch out, again without
a copy)."""

from __future__ import annotations

import numpy as np

from xegemm.api.errors import LayoutError
from xegemm.library.dlpack import DLPackError, is_foreign, to_numpy, to_torch, torch_of


class Frameworks:
    """One call's foreign arguments: taken as numpy views, and D given back in A's framework."""

    def __init__(self):
        self.torch = None

    def take(self, *args):
        out = []
        for index, x in enumerate(args):
            if is_foreign(x):
                if index == 0:
                    self.torch = torch_of(x)
                try:
                    out.append(to_numpy(x, ("a", "b", "c", "scales", "zeros", "a_scales", "bias", "g_idx")[index]
                                        if index < 8 else "an argument"))
                except DLPackError as exc:
                    raise LayoutError(str(exc)) from None
            else:
                out.append(x)
        return out

    @staticmethod
    def out_given(out) -> bool:
        return out is not None and is_foreign(out)

    def give(self, result):
        """D (or a dict of D and extra outputs) in the caller's framework."""
        if self.torch is None:
            return result
        if isinstance(result, dict):
            return {key: self.give(value) for key, value in result.items()}
        return to_torch(self.torch, result) if isinstance(result, np.ndarray) else result
