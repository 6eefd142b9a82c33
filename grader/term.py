"""One term's rules, from a TOML file: due dates, the late policy and extensions; and each notebook's lateness.

The file (``term.example.toml`` shows every key)::

    [due]                      # assignment = due date, with its UTC offset
    week1 = 2026-10-05T23:59:00-04:00

    [late]
    policy = "per_day"         # "none", "per_day" or "zero" (nbgrader's LateSubmissionPlugin has none and zero)
    per_day = 0.10             # per_day: this fraction of the raw score per started day late ...
    cap = 0.50                 # ... at most this fraction ...
    zero_after_days = 7        # ... and all of it once this many days late (optional)
    times = ["timestamp.txt", "mtime"]   # where a submission time may come from, in this order

    [extensions]               # a student's folder name = { assignment = a new due date, or a number of days }
    "alice" = { week1 = 2026-10-08T23:59:00-04:00 }

A submission time comes from ``timestamp.txt`` in the student's assignment folder (where nbgrader's submit writes
it) or, as a last resort, from the notebook file's modification time (an LMS download keeps the upload time there
when unzipped); the source is always reported. A notebook without one is never penalised: its status says why.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from grader.results import NotebookResult

POLICIES = ("none", "per_day", "zero")
TIME_SOURCES = ("timestamp.txt", "mtime")
TIMESTAMP_FILE = "timestamp.txt"

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

    def lateness(self, result: NotebookResult) -> Lateness:
        """From what grading found of the result's submission time (``timestamp_txt``, ``file_mtime``)."""
        due, extension = self.due_for(result.student, result.assignment, result.student_id)
        if due is None:
            return Lateness(NO_DUE_DATE)
        if not result.submitted_file:
            return Lateness(NOT_SUBMITTED, due, note=extension)
        when, source, problems = None, "", []
        for wanted in self.times:
            found = result.timestamp_txt if wanted == TIMESTAMP_FILE else result.file_mtime
            if found.startswith("unreadable"):
                problems.append(f"{wanted}: {found}")
            elif found:
                when, source = datetime.fromisoformat(found), wanted
                break
        if when is None:
            why = "; ".join(problems) or f"none of {', '.join(self.times)} was there"
            return Lateness(NO_TIME, due, note=f"no submission time ({why}): not penalised; a TA decides")
        source = "timestamp.txt" if source == TIMESTAMP_FILE else "the file's modification time"
        late = max(0.0, (when - due).total_seconds())
        fraction = self.fraction_lost(late)
        status = LATE if late > 0 else ON_TIME
        note = "; ".join(part for part in (extension, f"submitted {shown_time(when)} ({source})",
                                           f"{late_text(late)} late, {fraction:.0%} taken off" if late else "")
                         if part)
        return Lateness(status, due, when, source, late, fraction, note)


def apply(all_results: list[NotebookResult], term: Term) -> None:
    """Set each result's late status, penalty (points) and note from ``term``."""
    for result in all_results:
        lateness = term.lateness(result)
        result.late_status, result.late_note = lateness.status, lateness.note
        result.late_penalty = round(result.score * lateness.fraction, 4)


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
            raise TermError(f"{where}: no assignment is called {name!r} (there are {', '.join(sorted(courses))})")
        return name

    due = {assignment(name, "[due]"): _utc(value, f"[due] {name}") for name, value in data.get("due", {}).items()}
    late = data.get("late", {})
    policy = late.get("policy", "none")
    if policy not in POLICIES:
        raise TermError(f"[late] policy = {policy!r}: one of {', '.join(POLICIES)}")
    times = tuple(late.get("times", TIME_SOURCES))
    if not times or any(t not in TIME_SOURCES for t in times):
        raise TermError(f"[late] times = {list(times)!r}: a list of {', '.join(TIME_SOURCES)}")
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
                None if zero_after is None else float(zero_after), times, extensions)


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
