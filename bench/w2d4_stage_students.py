"""Add Week 2 Day 4 students whose only difference from the solution is GPU_CONFIG, to set the speed bands.

    python -m bench w2d4-stage-students CLASS

CLASS is a demo class (``python -m grader demo CLASS``). For each launch in LAUNCHES it writes
CLASS/<name>/week2/day4_pipelining.ipynb: fast_correct's notebook with its GPU_CONFIG replaced. Graded on a GPU
(bench/gpu_course_check.sh with CLASS_HOOK set to this script), the judge's same-run ratios show where an honest
pipelined kernel of each tile and stage count lands against the reference and against cuBLAS.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

NOTEBOOK = Path("week2") / "day4_pipelining.ipynb"
# name: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
LAUNCHES = {
    "t128x128x64_s1": (128, 128, 64, 8, 1),
    "t128x128x64_s2": (128, 128, 64, 8, 2),
    "t128x128x64_s3": (128, 128, 64, 8, 3),
    "t128x128x64_s4": (128, 128, 64, 8, 4),
    "t128x256x64_s2": (128, 256, 64, 8, 2),
    "t128x256x64_s3": (128, 256, 64, 8, 3),
    "t256x128x64_s3": (256, 128, 64, 8, 3),
    "t64x64x32_w4_s3": (64, 64, 32, 4, 3),
}
ASSIGNMENT = re.compile(r"^GPU_CONFIG = \{[^}]*\}", re.MULTILINE)


def with_launch(source: str, launch: tuple[int, int, int, int, int]) -> str:
    block_m, block_n, block_k, warps, stages = launch
    line = (f'GPU_CONFIG = {{"BLOCK_M": {block_m}, "BLOCK_N": {block_n}, "BLOCK_K": {block_k}, '
            f'"num_warps": {warps}, "num_stages": {stages}}}')
    changed, count = ASSIGNMENT.subn(line, source)
    if count != 1:
        raise SystemExit(f"expected one GPU_CONFIG assignment, found {count}")
    return changed


def main(root: Path) -> None:
    solved = nbformat.read(str(root / "fast_correct" / NOTEBOOK), as_version=4)
    cell = next(c for c in solved.cells if c.cell_type == "code" and ASSIGNMENT.search(c.source))
    original = cell.source
    for name, launch in LAUNCHES.items():
        cell.source = with_launch(original, launch)
        target = root / name / NOTEBOOK
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(solved, str(target))
    print(f"added {len(LAUNCHES)} Week 2 Day 4 students to {root}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
