"""One notebook between the stages: the task (a submission or the reference solution), what a stage hands the
next, the sandbox job it runs as, and a grader fault's outcome.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

from grader.flow.settings import Settings
from grader.intake.layout import (
    REPO,
)
from grader.run.execute import Job, Outcome
from grader.run.recording import Plan
from grader.score import results
from grader.wall import scratch_folders


@dataclass
class Task:
    """One notebook to run, build and judge (the reference solution or a submission)."""

    key: str  # the student id (or "reference")
    notebook: nbformat.NotebookNode  # sanitized
    plan: Plan
    run: Path  # the run's folder in OUT
    settings: Settings
    run_seed: int
    hide: list[str]
    reference: dict[str, str] | None = None
    bench_only: bool = False
    gpu: str | None = None
    judge_cache: Path | None = None


@dataclass
class Graded:
    outcome: Outcome
    verdict: dict[str, Any] | None
    run_status: str = ""  # the notebook run's own status, where a grader fault made the outcome grader_error


def _job(task: Task, scratch: Path, log: Path) -> Job:
    s = task.settings
    return Job(notebook=str(scratch / "submission.ipynb"), workdir=str(scratch), device=s.device, gpu=task.gpu,
               cell_timeout=s.cell_timeout, notebook_timeout=s.notebook_timeout, memory_bytes=s.memory_bytes,
               output_bytes=s.output_bytes, scratch_bytes=s.scratch_bytes, cpus=s.cpus_per_run, hide=task.hide,
               sandbox=s.sandbox, log=str(log))


def _keep(scratch: Path, run: Path) -> None:
    """Copy what the run produced out of its scratch directory (regular files only, links never followed)."""
    for name in ("executed.ipynb", "outcome.json", "export"):
        scratch_folders.copy_out(scratch / name, run / name)


def grader_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a grader subprocess started with -P from a scratch folder: it finds this grader as we did."""
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)}


def _grader_fault(outcome: Outcome, problem: str) -> Outcome:
    """The outcome of a notebook the grader failed (not the student): grader_error, saying what the run did."""
    ran = "" if outcome.status == results.OK else f" (the notebook run itself ended {outcome.status}: " \
                                                  f"{outcome.message})"
    return Outcome(results.GRADER_ERROR, f"a grader fault, not the notebook's: {problem}{ran}", outcome.timings)


@dataclass
class Staged:
    """One notebook between its stages: what its run gave, and what the next stage needs."""

    outcome: Outcome
    jobs: list[dict[str, Any]]
    exported: dict[str, Any]
    replay_error: str | None = None
    failed: Graded | None = None  # set when a stage failed the grader: nothing left to judge
