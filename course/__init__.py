"""Shared toolkit of the GPU kernels course, imported by every notebook and by the grader.

Importing it changes nothing in the process and loads none of its modules: each (``course.bench``,
``course.check``...) is imported at its first use. The device (a CUDA GPU, or the Triton CPU interpreter when
there is none) is chosen by ``course.device.configure()``, which every notebook calls first, before any kernel is
defined, or else at its first use (``course.device.info()``); see ``course.device``.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = ["answers", "bench", "check", "cuda", "device", "grading", "guard", "plot", "record", "spec"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f"course.{name}")
    raise AttributeError(f"module 'course' has no attribute {name!r}")
