"""A plan becomes a kernel: :mod:`.render` (Plan + Lowering -> source), :mod:`.arguments` (each launch's
arguments, global sizes and workspace: the one description the evaluator, the call API and the export bind),
:mod:`.grouped_launch` (a grouped / MoE launch laid out: table, buffers, packed operands).
"""
