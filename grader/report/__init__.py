"""Report: what a TA and the students read, from the stored results: CSV tables, feedback pages, the class
overview, similar submissions, and what a student's own grading shows.
"""
