"""Every output a TA uploads, from one source: the stored results, the term and the TA's overrides.

``render`` writes them all together (grades.csv, students.csv, grades-wide.csv, the gradebook's term and penalties,
the feedback pages, the Canvas file and the feedback zips), so they always agree; ``grade``, ``export``, ``feedback``
and ``publish`` all end in it. Nothing is regraded: each submission time is read again from the submissions folder
(``grader.lms.term``) and the overrides from the gradebook (``grader.score.overrides``).

OUT remembers what it was published with, in OUT/term.json: the term file (its path, its SHA-256 and a copy,
OUT/term.toml) and the submissions folder. A command given no term file uses the remembered one; one given a
different file says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from grader.lms import term
from grader.lms.term import Term
from grader.score import overrides
from grader.score.results import NotebookResult

STATE, TERM_COPY = "term.json", "term.toml"


@dataclass
class Rendered:
    results: list[NotebookResult]
    lines: list[str] = field(default_factory=list)  # what was written, one line each
    warnings: list[str] = field(default_factory=list)


def state(out: Path) -> dict[str, str]:
    path = out / STATE
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}


def _write_state(out: Path, data: dict[str, str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    temporary = out / f"{STATE}.tmp"
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(temporary, out / STATE)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def term_file(out: Path, given: str | None, default: Path | None) -> tuple[Path | None, str]:
    """The term file to use and a line saying which: ``given``; else the one OUT remembers (its copy); else
    ``default`` when it exists; else none."""
    known = state(out)
    copy = out / TERM_COPY
    if given:
        path = Path(given)
        if known.get("term_sha256") and path.is_file() and _digest(path) != known["term_sha256"]:
            return path, (f"term: {path}, a different term file from the one used before "
                          f"({known.get('term_file', '?')}, sha256 {known['term_sha256'][:12]})")
        return path, f"term: {path}"
    if copy.is_file() and known.get("term_sha256"):
        return copy, f"term: the one {out} was published with ({known.get('term_file', '?')}, kept as {copy})"
    if known.get("term_file") == "":
        return None, "term: none (as before): no due dates, no late penalties"
    if default is not None and default.is_file():
        return default, f"term: {default}"
    return None, "no term file (term.toml or --term): no due dates, no late penalties"


def remember(out: Path, path: Path | None, submissions: Path | None = None) -> None:
    """Keep the term file used (a copy and its digest) and the submissions folder in OUT."""
    known = state(out)
    if path is None:
        known.update(term_file="", term_sha256="")
        (out / TERM_COPY).unlink(missing_ok=True)
    elif path.resolve() != (out / TERM_COPY).resolve():
        known.update(term_file=str(path.resolve()), term_sha256=_digest(path))
        shutil.copyfile(path, out / f"{TERM_COPY}.tmp")
        os.replace(out / f"{TERM_COPY}.tmp", out / TERM_COPY)
    if submissions is not None:
        known["submissions"] = str(submissions.resolve())
    _write_state(out, known)


def submissions_of(out: Path) -> Path | None:
    known = state(out).get("submissions")
    return Path(known) if known else None


def refresh_times(all_results: list[NotebookResult], submissions: Path | None) -> None:
    """Read each submission's times again (timestamp.txt, the file's time), in memory: a corrected time counts
    without regrading. A notebook whose file is gone keeps the times grading found."""
    if submissions is None:
        return
    for result in all_results:
        if not result.submitted_file:
            continue
        student_dir = submissions / result.student
        notebook = student_dir / result.submitted_file
        if notebook.is_file():
            result.timestamp_txt, result.file_mtime = term.submission_times(student_dir, result.assignment, notebook)


def render(out: Path, rules: Term, all_results: list[NotebookResult] | None = None,
           submissions: Path | None = None) -> Rendered:
    """Write every output of OUT from its stored results (or ``all_results``, just graded), ``rules`` and the
    overrides. Raises ``term.TermError`` when the term names a student the class does not have, and
    ``roster.RosterError`` when the roster collect left in ``submissions`` cannot be read."""
    from grader.lms import upload
    from grader.report.feedback import write_pages
    from grader.report.tables import NBGRADER_CSV, export
    from grader.score import gradebook
    from grader.score.stored import load_results

    stored = load_results(out) if all_results is None else all_results
    rules.check_students({r.student for r in stored} | {r.student_id for r in stored})
    submissions = submissions or submissions_of(out)
    refresh_times(stored, submissions)
    rendered = Rendered(stored, warnings=overrides.apply(out, stored))
    if submissions is None or not submissions.is_dir():
        rendered.warnings.append(f"submission times as grading found them: {out} does not know its submissions "
                                 "folder (publish --submissions DIR reads them again)")
    found = term.apply(stored, rules, term.read_submitted_at(submissions))
    gradebook.record_lateness(gradebook.db_url(out), stored, rules, found)
    written = export(stored, out)
    index = write_pages(stored, out, similar=True)
    uploads = upload.write(stored, out, submissions=submissions)  # collect's roster and Canvas ids are there
    rendered.lines += [f"gradebook: {out / 'gradebook.db'} (`nbgrader export` run in {out} writes {NBGRADER_CSV})",
                       f"items: {written.grades}", f"students: {written.students}",
                       f"one row per student, one column per notebook: {written.wide}", f"feedback: {index}",
                       f"to upload: {uploads.canvas} (Canvas's gradebook import) and {len(uploads.zips)} zip(s) of "
                       f"feedback pages in {uploads.canvas.parent / 'feedback'}", *uploads.lines]
    return rendered
