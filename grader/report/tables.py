"""CSV exports: one row per graded item, one summary row per student, and the wide table LMSs import.

Every result is a row: a notebook that was missing, unreadable or did not finish is listed with its
status and message. ``student`` is the student's folder name as given; ``student_id`` the safe id
the gradebook uses.
"""

from __future__ import annotations

import csv
import io
import os
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import NamedTuple

from nbgrader.utils import is_grade

from grader.authoring.release import master_version
from grader.intake.layout import find_course_notebook
from grader.score.results import ItemResult, NotebookResult
from grader.score.score import performance_cells, results

# File names in OUT. nbgrader's own `nbgrader export` writes grades.csv by default: the
# nbgrader_config.py written beside these points it at NBGRADER_CSV instead, so it never overwrites ours.
GRADES_CSV, STUDENTS_CSV, WIDE_CSV = "grades.csv", "students.csv", "grades-wide.csv"
NBGRADER_CONFIG, NBGRADER_CSV = "nbgrader_config.py", "nbgrader-grades.csv"

ITEM_COLUMNS = ("student", "student_id", "assignment", "notebook", "submitted_file", "item", "kind", "score",
                "max_score", "status", "provisional", "measured", "threshold", "notebook_status",
                "notebook_message", "notebook_raw", "late_penalty", "notebook_final", "late_status", "late_note",
                "sandbox", "message")
# earned: points scored (raw: before any late penalty); graded_max: the points of the items decided so far; pending:
# the points still to be decided (performance without a GPU, answers a person grades); max_score = graded_max +
# pending; late_penalty: the points the term's late policy takes off (lms/term.py); final = earned - late_penalty.
STUDENT_COLUMNS = ("student", "student_id", "earned", "late_penalty", "final", "graded_max", "pending", "max_score",
                   "correctness_earned", "correctness_graded_max", "correctness_pending",
                   "performance_earned", "performance_graded_max", "performance_pending", "provisional_points",
                   "notebooks", "not_graded_normally", "messages", "sandbox")


class Exported(NamedTuple):
    grades: Path  # one row per student, notebook and graded item
    students: Path  # one row per student: earned, graded maximum and pending points, statuses, messages
    wide: Path  # one row per student, one column per notebook (earned points): the shape LMSs import
    nbgrader_config: Path  # makes `nbgrader export` run in OUT read gradebook.db and write nbgrader-grades.csv


@cache
def expected_items(assignment: str, notebook: str) -> tuple[tuple[str, str, float], ...]:
    """(grade id, kind, points) of every graded cell of a course notebook."""
    course_notebook = find_course_notebook(assignment, notebook)
    if course_notebook is None:
        return ()
    perf = performance_cells()
    return tuple(
        (cell.metadata.nbgrader["grade_id"],
         results.PERFORMANCE if cell.metadata.nbgrader["grade_id"] in perf else results.CORRECTNESS,
         float(cell.metadata.nbgrader["points"]))
        for cell in master_version(course_notebook).cells if is_grade(cell)
    )


def items_of(result: NotebookResult) -> list[ItemResult]:
    """The result's items, with a zero for every graded cell it has none for (a notebook that never ran)."""
    have = {item.item for item in result.items}
    missing = [ItemResult(grade_id, kind, 0.0, points, results.NOT_RUN, f"notebook {result.status}: {result.message}")
               for grade_id, kind, points in expected_items(result.assignment, result.notebook)
               if grade_id not in have]
    return list(result.items) + missing


def _cell(value: object) -> object:
    """A value as a spreadsheet will not run it: text that would start a formula gets a leading quote.
    A plain name such as "-dash" is kept as given; "=1+1", "@SUM(A1)" or "-cmd|' /C calc'!A0" are not."""
    formula = isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r")
    if formula and (value[0] != "-" or any(c in value for c in "(|!=+")):
        return "'" + value
    return value


def write_csv(path: Path, columns: tuple[str, ...], rows: list[dict[str, object]]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    writer.writerows({key: _cell(value) for key, value in row.items()} for row in rows)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(buffer.getvalue(), encoding="utf-8")
    os.replace(temporary, path)


def _one_line(text: str, limit: int = 600) -> str:
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())[:limit]


def points_text(value: float) -> str:
    return f"{round(value, 4):g}"


def notebook_message(result: NotebookResult) -> str:
    """What a TA needs about one notebook, on one line: its status's message, where the run stopped, how its
    file was found, and the changes the grader undid (the feedback page lists them all)."""
    parts = [result.summary] if result.summary else []
    if result.integrity:
        more = f" (and {len(result.integrity) - 1} more)" if len(result.integrity) > 1 else ""
        parts.append(f"the grader undid: {result.integrity[0]}{more}")
    return _one_line("; ".join(parts), 1000)


def _order(all_results: list[NotebookResult]) -> list[NotebookResult]:
    return sorted(all_results, key=lambda r: (r.student.casefold(), r.student_id, r.assignment, r.notebook))


def item_rows(all_results: list[NotebookResult]) -> list[dict[str, object]]:
    """One row per graded item; a notebook with no items at all still gets one row, with its status."""
    rows = []
    for result in _order(all_results):
        common = {"student": result.student, "student_id": result.student_id, "assignment": result.assignment,
                  "notebook": result.notebook, "submitted_file": result.submitted_file,
                  "notebook_status": result.status, "notebook_message": notebook_message(result),
                  "notebook_raw": points_text(result.score), "late_penalty": points_text(result.late_penalty),
                  "notebook_final": points_text(result.final_score), "late_status": result.late_status,
                  "late_note": result.late_note, "sandbox": result.sandbox}
        items = items_of(result)
        if not items:
            rows.append({**common, "status": result.status, "message": _one_line(result.summary)})
        for item in items:
            rows.append({**common, "item": item.item, "kind": item.kind,
                         "score": "" if item.score is None else points_text(item.score),
                         "max_score": points_text(item.max_score), "status": item.status,
                         "provisional": "provisional (CPU run; the GPU judge decides)" if item.provisional else "",
                         "measured": item.measured, "threshold": item.threshold, "message": _one_line(item.message)})
    return rows


def by_student(all_results: list[NotebookResult]) -> dict[str, list[NotebookResult]]:
    grouped: dict[str, list[NotebookResult]] = defaultdict(list)
    for result in _order(all_results):
        grouped[result.student_id].append(result)
    return grouped


def student_rows(all_results: list[NotebookResult]) -> list[dict[str, object]]:
    rows = []
    for student_id, mine in by_student(all_results).items():
        t: dict[str, float] = defaultdict(float)
        for result in mine:
            for item in items_of(result):
                kind = "correctness" if item.kind == results.CORRECTNESS else "performance"
                if item.score is None:
                    t[f"{kind}_pending"] += item.max_score
                else:
                    t[f"{kind}_earned"] += item.score
                    t[f"{kind}_graded_max"] += item.max_score
                if item.provisional:
                    t["provisional"] += item.score or 0.0
        row: dict[str, object] = {"student": mine[0].student, "student_id": student_id}
        for what in ("earned", "graded_max", "pending"):
            row[what] = points_text(t[f"correctness_{what}"] + t[f"performance_{what}"])
            for kind in ("correctness", "performance"):
                row[f"{kind}_{what}"] = points_text(t[f"{kind}_{what}"])
        row["max_score"] = points_text(sum(t[f"{k}_{w}"] for k in ("correctness", "performance")
                                       for w in ("graded_max", "pending")))
        penalty = sum(r.late_penalty for r in mine)
        row["late_penalty"] = points_text(penalty)
        row["final"] = points_text(sum(r.final_score for r in mine))
        row["provisional_points"] = points_text(t["provisional"])
        row["notebooks"] = "; ".join(f"{r.assignment}/{r.notebook}: {r.status}" for r in mine)
        row["not_graded_normally"] = sum(not r.graded_normally for r in mine)
        row["messages"] = " || ".join(f"{r.assignment}/{r.notebook}: {notebook_message(r)}"
                                      for r in mine if notebook_message(r))
        row["sandbox"] = ";".join(sorted({r.sandbox or "unknown" for r in mine}))
        rows.append(row)
    return rows


def notebook_keys(all_results: list[NotebookResult]) -> list[str]:
    return sorted({f"{r.assignment}/{r.notebook}" for r in all_results})


def wide_columns(all_results: list[NotebookResult]) -> tuple[str, ...]:
    return ("student", "student_id", *notebook_keys(all_results), "raw_total", "late_penalty", "total")


def wide_rows(all_results: list[NotebookResult]) -> list[dict[str, object]]:
    """One row per student, one column per notebook: its final points (late penalty taken off; pending points
    count 0 until decided; a notebook not graded normally counts what it earned, usually 0: students.csv says
    why); then the raw total, the late penalty and the final total."""
    rows = []
    for student_id, mine in by_student(all_results).items():
        row: dict[str, object] = {"student": mine[0].student, "student_id": student_id}
        for result in mine:
            row[f"{result.assignment}/{result.notebook}"] = points_text(result.final_score)
        row["raw_total"] = points_text(sum(r.score for r in mine))
        row["late_penalty"] = points_text(sum(r.late_penalty for r in mine))
        row["total"] = points_text(sum(r.final_score for r in mine))
        rows.append(row)
    return rows


def write_nbgrader_config(out: Path) -> Path:
    """Make a stock `nbgrader export`, run in OUT, read this gradebook and leave grades.csv alone."""
    path = out / NBGRADER_CONFIG
    path.write_text(
        "# Written by the course grader. `nbgrader export`, run in this folder, reads gradebook.db here and\n"
        f"# writes {NBGRADER_CSV} (the grader's own {GRADES_CSV} is one row per graded item: never overwritten).\n"
        "c = get_config()  # noqa: F821\n"
        'c.CourseDirectory.db_url = "sqlite:///gradebook.db"\n'
        # ExportPlugin, the trait `--to` sets: a setting of the subclass CsvExportPlugin would override `--to`
        f'c.ExportPlugin.to = "{NBGRADER_CSV}"\n', encoding="utf-8")
    return path


def export(all_results: list[NotebookResult], out: Path) -> Exported:
    written = Exported(out / GRADES_CSV, out / STUDENTS_CSV, out / WIDE_CSV, out / NBGRADER_CONFIG)
    write_csv(written.grades, ITEM_COLUMNS, item_rows(all_results))
    write_csv(written.students, STUDENT_COLUMNS, student_rows(all_results))
    write_csv(written.wide, wide_columns(all_results), wide_rows(all_results))
    write_nbgrader_config(out)
    return written
