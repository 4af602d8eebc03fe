"""Verification against numpy: :mod:`.dense` (operands, the reference of the accumulator and its tolerance from
the types, K and split K, the epilogue's bounds, the verdict) and :mod:`.grouped` (the same, group by group).
:mod:`.interpreter` runs a coopmat SPIR-V module on the host by the specification's semantics, so that what a
module computes is checked where no device runs it.
"""
