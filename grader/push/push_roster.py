"""The course's list of student repositories: the student each repository's pushes are graded as.

A CSV file kept with the push service's configuration, never in a student's repository, with the header
``repository,student``: the repository's full name (owner/name; matched regardless of case, as GitHub matches
names) and the student's folder name, as the TA's ``make grade`` names that student. Blank lines and lines
starting with ``#`` are skipped. A repository not listed is refused: nothing of it is graded.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

_REPOSITORY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$")
HEADER = ["repository", "student"]


class RosterError(ValueError):
    pass


def load(path: Path) -> dict[str, str]:
    """Repository full name, case-folded -> student folder name."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise RosterError(f"cannot read the roster {path}: {error}") from None
    rows = [(number, row) for number, row in enumerate(csv.reader(text.splitlines()), start=1)
            if row and any(cell.strip() for cell in row) and not row[0].lstrip().startswith("#")]
    if not rows or [cell.strip().lower() for cell in rows[0][1]] != HEADER:
        raise RosterError(f"{path}: the first row must be the header {','.join(HEADER)}")
    roster: dict[str, str] = {}
    for number, row in rows[1:]:
        cells = [cell.strip() for cell in row]
        if len(cells) != 2 or not _REPOSITORY.match(cells[0]) or not _student_name(cells[1]):
            raise RosterError(f"{path}, line {number}: expected owner/name,student folder name; got {row!r}")
        key = cells[0].casefold()
        if key in roster:
            raise RosterError(f"{path}, line {number}: {cells[0]} is listed twice")
        roster[key] = cells[1]
    return roster


def _student_name(name: str) -> bool:
    """A name usable as a folder of the class (grader.intake.layout makes it a safe id where it is not one already)."""
    return (0 < len(name) <= 100 and name not in (".", "..") and name.isprintable()
            and not any(c in name for c in "/\\"))
