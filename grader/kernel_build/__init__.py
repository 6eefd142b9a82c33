"""Build: the notebook's kernels from their source text to TTGIR (Triton, vetted first) or CUDA binaries, in a
sandbox with no GPU; then the TTGIR compiled to GPU binaries in the judge's cache, outside it.
"""
