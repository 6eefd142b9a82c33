"""Shared toolkit of the GPU kernels course, imported by every notebook and by the grader.

Importing it changes nothing in the process. The device (a CUDA GPU, or the Triton CPU interpreter when there is
none) is chosen by ``course.device.configure()``, which every notebook calls first, before any kernel is
defined, or else at its first use (``course.device.info()``); see ``course.device``.
"""

from course import answers, bench, check, cuda, device, grading, guard, plot, record, spec

__version__ = "0.1.0"

__all__ = ["answers", "bench", "check", "cuda", "device", "grading", "guard", "plot", "record", "spec", "__version__"]
