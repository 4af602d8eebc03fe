"""Arrays as checkpoints store them -> the arrays a format's kernels read (xegemm.quant.formats), without a hand
conversion by the user and never a silent wrong result (docs/quantization.md, "As stored").

What is taken, per array, and what it costs (each conversion is named in :attr:`Stored.notes`; views cost
nothing, copies are host work counted in the call's ``last_kernel.copies``):

* ``qweight`` of gptq/awq as uint32 (a view as int32); gpt-oss MXFP4 ``blocks`` ``[..., N, K/32, 16]`` uint8 (a
  view as ``[..., N, K/2]``, the ``col`` layout);
* scales of ``tensor`` groups as a 0-d value, ``[1]`` or ``[1, 1]``; of ``channel`` groups as ``[N]``, ``[N, 1]``
  or ``[1, N]`` (one scale row along K: the same bytes in either layout); e8m0 scales as the uint8 bytes
  safetensors holds (a view);
* GPTQ v2 zeros (GPTQModel's ``gptq_v2``: the zero point itself, not v1's ``z - 1``): repacked as v1 (a copy of
  the small zeros array);
* zero points given as values (``plain``'s, one per byte for u4): each must lie in the codes' range (u4: 0..15)
  and be finite; a zero point outside it (a u4 zero of 200) is refused naming the array and the first such
  element, never wrapped or run;
* ``g_idx``: trivial (``arange(K) // group``) is accepted as is; act-order (``desc_act``: every group of K
  rows holds ``group`` rows, in any order) is computed exactly by permuting K: B's rows are repacked in the
  order of their groups (a copy) and A's columns are taken in the same order (:attr:`Stored.perm`, a copy per
  call); any other ``g_idx`` is refused with the reason.

Every refusal is one line naming the array, what it has, what the format stores and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xegemm.errors import XegemmError
from xegemm.library.dtypes import ML_DTYPES, dtype
from xegemm.quant.formats import FORMATS, Unpacked
from xegemm.quant.packing import pack_words, unpack_words
from xegemm.quant.spec import QuantSpec
from xegemm.quant.values import NUMPY_DTYPES

GPTQ_VERSIONS = (1, 2)


class StoredError(XegemmError, ValueError):
    """Arrays that cannot be taken as the format stores them (the message names the array and the fix)."""


@dataclass(frozen=True)
class Stored:
    """A quantized B's arrays as the kernels read them: ``qweight``, ``scales``, ``zeros`` (or None), each with
    the call's batch dimension when it had one; ``perm``: A's columns in the order B's K rows were put (None:
    as they are); ``notes``: what was converted on the host (views and copies)."""

    qweight: np.ndarray
    scales: np.ndarray
    zeros: np.ndarray | None
    perm: np.ndarray | None = None
    notes: tuple[str, ...] = ()


def _dims(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def n_of(spec: QuantSpec, name: str, shape: tuple[int, ...], k: int) -> int:
    """N from a qweight's last two dimensions, the K axis checked against ``k`` (A's columns): a transposed
    view's message names the axis it found K on."""
    rows, cols = shape[-2:]
    bits = dtype(spec.weight).bits
    if spec.format == "gptq":
        k_axis, k_extent, what = 0, k * bits // 32, f"int32 [K*{bits}/32, N]"
    elif spec.format == "awq":
        k_axis, k_extent, what = 0, k, "int32 [K, N/8]"
    elif spec.layout == "row":
        k_axis, k_extent, what = 0, k, "[K, N]" + (" (two 4-bit values per byte along N)" if bits == 4 else "")
    else:
        k_axis, k_extent, what = 1, k // 2 if bits == 4 else k, \
            "[N, K/2] (two 4-bit values per byte along K)" if bits == 4 else "[N, K]"
    found = (rows, cols)[k_axis]
    if found != k_extent:
        other = (rows, cols)[1 - k_axis]
        hint = (" - it looks transposed: pass the array as the checkpoint stores it, not a .T view" if other == k_extent
                else f" - check that A's columns (K = {k}) are the layer's input features")
        raise StoredError(f"{name} is {_dims(shape)}; {spec.describe()} stores qweight {what}, so its "
                          f"{('rows', 'columns')[k_axis]} must be {k_extent} for K = {k} (A's columns){hint}")
    other = (rows, cols)[1 - k_axis]
    if spec.format == "awq":
        return other * 8
    if spec.layout == "row" and spec.format != "gptq" and bits == 4:
        return other * 2
    return other


def _qweight(spec: QuantSpec, b: np.ndarray, batched: bool, notes: list) -> np.ndarray:
    if spec.format in ("gptq", "awq") and b.dtype == np.uint32:
        notes.append("qweight uint32 viewed as int32")
        return b.view(np.int32)
    if spec.format in ("mx", "plain") and dtype(spec.weight).bits == 4 and spec.layout == "col" \
            and b.ndim == (4 if batched else 3) and b.shape[-1] == 16 and b.dtype == np.uint8:
        notes.append("blocks [..., N, K/32, 16] viewed as [..., N, K/2]")
        return np.ascontiguousarray(b).reshape(*b.shape[:-2], b.shape[-2] * 16)
    return b


def per_group(name: str, array, spec: QuantSpec, k: int, n: int, batch: int | None,
               notes: list) -> np.ndarray:
    """Scales or unpacked zeros of one scale row (tensor, channel) in the shapes checkpoints use, reshaped to
    the format's; others as given (checked by the caller)."""
    want = spec.scale_shape(k, n)
    a = array
    if isinstance(array, (int, float)) and not isinstance(array, bool):      # a Python number: exact in its type
        a = np.asarray(array, NUMPY_DTYPES[spec.scale])
        if float(a) != float(array):
            raise StoredError(f"{name} is the Python number {array!r}, which is not exact in {spec.scale} - pass it "
                              f"as a numpy array of {NUMPY_DTYPES[spec.scale]} as the checkpoint stores it")
    elif not isinstance(array, np.ndarray):
        return array
    lead = () if batch is None else (batch,)
    if spec.group == "tensor":
        if a.size == (batch or 1) and a.ndim <= len(lead) + 2:
            if a.shape != (*lead, 1, 1):
                notes.append(f"{name} {_dims(a.shape)} taken as the one per-tensor value")
            return a.reshape(*lead, 1, 1)
    elif spec.group == "channel" and spec.format in ("plain", "mx"):
        if a.shape in ((*lead, n), (*lead, n, 1), (*lead, 1, n)):
            if a.shape[len(lead):] != want:
                notes.append(f"{name} {_dims(a.shape)} taken as the per-channel values {_dims(want)}")
            return a.reshape(*lead, *want)
    return a


def _scales_dtype(spec: QuantSpec, scales: np.ndarray, notes: list) -> np.ndarray:
    if spec.scale == "e8m0" and scales.dtype == np.uint8:
        notes.append("e8m0 scales' uint8 bytes viewed as float8_e8m0fnu")
        return scales.view(ML_DTYPES["e8m0"])
    return scales


def check_zero_range(name: str, zeros, spec: QuantSpec) -> None:
    """Zero points stored as values (``plain``; GPTQ's and AWQ's packed words are in range by construction):
    StoredError naming ``name``, the first element outside the codes' range and the range, when there is one.
    Arrays of another dtype are left to the caller's check, which names what the format stores."""
    if spec.format != "plain" or not spec.has_zero or not isinstance(zeros, np.ndarray) \
            or zeros.dtype != NUMPY_DTYPES[spec.zero] or zeros.size == 0:
        return
    lo, hi = dtype(spec.weight).value_range
    z = zeros.astype(np.float64)
    bad = ~np.isfinite(z) | (z < lo) | (z > hi)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise StoredError(f"{name} holds {zeros[where].item()!r} at {list(where)}; {spec.describe()} takes zero points in the "
                          f"codes' range {lo}..{hi} ({spec.weight} codes, in quantized units) - pass the checkpoint's "
                          "zero points unpacked, one per element, as the format stores them")


def gptq_v2_to_v1(qzeros: np.ndarray, bits: int) -> np.ndarray:
    """GPTQModel's ``gptq_v2`` zeros (the zero points themselves) packed as AutoGPTQ's v1 (``z - 1``), the
    words' layout unchanged (32/bits columns per int32 word along the last axis)."""
    flat = qzeros.reshape(-1, qzeros.shape[-1])
    v1 = pack_words(unpack_words(flat, bits, axis=1) - 1, bits, axis=1)
    return v1.reshape(qzeros.shape)


def act_order_perm(g_idx, k: int, group) -> np.ndarray | None:
    """The K order that makes ``g_idx`` (the group of each of B's K rows) the kernels' ``k // group``: None when
    it already is, the permutation for act-order; StoredError for a g_idx no permutation fixes."""
    g = np.asarray(g_idx)
    if g.shape != (k,) or g.dtype.kind not in "iu":
        raise StoredError(f"g_idx is {g.dtype} {_dims(g.shape)}; GPTQ stores g_idx int32 [K] = [{k}] (the group of "
                          "each input feature) - pass the layer's g_idx as stored")
    if not isinstance(group, int):
        raise StoredError(f"g_idx is for integer groups; the loaded kernels' group is {group} - load a config with "
                          "quant.group: the checkpoint's group_size")
    trivial = np.arange(k) // group
    if np.array_equal(g, trivial):
        return None
    perm = np.argsort(g, kind="stable")
    if not np.array_equal(g[perm], trivial):
        counts = np.bincount(g.clip(0), minlength=int(trivial[-1]) + 1) if g.min() >= 0 else None
        raise StoredError("g_idx is neither arange(K) // group nor act-order (each group holding exactly "
                          f"{group} of the K = {k} rows{'' if counts is None else f'; group sizes {sorted(set(counts.tolist()))}'}): "
                          "no order of K makes it the kernels' k // group - check quant.group against the "
                          "checkpoint's group_size")
    return perm


def _permute_k(spec: QuantSpec, arrays: dict, k: int, n: int, perm: np.ndarray) -> dict:
    """The format's arrays with B's K rows taken in the order ``perm`` (each row keeps its codes; its group is
    now ``k // group``, whose scales and zeros are unchanged)."""
    fmt = FORMATS[spec.format]
    u = fmt.unpack(spec, arrays, k, n)
    return fmt.pack(spec, Unpacked(u.codes[perm], u.scales, u.zeros))


def as_stored(spec: QuantSpec, b, scales, zeros, k: int, batched: bool, *, g_idx=None,
              gptq_version: int = 1) -> Stored:
    """The call's (or a checkpoint's) qweight ``b``, ``scales``, ``zeros`` and ``g_idx`` as the kernels read them
    for K = ``k`` (see the module docstring).  Shapes and dtypes that remain wrong are left for the caller's
    check, which names what the format needs."""
    notes: list[str] = []
    if gptq_version not in GPTQ_VERSIONS:
        raise StoredError(f"gptq_version is {gptq_version!r}; GPTQ checkpoints are version 1 (AutoGPTQ: zeros stored "
                          "as z - 1) or 2 (GPTQModel gptq_v2: zeros as they are)")
    if gptq_version == 2 and spec.format != "gptq":
        raise StoredError(f"gptq_version=2 is for GPTQ checkpoints; the loaded kernels' B is {spec.format}")
    if g_idx is not None and spec.format not in ("gptq", "plain"):
        raise StoredError(f"g_idx is GPTQ's (and compressed-tensors'); {spec.format} has none - leave it out")
    b = _qweight(spec, b, batched, notes) if isinstance(b, np.ndarray) else b
    batch = (b.shape[0] if isinstance(b, np.ndarray) and b.ndim >= 1 else None) if batched else None
    n = n_of(spec, "b", b.shape, k) if isinstance(b, np.ndarray) and b.ndim == (3 if batched else 2) else None
    if n is not None and scales is not None:
        scales = per_group("scales", scales, spec, k, n, batch, notes)
        if spec.format == "plain" and zeros is not None:
            zeros = per_group("zeros", zeros, spec, k, n, batch, notes)
    check_zero_range("zeros", zeros, spec)
    if isinstance(scales, np.ndarray):
        scales = _scales_dtype(spec, scales, notes)
    if isinstance(zeros, np.ndarray) and spec.format == "gptq" and zeros.dtype == np.uint32:
        zeros = zeros.view(np.int32)
        notes.append("qzeros uint32 viewed as int32")
    if gptq_version == 2 and isinstance(zeros, np.ndarray):
        zeros = gptq_v2_to_v1(zeros, dtype(spec.weight).bits)
        notes.append("GPTQ v2 zeros repacked as v1 (z - 1): a copy of qzeros")
    perm = None
    if g_idx is not None:
        perm = act_order_perm(g_idx, k, spec.group)
        if perm is None:
            notes.append("g_idx is arange(K) // group: used as the kernels' groups")
        elif n is not None:
            want = FORMATS[spec.format].arrays(spec, k, n)
            zero_name = next((x for x in want if x in ("zeros", "qzeros")), None)
            names = ("qweight", "scales", *((zero_name,) if zero_name else ()))
            given = (b, scales, *((zeros,) if zero_name else ()))
            for name, array in zip(names, given):
                got = np.asarray(array)
                if got.dtype != want[name].dtype or got.shape[-2:] != want[name].shape:
                    return Stored(b, scales, zeros, None, tuple(notes))     # the caller's check names it
            stacks = [dict(zip(names, (x[i] for x in given))) for i in range(batch)] if batched else \
                [dict(zip(names, given))]
            permuted = [_permute_k(spec, arrays, k, n, perm) for arrays in stacks]
            pick = (lambda name: np.stack([p[name] for p in permuted])) if batched else \
                (lambda name: permuted[0][name])
            b, scales = pick("qweight"), pick("scales")
            zeros = pick(zero_name) if zero_name else None
            notes.append("act-order g_idx: B's K rows repacked in group order (a copy of qweight), A's columns "
                         "taken in the same order (a copy per call)")
    return Stored(b, scales, zeros, perm, tuple(notes))
