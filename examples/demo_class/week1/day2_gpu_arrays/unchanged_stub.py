"""Demo student: hands the notebook back untouched.

`gpu_time_ms` and the answers cell still raise NotImplementedError: every graded item scores 0.
"""
