"""Demo student: hands the notebook back untouched.

Every answer cell keeps its stub (both kernels, the four wrapper functions and the answers raise
NotImplementedError), so every graded item scores 0.
"""
