"""CSV exports: one row per graded item, and one summary row per student."""

from __future__ import annotations

import csv
import io
import os
from collections import defaultdict
from functools import cache
from pathlib import Path

from nbgrader.utils import is_grade

from grader import results
from grader.layout import find_course_notebook
from grader.release import master_version
from grader.results import ItemResult, NotebookResult
from grader.score import performance_cells

ITEM_COLUMNS = ("student_id", "assignment", "notebook", "item", "kind", "score", "max_score", "status",
                "provisional", "measured", "threshold", "notebook_status", "sandbox", "message")
STUDENT_COLUMNS = ("student_id", "score", "max_score", "correctness_score", "correctness_max",
                   "performance_score", "performance_max", "performance_pending", "provisional_points", "notebooks",
                   "problems", "sandbox")


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


def _write_csv(path: Path, columns: tuple[str, ...], rows: list[dict[str, object]]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(buffer.getvalue(), encoding="utf-8")
    os.replace(temporary, path)


def item_rows(all_results: list[NotebookResult]) -> list[dict[str, object]]:
    rows = []
    for result in all_results:
        for item in items_of(result):
            rows.append({"student_id": result.student, "assignment": result.assignment, "notebook": result.notebook,
                         "item": item.item, "kind": item.kind,
                         "score": "" if item.score is None else f"{item.score:g}",
                         "max_score": f"{item.max_score:g}", "status": item.status,
                         "provisional": "provisional (CPU run; the GPU judge decides)" if item.provisional else "",
                         "measured": item.measured, "threshold": item.threshold, "notebook_status": result.status,
                         "sandbox": result.sandbox,
                         "message": " | ".join(item.message.splitlines())[:600]})
    return rows


def student_rows(all_results: list[NotebookResult]) -> list[dict[str, object]]:
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    notebooks: dict[str, list[str]] = defaultdict(list)
    problems: dict[str, list[str]] = defaultdict(list)
    sandboxes: dict[str, set[str]] = defaultdict(set)
    for result in all_results:
        sandboxes[result.student].add(result.sandbox or "unknown")
        notebooks[result.student].append(f"{result.assignment}/{result.notebook}")
        if result.status != results.OK:
            problems[result.student].append(f"{result.assignment}/{result.notebook}: {result.status}")
        for item in items_of(result):
            total = totals[result.student]
            prefix = "correctness" if item.kind == results.CORRECTNESS else "performance"
            total[f"{prefix}_max"] += item.max_score
            if item.score is None:
                total["performance_pending"] += item.max_score
            else:
                total[f"{prefix}_score"] += item.score
            if item.provisional:
                total["provisional"] += item.score or 0.0
    rows = []
    for student in sorted(totals):
        t = totals[student]
        rows.append({
            "student_id": student,
            "score": f"{t['correctness_score'] + t['performance_score']:g}",
            "max_score": f"{t['correctness_max'] + t['performance_max']:g}",
            "correctness_score": f"{t['correctness_score']:g}", "correctness_max": f"{t['correctness_max']:g}",
            "performance_score": f"{t['performance_score']:g}", "performance_max": f"{t['performance_max']:g}",
            "performance_pending": f"{t['performance_pending']:g}", "provisional_points": f"{t['provisional']:g}",
            "notebooks": ";".join(notebooks[student]), "problems": ";".join(problems[student]),
            "sandbox": ";".join(sorted(sandboxes[student])),
        })
    return rows


def export(all_results: list[NotebookResult], out: Path) -> tuple[Path, Path]:
    grades, students = out / "grades.csv", out / "students.csv"
    _write_csv(grades, ITEM_COLUMNS, item_rows(all_results))
    _write_csv(students, STUDENT_COLUMNS, student_rows(all_results))
    return grades, students
