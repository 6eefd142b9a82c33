"""Grading a student's pushed notebooks, and the Markdown summary a push gets.

Two callers: the push service (``grader/push/push_service.py``), which grades the notebooks an autograding job hands
it, and ``python -m grader pushed``, which grades the course notebooks among a list of paths of a checkout on
this machine. Either way the grader, its master copies and its hidden tests are this checkout's; a student's
repository gives only notebook files, and only regular ones (a link is never followed). Each is graded as the
TA's ``grade`` would, under the student's name; the feedback pages leave out hidden tests' messages (as
``check`` does).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from grader.intake.layout import MAX_NOTEBOOK_BYTES, CourseNotebook, course_notebooks
from grader.score.results import GRADER_ERROR, MISSING, NotebookResult

if TYPE_CHECKING:
    from grader.flow.settings import Settings

FEEDBACK_NOTE = ("These scores are feedback, not a grade: the grade of record is the course's own grading of the "
                 "notebooks you submit.")


@dataclass(frozen=True)
class Pushed:
    notebooks: list[tuple[CourseNotebook, bytes]]  # the course notebook, the student's file's content
    ignored: list[tuple[str, str]]  # a listed path not graded, and why


def select(repository: Path, changed: Sequence[str]) -> Pushed:
    """The course notebooks among ``changed`` (paths relative to ``repository``, as ``git diff --name-only``
    prints them): ``weekN/<name>.ipynb`` exactly, each a regular file in a real folder (never through a link)."""
    by_path = {f"{nb.assignment}/{nb.name}.ipynb": nb for nb in course_notebooks()}
    chosen: dict[str, tuple[CourseNotebook, bytes]] = {}
    ignored = []
    for line in changed:
        name = line.strip()
        if not name:
            continue
        notebook = by_path.get(str(PurePosixPath(name)))
        if notebook is None:
            ignored.append((name, "not a course notebook at its course path"))
            continue
        content, why = _regular_file(repository, notebook)
        if content is None:
            ignored.append((name, why))
        else:
            chosen[notebook.key] = (notebook, content)
    return Pushed(sorted(chosen.values(), key=lambda pair: pair[0].key), ignored)


def _regular_file(repository: Path, notebook: CourseNotebook) -> tuple[bytes | None, str]:
    """The notebook's bytes, or None and why: read only from a regular file under a real week folder."""
    try:
        if not stat.S_ISDIR(os.lstat(repository / notebook.assignment).st_mode):
            return None, f"{notebook.assignment} is not a folder (a link?)"
        fd = os.open(repository / notebook.assignment / f"{notebook.name}.ipynb",
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, "deleted"
    except OSError as error:
        if error.errno == errno.ELOOP:
            return None, "a symbolic link, not a notebook file (links are never followed)"
        return None, f"cannot be read: {error.strerror}"
    with os.fdopen(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            return None, "not a regular file"
        content = stream.read(MAX_NOTEBOOK_BYTES + 1)
    if len(content) > MAX_NOTEBOOK_BYTES:
        return None, f"larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB"
    return content, ""


def stage(notebooks: Sequence[tuple[CourseNotebook, bytes]], submissions: Path, student: str) -> None:
    """``submissions/<student>/<week>/<name>.ipynb``: the layout ``grade`` reads."""
    shutil.rmtree(submissions, ignore_errors=True)
    for notebook, content in notebooks:
        target = submissions / student / notebook.assignment / f"{notebook.name}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def grade_notebooks(notebooks: Sequence[tuple[CourseNotebook, bytes]], student: str, out: Path, settings: Settings,
                    log: Callable[[str], None] = print,
                    progress: Callable[[int, int, NotebookResult], None] | None = None) -> list[NotebookResult]:
    """Grade ``notebooks`` as ``student``'s into ``out``: the
    results of those notebooks, hidden tests' messages left out, with their feedback pages under ``out``."""
    from grader.pipeline import grade
    from grader.report.feedback import write_pages
    from grader.report.student_view import without_hidden_material

    stage(notebooks, out / "submission", student)
    graded = grade(out / "submission", out, settings, log=log, progress=progress)
    keys = {(nb.assignment, nb.name) for nb, _ in notebooks}
    results = sorted((r for r in graded if (r.assignment, r.notebook) in keys),
                     key=lambda r: (r.assignment, r.notebook))
    for result in results:
        without_hidden_material(result)
    write_pages(results, out)
    return results


def not_graded_normally(results: Sequence[NotebookResult]) -> list[NotebookResult]:
    return [r for r in results if not r.graded_normally or r.status == MISSING]


def graded_to_a_result(results: Sequence[NotebookResult]) -> set[str]:
    """``weekN/<name>.ipynb`` of each notebook graded to the student's result (not a grader's failure)."""
    return {f"{r.assignment}/{r.notebook}.ipynb" for r in results if r.status not in (GRADER_ERROR, MISSING)}


def summary_markdown(results: Sequence[NotebookResult], device: str, *, notes: Sequence[str] = (),
                     skipped: Sequence[tuple[str, str]] = (), unchanged: Sequence[str] = (),
                     nothing: str = "No course notebook changed in this push; nothing was graded.") -> str:
    """The job summary: ``notes`` first, one row per graded notebook, what was not graded normally, each path
    not graded with why, and the notebooks left unchanged since they were last graded."""
    lines = [f"## Autograder ({device})", ""]
    for note in notes:
        lines += [note, ""]
    if not results:
        lines.append(nothing)
    else:
        lines += ["| notebook | status | points | pending |", "| --- | --- | ---: | ---: |"]
        for r in results:
            earned = sum(i.score or 0.0 for i in r.items)
            graded = sum(i.max_score for i in r.items if i.score is not None)
            pending = sum(i.max_score for i in r.items if i.score is None)
            lines.append(f"| {r.assignment}/{r.notebook} | {r.status} | {earned:g} / {graded:g} | {pending:g} |")
        failed = not_graded_normally(results)
        if failed:
            lines += ["", "**Not graded normally:**", ""]
            lines += [f"- {r.assignment}/{r.notebook}: {r.status}: {' '.join(r.summary.split())[:300]}"
                      for r in failed]
    if skipped:
        lines += ["", "**Not graded:**", ""]
        lines += [f"- `{path}`: {why}" for path, why in skipped]
    if unchanged:
        lines += ["", "Unchanged since they were last graded, so not graded again: "
                  + ", ".join(f"`{path}`" for path in unchanged) + "."]
    lines += ["", FEEDBACK_NOTE]
    return "\n".join(lines) + "\n"
