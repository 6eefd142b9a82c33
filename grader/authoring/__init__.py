"""Authoring: what the course hands out, made from its solutions: the student notebooks (release), the student
bundle, and the demo class.
"""
