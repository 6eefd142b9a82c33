"""Demo student: solves the day as the course does.

The solution's peak formula, coordinate kernel and answers: every point that can be earned (nothing
today is timed, so a CPU run decides everything, provisionally for the kernel).
"""

# %% all < solution
