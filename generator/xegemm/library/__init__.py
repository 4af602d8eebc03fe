"""The registries every stage reads, one module per kind of knowledge (cutlass_library's ``library.py`` in
spirit): :mod:`.dtypes` (element types and their OpenCL C spellings), :mod:`.layouts` (memory layouts),
:mod:`.targets` (the GPUs and their facts), :mod:`.build_flags` (build options), :mod:`.formula` (integer
formulas printed as C and evaluated in Python) and :mod:`.record` (the one record of a result, its status
words and columns).  Nothing here imports a stage of the chain.
"""
