"""The student bundle: the course exactly as students receive it (``make student-bundle``).

It is assembled from an allow-list: the released notebooks of each week, with a README per week written
here for students (the repository's week READMEs are notes for authors), the ``course`` package, what
``make setup`` needs, and the student README and Makefile from ``student/``. Solutions, hidden tests,
the grader, the tests and the examples never go in. After writing, every file is scanned for each
line of every solution and hidden test; a bundle holding one is deleted and the build fails.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

from grader import release
from grader.layout import REPO, course_notebooks

DEFAULT_DEST = REPO / "build" / "student-bundle"
TEMPLATES = REPO / "student"
MARKER = ".student-bundle"  # marks a folder this module wrote, so it may be replaced
MIN_SECRET_CHARS = 8  # shorter lines ("pass", "return c", ")") are not evidence of a leak
_SECRET_BLOCKS = (("BEGIN SOLUTION", "END SOLUTION"), ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS"))
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
_WEEK_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".*", "*.md")
_TITLE = re.compile(r"^#\s+Week\s+\d+,\s*([^:]+):\s*(.+)$")


class BundleError(Exception):
    pass


def secret_lines() -> set[str]:
    """Non-trivial lines found only inside solution or hidden-test blocks of the solution notebooks.

    A line that the notebook also shows outside those blocks (``M, N, K,`` in a kernel's signature) is public.
    """
    hidden: set[str] = set()
    public: set[str] = set()
    for notebook in course_notebooks():
        for cell in release.read(notebook.solution_path).cells:
            inside = None
            for line in cell.source.splitlines():
                if inside is None:
                    inside = next((end for begin, end in _SECRET_BLOCKS if begin in line), None)
                    public.add(line.strip())
                elif inside in line:
                    inside = None
                else:
                    hidden.add(line.strip())
    return {line for line in hidden - public if len(line) >= MIN_SECRET_CHARS}


def file_lines(path: Path) -> list[str]:
    """A file's lines as a reader sees them: a notebook's cell sources and outputs decoded from JSON."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    if path.suffix == ".ipynb":
        strings: list[str] = []

        def walk(node: object) -> None:
            if isinstance(node, str):
                strings.append(node)
            elif isinstance(node, list | dict):
                for child in node.values() if isinstance(node, dict) else node:
                    walk(child)

        walk(json.loads(text))
        text = "\n".join(strings) + "\n" + text
    return [line.strip() for line in text.splitlines()]


def leaks(folder: Path, secrets: set[str] | None = None) -> list[str]:
    """``path: line`` for every secret line found in a file under ``folder``."""
    secrets = secret_lines() if secrets is None else secrets
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        found += [f"{path.relative_to(folder)}: {line}" for line in dict.fromkeys(file_lines(path)) if line in secrets]
    return found


def student_pyproject(text: str) -> str:
    """The course's pyproject.toml, installing only ``course`` (no grader package, script or templates)."""
    edited = text.replace('include = ["course*", "grader*"]', 'include = ["course*"]')
    for table in ("project.scripts", "tool.setuptools.package-data"):  # the table and its lines, up to the next one
        edited = re.sub(rf"(?m)^\[{re.escape(table)}\]\n(?:[^\[\n].*\n|\n)*", "", edited)
    if 'include = ["course*"]' not in edited or re.search(r"\bgrader\b", edited):
        raise BundleError("pyproject.toml changed shape: update student_pyproject in grader/bundle.py")
    return edited


def week_readme(week: Path) -> str:
    """A week's README for students: its notebooks, each with the title of its first heading."""
    number = week.name.removeprefix("week")
    lines = [f"# Week {number}", "",
             "One notebook per day, in this order. To check one, run `make check NB=" + week.name + "/<notebook>`",
             "in the folder above (its README says more).", ""]
    for notebook in sorted(week.glob("*.ipynb"), key=lambda p: (p.name.startswith("bonus"), p.name)):
        first = release.read(notebook).cells[0].source.splitlines()[0]
        title = _TITLE.match(first)
        day = title[1].strip().capitalize() if title else ""
        what = f"{day}, `{notebook.name}`: {title[2]}" if title else f"`{notebook.name}`"
        lines.append(f"- {what}")
    return "\n".join(lines) + "\n"


def _prepare(destination: Path) -> None:
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        if not (destination / MARKER).is_file():
            raise BundleError(f"{destination} is not empty and not an earlier student bundle; choose another DEST")
        shutil.rmtree(destination)
    destination.mkdir(parents=True, exist_ok=True)


def build(destination: Path = DEFAULT_DEST) -> list[Path]:
    """Write the bundle into ``destination``; returns the files written."""
    problems = release.drifted()
    if problems:
        raise BundleError("the student notebooks are not the current release:\n" + "\n".join(problems))
    destination = destination.resolve()
    _prepare(destination)
    for week in sorted(p for p in REPO.glob("week*") if p.is_dir()):
        shutil.copytree(week, destination / week.name, ignore=_WEEK_SKIP)
        (destination / week.name / "README.md").write_text(week_readme(week), encoding="utf-8")
    shutil.copytree(REPO / "course", destination / "course", ignore=_SKIP)
    shutil.copytree(REPO / "requirements", destination / "requirements", ignore=_SKIP)
    shutil.copy(REPO / "environment.yml", destination / "environment.yml")
    pyproject = student_pyproject((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (destination / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    shutil.copy(TEMPLATES / "README.md", destination / "README.md")
    shutil.copy(TEMPLATES / "Makefile", destination / "Makefile")
    shutil.copy(TEMPLATES / ".gitignore", destination / ".gitignore")
    # the autograding workflow, for a course that grades pushes on its own GPU runner (the README says how)
    shutil.copytree(TEMPLATES / ".github", destination / ".github")
    (destination / MARKER).write_text("written by `make student-bundle`; rebuilt in place\n", encoding="utf-8")
    found = leaks(destination)
    if found:
        shutil.rmtree(destination)
        raise BundleError("solution or hidden-test lines would reach students:\n" + "\n".join(found))
    return sorted(p for p in destination.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.bundle", description=__doc__.splitlines()[0])
    parser.add_argument("destination", nargs="?", type=Path, default=DEFAULT_DEST)
    args = parser.parse_args(argv)
    try:
        files = build(args.destination)
    except BundleError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {len(files)} files to {args.destination}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
