"""The recorder: the code that runs inside the sandbox, beside the student's notebook, and writes what leaves it.

``plan`` records one call of a graded function as a launch plan (buffers, kernels, grids, arguments),
``descriptors`` describes its TMA tensor descriptors as data, and ``export`` writes the plans and the answers
the grader's test cells read. What these write is the judge's contract: the judge (``grader.judge.verdict``) reads it as
data and never imports the notebook's Python. Everything here may run next to student code, so nothing here is
trusted by the grader beyond the data it writes, which the judge checks again.
"""
