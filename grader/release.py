"""Release: solution notebooks -> student notebooks, through nbgrader's own preprocessors.

``master_version`` is what nbgrader's generate_assignment stores in the gradebook (solutions
replaced by stubs, hidden tests still in, checksums recorded); ``student_version`` is what
students get (hidden tests removed, checksums recomputed). Both are deterministic, so a test can
regenerate the student notebooks and compare them with the committed ones.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from nbgrader.preprocessors import (
    CheckCellMetadata,
    ClearHiddenTests,
    ClearMarkScheme,
    ClearOutput,
    ClearSolutions,
    ComputeChecksums,
    LockCells,
)

from grader.layout import CourseNotebook, course_notebooks

NBFORMAT_VERSION = 4
HIDDEN_BEGIN = "BEGIN HIDDEN TESTS"  # matched as nbgrader's ClearHiddenTests matches it
HIDDEN_DEFAULT_NOTE = "the grader checks the value of your answer"


def _apply(preprocessors: list[Preprocessor], nb: NotebookNode, notebook: CourseNotebook) -> NotebookNode:
    resources = {"nbgrader": {"notebook": notebook.name, "assignment": notebook.assignment}}
    for preprocessor in preprocessors:
        nb, resources = preprocessor.preprocess(nb, resources)
    return nb


def read(path: Path) -> NotebookNode:
    return nbformat.read(str(path), as_version=NBFORMAT_VERSION)


def master_version(notebook: CourseNotebook) -> NotebookNode:
    """The instructor's master copy: stubs in the solution regions, hidden tests kept."""
    nb = read(notebook.solution_path)
    return _apply([LockCells(), ClearSolutions(), ClearOutput(), CheckCellMetadata(), ComputeChecksums()],
                  nb, notebook)


def hidden_test_notes(nb: NotebookNode) -> dict[str, str]:
    """Grade id -> what that test cell's hidden tests check, in the words of the comments just above them.

    Only those comments, which stay in the student's copy anyway; never the hidden code.
    """
    notes = {}
    for cell in nb.cells:
        if cell.cell_type != "code" or not cell.metadata.get("nbgrader", {}).get("grade"):
            continue
        lines = cell.source.splitlines()
        said = []
        for start in (i for i, line in enumerate(lines) if HIDDEN_BEGIN in line):
            above = []
            for line in reversed(lines[:start]):
                if not line.strip().startswith("#"):
                    break
                above.insert(0, line.strip().lstrip("#").strip())
            said.append(" ".join(part for part in above if part))
        if said:
            notes[cell.metadata.nbgrader["grade_id"]] = " ".join(s for s in said if s) or HIDDEN_DEFAULT_NOTE
    return notes


def student_version(notebook: CourseNotebook) -> NotebookNode:
    """The notebook students receive; ``metadata.course.hidden_tests`` says which cells the grader extends."""
    master = master_version(notebook)
    notes = hidden_test_notes(master)
    nb = _apply([ClearHiddenTests(), ClearMarkScheme(), ComputeChecksums(), CheckCellMetadata()],
                master, notebook)
    if notes:
        nb.metadata["course"] = {"hidden_tests": notes}
    return nb


def serialize(nb: NotebookNode) -> str:
    return nbformat.writes(nb, version=NBFORMAT_VERSION) + "\n"


def release(notebooks: list[CourseNotebook] | None = None) -> list[Path]:
    """Write every student notebook from its solution; returns the paths written."""
    written = []
    for notebook in notebooks or course_notebooks():
        notebook.student_path.parent.mkdir(parents=True, exist_ok=True)
        notebook.student_path.write_text(serialize(student_version(notebook)), encoding="utf-8")
        written.append(notebook.student_path)
    return written


def drifted(notebooks: list[CourseNotebook] | None = None) -> list[str]:
    """Student notebooks that are missing or differ from what release would write now."""
    problems = []
    for notebook in notebooks or course_notebooks():
        path = notebook.student_path
        if not path.exists():
            problems.append(f"{path} is missing: run `make release`")
        elif path.read_text(encoding="utf-8") != serialize(student_version(notebook)):
            problems.append(f"{path} differs from its solution's release: run `make release`")
    return problems
