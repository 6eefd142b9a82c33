"""What a TA uploads after grading, in OUT/upload: the grades in the CSV shape Canvas's gradebook import reads, and
each student's feedback pages as one zip (to attach as that student's feedback).

Canvas matches a row to a student by its "SIS Login ID" (here: the student's folder name, as the LMS download
named it) and creates one assignment per unknown column; the "Points Possible" row gives each column's maximum.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import NamedTuple

from grader.feedback import page_path
from grader.results import NotebookResult
from grader.tables import by_student, items_of, notebook_keys, points_text, write_csv

UPLOAD = "upload"
CANVAS_CSV = "canvas-grades.csv"
TOTAL = "Course grader total"


class Uploads(NamedTuple):
    canvas: Path
    zips: list[Path]


def canvas_rows(all_results: list[NotebookResult]) -> tuple[tuple[str, ...], list[dict[str, object]]]:
    """(columns, rows): a "Points Possible" row, then one row per student with each notebook's final points."""
    keys = notebook_keys(all_results)
    columns = ("Student", "SIS Login ID", *keys, TOTAL)
    maxima: dict[str, float] = {}
    for result in all_results:
        maxima[f"{result.assignment}/{result.notebook}"] = sum(i.max_score for i in items_of(result))
    rows: list[dict[str, object]] = [{"Student": "Points Possible", "SIS Login ID": "",
                                      **{key: points_text(maxima[key]) for key in keys},
                                      TOTAL: points_text(sum(maxima.values()))}]
    for mine in by_student(all_results).values():
        row: dict[str, object] = {"Student": mine[0].student, "SIS Login ID": mine[0].student}
        row.update({f"{r.assignment}/{r.notebook}": points_text(r.final_score) for r in mine})
        row[TOTAL] = points_text(sum(r.final_score for r in mine))
        rows.append(row)
    return columns, rows


def write(all_results: list[NotebookResult], out: Path) -> Uploads:
    """OUT/upload/canvas-grades.csv and OUT/upload/feedback/<student id>.zip (the pages must be written first)."""
    folder = out / UPLOAD
    (folder / "feedback").mkdir(parents=True, exist_ok=True)
    columns, rows = canvas_rows(all_results)
    write_csv(folder / CANVAS_CSV, columns, rows)
    zips = []
    for student_id, mine in by_student(all_results).items():
        path = folder / "feedback" / f"{student_id}.zip"
        temporary = path.with_suffix(".tmp")
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
            for result in mine:
                page = page_path(out, result)
                archive.write(page, page.name)
        temporary.replace(path)
        zips.append(path)
    return Uploads(folder / CANVAS_CSV, zips)
