"""The learning-management side: a Canvas download brought into the class layout, the roster, the term's due
dates and late policy, and what a TA uploads back (grades, feedback zips).
"""
