"""What a TA uploads after grading, in OUT/upload: the grades as Canvas's gradebook import reads them, a notes file
beside them, and the feedback pages zipped per assignment and student (grader/lms/feedback_zips.py).

canvas-grades.csv has Canvas's import columns (instructure/canvas-lms, app/models/gradebook_importer.rb; the same
columns its gradebook export writes): ``Student``, ``ID`` (Canvas's user id), ``SIS User ID``, ``SIS Login ID``,
``Section``, then one column per assignment (a course week: the notebooks' final points added up), and a
``Points Possible`` row under the header. Canvas matches a row to a student by ``ID``, else ``SIS User ID``, else
``SIS Login ID``, else the name; with a roster (grader/lms/roster.py) the identity columns are the roster's, without
one ``Student`` and ``SIS Login ID`` hold the folder name and the rest are blank. An assignment column is
the roster's ``Title (id)`` where the roster has that assignment, else its title (Canvas then creates it once and
matches it by title afterwards). There is no total column: Canvas computes the course total, and any column it
does not know as a score would become an assignment.

A cell is left blank, not 0, where the assignment is not decided yet: points pending a GPU run (or a person), or a
notebook the grader itself failed on (grader_error): a partial score must not pass for a grade. Canvas's importer
counts a blank cell as no change only where its gradebook has no score either (gradebook_importer.rb,
no_change_to_value?); over a score already there, a blank reads as a change, so the notes tell the TA to take that
column out before importing. canvas-grades-notes.txt says which cells are blank and why, which folders are not on
the roster, and who on the roster has no submission.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from grader.lms import feedback_zips
from grader.lms.roster import (
    CANVAS_ID,
    IDENTITY_COLUMNS,
    ROSTER_IN_SUBMISSIONS,
    SECTION,
    SIS_LOGIN_ID,
    SIS_USER_ID,
    STUDENT,
    Reconciled,
    Roster,
    reconcile,
)
from grader.lms.roster import load as load_roster
from grader.report.tables import items_of, points_text, write_csv
from grader.score import results
from grader.score.results import NotebookResult

UPLOAD = "upload"
CANVAS_CSV = "canvas-grades.csv"
NOTES = "canvas-grades-notes.txt"
POINTS_POSSIBLE = "Points Possible"


class Uploads(NamedTuple):
    canvas: Path
    zips: list[Path]  # one per assignment and student
    notes: Path | None = None
    lines: list[str] = []  # what a TA should read: blank cells, roster mismatches, the zips


class CanvasFile(NamedTuple):
    columns: tuple[str, ...]
    rows: list[dict[str, object]]
    blank: list[str]  # "<student> <assignment>: why it is blank"
    reconciled: Reconciled | None


def _undecided(result: NotebookResult) -> str:
    """Why this notebook's points cannot go to the LMS yet ("" when they can)."""
    if result.status == results.GRADER_ERROR:
        return f"{result.notebook}: the grader failed on it (graded again on the next run)"
    pending = sum(i.max_score for i in items_of(result) if i.score is None)
    if pending:
        return f"{result.notebook}: {points_text(pending)} point(s) pending a GPU run"
    return ""


def canvas_file(all_results: list[NotebookResult], roster: Roster | None = None) -> CanvasFile:
    """The Canvas file's columns and rows (a Points Possible row first), and why each blank cell is blank."""
    titles = sorted({r.assignment for r in all_results})
    heading = {a: (roster.assignment_columns.get(a, a) if roster else a) for a in titles}
    columns = (*IDENTITY_COLUMNS, *(heading[a] for a in titles))
    by_student: dict[str, dict[str, list[NotebookResult]]] = defaultdict(lambda: defaultdict(list))
    maxima: dict[str, dict[str, float]] = defaultdict(dict)
    for result in all_results:
        by_student[result.student][result.assignment].append(result)
        most = sum(i.max_score for i in items_of(result))  # a result that never ran may lack items: the largest
        maxima[result.assignment][result.notebook] = max(most, maxima[result.assignment].get(result.notebook, 0.0))
    rows: list[dict[str, object]] = [{STUDENT: POINTS_POSSIBLE,
                                      **{heading[a]: points_text(sum(maxima[a].values())) for a in titles}}]
    people = roster.by_folder() if roster else {}
    reconciled = reconcile(roster, by_student) if roster else None
    blank: list[str] = []
    students = sorted(by_student, key=lambda s: ((people[s].name if s in people else s).casefold(), s))
    for student in students:
        if roster and student not in people:
            continue  # listed in the notes: Canvas could not place the row
        person = people.get(student)
        row: dict[str, object] = ({STUDENT: person.name, CANVAS_ID: person.canvas_id, SIS_USER_ID: person.sis_user_id,
                                   SIS_LOGIN_ID: person.sis_login_id, SECTION: person.section} if person
                                  else {STUDENT: student, SIS_LOGIN_ID: student})
        for assignment, mine in sorted(by_student[student].items()):
            why = [reason for reason in map(_undecided, mine) if reason]
            if why:
                row[heading[assignment]] = ""
                decided = sum(r.final_score for r in mine)
                blank.append(f"{student} {assignment}: blank ({'; '.join(why)}; {points_text(decided)} point(s) "
                             "decided so far)")
            else:
                row[heading[assignment]] = points_text(sum(r.final_score for r in mine))
        rows.append(row)
    return CanvasFile(columns, rows, blank, reconciled)


def notes_text(made: CanvasFile, roster: Roster | None) -> str:
    """The notes file beside the Canvas file: what its columns hold, and every cell or student it leaves out."""
    lines = [f"{CANVAS_CSV}: Canvas's gradebook import columns ({', '.join(IDENTITY_COLUMNS)}), then one column "
             "per assignment (its notebooks' final points, late penalties taken off), and a Points Possible row.",
             "No total column: Canvas computes the course total.", ""]
    if roster:
        lines.append(f"Identities from the roster {roster.path}: student folders matched by {roster.matched_by}.")
    else:
        lines.append(f"No roster was given: {STUDENT} and {SIS_LOGIN_ID} hold the student's folder name; {CANVAS_ID}, "
                     f"{SIS_USER_ID} and {SECTION} are blank. Canvas places such a row only where the folder name "
                     "is the student's SIS login (or their name as Canvas has it); give a roster to be sure.")
    lines += ["", "Blank cells are not zeros. A cell is blank while any notebook of its assignment has points pending "
              "a GPU run (a CPU grading run cannot time kernels) or the grader failed on it; grade on a GPU and "
              "upload again. Canvas's import sets no grade for a blank cell where its gradebook has none, but where "
              "Canvas already holds a grade for that assignment (an earlier GPU run's), it reads a blank as a "
              "change: delete that column from the file before importing."]
    lines += [f"  {line}" for line in made.blank] or ["  (no blank cells)"]
    if made.reconciled:
        lines += ["", *(made.reconciled.lines() or ["Every student folder is on the roster, and every roster entry "
                                                    "has a submission folder."])]
    return "\n".join(lines) + "\n"


def write(all_results: list[NotebookResult], out: Path, roster: Roster | None = None,
          submissions: Path | None = None) -> Uploads:
    """OUT/upload/canvas-grades.csv, its notes and the feedback zips (the pages must be written first).
    ``roster``: else the roster collect left in ``submissions`` (roster.csv), if any; ``submissions``: where
    collect's record of Canvas ids is (it names the zips so Canvas's bulk upload can place them)."""
    folder = out / UPLOAD
    folder.mkdir(parents=True, exist_ok=True)
    if roster is None and submissions is not None and (submissions / ROSTER_IN_SUBMISSIONS).is_file():
        roster = load_roster(submissions / ROSTER_IN_SUBMISSIONS)
    made = canvas_file(all_results, roster)
    write_csv(folder / CANVAS_CSV, made.columns, made.rows)
    notes = folder / NOTES
    temporary = notes.with_name(notes.name + ".tmp")
    temporary.write_text(notes_text(made, roster), encoding="utf-8")
    temporary.replace(notes)
    zips = feedback_zips.write(all_results, out, folder / "feedback", submissions)
    lines = [f"{CANVAS_CSV}: {len(made.rows) - 1} student row(s)"
             + (f", identities from {roster.path}" if roster else ", no roster: SIS Login ID = folder name")
             + (f"; {len(made.blank)} cell(s) left blank, not 0 (pending or not graded: see {notes})"
                if made.blank else f"; notes in {notes}")]
    if made.reconciled:
        lines += made.reconciled.lines()
    return Uploads(folder / CANVAS_CSV, zips.zips, notes, lines + zips.lines)
