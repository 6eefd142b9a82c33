"""Demo student: measures every kernel against the arithmetic roof.

`classify` is right. `roof_fraction` always divides the achieved FLOP rate by the peak FLOP rate,
whatever the kernel is bound by: right for compute-bound kernels, far too low for memory-bound ones
(and 0 for a copy, which does no arithmetic). Both roof_fraction items fail; Q1 and Q3 are right,
Q2 counts FLOPs per element instead of per byte and Q4 blames memory.
"""

# %% roofline_functions
def classify(m: Measurement) -> str:
    """Return "memory" when the kernel's FLOPs per DRAM byte are below the device's ridge point, else "compute"."""
    intensity = m.flops / m.dram_bytes
    return "memory" if intensity < m.peak_tflops / m.peak_tbps else "compute"


def roof_fraction(m: Measurement) -> float:
    """Achieved FLOP rate over the peak FLOP rate."""
    return m.flops / (m.time_ms * 1e-3) / (m.peak_tflops * 1e12)

# %% answers
ridge_h100_fp32 = 67e12 / 3350e9
steps_at_ridge = 20
bandwidth_gbps = 2e9 / 0.8e-3 / 1e9
low_both = "memory"
