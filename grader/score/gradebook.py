"""The nbgrader gradebook (SQLite): assignments from the master notebooks, grades from results.

Only the coordinating process writes here. The file is stock nbgrader's, so ``nbgrader export``
and formgrader read it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import sys
import warnings
from pathlib import Path

import nbformat
import nbgrader
from nbformat import NotebookNode
from nbgrader import api
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import SaveAutoGrades, SaveCells
from sqlalchemy.exc import SAWarning

from grader.authoring.release import master_version
from grader.intake.layout import CourseNotebook
from grader.lms.term import Lateness, Term
from grader.score.results import NotebookResult


class GradebookMismatch(RuntimeError):
    """The gradebook was made from notebooks whose graded cells differ from the current ones."""


def _put_alembic_on_path() -> None:
    """nbgrader's Gradebook runs the `alembic` command; find it beside this Python or its package."""
    if shutil.which("alembic"):
        return
    import alembic

    for folder in (Path(sys.executable).parent, Path(alembic.__file__).resolve().parents[1] / "bin"):
        if (folder / "alembic").exists():
            os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
            return


_put_alembic_on_path()
# A new gradebook asks the `alembic` command for nbgrader's schema head (1.8 s a process): a constant of the
# installed nbgrader, asked once per process.
api.get_alembic_version = functools.cache(api.get_alembic_version)


def db_url(out: Path) -> str:
    return f"sqlite:///{(out / 'gradebook.db').resolve()}"


def register(url: str, notebooks: list[CourseNotebook]) -> None:
    """Record each notebook's master cells (sources, checksums, points), as generate_assignment does.

    A new gradebook of the same master notebooks (and nbgrader) is the same file every time, so the first one made
    is kept in a cache (``template_dir``) and later new gradebooks are copies of it: nbgrader writes a new one a
    row at a time, seconds of CPU per OUT."""
    masters = [(notebook, master_version(notebook)) for notebook in notebooks]
    path = Path(url.removeprefix("sqlite:///"))
    template = template_dir() / f"{_template_key(masters)}.db"
    fresh = not path.exists()
    if fresh and template.is_file():
        with contextlib.suppress(OSError):
            shutil.copyfile(template, path)
            return
    with Gradebook(url) as gb:
        for assignment in sorted({nb.assignment for nb, _ in masters}):
            gb.update_or_create_assignment(assignment)
    for notebook, master in masters:
        resources = {"nbgrader": {"notebook": notebook.name, "assignment": notebook.assignment, "db_url": url}}
        try:
            SaveCells().preprocess(master, resources)
        except RuntimeError as error:  # nbgrader refuses to change the cells of a graded notebook
            raise GradebookMismatch(
                f"{url} holds grades for another version of {notebook.key} ({error}). Grade into a new "
                "OUT folder, or move the old gradebook.db away to regrade everything."
            ) from error
    if fresh:
        _keep_template(path, template)


def template_dir() -> Path:
    """Where new gradebooks are kept for copying: $GRADER_CACHE, else the user's cache folder."""
    base = os.environ.get("GRADER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpu-kernels-course")
    return Path(base) / "gradebooks"


def _template_key(masters: list[tuple[CourseNotebook, NotebookNode]]) -> str:
    digest = hashlib.sha256(f"nbgrader {nbgrader.__version__}\n".encode())
    for notebook, master in masters:
        digest.update(f"{notebook.assignment}/{notebook.name}\n".encode() + nbformat.writes(master).encode())
    return digest.hexdigest()[:32]


def _keep_template(made: Path, template: Path) -> None:
    """A copy of the gradebook just made, written whole before it is named (a cache that cannot be written is
    only slower)."""
    with contextlib.suppress(OSError):
        template.parent.mkdir(parents=True, exist_ok=True)
        partial = template.with_suffix(f".{os.getpid()}.part")
        shutil.copyfile(made, partial)
        os.replace(partial, template)


def record(url: str, result: NotebookResult, executed: NotebookNode | None, book: Gradebook | None = None) -> None:
    """Store one notebook's grades: nbgrader's autogrades first, then the grader's item scores. ``book``: an open
    gradebook of ``url`` to use (opening one costs tens of milliseconds: a batch of missing notebooks shares one)."""
    with _opened(url, book) as gb, warnings.catch_warnings():
        # nbgrader's own autoflush while creating a submission warns harmlessly (SQLAlchemy SAWarning).
        warnings.simplefilter("ignore", SAWarning)
        try:  # a student's other notebooks made the submission already: one query instead of two updates
            gb.find_submission_notebook(result.notebook, result.assignment, result.student)
        except MissingEntry:
            gb.update_or_create_student(result.student)
            gb.update_or_create_submission(result.assignment, result.student)
    if executed is not None:
        resources = {"nbgrader": {"notebook": result.notebook, "assignment": result.assignment,
                                  "student": result.student, "db_url": url}}
        SaveAutoGrades().preprocess(executed, resources)
    scored = {item.item: item for item in result.items}
    with _opened(url, book) as gb:
        submission = gb.find_submission_notebook(result.notebook, result.assignment, result.student)
        # Each grade with its cell's name in one query (``Grade.name`` loads its cell, a query per grade).
        grades = gb.db.query(api.Grade, api.BaseCell.name).join(api.BaseCell, api.Grade.cell_id == api.BaseCell.id) \
            .filter(api.Grade.notebook_id == submission.id)
        for grade, name in grades:
            item = scored.get(name)
            # Cells without an item (the notebook never ran) score 0, as nbgrader does for missing work.
            grade.auto_score = item.score if item else 0.0
            grade.needs_manual_grade = item is not None and item.score is None
        gb.db.commit()


def _opened(url: str, book: Gradebook | None) -> contextlib.AbstractContextManager[Gradebook]:
    return contextlib.nullcontext(book) if book is not None else Gradebook(url)


def record_lateness(url: str, all_results: list[NotebookResult], term: Term,
                    found: dict[tuple[str, str, str], Lateness]) -> None:
    """Write the term into the gradebook as nbgrader keeps it, so a stock ``nbgrader export`` shows the raw score,
    the late penalty and the final score: each assignment's ``duedate``, each submission's ``timestamp`` (its latest
    notebook's) and ``extension``, and each notebook's ``late_submission_penalty``. ``found``: what
    ``grader.lms.term.apply`` returned for these results."""
    with Gradebook(url) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        for assignment in gb.assignments:
            gb.update_or_create_assignment(assignment.name, duedate=term.due.get(assignment.name))
        by_submission: dict[tuple[str, str], list[NotebookResult]] = {}
        for result in all_results:
            by_submission.setdefault((result.student_id, result.assignment), []).append(result)
        for (student_id, assignment), mine in by_submission.items():
            try:
                submission = gb.find_submission(assignment, student_id)
            except MissingEntry:
                continue
            times = [found[r.student_id, r.assignment, r.notebook].submitted for r in mine]
            known = [t for t in times if t is not None]
            submission.timestamp = max(known).replace(tzinfo=None) if known else None
            due, _ = term.due_for(mine[0].student, assignment, student_id)
            base = term.due.get(assignment)
            submission.extension = due - base if due is not None and base is not None and due != base else None
            for result in mine:
                try:
                    gb.find_submission_notebook(result.notebook, assignment, student_id).late_submission_penalty = \
                        result.late_penalty
                except MissingEntry:
                    continue
        gb.db.commit()
