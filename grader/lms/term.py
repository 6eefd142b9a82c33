"""One term's rules, from a TOML file: due dates, the late policy and extensions; and each notebook's lateness.

The file (``term.example.toml`` shows every key)::

    [due]                      # assignment = due date, with its UTC offset
    week1 = 2026-10-05T23:59:00-04:00

    [late]
    policy = "per_day"         # "none", "per_day" or "zero" (nbgrader's LateSubmissionPlugin has none and zero)
    per_day = 0.10             # per_day: this fraction of the raw score per started day late ...
    cap = 0.50                 # ... at most this fraction ...
    zero_after_days = 7        # ... and all of it once this many days late (optional)
    times = ["lms", "timestamp.txt", "mtime"]   # where a submission time may come from, in this order
    from_exchange = false      # true: the folders came from nbgrader's exchange, so timestamp.txt and file times
                               # were written by nbgrader, not by the student

    [extensions]               # a student's folder name = { assignment = a new due date, or a number of days }
    "alice" = { week1 = 2026-10-08T23:59:00-04:00 }

Where a submission time comes from, and which ones the student cannot have written:

* ``lms``: the LMS's own record of the upload, in ``submitted_at.json`` at the top of the submissions folder
  (beside the student folders, so no student's upload can hold it). Whatever downloads the class from the LMS
  (such as ``python -m grader collect``) writes it with :func:`write_submitted_at`; its form is
  ``{"<student folder name>": {"<assignment>": "<ISO 8601 time with its UTC offset>"}}``. Always trusted.
* ``timestamp.txt`` in the student's assignment folder (where nbgrader's submit writes it) and ``mtime``, the notebook
  file's modification time: a student who uploads a folder or a zip writes both, so they count only where the term
  says ``from_exchange = true`` (the folders came from nbgrader's exchange). Otherwise a timestamp.txt found is
  ignored and the notebook's late note says so.

Every time is read again each time the reports are written (``grader.report.publish``), so a corrected time needs no
regrading. A notebook without a usable time is never penalised: its status says why.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from grader.score.results import NotebookResult

POLICIES = ("none", "per_day", "zero")
LMS, TIMESTAMP_FILE, MTIME = "lms", "timestamp.txt", "mtime"
TIME_SOURCES = (LMS, TIMESTAMP_FILE, MTIME)
SUBMITTED_AT = "submitted_at.json"  # at the submissions folder's top: the LMS's upload times (see above)
SOURCE_NAMES = {LMS: "the LMS's record", TIMESTAMP_FILE: "timestamp.txt", MTIME: "the file's modification time"}

# A notebook's lateness status (NotebookResult.late_status).
NO_DUE_DATE = "no_due_date"  # its assignment has no due date: nothing to be late for
ON_TIME = "on_time"
LATE = "late"
NO_TIME = "no_submission_time"  # due, but no usable submission time: not penalised, a TA decides
NOT_SUBMITTED = "not_submitted"


class TermError(ValueError):
    """The term file cannot be used; the message says where and why."""


@dataclass(frozen=True)
class Lateness:
    status: str
    due: datetime | None = None  # the student's due date, extension included (UTC)
    submitted: datetime | None = None  # UTC
    source: str = ""  # where ``submitted`` came from
    seconds_late: float = 0.0
    fraction: float = 0.0  # of the raw score taken away
    note: str = ""


@dataclass(frozen=True)
class Term:
    due: dict[str, datetime] = field(default_factory=dict)  # assignment -> due date (UTC)
    policy: str = "none"
    per_day: float = 0.0
    cap: float = 1.0
    zero_after_days: float | None = None
    times: tuple[str, ...] = TIME_SOURCES
    from_exchange: bool = False  # timestamp.txt and file times were written by nbgrader's exchange, not the student
    extensions: dict[str, dict[str, datetime | float]] = field(default_factory=dict)  # student -> assignment ->
    # a new due date (UTC) or a number of days

    def due_for(self, student: str, assignment: str, student_id: str = "") -> tuple[datetime | None, str]:
        """The student's due date for ``assignment`` (an extension applied), and a note naming the extension.
        An extension is found under the student's folder name as given or under its safe id."""
        due = self.due.get(assignment)
        granted = (self.extensions.get(student) or self.extensions.get(student_id) or {}).get(assignment)
        if due is None or granted is None:
            return due, ""
        if isinstance(granted, datetime):
            return granted, f"extension to {shown_time(granted)}"
        return due + timedelta(days=granted), f"extension of {granted:g} day{'s' if granted != 1 else ''}"

    def is_due(self, assignment: str, now: datetime) -> bool:
        """Whether the assignment's own due date has passed (no due date: it is due whenever it is graded)."""
        due = self.due.get(assignment)
        return due is None or now >= due

    def fraction_lost(self, seconds_late: float) -> float:
        if seconds_late <= 0 or self.policy == "none":
            return 0.0
        if self.policy == "zero":
            return 1.0
        if self.zero_after_days is not None and seconds_late > self.zero_after_days * 86400:
            return 1.0
        return min(self.cap, self.per_day * math.ceil(seconds_late / 86400))

    def lateness(self, result: NotebookResult, lms_time: str = "") -> Lateness:
        """From the submission times found (``lms_time``: the LMS's record, ISO; ``result.timestamp_txt`` and
        ``result.file_mtime``: what the student's folder holds)."""
        due, extension = self.due_for(result.student, result.assignment, result.student_id)
        if due is None:
            return Lateness(NO_DUE_DATE)
        if not result.submitted_file:
            return Lateness(NOT_SUBMITTED, due, note=extension)
        when, source, problems = None, "", []
        found = {LMS: lms_time, TIMESTAMP_FILE: result.timestamp_txt, MTIME: result.file_mtime}
        for wanted in self.times:
            value = found[wanted]
            if value and wanted != LMS and not self.from_exchange:
                problems.append(f"{wanted} ignored: the student's upload could have set it (the term's from_exchange "
                                "= true trusts it)")
            elif value.startswith("unreadable"):
                problems.append(f"{wanted}: {value}")
            elif value:
                when, source = datetime.fromisoformat(value), wanted
                break
        ignored = (f"{TIMESTAMP_FILE} ignored: the student's upload could have set it (the term's from_exchange "
                   "= true trusts it)")
        if result.timestamp_txt and not self.from_exchange and ignored not in problems:
            problems.append(ignored)  # reported even where a time came from elsewhere
        if when is None:
            why = "; ".join(problems) or f"none of {', '.join(self.times)} was there"
            return Lateness(NO_TIME, due, note=f"no submission time ({why}): not penalised; a TA decides")
        late = max(0.0, (when - due).total_seconds())
        fraction = self.fraction_lost(late)
        status = LATE if late > 0 else ON_TIME
        note = "; ".join(part for part in (extension, f"submitted {shown_time(when)} ({SOURCE_NAMES[source]})",
                                           f"{late_text(late)} late, {fraction:.0%} taken off" if late else "",
                                           *problems)
                         if part)
        return Lateness(status, due, when, source, late, fraction, note)

    def check_students(self, students: set[str]) -> None:
        """An extension for a student the class does not have is an error naming the closest one."""
        for name in self.extensions:
            if name not in students:
                raise TermError(f"[extensions] {name!r}: no student is called that{closest(name, students)}")


def closest(name: str, choices: set[str]) -> str:
    """", the closest is 'x'" (difflib), or the choices when none is close."""
    near = difflib.get_close_matches(name, sorted(choices), n=1, cutoff=0.5) or \
        [c for c in sorted(choices) if c.casefold() == name.casefold()]
    if near:
        return f" (the closest is {near[0]!r})"
    return f" (there are {', '.join(sorted(choices))})" if len(choices) <= 12 else ""


def read_submitted_at(submissions: Path | None) -> dict[tuple[str, str], str]:
    """(student folder name, assignment) -> the LMS's upload time (ISO UTC) from ``submitted_at.json``; an entry
    that is not a time with an offset is read as "unreadable: ..." (its notebook's note says so)."""
    path = None if submissions is None else submissions / SUBMITTED_AT
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise TermError(f"{path} cannot be read: {error}") from None
    times: dict[tuple[str, str], str] = {}
    for student, assignments in (data.items() if isinstance(data, dict) else ()):
        for assignment, text in (assignments.items() if isinstance(assignments, dict) else ()):
            try:
                when = datetime.fromisoformat(str(text))
                if when.tzinfo is None:
                    raise ValueError("no UTC offset")
                times[student, assignment] = when.astimezone(UTC).isoformat()
            except ValueError as error:
                times[student, assignment] = f"unreadable: {str(text)[:60]!r} ({error})"
    return times


def write_submitted_at(submissions: Path, student: str, assignment: str, when: datetime) -> None:
    """Record the LMS's upload time of one student's assignment (``when`` with its UTC offset) in
    ``submissions/submitted_at.json``, keeping the others: for whatever downloads the class from the LMS."""
    if when.tzinfo is None:
        raise ValueError(f"{when.isoformat()}: a submission time needs its UTC offset")
    path = submissions / SUBMITTED_AT
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    data.setdefault(student, {})[assignment] = when.astimezone(UTC).isoformat()
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(temporary, path)


def apply(all_results: list[NotebookResult], term: Term,
          lms_times: dict[tuple[str, str], str] | None = None) -> dict[tuple[str, str, str], Lateness]:
    """Set each result's late status, penalty (points) and note from ``term``; returns each one's Lateness by
    (student id, assignment, notebook). ``lms_times``: ``read_submitted_at``'s."""
    found = {}
    for result in all_results:
        lateness = term.lateness(result, (lms_times or {}).get((result.student, result.assignment), ""))
        result.late_status, result.late_note = lateness.status, lateness.note
        result.late_penalty = round(result.score * lateness.fraction, 4)
        found[result.student_id, result.assignment, result.notebook] = lateness
    return found


def shown_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def late_text(seconds: float) -> str:
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    return f"{days} d {hours} h" if days else f"{hours} h {rest // 60} min"


def _utc(value: Any, where: str) -> datetime:
    if not isinstance(value, datetime):
        raise TermError(f"{where}: {value!r} is not a date and time (write it as 2026-10-05T23:59:00-04:00)")
    if value.tzinfo is None:
        raise TermError(f"{where}: {value.isoformat()} has no UTC offset (add one, such as -04:00 or Z)")
    return value.astimezone(UTC)


def _fraction(section: dict[str, Any], key: str, default: float) -> float:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise TermError(f"[late] {key} = {value!r}: a fraction between 0 and 1 (0.1 for 10%)")
    return float(value)


def parse(data: dict[str, Any], courses: set[str] | None = None) -> Term:
    """A Term from the TOML's tables; ``courses``: the assignment names there are (an unknown one is an error)."""
    unknown = set(data) - {"due", "late", "extensions"}
    if unknown:
        raise TermError(f"unknown table(s) {', '.join(sorted(unknown))} (the file has [due], [late], [extensions])")

    def assignment(name: str, where: str) -> str:
        if courses is not None and name not in courses:
            raise TermError(f"{where}: no assignment is called {name!r}{closest(name, courses)}")
        return name

    due = {assignment(name, "[due]"): _utc(value, f"[due] {name}") for name, value in data.get("due", {}).items()}
    late = data.get("late", {})
    policy = late.get("policy", "none")
    if policy not in POLICIES:
        raise TermError(f"[late] policy = {policy!r}: one of {', '.join(POLICIES)}")
    times = tuple(late.get("times", TIME_SOURCES))
    if not times or any(t not in TIME_SOURCES for t in times):
        raise TermError(f"[late] times = {list(times)!r}: a list of {', '.join(TIME_SOURCES)}")
    from_exchange = late.get("from_exchange", False)
    if not isinstance(from_exchange, bool):
        raise TermError(f"[late] from_exchange = {from_exchange!r}: true or false")
    zero_after = late.get("zero_after_days")
    if zero_after is not None and (isinstance(zero_after, bool) or not isinstance(zero_after, int | float)
                                   or zero_after < 0):
        raise TermError(f"[late] zero_after_days = {zero_after!r}: a number of days")
    if policy == "per_day" and "per_day" not in late:
        raise TermError("[late] policy = \"per_day\" needs per_day (the fraction taken off per started day)")
    extensions: dict[str, dict[str, datetime | float]] = {}
    for student, granted in data.get("extensions", {}).items():
        if not isinstance(granted, dict):
            raise TermError(f"[extensions] {student!r}: write {{ week1 = 2 }} (days) or {{ week1 = <a date> }}")
        extensions[student] = {}
        for name, value in granted.items():
            where = f"[extensions] {student!r} {name}"
            if assignment(name, where) not in due:
                raise TermError(f"{where}: {name} has no due date in [due] to extend")
            days = isinstance(value, int | float) and not isinstance(value, bool)
            if days and value < 0:
                raise TermError(f"{where} = {value!r}: a number of days, not negative")
            extensions[student][name] = float(value) if days else _utc(value, where)
    return Term(due, policy, _fraction(late, "per_day", 0.0), _fraction(late, "cap", 1.0),
                None if zero_after is None else float(zero_after), times, from_exchange, extensions)


def load(path: Path, courses: set[str] | None = None) -> Term:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise TermError(f"{path}: cannot be read ({error.strerror or error})") from None
    except tomllib.TOMLDecodeError as error:
        raise TermError(f"{path} is not valid TOML: {error}") from None
    try:
        return parse(data, courses)
    except TermError as error:
        raise TermError(f"{path}: {error}") from None


def submission_times(student_dir: Path, assignment: str, notebook: Path) -> tuple[str, str]:
    """(timestamp.txt's time, the notebook file's modification time), each ISO UTC, "" when absent, or
    "unreadable: ..." when there but not usable."""
    from nbgrader.utils import parse_utc  # here: importing nbgrader costs every sandboxed stage that imports layout

    stamp = ""
    stamp_path = student_dir / assignment / TIMESTAMP_FILE
    if stamp_path.is_file() and not stamp_path.is_symlink():
        text = stamp_path.read_text(encoding="utf-8", errors="replace")[:200].strip()
        try:
            stamp = parse_utc(text).replace(tzinfo=UTC).isoformat()
        except (ValueError, OverflowError, TypeError):
            stamp = f"unreadable: {text[:60]!r} is not a date and time"
    try:
        mtime = datetime.fromtimestamp(notebook.stat().st_mtime, UTC).isoformat()
    except OSError as error:
        mtime = f"unreadable: {error.strerror or error}"
    return stamp, mtime
