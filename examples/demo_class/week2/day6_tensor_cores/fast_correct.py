"""Demo student: the kernel and launcher as the course wrote them, and right answers to all four questions.

Full correctness and understanding marks; on a GPU, the speed of the reference kernel in both formats.
"""

# %% all < solution
