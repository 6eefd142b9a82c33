"""Score and record: the judge's verdicts turned into one item per graded cell, stored as results JSON and in
nbgrader's gradebook, with a TA's overrides.
"""
