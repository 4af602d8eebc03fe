"""Where results are kept: :mod:`.journal` (a run directory's journal, read bounded, and its lock).  The record
itself (:class:`xegemm.library.record.Evaluation`) is in the library, since every stage reads it.
"""
