"""Demo student: hands the notebook back untouched (every function raises NotImplementedError)."""
