"""Demo student: the notebook as shipped, nothing filled in."""
