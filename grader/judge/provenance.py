"""Where a launched kernel was written: an exercise may count only kernels defined in its own answer cells.

A spec's ``kernel_cells`` names answer cells by grade id (``course.spec.ExerciseSpec``). In a notebook
with several graded versions of one kernel, a wrapper could launch an earlier version's kernel under a
later version's name and collect its correctness points. The judge refuses such a launch: a CUDA C
launch counts only when its source digest is that of a string constant at the top level of one of
those cells, a Triton launch only when its kernel is a decorated function defined at the top level of
one of them. Read from the sanitized notebook's syntax (whose grade ids are the master's); nothing runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grader.kernel_build import build_cuda, build_kernels


@dataclass
class Allowed:
    """The kernels the named cells define: CUDA sources by SHA-256, Triton kernels by name."""

    cells: tuple[str, ...]
    cuda: set[str] = field(default_factory=set)
    triton: set[str] = field(default_factory=set)


def allowed_kernels(cells: list[Any], grade_ids: tuple[str, ...]) -> Allowed:
    """What the notebook cells with these grade ids define (``cells``: nbformat cells)."""
    allowed = Allowed(tuple(grade_ids))
    for cell in cells:
        grade_id = (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
        if cell.get("cell_type") != "code" or grade_id not in grade_ids:
            continue
        allowed.cuda |= set(build_cuda.string_constants([cell["source"]]))
        allowed.triton |= set(build_kernels.read_definitions([cell["source"]]).jit_options)
    return allowed


def foreign_launch(plan: Any, allowed: Allowed) -> str | None:
    """Why a launch of ``plan`` does not count for the exercise, or None when every launch does."""
    launches = plan.get("launches") if isinstance(plan, dict) else None
    where = " or ".join(repr(c) for c in allowed.cells)
    for launch in launches if isinstance(launches, list) else []:
        if not isinstance(launch, dict):
            return "a launch of the plan is malformed"
        name = str(launch.get("kernel"))[:80]
        if isinstance(launch.get("cuda"), dict):
            if launch["cuda"].get("source_sha256") not in allowed.cuda:
                return (f"CUDA kernel {name} was launched, but its source is not a string constant of the answer "
                        f"cell {where}: this exercise counts only a kernel written in its own cell")
        elif name not in allowed.triton:
            return (f"Triton kernel {name} was launched, but it is not defined in the answer cell {where}: this "
                    "exercise counts only a kernel written in its own cell")
    return None
