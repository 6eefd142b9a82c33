"""Where each notebook's result and run live in OUT, whether a stored result is still up to date (same
submission, grader version and device), and results written and read back.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from dataclasses import replace
from pathlib import Path, PurePosixPath

import nbformat
from nbgrader.api import Gradebook
from sqlalchemy.exc import SAWarning

from grader import GRADER_VERSION
from grader.flow.settings import Settings
from grader.intake.layout import (
    Submission,
)
from grader.lms import term
from grader.score import gradebook, results
from grader.score.results import NotebookResult


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def result_path(out: Path, submission: Submission) -> Path:
    return out / "results" / submission.student_id / submission.assignment / f"{submission.notebook}.json"


def run_dir(out: Path, submission: Submission) -> Path:
    return out / "runs" / submission.student_id / submission.assignment / submission.notebook


def _up_to_date(out: Path, submission: Submission, settings: Settings) -> bool:
    path = result_path(out, submission)
    if settings.force or not path.exists() or submission.path is None:
        return False
    try:
        old = results.read_json(path)
    except (OSError, ValueError):
        return False
    return (old.get("status") != results.GRADER_ERROR  # a grader fault is tried again
            and old.get("grader_version") == GRADER_VERSION and old.get("device") == settings.device_name
            and old.get("submission_sha256") == sha256(submission.path)
            and old.get("submitted_file", submission.submitted_file) == submission.submitted_file
            and old.get("student") == submission.student)


def record_result(out: Path, submission: Submission, result: NotebookResult, notebook: nbformat.NotebookNode | None,
                  book: Gradebook | None = None) -> None:
    """One notebook's result into OUT's gradebook (``book``: an open one of it) and OUT/results."""
    url = gradebook.db_url(out)
    result.student_id, result.submitted_file = submission.student_id, submission.submitted_file
    result.found = submission.found
    if submission.path is not None:
        student_dir = submission.path.parents[len(PurePosixPath(submission.submitted_file).parts) - 1]
        result.timestamp_txt, result.file_mtime = term.submission_times(student_dir, submission.assignment,
                                                                         submission.path)
    _name_student(url, result)
    gradebook.record(url, replace(result, student=result.student_id), notebook, book)
    results.write_json_atomic(result_path(out, submission), result.to_json())


def _name_student(url: str, result: NotebookResult) -> None:
    """Give a student whose folder name is not an id that name in the gradebook (``nbgrader export``'s
    last_name column; nbgrader writes that CSV without quoting, so commas and line breaks become spaces)."""
    if result.student == result.student_id:
        return
    with Gradebook(url) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        gb.update_or_create_student(result.student_id, last_name=re.sub(r'[,"\r\n]', " ", result.student)[:128])


def load_results(out: Path) -> list[NotebookResult]:
    found = []
    for path in sorted((out / "results").glob("*/*/*.json")):
        found.append(NotebookResult.from_json(results.read_json(path)))
    return found
