"""Demo student: hands the notebook back untouched.

No section replaces any cell, so the released stubs stay: every function and the answers cell raise
NotImplementedError, and every graded item scores 0.
"""
