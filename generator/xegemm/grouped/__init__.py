"""Grouped GEMM and Mixture-of-Experts GEMM: many problems in one launch (docs/grouped.md).

``problem``: the groups' shapes (:class:`GroupedProblem`, the MoE form from rows per expert) and their checks;
``table``: the device-side problem table; ``schedule``: the persistent tile scheduler as formulas printed into
kernels as C and evaluated in Python, and its balance model; ``verify``: the numpy reference and verdict per
group.  ``problem`` imports nothing of xegemm but the errors, so the config reader and the shapes list can use it.
"""
