"""Build the demo class: each file in examples/demo_class/ is one student's answers.

A demo file has a docstring, then sections that each start with ``# %% <grade_id>`` and hold the
full source of that solution cell. The student's notebook is the released one with those cells
replaced, so the demo class always matches the current release.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from grader.layout import REPO, CourseNotebook, course_notebooks
from grader.release import student_version

DEMO_CLASS = REPO / "examples" / "demo_class"
_SECTION = re.compile(r"^# %% (\S+)[ \t]*$", re.MULTILINE)


def parse_answers(text: str) -> dict[str, str]:
    """Map grade id -> cell source from a demo file."""
    marks = list(_SECTION.finditer(text))
    answers = {}
    ends = [m.start() for m in marks[1:]] + [len(text)] if marks else []
    for mark, end in zip(marks, ends, strict=True):
        answers[mark.group(1)] = text[mark.end():end].strip("\n") + "\n"
    return answers


def fill(notebook: CourseNotebook, answers: dict[str, str]) -> nbformat.NotebookNode:
    nb = student_version(notebook)
    ids = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    for grade_id, source in answers.items():
        if grade_id not in ids or not ids[grade_id].metadata["nbgrader"].get("solution"):
            raise KeyError(f"{notebook.key} has no solution cell {grade_id!r}")
        ids[grade_id].source = source.rstrip("\n")
    return nb


def build(destination: Path, demo_dir: Path = DEMO_CLASS) -> list[Path]:
    """Write ``<destination>/<student>/<assignment>/<notebook>.ipynb`` for each demo student."""
    notebook = next(nb for nb in course_notebooks() if nb.key == "week1/day7_fast_matmul")
    written = []
    for demo_file in sorted(demo_dir.glob("*.py")):
        nb = fill(notebook, parse_answers(demo_file.read_text(encoding="utf-8")))
        path = destination / demo_file.stem / notebook.assignment / f"{notebook.name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(path))
        written.append(path)
    return written
