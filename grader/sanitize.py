"""Sanitize a submission: restore locked and test cells from the gradebook's master copy.

nbgrader's own preprocessors do the work (OverwriteCells puts back the source of every locked or
test cell, and re-adds deleted grade cells); their warnings about edited, re-typed or deleted
cells are kept as integrity notes for the feedback page. A file that is not a readable notebook
becomes a status, not an exception.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
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
from grader.release import NBFORMAT_VERSION


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


def sanitize(path: Path, assignment: str, notebook: str, student: str, db_url: str) -> Sanitized:
    nb, problem = read_submission(path)
    if nb is None:
        return Sanitized(results.CORRUPT, problem)
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
    return Sanitized(results.OK, notebook=nb, notes=collector.messages)
