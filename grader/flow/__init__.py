"""What carries a class through the stages: the scheduler (each stage on the resource it needs), a clean stop
on a signal, and the one-grader-per-OUT lock.
"""
