"""One notebook's result assembled: the outcome of its run and the judge's verdict scored item by item, or a
result for a notebook that did not run.
"""

from __future__ import annotations

from typing import Any

import nbformat

from grader import GRADER_VERSION
from grader.flow.settings import Settings
from grader.flow.task import Graded
from grader.intake.layout import (
    Submission,
)
from grader.run.execute import Outcome
from grader.run.recording import Plan
from grader.score import results, score
from grader.score.results import NotebookResult
from grader.score.stored import sha256


def _unjudged(outcome: Outcome, verdict: dict[str, Any] | None) -> str:
    if verdict and verdict.get("error"):
        return f"not judged: {verdict['error']}"
    if outcome.status == results.GRADER_ERROR:
        return f"not judged: {outcome.message}"
    if outcome.status != results.OK:
        return f"not judged: the notebook run ended with status {outcome.status} ({outcome.message})"
    return "not judged: the notebook run did not reach the grader's recording cell"


def _result(submission: Submission, graded: Graded, plan: Plan, sanitized: nbformat.NotebookNode,
            settings: Settings, run_seed: int, notes: list[str]) -> NotebookResult:
    outcome, verdict = graded.outcome, graded.verdict
    result = NotebookResult(submission.student, submission.assignment, submission.notebook, outcome.status,
                            outcome.message, submission_sha256=sha256(submission.path),
                            grader_version=GRADER_VERSION, device=settings.device_name,
                            timings=dict(outcome.timings), integrity=notes, sandbox=settings.sandbox_label,
                            run_seed=run_seed)
    on_gpu = settings.device == "gpu"
    result.items = score.items(plan.notebook.key, plan.master, verdict, on_gpu, _unjudged(outcome, verdict))
    result.perf_rows = score.perf_rows(verdict)
    result.code = [{"id": c.metadata.nbgrader["grade_id"], "source": c.source} for c in sanitized.cells
                   if c.get("metadata", {}).get("nbgrader", {}).get("solution")]
    return result


def ungraded_result(submission: Submission, status: str, message: str, settings: Settings) -> NotebookResult:
    """A result for a notebook that did not run: nothing to grade, or a file that is not a notebook."""
    return NotebookResult(submission.student, submission.assignment, submission.notebook, status, message,
                          submission_sha256=sha256(submission.path) if submission.path else "",
                          grader_version=GRADER_VERSION, device=settings.device_name, sandbox=settings.sandbox_label,
                          student_id=submission.student_id, submitted_file=submission.submitted_file,
                          found=submission.found)
