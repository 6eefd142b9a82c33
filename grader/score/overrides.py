"""A TA's own score for one graded item: nbgrader's ``manual_score`` on the item's grade, as formgrader sets it.

The score lives in OUT/gradebook.db, where nbgrader keeps it (so ``nbgrader export`` and formgrader show it too);
the reason, and the automatic score it replaced, in OUT/overrides.json, the grader's own record. A manual score set
in formgrader (no reason) counts the same. Every report is written from the stored results with the overrides put
on them (``apply``): the item's score becomes the TA's and its message says so, with the reason. A regrade writes
``auto_score`` only, so the override stays; when the automatic score under it changed, ``apply`` says so.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from nbgrader import api
from nbgrader.api import Gradebook
from sqlalchemy.exc import SAWarning

from grader.lms.term import closest
from grader.report.tables import items_of, points_text
from grader.score import results
from grader.score.gradebook import db_url
from grader.score.results import NotebookResult

RECORD = "overrides.json"


class OverrideError(ValueError):
    """The override names something the class does not have; the message names the closest."""


@dataclass(frozen=True)
class Override:
    score: float
    why: str  # "" when set elsewhere (formgrader)
    auto_score: float | None  # the automatic score when the override was set (None: not known)


def _key(student_id: str, assignment: str, notebook: str, item: str) -> str:
    return f"{student_id}/{assignment}/{notebook}/{item}"


def read_record(out: Path) -> dict[str, dict[str, object]]:
    path = out / RECORD
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _find(all_results: list[NotebookResult], student: str, notebook: str) -> NotebookResult:
    students = {r.student for r in all_results} | {r.student_id for r in all_results}
    if student not in students:
        raise OverrideError(f"no student is called {student!r}{closest(student, students)}")
    mine = [r for r in all_results if student in (r.student, r.student_id)]
    keys = {f"{r.assignment}/{r.notebook}" for r in mine}
    if notebook not in keys:
        raise OverrideError(f"{student} has no notebook {notebook!r}{closest(notebook, keys)}")
    return next(r for r in mine if f"{r.assignment}/{r.notebook}" == notebook)


def set_override(out: Path, all_results: list[NotebookResult], student: str, notebook: str, item: str,
                 score: float, why: str) -> Override:
    """Store ``score`` as the item's manual score in OUT's gradebook and ``why`` in OUT/overrides.json."""
    result = _find(all_results, student, notebook)
    items = {i.item: i for i in items_of(result)}
    if item not in items:
        raise OverrideError(f"{notebook} has no graded item {item!r}{closest(item, set(items))}")
    if not 0 <= score <= items[item].max_score:
        raise OverrideError(f"{score:g} is not between 0 and {item}'s {points_text(items[item].max_score)} points")
    with Gradebook(db_url(out)) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        grade = gb.find_grade(item, result.notebook, result.assignment, result.student_id)
        grade.manual_score = score
        gb.db.commit()
    auto = items[item].score
    record = read_record(out)
    record[_key(result.student_id, result.assignment, result.notebook, item)] = {
        "score": score, "why": why, "auto_score": auto, "set": datetime.now(UTC).isoformat(timespec="seconds")}
    temporary = out / f"{RECORD}.tmp"
    temporary.write_text(json.dumps(record, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(temporary, out / RECORD)
    return Override(score, why, auto)


def stored(out: Path, all_results: list[NotebookResult]) -> dict[tuple[str, str, str, str], Override]:
    """Every manual score in OUT's gradebook for these results (one query), with its reason where the grader has
    one, by (student id, assignment, notebook, item)."""
    record = read_record(out)
    found: dict[tuple[str, str, str, str], Override] = {}
    if not (out / "gradebook.db").is_file():
        return found
    wanted = {(r.student_id, r.assignment, r.notebook) for r in all_results}
    with Gradebook(db_url(out)) as gb:
        rows = gb.db.query(api.Grade.manual_score, api.BaseCell.name, api.Notebook.name, api.Assignment.name,
                           api.SubmittedAssignment.student_id) \
            .join(api.BaseCell, api.Grade.cell_id == api.BaseCell.id) \
            .join(api.SubmittedNotebook, api.Grade.notebook_id == api.SubmittedNotebook.id) \
            .join(api.Notebook, api.SubmittedNotebook.notebook_id == api.Notebook.id) \
            .join(api.SubmittedAssignment, api.SubmittedNotebook.assignment_id == api.SubmittedAssignment.id) \
            .join(api.Assignment, api.SubmittedAssignment.assignment_id == api.Assignment.id) \
            .filter(api.Grade.manual_score.isnot(None)).all()
    for score, item, notebook, assignment, student_id in rows:
        if (student_id, assignment, notebook) not in wanted:
            continue
        mine = record.get(_key(student_id, assignment, notebook, item), {})
        same = mine.get("score") == score  # a reason recorded for another score (changed in formgrader) is not its
        auto = mine.get("auto_score") if same else None
        found[student_id, assignment, notebook, item] = Override(
            float(score), str(mine.get("why", "")) if same else "", None if auto is None else float(auto))
    return found


def apply(out: Path, all_results: list[NotebookResult]) -> list[str]:
    """Put OUT's overrides on the results (in memory: the stored results are the grader's automatic scores);
    returns a warning for each override whose automatic score changed since it was set."""
    by_notebook: dict[tuple[str, str, str], dict[str, Override]] = {}
    for (student_id, assignment, notebook, name), override in stored(out, all_results).items():
        by_notebook.setdefault((student_id, assignment, notebook), {})[name] = override
    warnings_: list[str] = []
    for result in all_results:
        mine = by_notebook.get((result.student_id, result.assignment, result.notebook))
        if not mine:
            continue
        items = items_of(result)
        for item in items:
            override = mine.get(item.item)
            if override is None:
                continue
            automatic = item.score
            item.score, item.provisional = override.score, False
            item.status = (results.PASSED if override.score >= item.max_score
                           else results.FAILED if override.score == 0 else results.PARTIAL)
            shown = "pending" if automatic is None else points_text(automatic)
            reason = f": {override.why}" if override.why else " (set in formgrader; no reason recorded)"
            item.message = f"TA override to {points_text(override.score)} (automatic score {shown}){reason}" + \
                (f" | {item.message}" if item.message else "")
            if override.auto_score is not None and automatic != override.auto_score:
                warnings_.append(
                    f"{result.student}: {result.assignment}/{result.notebook} {item.item}: the automatic score is "
                    f"now {shown}, {points_text(override.auto_score)} when the TA's {points_text(override.score)} "
                    "was set; the override still counts")
        result.items = items
    return warnings_
