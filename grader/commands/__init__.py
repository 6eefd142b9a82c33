"""The command line's verbs (``python -m grader <verb>``), one module per kind: grading, the outputs made from
stored results, the course's own material, and push grading; with the options they share. ``grader.cli`` parses
the command line and dispatches to them.
"""
