"""The reference solution's pass: run, built and judged first on this GPU (kept in OUT while device, grader
version and benchmark shapes stay), so that its students are judged against its plan and timings.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import nbformat

from grader import GRADER_VERSION
from grader.flow.settings import Settings
from grader.flow.task import Graded, Task
from grader.intake.layout import (
    CourseNotebook,
)
from grader.run.execute import Outcome
from grader.run.recording import kernel_calls, notebook_plan
from grader.score import results


def _reference_problem(graded: Graded, jobs: list[dict[str, Any]]) -> str | None:
    """Why the reference solution's run cannot anchor its students' grades, or None."""
    if graded.outcome.status != results.OK:
        return f"{graded.outcome.status}: {graded.outcome.message}"
    kernels = (graded.verdict or {}).get("kernels") or {}
    for job in jobs:
        if not job["bench_shapes"]:
            continue
        kernel = kernels.get(job["spec"]) or {}
        failed = [m for s in (kernel.get("sets") or {}).values() if not s.get("passed") for m in s.get("messages", [])]
        untimed = [r.get("error") or f"{r['shape']} not timed" for r in (kernel.get("bench") or {}).get("rows") or []
                   if not r.get("student_ms")]
        if not kernel or failed or untimed:
            return f"its kernel {job['spec']} was not replayed and timed on every benchmark shape: " \
                   f"{(failed + untimed + ['no verdict'])[0]}"[:500]
    return None


def _reference_where(out: Path, notebook: CourseNotebook) -> Path:
    return out / "reference" / notebook.assignment / notebook.name


def _reference_stamp(settings: Settings) -> str:
    return f"{settings.device_name}\n{GRADER_VERSION}\n{json.dumps(settings.bench_shapes)}\n"


def _reference_paths(where: Path) -> dict[str, str]:
    return {"export": str(where / "export"), "built": str(where / "built"), "verdict": str(where / "verdict.json")}


def reference_ready(out: Path, notebook: CourseNotebook, settings: Settings) -> bool:
    """Whether OUT holds ``notebook``'s reference solution graded on this device, grader version and benchmark
    shapes (graded here, or by the Slurm executor's references job and copied in)."""
    marker = _reference_where(out, notebook) / "device.txt"
    return marker.is_file() and marker.read_text() == _reference_stamp(settings)


def reference_task(out: Path, notebook: CourseNotebook, settings: Settings, run_seed: int,
                   hide: list[str]) -> Task | None:
    """The run of ``notebook``'s reference solution on this GPU, or None when OUT has it already (same device,
    grader version and benchmark shapes)."""
    where = _reference_where(out, notebook)
    shared = Path(settings.shared_references) if settings.shared_references else None
    if shared is not None and shared.resolve() != out.resolve() and reference_ready(shared, notebook, settings):
        shutil.rmtree(where, ignore_errors=True)
        shutil.copytree(_reference_where(shared, notebook), where, symlinks=True)
        return None
    if not settings.force and reference_ready(out, notebook, settings):
        return None
    where.mkdir(parents=True, exist_ok=True)
    (where / "device.txt").unlink(missing_ok=True)
    solution = nbformat.read(str(notebook.solution_path), as_version=4)
    nbformat.write(solution, str(where / "sanitized.ipynb"))
    return Task("reference", solution, notebook_plan(notebook), where, settings, run_seed, hide, bench_only=True,
                judge_cache=out / "judge-cache")


def reference_result(out: Path, notebook: CourseNotebook, settings: Settings, run_seed: int,
                     graded: Graded | None, log: Callable[[str], None]) -> dict[str, str]:
    """What the students of ``notebook`` are judged against: the reference's paths, or ``{"error": why}`` when
    it could not be graded (then none of them is: grader_error). ``graded``: its run now (None: kept in OUT)."""
    where = _reference_where(out, notebook)
    if graded is None:
        return _reference_paths(where)
    try:
        problem = _reference_problem(graded, kernel_calls(notebook, settings, run_seed, "reference", True))
    except Exception as error:  # the grader's own failure: the same stop
        problem = f"{type(error).__name__}: {error}"
    if problem:
        why = f"the reference solution of {notebook.key} could not be graded on {settings.device_name} " \
              f"({problem}); none of its submissions was graded (see {where})"
        settings.notes.append(why)
        log(f"GRADER ERROR: {why}")
        return {"error": why}
    (where / "device.txt").write_text(_reference_stamp(settings))
    return _reference_paths(where)


def _with_reference(task: Task, reference: dict[str, str]) -> tuple[Task | None, Graded | None]:
    if "error" in reference:
        return None, Graded(Outcome(results.GRADER_ERROR, reference["error"]), None)
    return replace(task, reference=reference), None
