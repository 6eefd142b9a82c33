"""What a sandboxed run holds, measured against its limits: its processes' resident memory, and the bytes it
wrote to its scratch folder and printed to its log.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

import psutil


def _resident_bytes(processes: Sequence[psutil.Process]) -> int:
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            total += process.memory_info().rss
    return total


def _written_bytes(scratch: Path, log_path: Path, printed: Sequence[str] = ()) -> tuple[int, int]:
    """(printed output, scratch files): the log and the top-level scratch entries named in ``printed``, and every
    other entry. Apparent or allocated size, whichever is larger, and at least 512 bytes an entry: neither sparse
    files nor millions of empty files are free."""
    totals = [0, 0]
    with contextlib.suppress(OSError):
        totals[0] += log_path.stat().st_size
    stack = [(scratch, None)]
    while stack:
        folder, kind = stack.pop()
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    which = kind if kind is not None else (0 if entry.name in printed else 1)
                    info = entry.stat(follow_symlinks=False)
                    totals[which] += max(info.st_size, info.st_blocks * 512, 512)
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((Path(entry.path), which))
    return totals[0], totals[1]
