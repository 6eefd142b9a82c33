"""Demo student: hands the notebook back untouched.

No section replaces any cell, so the released stubs stay: the kernels, `attention`, its configurations and the
answers cell raise NotImplementedError or hold placeholders, and every graded item scores 0.
"""
