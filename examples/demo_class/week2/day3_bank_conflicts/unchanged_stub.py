"""Demo student: hands the notebook back untouched.

No section replaces any cell: the kernel source cell and the answers raise NotImplementedError, and
`transpose_padded` does too. On a GPU every item scores 0; on a CPU the kernel items are pending a
GPU run (CUDA C is never checked without one) and the answers score 0.
"""
