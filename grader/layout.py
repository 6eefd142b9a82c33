"""Where things live: the course's notebooks, and a class's submissions on disk."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO / "solutions"
KERNEL_NAME = "gpu-kernels-course"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class CourseNotebook:
    """One released notebook: ``assignment`` is its week folder, ``name`` its file stem."""

    assignment: str
    name: str

    @property
    def solution_path(self) -> Path:
        return SOLUTIONS / self.assignment / f"{self.name}.ipynb"

    @property
    def student_path(self) -> Path:
        return REPO / self.assignment / f"{self.name}.ipynb"

    @property
    def key(self) -> str:
        return f"{self.assignment}/{self.name}"


def course_notebooks() -> list[CourseNotebook]:
    """Every notebook under solutions/<week>/, in a stable order."""
    return [
        CourseNotebook(path.parent.name, path.stem)
        for path in sorted(SOLUTIONS.glob("*/*.ipynb"))
        if not path.name.startswith(".")
    ]


def find_course_notebook(assignment: str, name: str) -> CourseNotebook | None:
    for notebook in course_notebooks():
        if (notebook.assignment, notebook.name) == (assignment, name):
            return notebook
    return None


@dataclass(frozen=True)
class Submission:
    """One submitted file, laid out as ``<root>/<student>/<assignment>/<notebook>.ipynb``."""

    student: str
    assignment: str
    notebook: str
    path: Path | None  # None: the student did not submit this notebook

    @property
    def key(self) -> str:
        return f"{self.student}/{self.assignment}/{self.notebook}"


def valid_id(text: str) -> bool:
    return bool(_ID.match(text))


def find_submissions(root: Path) -> tuple[list[Submission], list[str]]:
    """Submissions under ``root`` plus a missing entry for each expected notebook not submitted.

    Returns (submissions, problems): ``problems`` describes files that are not where a submission
    should be (misnamed notebooks, stray files), so the TA sees them instead of losing them.
    """
    expected = {(nb.assignment, nb.name) for nb in course_notebooks()}
    found: list[Submission] = []
    problems: list[str] = []
    for student_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not valid_id(student_dir.name):
            problems.append(f"{student_dir}: not a valid student id; skipped")
            continue
        submitted = set()
        for path in sorted(student_dir.rglob("*")):
            if not path.is_file() or any(part.startswith(".") for part in path.relative_to(root).parts):
                continue
            relative = path.relative_to(student_dir)
            if path.suffix != ".ipynb" or len(relative.parts) != 2:
                problems.append(f"{path}: not <student>/<assignment>/<notebook>.ipynb; ignored")
                continue
            assignment, name = relative.parts[0], path.stem
            if (assignment, name) not in expected:
                problems.append(f"{path}: {assignment}/{name}.ipynb is not a notebook of this course; ignored")
                continue
            submitted.add((assignment, name))
            found.append(Submission(student_dir.name, assignment, name, path))
        # An assignment folder a student made counts as an attempt: each expected notebook not in it is missing.
        assignments = {a for a, _ in submitted} | {p.name for p in student_dir.iterdir() if p.is_dir()}
        for assignment, name in sorted(expected):
            if assignment in assignments and (assignment, name) not in submitted:
                found.append(Submission(student_dir.name, assignment, name, None))
    return found, problems
