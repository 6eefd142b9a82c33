"""Run: the sanitized notebook executed in the sandbox with the recording cell appended, its launch plans and
answers exported as data; and a run's requests to hold its GPU alone for a moment.
"""
