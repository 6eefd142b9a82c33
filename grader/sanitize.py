"""Sanitize a submission: restore locked and test cells from the gradebook's master copy.

nbgrader's own preprocessors do the work (OverwriteCells puts back the source of every locked or
test cell, hidden tests included, and re-adds deleted grade cells). What the student changed in
those cells, compared with the notebook they were given, is kept as notes for the feedback page.
A file that is not a readable notebook becomes a status, not an exception.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import nbformat
from nbformat import NotebookNode
from nbgrader.preprocessors import (
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    OverwriteCells,
    OverwriteKernelspec,
)

from grader import results
from grader.layout import find_course_notebook
from grader.release import NBFORMAT_VERSION, student_version


@dataclass
class Sanitized:
    status: str
    message: str = ""
    notebook: NotebookNode | None = None
    notes: list[str] = field(default_factory=list)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def read_submission(path: Path) -> tuple[NotebookNode | None, str]:
    """The notebook, or None and why it could not be read."""
    try:
        nb = nbformat.read(str(path), as_version=NBFORMAT_VERSION)
        nbformat.validate(nb)
    except Exception as error:  # JSON, schema and encoding errors all mean "not a notebook"
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return None, f"not a readable Jupyter notebook ({type(error).__name__}: {first_line[:200]})"
    return nb, ""


@cache
def _released_cells(assignment: str, notebook: str) -> dict[str, NotebookNode]:
    course_notebook = find_course_notebook(assignment, notebook)
    if course_notebook is None:
        return {}
    return {c.metadata.nbgrader["grade_id"]: c for c in student_version(course_notebook).cells
            if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")}


def tampering(nb: NotebookNode, assignment: str, notebook: str) -> list[str]:
    """What the student changed in cells they may not change, compared with the notebook they received."""
    released = _released_cells(assignment, notebook)
    submitted = {c.metadata.nbgrader["grade_id"]: c for c in nb.cells
                 if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")}
    notes = []
    for grade_id, cell in released.items():
        if not cell.metadata.nbgrader.get("locked"):
            continue
        mine = submitted.get(grade_id)
        if mine is None:
            notes.append(f"cell {grade_id} was deleted (or its metadata removed); the grader put it back")
        elif mine.cell_type != cell.cell_type:
            notes.append(f"cell {grade_id} was turned into {mine.cell_type}; the grader restored it")
        elif mine.source != cell.source:
            notes.append(f"cell {grade_id} was edited; the grader restored the original")
    return notes


def sanitize(path: Path, assignment: str, notebook: str, student: str, db_url: str) -> Sanitized:
    nb, problem = read_submission(path)
    if nb is None:
        return Sanitized(results.CORRUPT, problem)
    notes = tampering(nb, assignment, notebook)
    collector = _Collect()
    log = logging.getLogger(f"grader.sanitize.{student}.{assignment}.{notebook}")
    log.propagate = False
    log.addHandler(collector)
    resources = {"nbgrader": {"notebook": notebook, "assignment": assignment, "student": student,
                              "db_url": db_url}}
    preprocessors = [ClearOutput(log=log), DeduplicateIds(log=log), OverwriteKernelspec(log=log),
                     OverwriteCells(log=log, add_missing_cells=True), CheckCellMetadata(log=log)]
    try:
        for preprocessor in preprocessors:
            nb, resources = preprocessor.preprocess(nb, resources)
    except Exception as error:  # e.g. metadata so broken that nbgrader refuses the notebook
        return Sanitized(results.CORRUPT, f"nbgrader could not sanitize it: {type(error).__name__}: {error}"[:500])
    finally:
        log.removeHandler(collector)
    # nbgrader's own warnings also fire for the hidden tests it restores, which students never had;
    # only its other complaints are kept beside the comparison with the released notebook.
    ignored = ("has changed!", "Missing grade cell")
    notes += [m for m in collector.messages if not any(text in m for text in ignored)]
    return Sanitized(results.OK, notebook=nb, notes=notes)
