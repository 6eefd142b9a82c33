"""Replay: a recorded launch plan run again on the judge's own inputs, on a GPU (with torch) or through Triton's
interpreter on a CPU (in a sandbox, without torch), after the checks every replay makes first.
"""
