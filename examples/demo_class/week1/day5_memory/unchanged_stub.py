"""Demo student: hands the notebook back untouched.

Every answer cell keeps its stub (copy, every_kth and the answers raise NotImplementedError), so
every graded item scores 0.
"""
