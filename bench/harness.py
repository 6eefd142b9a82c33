"""What every measurement in bench/ shares: its command line, the device check, a table and the JSON it writes.

A measurement's JSON carries where it came from (UTC date, GPU, commit, command) beside its own fields, so a
file under ``bench/results/`` says what ``bench/RESULTS.md`` needs to cite it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from course import bench, device

REPO = Path(__file__).resolve().parent.parent


def parser(doc: str) -> argparse.ArgumentParser:
    """The measurement's command line: the first line of its docstring, and ``--json FILE`` for its full results."""
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


def start(p: argparse.ArgumentParser,
          argv: Sequence[str] | None) -> tuple[argparse.Namespace, device.DeviceInfo | None]:
    """Parse the command line, then configure the GPU (None where there is none, having said so)."""
    args = p.parse_args(argv)
    return args, gpu_or_say_so()


def profiled_launch(fn: Any, *args: Any) -> Any:
    """Two warm-up calls, then one between cudaProfilerStart and Stop: the launch ``ncu --profile-from-start off``
    profiles. Returns that call's output."""
    import torch

    for _ in range(2):
        fn(*args)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    out = fn(*args)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return out


def commit() -> str:
    """This checkout's short commit, "+changes" where tracked files differ from it; "unknown" outside git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()

    try:
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return git("rev-parse", "--short", "HEAD") + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance(argv: Sequence[str] | None = None) -> dict[str, str]:
    """Date (UTC), GPU, commit and command of a measurement made now."""
    import torch  # here, not at the top: --list and the CPU tests never load torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    command = " ".join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)])
    return {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "gpu": gpu, "commit": commit(),
            "command": command}


def write_json(path: Path | None, fields: dict[str, Any]) -> None:
    """Write the measurement's fields, with its provenance first, where ``--json`` asked (nowhere if None)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**provenance(), **fields}, indent=1))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows as fixed-width text columns, numbers right-aligned; floats with three decimals."""
    def cell(value: Any) -> str:
        return f"{value:.3f}" if isinstance(value, float) else str(value)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) if cells else len(str(h)) for i, h in enumerate(headers)]

    def line(values: Sequence[str], numeric: Sequence[bool]) -> str:
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric, strict=True))

    numeric = [all(isinstance(row[i], int | float) for row in rows) if rows else False for i in range(len(headers))]
    return "\n".join([line([str(h) for h in headers], numeric), *(line(r, numeric) for r in cells)]).rstrip()
