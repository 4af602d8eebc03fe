"""The jobs a user runs: :mod:`.pipeline` (generate, run, build ahead of time) and :mod:`.support` (the supported
matrix).  The tuner (:mod:`xegemm.tune`) and the call API (:mod:`xegemm.api`) are jobs of their own packages.
"""
