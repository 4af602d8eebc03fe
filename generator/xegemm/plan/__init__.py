"""The planner: one resolved config -> :class:`xegemm.plan.planner.Plan` (tile arithmetic, the copy and DPAS atoms
chosen, predicted messages and registers) or a rejection with the rule and the numbers.  :mod:`.planner` is the
entry point; the other modules are its jobs (operands, atom choice, surfaces, registers, kernel names,
dequantization, stream-K, swizzle).
"""
