"""Helpers for one day of the course each, imported by that day's notebook (and its tests and benches).

They run where the notebook runs: in the student's process, and in the grader's sandboxed run of it. None of
them is part of what the judge trusts or reads.
"""
