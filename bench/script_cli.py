"""What the GPU measurement scripts in bench/ start with: a command line that takes ``--json FILE``, and the
check that leaves a CPU-only machine with a message and exit status 0."""

from __future__ import annotations

import argparse
from pathlib import Path

from course import bench, device


def parser(doc: str) -> argparse.ArgumentParser:
    """The script's command line: the first line of its docstring, and ``--json FILE`` for its full results."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--json", type=Path, default=None)
    return p


def gpu_or_say_so() -> device.DeviceInfo | None:
    """This machine's GPU, configured for the course; None, having said so, where there is none."""
    info = device.configure("auto")
    if not info.has_gpu:
        print(f"no GPU: nothing measured ({bench.NO_GPU})")
        return None
    return info
