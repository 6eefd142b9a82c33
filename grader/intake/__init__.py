"""Intake: a class's submissions found on disk (every expected notebook a row) and each one rebuilt from the
course's master copy, the student's answer cells only, before anything of it runs.
"""
