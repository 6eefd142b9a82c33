"""Build the demo class: ``examples/demo_class/<week>/<notebook>/<student>.py`` is one student's answers.

A demo file has a docstring, then sections that each start with ``# %% <grade_id>`` and hold the
full source of that solution cell; a section ``# %% all < solution`` takes every solution cell from
the solution notebook (a student who solved the day as the course did). A file with no sections is
the notebook as shipped. The student's notebook is the released one with those cells replaced, so
the demo class always matches the current release.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from grader.authoring.release import student_version
from grader.intake.layout import REPO, CourseNotebook, course_notebooks

DEMO_CLASS = REPO / "examples" / "demo_class"
FROM_SOLUTION = "all"  # "# %% all < solution"
_SECTION = re.compile(r"^# %% (\S+)(?: < solution)?[ \t]*$", re.MULTILINE)


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
    if answers.pop(FROM_SOLUTION, None) is not None:
        master = nbformat.read(str(notebook.solution_path), as_version=4)
        answers = {**{c.metadata["nbgrader"]["grade_id"]: c.source for c in master.cells
                      if c.metadata.get("nbgrader", {}).get("solution")}, **answers}
    for grade_id, source in answers.items():
        if grade_id not in ids or not ids[grade_id].metadata["nbgrader"].get("solution"):
            raise KeyError(f"{notebook.key} has no solution cell {grade_id!r}")
        ids[grade_id].source = source.rstrip("\n")
    return nb


def demo_files(notebook: CourseNotebook, demo_dir: Path = DEMO_CLASS) -> list[Path]:
    return sorted((demo_dir / notebook.assignment / notebook.name).glob("*.py"))


def build(destination: Path, demo_dir: Path = DEMO_CLASS, keys: set[str] | None = None) -> list[Path]:
    """Write ``<destination>/<student>/<assignment>/<notebook>.ipynb`` for each demo student and notebook
    (only the notebooks whose keys, "week1/day7_fast_matmul", are given, when some are)."""
    written = []
    for notebook in course_notebooks():
        if keys is not None and notebook.key not in keys:
            continue
        for demo_file in demo_files(notebook, demo_dir):
            nb = fill(notebook, parse_answers(demo_file.read_text(encoding="utf-8")))
            path = destination / demo_file.stem / notebook.assignment / f"{notebook.name}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, str(path))
            written.append(path)
    return written
