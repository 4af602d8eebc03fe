"""Verification against numpy: :mod:`.dense` (operands, the reference of the accumulator and its tolerance from
the types, K and split K, the epilogue's bounds, the verdict) and :mod:`.grouped` (the same, group by group).
"""
