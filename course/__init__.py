"""Shared toolkit of the GPU kernels course, imported by every notebook and by the grader.

Importing it chooses the device (a CUDA GPU, or the Triton CPU interpreter when there is none)
before any kernel is defined; see ``course.device``.
"""

from course import device

__version__ = "0.1.0"

device.configure()

from course import answers, bench, check, cuda, grading, guard, plot, record, spec  # noqa: E402

__all__ = ["answers", "bench", "check", "cuda", "device", "grading", "guard", "plot", "record", "spec", "__version__"]
