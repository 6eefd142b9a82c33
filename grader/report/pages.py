"""Where a student's feedback page lives in OUT, for the pages that write it and the pages and zips that link
to it.
"""

from __future__ import annotations

from pathlib import Path

from grader.score.results import NotebookResult


def student_id(result: NotebookResult) -> str:
    return getattr(result, "student_id", "") or result.student


def page_path(out: Path, result: NotebookResult) -> Path:
    return out / "feedback" / student_id(result) / f"{result.assignment}-{result.notebook}.html"
