"""What the push service last graded on each branch: the commit, and the blob of each course notebook graded then.

The service keeps it (the job can neither read nor write it), one JSON file per (repository, branch), and writes it
only once a grading has finished. So a run that was cancelled, never ran, or stopped before handing its notebooks
over loses nothing: the next request grades every notebook whose blob differs from the one recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from grader.push.push_request import MAX_COMMITS, Notebook, Request


@dataclass(frozen=True)
class BranchState:
    commit: str = ""  # "" when nothing was graded on this branch yet
    notebooks: dict[str, str] = field(default_factory=dict)  # weekN/<name>.ipynb -> the blob id graded


def path_for(root: Path, repository: str, ref: str) -> Path:
    """The branch's file: named by a hash, since a branch name may hold anything a file name cannot."""
    key = hashlib.sha256(f"{repository.casefold()}\0{ref}".encode()).hexdigest()[:40]
    return root / f"{key}.json"


def load(root: Path, repository: str, ref: str) -> BranchState:
    try:
        data = json.loads(path_for(root, repository, ref).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return BranchState()
    return BranchState(str(data["commit"]), {str(k): str(v) for k, v in data["notebooks"].items()})


def save(root: Path, repository: str, ref: str, state: BranchState) -> None:
    """Written whole or not at all (a temporary file renamed over the old one)."""
    path = path_for(root, repository, ref)
    record = {"repository": repository, "ref": ref, "commit": state.commit, "notebooks": state.notebooks,
              "recorded": datetime.now(UTC).isoformat(timespec="seconds")}
    fd, temporary = tempfile.mkstemp(dir=root, prefix=".state-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            json.dump(record, stream, indent=1, sort_keys=True)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def changed(state: BranchState, notebooks: Iterable[Notebook]) -> list[Notebook]:
    """The notebooks to grade: every one whose blob is not the one last graded (all of them the first time)."""
    return [notebook for notebook in notebooks if state.notebooks.get(notebook.path) != notebook.blob]


def history_note(state: BranchState, request: Request) -> str:
    """A plain sentence when the last graded commit is not an ancestor of the pushed one ("" when it is)."""
    if not state.commit or state.commit in request.commits:
        return ""
    where = (f"among the last {MAX_COMMITS} commits of this branch's history" if len(request.commits) >= MAX_COMMITS
             else "in this branch's history")
    return (f"The last graded commit {state.commit[:7]} is not {where} (a force-push?): every notebook that "
            "differs from the last graded version is graded.")


def recorded(state: BranchState, request: Request, graded: set[str]) -> BranchState:
    """The state once ``request`` is graded: its commit, and for each of its course notebooks the blob now graded
    (``graded`` holds the paths graded to a result) or unchanged; one the grader failed on keeps the blob recorded
    before, so the next request grades it again. A notebook no longer in the commit is dropped."""
    notebooks = {}
    for notebook in request.notebooks:
        if notebook.path in graded or state.notebooks.get(notebook.path) == notebook.blob:
            notebooks[notebook.path] = notebook.blob
        elif notebook.path in state.notebooks:
            notebooks[notebook.path] = state.notebooks[notebook.path]
    return BranchState(request.sha, notebooks)
