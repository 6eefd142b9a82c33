"""Demo student: hands the notebook back untouched.

Every answer cell keeps its stub (smem_bytes, the matmul cell and the answers raise NotImplementedError),
so every graded item scores 0.
"""
