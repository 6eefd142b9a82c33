"""Demo student: both kernels as the course wrote them, and right answers to all four questions.

Full correctness and understanding marks; on a GPU, the copy's bandwidth is the reference's.
"""

# %% all < solution
