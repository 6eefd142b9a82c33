"""Judge: every verdict of a notebook, computed where none of the student's Python runs (the master test cells on
the exported answers, the replays checked and timed), in a watched process of its own.
"""
