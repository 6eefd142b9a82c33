"""Demo student: the course's solution.

The padded CUDA C kernel (a 32 x 33 shared tile), the wrapper that launches it, and right answers to
all four questions: full correctness and understanding marks on a GPU, the reference solution's
speed; on a CPU the kernel items are pending a GPU run and the four answers earn their points.
"""

# %% all < solution
