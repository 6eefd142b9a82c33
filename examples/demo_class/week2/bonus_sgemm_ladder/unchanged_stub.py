"""Demo student: hands the notebook back untouched.

No section replaces any cell: every version's answer cell raises NotImplementedError before its
source is defined, and so do the answers. On a GPU every item scores 0; on a CPU the kernel and speed
items are pending a GPU run (CUDA C is never checked without one) and the answers score 0.
"""
