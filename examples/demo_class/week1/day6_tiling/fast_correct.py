"""Demo student: the course's solution.

Submits the reference kernel (64 x 64 tiles of C in registers, one rank-1 update per k, BLOCK_K = 8 of
them unrolled per loop step, masks on M, N and K) and the right answers to all five questions: every
correctness and understanding point, and the reference kernel's speed.
"""

# %% all < solution
