"""Demo student: the course's solution.

All eight CUDA C kernels and their wrappers, and right answers to the four questions: every
correctness and speed item on a GPU (the reference kernels' own speed); on a CPU the kernel and speed
items are pending a GPU run and the four answers earn their points.
"""

# %% all < solution
