"""The class roster: who each student folder is in the LMS.

The roster is a CSV as Canvas exports its gradebook (Grades > Export): the columns ``Student``, ``ID`` (Canvas's
user id), ``SIS User ID``, ``SIS Login ID`` and ``Section``, then one column per assignment named ``Title (id)``.
Canvas's importer reads those same columns back (instructure/canvas-lms, app/models/gradebook_importer.rb: the header
must start with ``Student`` and ``ID``, may go on with ``SIS User ID`` and ``SIS Login ID``, and must end its
student columns with ``Section``; a ``Points Possible`` row follows the header; an assignment column's title is
``Title (id)``). Only ``Student`` and ``ID`` are required here; a missing SIS or Section column reads as blank.

Which folder is whose: an optional ``folder`` column names the student's folder under the submissions folder;
where it is absent or blank, the folder is the ``SIS Login ID``, and where that is blank too, the Canvas ``ID``.
``python -m grader collect`` names the folders it writes by this same rule, so a class it collects always matches.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

# Canvas's gradebook import columns, in order (gradebook_importer.rb, update_column_count and header?).
STUDENT, CANVAS_ID, SIS_USER_ID, SIS_LOGIN_ID, SECTION = "Student", "ID", "SIS User ID", "SIS Login ID", "Section"
IDENTITY_COLUMNS = (STUDENT, CANVAS_ID, SIS_USER_ID, SIS_LOGIN_ID, SECTION)
ROSTER_IN_SUBMISSIONS = "roster.csv"  # the copy collect leaves at the submissions folder's top
FOLDER = "folder"  # optional: the student's folder name, when it is not the SIS Login ID
# Columns of a Canvas export that are neither a student's identity nor an assignment (gradebook_importer.rb's
# GRADEBOOK_IMPORTER_RESERVED_NAMES and NON_ASSIGNMENT_COLUMN_HEADERS).
_NOT_ASSIGNMENTS = re.compile(r"Integration ID|Root Account|LastName|FirstName|Current |Final |Unposted |Override ")
_TITLE_AND_ID = re.compile(r"^(?P<title>.+?)\s+\((?P<id>\d+)\)$")  # Canvas's Assignment.title_and_id


class RosterError(ValueError):
    """The roster cannot be used; the message says where and why."""


@dataclass(frozen=True)
class Person:
    name: str  # as Canvas shows it ("Doe, Jane")
    canvas_id: str  # Canvas's user id ("ID"): what Canvas's downloads name files by
    sis_user_id: str
    sis_login_id: str
    section: str
    folder: str  # the student's folder under the submissions folder


@dataclass(frozen=True)
class Roster:
    path: Path
    people: tuple[Person, ...]
    # An assignment's title -> its Canvas column ("week1 (4821)"), from the export's header: a Canvas file with
    # that column updates the existing assignment instead of creating one of the same title.
    assignment_columns: dict[str, str] = field(default_factory=dict)
    matched_by: str = ""  # which column the folder names came from, in words

    def by_folder(self) -> dict[str, Person]:
        return {person.folder: person for person in self.people}

    def by_canvas_id(self) -> dict[str, Person]:
        return {person.canvas_id: person for person in self.people if person.canvas_id}


@dataclass(frozen=True)
class Reconciled:
    not_on_roster: list[str]  # student folders no roster entry names
    no_submission: list[Person]  # roster entries with no student folder

    def lines(self) -> list[str]:
        """What a TA reads: each student folder the roster lacks, and each person with no submission."""
        out = []
        if self.not_on_roster:
            out.append(f"{len(self.not_on_roster)} student folder(s) not on the roster (no LMS identity; left out of "
                       f"the Canvas file): {', '.join(self.not_on_roster)}")
        if self.no_submission:
            out.append(f"{len(self.no_submission)} roster entr(y/ies) with no submission folder: "
                       + ", ".join(f"{p.name} ({p.folder})" for p in self.no_submission))
        return out


def _cell(row: dict[str, str | None], column: str) -> str:
    return (row.get(column) or "").strip()


def parse(text: str, path: Path) -> Roster:
    """A Roster from the CSV's text (``path``: for messages)."""
    text = text.lstrip("\ufeff")
    first = text.split("\n", 1)[0]
    # Canvas reads a file whose first lines split more evenly on ";" as semicolon-separated (gradebook_importer.rb,
    # semicolon_delimited?), as spreadsheets in locales with a decimal comma save it: so does this.
    reader = csv.DictReader(io.StringIO(text), delimiter=";" if first.count(";") > first.count(",") else ",")
    header = [name.strip() for name in (reader.fieldnames or [])]
    reader.fieldnames = header
    missing = [name for name in (STUDENT, CANVAS_ID) if name not in header]
    if missing:
        raise RosterError(f"{path}: no {' or '.join(repr(m) for m in missing)} column (a roster is Canvas's "
                          f"gradebook export: {', '.join(IDENTITY_COLUMNS)}, optionally {FOLDER!r}); "
                          f"the header is {', '.join(header) or 'empty'}")
    people: list[Person] = []
    seen_folders: dict[str, int] = {}
    seen_ids: dict[str, int] = {}
    for line, row in enumerate(reader, start=2):
        name, canvas_id = _cell(row, STUDENT), _cell(row, CANVAS_ID)
        if "Points Possible" in name or not (name or canvas_id):
            continue  # the export's second row, or a row of posting policies ("Manual Posting") with no student
        login = _cell(row, SIS_LOGIN_ID)
        folder = _cell(row, FOLDER) or login or canvas_id
        if not folder:
            raise RosterError(f"{path}, line {line}: {name!r} has no {FOLDER}, {SIS_LOGIN_ID} or {CANVAS_ID}: "
                              "nothing names their folder")
        if "/" in folder or "\\" in folder or folder.startswith(".") or folder == "__MACOSX":
            raise RosterError(f"{path}, line {line}: {folder!r} cannot be a student's folder name (no /, \\ or "
                              "leading '.')")
        if folder in seen_folders:
            raise RosterError(f"{path}, line {line}: folder {folder!r} is also line {seen_folders[folder]}'s")
        if canvas_id and canvas_id in seen_ids:
            raise RosterError(f"{path}, line {line}: {CANVAS_ID} {canvas_id} is also line {seen_ids[canvas_id]}'s")
        seen_folders[folder] = line
        if canvas_id:
            seen_ids[canvas_id] = line
        people.append(Person(name, canvas_id, _cell(row, SIS_USER_ID), login, _cell(row, SECTION), folder))
    columns = {}
    for column in header:
        match = _TITLE_AND_ID.match(column)
        if match and column not in IDENTITY_COLUMNS and not _NOT_ASSIGNMENTS.match(column):
            columns[match["title"]] = column
    matched_by = (f"the {FOLDER!r} column, else {SIS_LOGIN_ID}" if FOLDER in header
                  else f"{SIS_LOGIN_ID} (else Canvas's {CANVAS_ID})")
    return Roster(path, tuple(people), columns, matched_by)


def load(path: Path) -> Roster:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise RosterError(f"{path}: cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise RosterError(f"{path}: not UTF-8 text (save the export as CSV UTF-8)") from None
    return parse(text, path)


def reconcile(roster: Roster, folders: Iterable[str]) -> Reconciled:
    """The student folders the roster does not name, and the roster's people with no folder among ``folders``."""
    given = set(folders)
    known = roster.by_folder()
    absent = [person for folder, person in known.items() if folder not in given]
    return Reconciled(sorted(given - set(known), key=str.casefold), sorted(absent, key=lambda p: p.name.casefold()))
