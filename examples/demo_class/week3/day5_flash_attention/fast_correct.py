"""Demo student: the course's solution (every answer cell as the solution notebook has it)."""

# %% all < solution
