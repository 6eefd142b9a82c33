"""Feedback to release, one assignment at a time: OUT/upload/feedback/<assignment>/<student>.zip.

Each zip holds one student's feedback pages for one assignment and an ``index.html`` listing them; every link in
it resolves inside it (the pages' link to the class overview, which is not in the zip, is pointed at that index).
A TA releases week 1 by uploading week 1's zips, and nothing of week 2.

Names Canvas's bulk upload accepts: Canvas's "Upload submission comments" (a zip of files) finds each file's student
and submission from the first two all-digit ``_``-separated parts of its name, the user id and the id of a file the
student submitted (instructure/canvas-lms, app/models/assignment.rb, infer_comment_context_from_filename; the names
of its own "Download submissions" zip, lib/content_zipper.rb, are ``name[_late]_<user id>_<attachment id>_<file>``).
Where ``python -m grader collect`` recorded those ids for a student (SUBMISSIONS/collected.json), the zip is named
``<student>_<user id>_<attachment id>_feedback.zip`` and also goes into ``<assignment>-canvas-bulk.zip``, ready for
that upload; otherwise it is ``<student id>.zip``, to attach by hand (the notes say so).
"""

from __future__ import annotations

import html
import json
import os
import re
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from grader.report.pages import page_path
from grader.report.tables import items_of, points_text
from grader.score.results import NotebookResult

COLLECTED = "collected.json"  # written by grader/lms/collect.py at the submissions folder's top
INDEX = "index.html"
_NAV = re.compile(r"<nav>.*?</nav>", re.DOTALL)


class Zips(NamedTuple):
    zips: list[Path]  # one per student and assignment
    bulk: list[Path]  # one per assignment: the zips Canvas's bulk upload can place
    lines: list[str]  # for the TA


def canvas_ids(submissions: Path | None) -> dict[tuple[str, str], tuple[str, str]]:
    """(student folder, assignment) -> (Canvas user id, an attachment id of that submission), from collect's
    record; empty when there is none."""
    path = None if submissions is None else submissions / COLLECTED
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    found = {}
    for assignment, students in (data.items() if isinstance(data, dict) else ()):
        for folder, record in (students.items() if isinstance(students, dict) else ()):
            user, attachments = str(record.get("canvas_user_id", "")), record.get("attachment_ids") or []
            if user.isdigit() and attachments and str(attachments[0]).isdigit():
                found[folder, assignment] = (user, str(attachments[0]))
    return found


def canvas_name(student_id: str, user: str, attachment: str) -> str:
    """``<name>_<user id>_<attachment id>_feedback.zip``: the name part has no ``_`` and is never all digits, so
    Canvas reads the two ids where they are."""
    name = re.sub(r"[^A-Za-z0-9-]", "", student_id) or "student"
    if name.isdigit():
        name = f"s{name}"
    return f"{name}_{user}_{attachment}_feedback.zip"


def _index_page(student: str, assignment: str, mine: list[NotebookResult]) -> str:
    rows = []
    for result in mine:
        items = items_of(result)
        pending = sum(i.max_score for i in items if i.score is None)
        total = sum(i.max_score for i in items)
        note = f"; {points_text(pending)} pending a GPU run" if pending else ""
        rows.append(f'<li><a href="{html.escape(_entry(result))}">{html.escape(result.notebook)}</a>: '
                    f"{points_text(result.final_score)} of {points_text(total)}{note} ({html.escape(result.status)})"
                    "</li>")
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(assignment)}: {html.escape(student)}</title></head><body>\n"
            f"<h1>{html.escape(assignment)}: your feedback</h1>\n<p>{html.escape(student)}</p>\n<ul>\n"
            + "\n".join(rows) + "\n</ul>\n</body></html>\n")


def _entry(result: NotebookResult) -> str:
    return f"{result.assignment}-{result.notebook}.html"


def _local(page: str, assignment: str) -> str:
    """The page with its link to the class overview (not in the zip) pointed at the zip's index."""
    return _NAV.sub(f'<nav><a href="{INDEX}">← your {html.escape(assignment)} feedback</a></nav>', page, count=1)


def _write_zip(path: Path, files: dict[str, bytes]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    os.replace(temporary, path)


def write(all_results: list[NotebookResult], out: Path, folder: Path, submissions: Path | None = None) -> Zips:
    """``folder``/<assignment>/<zip> per student and assignment (the feedback pages must be written first)."""
    grouped: dict[str, dict[str, list[NotebookResult]]] = defaultdict(lambda: defaultdict(list))
    for result in sorted(all_results, key=lambda r: (r.assignment, r.student_id, r.notebook)):
        grouped[result.assignment][result.student_id].append(result)
    ids = canvas_ids(submissions)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.zip"):  # one zip per student of every assignment, as an earlier grader wrote them
        if not old.name.endswith("-canvas-bulk.zip"):
            old.unlink()
    zips: list[Path] = []
    bulk: list[Path] = []
    lines: list[str] = []
    for assignment, students in grouped.items():
        where = folder / assignment
        where.mkdir(parents=True, exist_ok=True)
        for stale in where.glob("*.zip"):  # a student no longer in the results, or renamed by collect's ids
            stale.unlink()
        placed: dict[str, bytes] = {}
        for student_id, mine in students.items():
            files = {INDEX: _index_page(mine[0].student, assignment, mine).encode("utf-8")}
            for result in mine:
                page = page_path(out, result)
                text = page.read_text(encoding="utf-8") if page.is_file() else ""
                files[_entry(result)] = _local(text, assignment).encode("utf-8")
            known = ids.get((mine[0].student, assignment))
            path = where / (canvas_name(student_id, *known) if known else f"{student_id}.zip")
            _write_zip(path, files)
            zips.append(path)
            if known:
                placed[path.name] = path.read_bytes()
        bulk_path = folder / f"{assignment}-canvas-bulk.zip"
        if placed:
            _write_zip(bulk_path, placed)
            bulk.append(bulk_path)
        elif bulk_path.exists():
            bulk_path.unlink()
        unplaced = len(students) - len(placed)
        lines.append(f"{assignment}: {len(students)} feedback zip(s) in {where}"
                     + (f"; {len(placed)} in {folder / f'{assignment}-canvas-bulk.zip'} for Canvas's "
                        "\"Upload submission comments\"" if placed else "")
                     + (f"; {unplaced} without Canvas ids (not collected from Canvas): attach by hand"
                        if unplaced else ""))
    return Zips(zips, bulk, lines)
