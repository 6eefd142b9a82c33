"""Grade the course notebooks a push changed in a student's repository (the autograding workflow's step).

The grader, its master copies and its hidden tests come from the runner's own checkout of the course; the
student's repository gives only its notebooks, found by the paths the push changed. Each is graded as the TA's
``grade`` would, under the student's name; the feedback pages leave out hidden tests' messages (as ``check``
does), and a Markdown table of the scores goes to the job summary.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from grader.layout import CourseNotebook, course_notebooks
from grader.results import MISSING, NotebookResult


@dataclass(frozen=True)
class Pushed:
    notebooks: list[tuple[Path, CourseNotebook]]  # the student's file, the course notebook it is
    ignored: list[str]  # changed paths that are no course notebook, or are gone


def select(repository: Path, changed: list[str]) -> Pushed:
    """The course notebooks among ``changed`` (paths relative to ``repository``, as ``git diff --name-only``
    prints them) that exist in it; ``weekN/<name>.ipynb`` exactly, so nothing else is taken for one."""
    by_path = {f"{nb.assignment}/{nb.name}.ipynb": nb for nb in course_notebooks()}
    chosen: dict[str, tuple[Path, CourseNotebook]] = {}
    ignored = []
    for line in changed:
        name = line.strip()
        if not name:
            continue
        notebook = by_path.get(str(PurePosixPath(name)))
        path = repository / name
        if notebook is None or not path.is_file():
            ignored.append(name)
        else:
            chosen[notebook.key] = (path, notebook)
    return Pushed(sorted(chosen.values(), key=lambda pair: pair[1].key), ignored)


def stage(pushed: Pushed, submissions: Path, student: str) -> None:
    """``submissions/<student>/<week>/<name>.ipynb``: the layout ``grade`` reads."""
    shutil.rmtree(submissions, ignore_errors=True)
    for path, notebook in pushed.notebooks:
        target = submissions / student / notebook.assignment / f"{notebook.name}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def summary_markdown(results: list[NotebookResult], ignored: list[str], device: str) -> str:
    """The job summary: one row per graded notebook, and what was not graded normally, by name."""
    lines = [f"## Autograder ({device})", ""]
    if not results:
        lines.append("No course notebook changed in this push; nothing was graded.")
    else:
        lines += ["| notebook | status | points | pending |", "| --- | --- | ---: | ---: |"]
        for r in results:
            earned = sum(i.score or 0.0 for i in r.items)
            graded = sum(i.max_score for i in r.items if i.score is not None)
            pending = sum(i.max_score for i in r.items if i.score is None)
            lines.append(f"| {r.assignment}/{r.notebook} | {r.status} | {earned:g} / {graded:g} | {pending:g} |")
        failed = [r for r in results if not r.graded_normally or r.status == MISSING]
        if failed:
            lines += ["", "**Not graded normally:**", ""]
            lines += [f"- {r.assignment}/{r.notebook}: {r.status}: {' '.join(r.summary.split())[:300]}"
                      for r in failed]
    if ignored:
        lines += ["", "Changed but not graded (not a course notebook at its course path, or deleted): "
                  + ", ".join(f"`{name}`" for name in ignored)]
    return "\n".join(lines) + "\n"
