"""What starting one sandbox costs: the seconds from starting a sandboxed Python to its exit, for a bare interpreter
and for the imports a notebook's run begins with, and the one-off cost of building the wall tree.

    python -m bench sandbox-startup [--repeats 15] [--json FILE]

Runs on whichever checkout is first on PYTHONPATH, so the same script times an older grader's sandbox too (run it
with ``python -P`` from that checkout). CPU-only work: no GPU is bound.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.run import execute
from grader.wall import sandbox, scratch_folders

COMMANDS = {
    "bare python": "pass",
    "import course, papermill, ipykernel": "import course, papermill, ipykernel.kernelapp",
}


def _one(code: str, scratch: Path) -> float:
    job = execute.Job(notebook="", workdir=str(scratch), device="cpu")
    env = execute.scrubbed_environment(job)
    started = time.perf_counter()
    ran = sandbox.run([sys.executable, "-P", "-c", code], scratch=scratch, env=env, limits=sandbox.Limits(seconds=120),
                      log_path=scratch.parent / f"{scratch.name}.log")
    seconds = time.perf_counter() - started
    if ran.status != "ok":
        raise SystemExit(f"{code!r} failed in the sandbox: {ran.message}: "
                         f"{(scratch.parent / f'{scratch.name}.log').read_text()[-500:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--label", default=None, help="what is timed (default: this checkout's commit)")
    args = parser.parse_args()
    reason = sandbox.unavailable_reason()
    if reason is not None:
        raise SystemExit(f"no sandbox here: {reason}")
    label = args.label or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                         cwd=Path(execute.__file__).parent).stdout.strip()
    found: dict[str, object] = {"host": platform.node(), "python": sys.version.split()[0], "grader": label}
    wall_tree = sys.modules.get("grader.wall.wall_tree")  # imported by the sandbox where there is one
    if wall_tree is None:
        found["wall tree build s"] = None
    else:
        with tempfile.TemporaryDirectory() as folder:
            started = time.perf_counter()
            wall_tree.build(Path(folder) / "tree")
            found["wall tree build s"] = round(time.perf_counter() - started, 3)
    for label, code in COMMANDS.items():
        seconds = []
        for _ in range(args.repeats):
            scratch = scratch_folders.make_scratch("gpu-course-bench-")
            try:
                seconds.append(_one(code, scratch))
            finally:
                subprocess.run(["rm", "-rf", str(scratch), f"{scratch}.log"], check=False)
        found[label] = {"median s": round(statistics.median(seconds), 3), "min s": round(min(seconds), 3),
                        "max s": round(max(seconds), 3), "repeats": len(seconds)}
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    for key, value in found.items():
        print(f"{key:<40}{value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
