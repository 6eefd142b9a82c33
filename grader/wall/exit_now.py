"""End a sandboxed stage's process once its results are written, without Python's finalization.

A process that imported torch and Triton spends 1 to 1.5 s of CPU tearing them down at exit (measured on the
2-core CI-sized machine, bench/RESULTS.md), for nothing: every result is already in a file. On a CPU grading that
is several percent of each notebook's cost.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Flush the standard streams (the sandbox's log) and end the process with ``code``."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
