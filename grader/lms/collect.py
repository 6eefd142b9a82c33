"""``python -m grader collect``: a Canvas "Download submissions" zip into the class layout, with submission times.

Canvas's zip is flat: one file per file a student submitted, named ``<name>[_late]_<user id>_<attachment id>_<file
name>`` (instructure/canvas-lms, lib/content_zipper.rb: ``get_filename`` joins the student's sortable name with every
non-word character removed, ``LATE`` when the submission is late, and the user id, all lower-cased; then
``add_upload_submission`` adds ``_<attachment id>_<display name>``). collect finds the student by the user id on the
roster (grader/lms/roster.py) and writes ``SUBS/<folder>/<assignment>/<file name>``; a zip a student uploaded is
unpacked there. A user id not on the roster still gets a folder (``<name>-<user id>``), and is reported.

Submission times: Canvas's file names carry none (only the late mark), and its zip entries' times are when Canvas
built the zip (rubyzip's ``get_output_stream`` without a time stamps an entry with the time it is written), not when
the student uploaded. So collect takes times only from ``--times FILE``: the JSON that Canvas's submissions API
returns (``GET /api/v1/courses/:course/assignments/:assignment/submissions``: a list of objects with ``user_id`` and
``submitted_at``), or a CSV with those two columns. It writes them where the term reads the LMS's times
(``submitted_at.json`` at the top of SUBS, grader/lms/term.py) and as the notebook files' modification times. Without
--times no time is written and the term finds none from the LMS for that assignment (it says so per notebook).

A ``timestamp.txt`` in a student's upload (a forged nbgrader time) is renamed aside to ``timestamp.txt.uploaded``
and reported: only the LMS's record says when work was submitted.

collect also leaves ``collected.json`` (each student's Canvas user id and attachment ids, so the feedback zips can be
named for Canvas's bulk upload: lms/feedback_zips.py) and a copy of the roster, ``roster.csv``, at the top of SUBS.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from grader.lms.feedback_zips import COLLECTED
from grader.lms.roster import ROSTER_IN_SUBMISSIONS, Roster

SUBMITTED_AT = "submitted_at.json"  # grader/lms/term.py reads it: {"<folder>": {"<assignment>": "<ISO time>"}}
TIMESTAMP_FILE = "timestamp.txt"
SET_ASIDE = ".uploaded"  # appended to a timestamp.txt a student uploaded
MAX_MEMBERS = 2000  # files in one student's uploaded zip
MAX_BYTES = 512 * 2**20  # bytes unpacked from one download, all students together


class CollectError(ValueError):
    """The download or the times file cannot be used; the message says why."""


@dataclass
class Upload:
    """One file of Canvas's download."""

    member: str  # its name in the download
    name: str  # the student's name as Canvas wrote it ("doejane")
    user_id: str
    attachment_id: str
    file_name: str  # as the student named it
    late: bool


@dataclass
class Collected:
    students: dict[str, list[str]] = field(default_factory=dict)  # folder -> files written (relative to SUBS)
    times: dict[str, datetime] = field(default_factory=dict)  # folder -> submitted_at
    late_marked: list[str] = field(default_factory=list)  # folders Canvas marked late
    not_on_roster: list[str] = field(default_factory=list)  # folders made for user ids the roster lacks
    no_submission: list[str] = field(default_factory=list)  # roster entries with no file in the download
    set_aside: list[str] = field(default_factory=list)  # timestamp.txt files students uploaded
    skipped: list[str] = field(default_factory=list)  # members not read, and why

    def lines(self, assignment: str, subs: Path, with_times: bool) -> list[str]:
        out = [f"collected {assignment} for {len(self.students)} student(s) into {subs}"]
        if with_times:
            untimed = sorted(set(self.students) - set(self.times))
            out.append(f"submission times for {len(self.times)} student(s) in {subs / SUBMITTED_AT}"
                       + (f"; none in the times file for: {', '.join(untimed)}" if untimed else ""))
        else:
            out.append("no --times file: no submission times were written (Canvas's zip holds none; its entries' "
                       "times are when the zip was built), so the term has no LMS time for this assignment")
        if self.late_marked:
            out.append(f"Canvas marked {len(self.late_marked)} late: {', '.join(self.late_marked)}")
        if self.not_on_roster:
            out.append(f"{len(self.not_on_roster)} Canvas user(s) not on the roster, collected under a folder of "
                       f"their own: {', '.join(self.not_on_roster)}")
        if self.no_submission:
            out.append(f"{len(self.no_submission)} roster entr(y/ies) with nothing in the download: "
                       f"{', '.join(self.no_submission)}")
        out += [f"set aside a {TIMESTAMP_FILE} the student uploaded (never a submission time): {p}"
                for p in self.set_aside]
        out += [f"skipped {s}" for s in self.skipped]
        return out


def parse_name(member: str) -> Upload | None:
    """Canvas's download name of one file (None when it is not one): the first all-digit ``_`` part is the user
    id, the next (when all digits) the attachment id, and the rest the file's own name; a ``late`` part (or a
    leading ``LATE_``) before the user id marks a late submission."""
    name = PurePosixPath(member).name
    parts = name.split("_")
    at = next((i for i, part in enumerate(parts) if part.isdigit()), None)
    if at is None:
        return None
    before = [p.lower() for p in parts[:at]]
    attachment = parts[at + 1] if at + 1 < len(parts) and parts[at + 1].isdigit() else ""
    rest = "_".join(parts[at + (2 if attachment else 1):])
    if not rest or rest in (".", ".."):
        return None
    name_part = "".join(p for p in parts[:at] if p.lower() != "late")
    return Upload(member, name_part, parts[at], attachment, rest, "late" in before)


def read_times(path: Path) -> dict[str, datetime]:
    """Canvas user id -> submitted_at, from the submissions API's JSON or a CSV of user_id,submitted_at."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise CollectError(f"{path}: cannot be read ({error})") from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except ValueError as error:
            raise CollectError(f"{path}: not JSON ({error})") from None
        records = data.get("submissions", data) if isinstance(data, dict) else data
        if isinstance(records, dict):  # {"<user id>": "<time>"}
            records = [{"user_id": k, "submitted_at": v} for k, v in records.items()]
    else:
        records = list(csv.DictReader(io.StringIO(text)))
    if not isinstance(records, list):
        raise CollectError(f"{path}: expected a list of submissions with user_id and submitted_at")
    times = {}
    for number, record in enumerate(records, start=1):
        if not isinstance(record, dict) or "user_id" not in record or "submitted_at" not in record:
            raise CollectError(f"{path}: submission {number} has no user_id and submitted_at")
        when = record["submitted_at"]
        if when in (None, ""):  # Canvas lists students who submitted nothing with submitted_at null
            continue
        try:
            parsed = datetime.fromisoformat(str(when).strip())
        except ValueError:
            raise CollectError(f"{path}: submission {number}: {when!r} is not an ISO 8601 time") from None
        if parsed.tzinfo is None:
            raise CollectError(f"{path}: submission {number}: {when!r} has no UTC offset (Canvas writes Z)")
        times[str(record["user_id"]).strip()] = parsed.astimezone(UTC)
    return times


def _folder_name(upload: Upload) -> str:
    """The folder of a Canvas user the roster lacks: their name as Canvas wrote it, and their user id."""
    return f"{re.sub(r'[^A-Za-z0-9-]', '', upload.name) or 'canvas'}-{upload.user_id}"


def _safe_parts(name: str) -> tuple[str, ...] | None:
    path = PurePosixPath(name.replace("\\", "/"))
    parts = tuple(p for p in path.parts if p not in ("", "."))
    if path.is_absolute() or not parts or ".." in parts or parts[0] == "__MACOSX" or any(
            p.startswith(".") for p in parts):
        return None
    return parts


class _Writer:
    def __init__(self, subs: Path, collected: Collected) -> None:
        self.subs, self.collected, self.budget = subs, collected, MAX_BYTES

    def put(self, folder: str, parts: tuple[str, ...], data: bytes) -> None:
        if len(data) > self.budget:
            raise CollectError(f"the download unpacks to more than {MAX_BYTES // 2**20} MiB: is it the right zip?")
        self.budget -= len(data)
        if parts[-1].lower() == TIMESTAMP_FILE:
            parts = (*parts[:-1], parts[-1] + SET_ASIDE)
            self.collected.set_aside.append("/".join((folder, *parts)))
        target = self.subs.joinpath(folder, *parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        serial = 1
        while target.exists():  # two uploads of one name: keep both
            serial += 1
            target = target.with_name(f"{PurePosixPath(parts[-1]).stem}-{serial}{PurePosixPath(parts[-1]).suffix}")
        target.write_bytes(data)
        self.collected.students[folder].append(target.relative_to(self.subs).as_posix())

    def unpack(self, folder: str, assignment: str, upload: Upload, data: bytes) -> None:
        """A zip the student uploaded, into their assignment folder (a leading <assignment>/ folder dropped)."""
        try:
            inner = zipfile.ZipFile(io.BytesIO(data))
            members = [m for m in inner.infolist() if not m.is_dir()]
        except (zipfile.BadZipFile, OSError):
            self.put(folder, (assignment, upload.file_name), data)
            return
        if len(members) > MAX_MEMBERS:
            self.collected.skipped.append(f"{upload.member}: {len(members)} files (at most {MAX_MEMBERS})")
            return
        named = [(m, _safe_parts(m.filename)) for m in members]
        for member, parts in named:
            if parts is None:
                self.collected.skipped.append(f"{upload.member}: {member.filename!r} (a hidden, absolute or "
                                              "outside path)")
        kept = [(m, p) for m, p in named if p]
        if kept and all(len(p) > 1 and p[0] == assignment for _, p in kept):
            kept = [(m, p[1:]) for m, p in kept]
        for member, parts in kept:
            if member.file_size > self.budget:
                raise CollectError(f"{upload.member} unpacks to more than {MAX_BYTES // 2**20} MiB")
            try:
                data = inner.read(member)
            except (zipfile.BadZipFile, OSError, RuntimeError, ValueError) as error:  # corrupt, or encrypted
                self.collected.skipped.append(f"{upload.member}: {member.filename!r} cannot be read ({error})")
                continue
            self.put(folder, (assignment, *parts), data)


def collect(download: Path, roster: Roster, assignment: str, subs: Path,
            times: dict[str, datetime] | None = None) -> Collected:
    """Write ``download``'s files into ``subs``/<folder>/``assignment``/ (each student's earlier copy of that
    assignment replaced), the times into subs/submitted_at.json, and collect's record into subs/collected.json."""
    try:
        archive = zipfile.ZipFile(download)
    except (OSError, zipfile.BadZipFile) as error:
        raise CollectError(f"{download}: not a zip ({error})") from None
    collected = Collected()
    people = roster.by_canvas_id()
    uploads: list[Upload] = []
    with archive:
        for member in archive.infolist():
            if member.is_dir():
                continue
            parts = _safe_parts(member.filename)
            upload = parse_name(member.filename) if parts and len(parts) == 1 else None
            if upload is None:
                collected.skipped.append(f"{member.filename!r}: not a Canvas submission file "
                                         "(<name>_<user id>_<attachment id>_<file>)")
                continue
            uploads.append(upload)
        folders = {u.user_id: people[u.user_id].folder if u.user_id in people else _folder_name(u) for u in uploads}
        subs.mkdir(parents=True, exist_ok=True)
        for folder in sorted(set(folders.values())):
            collected.students[folder] = []
            old = subs / folder / assignment
            if old.is_symlink() or old.is_file():
                old.unlink()
            elif old.is_dir():
                shutil.rmtree(old)
        writer = _Writer(subs, collected)
        record: dict[str, dict[str, object]] = {}
        for upload in uploads:
            folder = folders[upload.user_id]
            if archive.getinfo(upload.member).file_size > writer.budget:
                raise CollectError(f"the download unpacks to more than {MAX_BYTES // 2**20} MiB: is it the right zip?")
            try:
                data = archive.read(upload.member)
            except (zipfile.BadZipFile, OSError, RuntimeError, ValueError) as error:
                collected.skipped.append(f"{upload.member!r}: cannot be read ({error})")
                continue
            if upload.file_name.lower().endswith(".zip"):
                writer.unpack(folder, assignment, upload, data)
            else:
                writer.put(folder, (assignment, upload.file_name), data)
            entry = record.setdefault(folder, {"canvas_user_id": upload.user_id, "attachment_ids": [],
                                               "late": False})
            if upload.attachment_id:
                entry["attachment_ids"].append(upload.attachment_id)  # type: ignore[union-attr]
            entry["late"] = bool(entry["late"]) or upload.late
    collected.not_on_roster = sorted({f for uid, f in folders.items() if uid not in people})
    collected.no_submission = sorted(p.folder for p in roster.people if p.canvas_id not in folders)
    collected.late_marked = sorted(f for f, e in record.items() if e["late"])
    for user_id, folder in folders.items():
        when = (times or {}).get(user_id)
        if when is None:
            continue
        collected.times[folder] = when
        record[folder]["submitted_at"] = when.isoformat()
        stamp = when.timestamp()
        for written in collected.students[folder]:
            os.utime(subs / written, (stamp, stamp))
    _merge(subs / COLLECTED, {assignment: record})
    if times is not None:
        stamps = {folder: {assignment: when.isoformat()} for folder, when in collected.times.items()}
        _merge(subs / SUBMITTED_AT, stamps, replace_inner=assignment)
    if roster.path.resolve() != (subs / ROSTER_IN_SUBMISSIONS).resolve():
        shutil.copyfile(roster.path, subs / ROSTER_IN_SUBMISSIONS)
    return collected


def _merge(path: Path, new: dict[str, dict[str, object]], replace_inner: str | None = None) -> None:
    """Merge ``new`` into the JSON object at ``path``: collected.json by assignment (replaced whole); the times by
    student, where ``replace_inner`` (this assignment) is first taken out of every student's entry."""
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    if replace_inner is None:
        data.update(new)
    else:
        for entry in data.values():
            if isinstance(entry, dict):
                entry.pop(replace_inner, None)
        for key, inner in new.items():
            data.setdefault(key, {}).update(inner)
        data = {k: v for k, v in data.items() if v}
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(temporary, path)
