"""The LMS side of grading, on fabricated results (CPU only, no notebook runs): the roster, the Canvas file against
Canvas's gradebook import header, collect of a Canvas "Download submissions" zip, and the per-assignment feedback
zips."""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath

import pytest

from grader import cli
from grader.intake.layout import find_submissions
from grader.lms import collect, feedback_zips, roster, upload
from grader.report.feedback import page_path, render_page
from grader.score.results import GRADER_ERROR, MISSING, OK, PASSED, PENDING, ItemResult, NotebookResult

# Canvas's gradebook import header, as its importer checks it (instructure/canvas-lms,
# app/models/gradebook_importer.rb: row[0] "Student", row[1] "ID", then "SIS User ID" and "SIS Login ID", and
# "Section" last of the student columns) and its gradebook export writes it.
CANVAS_HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]

ROSTER = """\ufeffStudent,ID,SIS User ID,SIS Login ID,Section,week1 (4821),Current Score,Final Score
    Points Possible,,,,,14,(read only),(read only)
"Doe, Jane",12345,900001,jdoe,GPU-01,,,
"Roe, Sam",23456,900002,sroe,GPU-01,,,
"Mallory, Eve",34567,900003,emallory,GPU-02,,,
"Absent, Carol",45678,900004,cabsent,GPU-02,,,
"""
DUE = datetime(2026, 10, 5, 23, 59, tzinfo=UTC)


def _roster(tmp_path: Path) -> roster.Roster:
    path = tmp_path / "roster.csv"
    path.write_text(ROSTER, encoding="utf-8")
    return roster.load(path)


def _result(student: str, assignment: str, notebook: str, *, pending: float = 0.0, earned: float = 9.0,
            status: str = OK) -> NotebookResult:
    items = [ItemResult("correct", "correctness", earned, 9.0, PASSED)]
    if pending:
        items.append(ItemResult("fast", "performance", None, pending, PENDING, "pending a GPU run"))
    return NotebookResult(student, assignment, notebook, status, items=items, device="cpu",
                          submitted_file=f"{assignment}/{notebook}.ipynb")


def _csv(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.reader(f))


def test_the_roster_reads_canvas_s_gradebook_export(tmp_path):
    people = _roster(tmp_path)
    assert [p.folder for p in people.people] == ["jdoe", "sroe", "emallory", "cabsent"]  # SIS Login ID
    assert people.by_canvas_id()["12345"].name == "Doe, Jane"
    assert people.assignment_columns == {"week1": "week1 (4821)"}  # not Current Score, Final Score
    found = roster.reconcile(people, ["jdoe", "sroe", "zed"])
    assert found.not_on_roster == ["zed"]
    assert [p.folder for p in found.no_submission] == ["cabsent", "emallory"]
    assert "zed" in found.lines()[0] and "Absent, Carol (cabsent)" in found.lines()[1]
    explicit = tmp_path / "folders.csv"
    explicit.write_text("Student,ID,SIS Login ID,folder\n\"Doe, Jane\",12345,jdoe@uni.edu,jane doe\n")
    assert roster.load(explicit).people[0].folder == "jane doe"  # the folder column wins
    semicolons = tmp_path / "semicolons.csv"
    semicolons.write_text("Student;ID;SIS User ID;SIS Login ID;Section\nDoe, Jane;12345;900001;jdoe;GPU-01\n")
    assert roster.load(semicolons).people[0] == roster.Person("Doe, Jane", "12345", "900001", "jdoe", "GPU-01", "jdoe")


@pytest.mark.parametrize(("text", "says"), [
    ("Name,Login\nJane,jdoe\n", "no 'Student' or 'ID' column"),
    ("Student,ID,SIS Login ID\nA,1,x\nB,2,x\n", "folder 'x' is also line 2's"),
    ("Student,ID,SIS Login ID\nA,1,x\nB,1,y\n", "ID 1 is also line 2's"),
    ("Student,ID,folder\nA,1,../../etc\n", "'../../etc' cannot be a student's folder name"),
])
def test_a_roster_that_cannot_be_used_says_why(tmp_path, text, says):
    path = tmp_path / "roster.csv"
    path.write_text(text)
    with pytest.raises(roster.RosterError, match=re.escape(says)):
        roster.load(path)


def test_the_canvas_file_has_canvas_s_import_columns_and_leaves_pending_points_blank(tmp_path):
    people = _roster(tmp_path)
    results = [_result("jdoe", "week1", "day1_fake"), _result("jdoe", "week1", "day2_fake"),
               _result("sroe", "week1", "day1_fake", pending=5.0), _result("sroe", "week1", "day2_fake"),
               _result("jdoe", "week2", "day7_fake"), _result("sroe", "week2", "day7_fake", status=GRADER_ERROR),
               _result("zed", "week1", "day1_fake"),
               _result("emallory", "week1", "day1_fake", status=MISSING, earned=0.0),
               _result("emallory", "week1", "day2_fake", status=MISSING, earned=0.0)]
    made = upload.write(results, tmp_path / "out", people)
    rows = _csv(made.canvas)
    header = rows[0]
    assert header[:5] == CANVAS_HEADER
    assert header[5:] == ["week1 (4821)", "week2"]  # one column per assignment; the roster's id where it has one
    assert not any("total" in column.lower() for column in header)  # the course total is Canvas's
    by_name = {row[0]: dict(zip(header, row, strict=True)) for row in rows[1:]}
    assert by_name["Points Possible"]["week1 (4821)"] == "23" and by_name["Points Possible"]["week2"] == "9"
    jane = by_name["Doe, Jane"]
    assert (jane["ID"], jane["SIS User ID"], jane["SIS Login ID"], jane["Section"]) == ("12345", "900001", "jdoe",
                                                                                        "GPU-01")
    assert jane["week1 (4821)"] == "18" and jane["week2"] == "9"
    sam = by_name["Roe, Sam"]
    assert sam["week1 (4821)"] == "" and sam["week2"] == ""  # pending a GPU run; the grader failed: not 0
    assert by_name["Mallory, Eve"]["week1 (4821)"] == "0"  # nothing submitted, due: a real 0
    assert "zed" not in by_name  # not on the roster: Canvas could not place the row
    notes = made.notes.read_text()
    assert "sroe week1: blank (day1_fake: 5 point(s) pending a GPU run; 18 point(s) decided so far)" in notes
    assert "sroe week2: blank (day7_fake: the grader failed on it" in notes
    assert "zed" in notes and "Absent, Carol (cabsent)" in notes and "No total column" in notes
    assert any("left blank, not 0" in line for line in made.lines)


def test_without_a_roster_the_identity_columns_say_what_they_hold(tmp_path):
    made = upload.write([_result("jdoe", "week1", "day1_fake")], tmp_path / "out")
    header, points, row = _csv(made.canvas)
    assert header == [*CANVAS_HEADER, "week1"] and points[0] == "Points Possible"
    assert row == ["jdoe", "", "", "jdoe", "", "9"]
    assert "No roster was given: Student and SIS Login ID hold the student's folder name" in made.notes.read_text()


def _notebook(text: str = "print(1)") -> bytes:
    return json.dumps({"cells": [{"cell_type": "code", "source": text, "metadata": {}, "outputs": [],
                                  "execution_count": None}], "metadata": {}, "nbformat": 4,
                       "nbformat_minor": 5}).encode()


def _canvas_download(path: Path, forged: bool) -> Path:
    """A download as Canvas's content_zipper names it: <name>[_late]_<user id>_<attachment id>_<file name>."""
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr("week1/day1_host_baseline.ipynb", _notebook("mallory"))
        z.writestr("week1/timestamp.txt", "2026-10-01 10:00:00.000000 UTC")
        z.writestr("../escape.txt", "no")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("doejane_12345_67890_day1_host_baseline.ipynb", _notebook("jane"))
        z.writestr("roesam_late_23456_78901_day1_host_baseline.ipynb", _notebook("sam"))
        if forged:  # an on-time nbgrader time, uploaded with the late notebook
            z.writestr("roesam_late_23456_78902_timestamp.txt", "2026-10-01 10:00:00.000000 UTC")
        z.writestr("mallory_34567_79999_week1.zip", inner.getvalue())
        z.writestr("ghost_99999_11111_day1_host_baseline.ipynb", _notebook("ghost"))
        z.writestr("notes.txt", "not a submission")
    return path


TIMES = [{"user_id": 12345, "submitted_at": "2026-10-05T20:00:00Z", "late": False},
         {"user_id": 23456, "submitted_at": "2026-10-07T09:30:00Z", "late": True},
         {"user_id": 34567, "submitted_at": "2026-10-05T23:00:00-04:00", "late": True},
         {"user_id": 45678, "submitted_at": None, "late": False}]


def _files(subs: Path) -> set[str]:
    return {p.relative_to(subs).as_posix() for p in subs.rglob("*") if p.is_file()}


def test_collect_turns_a_canvas_download_into_the_class_layout_with_its_times(tmp_path):
    people = _roster(tmp_path)
    times_file = tmp_path / "submissions.json"
    times_file.write_text(json.dumps(TIMES))
    times = collect.read_times(times_file)
    subs = {}
    for forged in (False, True):
        subs[forged] = tmp_path / f"subs-{forged}"
        done = collect.collect(_canvas_download(tmp_path / f"{forged}.zip", forged), people, "week1", subs[forged],
                               times)
    clean, with_forgery = subs[False], subs[True]
    assert {"jdoe/week1/day1_host_baseline.ipynb", "sroe/week1/day1_host_baseline.ipynb",
            "emallory/week1/day1_host_baseline.ipynb", "ghost-99999/week1/day1_host_baseline.ipynb",
            "submitted_at.json", "collected.json", "roster.csv"} <= _files(clean)
    assert json.loads((clean / "emallory/week1/day1_host_baseline.ipynb").read_text())["cells"][0]["source"] == \
        "mallory"  # the student's own zip, unpacked, its week1/ folder dropped
    assert not (tmp_path / "escape.txt").exists() and not list(tmp_path.rglob("escape.txt"))
    stamps = json.loads((clean / "submitted_at.json").read_text())
    assert stamps == {"jdoe": {"week1": "2026-10-05T20:00:00+00:00"}, "sroe": {"week1": "2026-10-07T09:30:00+00:00"},
                      "emallory": {"week1": "2026-10-06T03:00:00+00:00"}}
    jane = clean / "jdoe/week1/day1_host_baseline.ipynb"
    assert datetime.fromtimestamp(jane.stat().st_mtime, UTC) == datetime(2026, 10, 5, 20, tzinfo=UTC)
    # the forged timestamp.txt changes nothing: no timestamp.txt anywhere, the same times, the same submissions
    assert not [f for f in _files(with_forgery) if PurePosixPath(f).name == "timestamp.txt"]
    assert (with_forgery / "submitted_at.json").read_bytes() == (clean / "submitted_at.json").read_bytes()
    assert _files(with_forgery) - _files(clean) == {"sroe/week1/timestamp.txt.uploaded"}
    graded = [find_submissions(root, ("week1",))[0] for root in (clean, with_forgery)]
    assert [(s.student, s.notebook, s.submitted_file) for s in graded[0]] == \
        [(s.student, s.notebook, s.submitted_file) for s in graded[1]]
    assert "sroe/week1/timestamp.txt.uploaded" in done.set_aside
    assert "emallory/week1/timestamp.txt.uploaded" in done.set_aside  # inside the student's zip too
    lines = "\n".join(done.lines("week1", with_forgery, True))
    assert "not on the roster" in lines and "ghost-99999" in lines and "cabsent" in lines
    assert "Canvas marked 1 late: sroe" in lines and "'notes.txt': not a Canvas submission" in lines
    record = json.loads((with_forgery / "collected.json").read_text())["week1"]
    assert record["jdoe"] == {"canvas_user_id": "12345", "attachment_ids": ["67890"], "late": False,
                              "submitted_at": "2026-10-05T20:00:00+00:00"}


def test_collect_without_times_writes_none_and_a_times_csv_is_read(tmp_path, capsys):
    _roster(tmp_path)
    download = _canvas_download(tmp_path / "download.zip", forged=False)
    subs = tmp_path / "subs"
    assert cli.main(["collect", str(download), "--roster", str(tmp_path / "roster.csv"), "--assignment", "week1",
                     "--out", str(subs)]) == 0
    assert "no --times file: no submission times were written" in capsys.readouterr().out
    assert not (subs / "submitted_at.json").exists()
    times = tmp_path / "times.csv"
    times.write_text("user_id,submitted_at\n12345,2026-10-05T20:00:00Z\n23456,\n")
    assert collect.read_times(times) == {"12345": datetime(2026, 10, 5, 20, tzinfo=UTC)}
    times.write_text("user_id,submitted_at\n12345,2026-10-05T20:00:00\n")
    with pytest.raises(collect.CollectError, match="has no UTC offset"):
        collect.read_times(times)
    assert cli.main(["collect", str(download), "--roster", str(tmp_path / "roster.csv"), "--assignment", "week9",
                     "--out", str(subs)]) == 2


@pytest.mark.parametrize(("member", "expected"), [
    ("doejane_12345_67890_day7_fast_matmul.ipynb", ("doejane", "12345", "67890", "day7_fast_matmul.ipynb", False)),
    ("doejane_late_12345_67890_day7_fast_matmul-1.ipynb",
     ("doejane", "12345", "67890", "day7_fast_matmul-1.ipynb", True)),
    ("LATE_doejane_12345_67890_a_2_b.ipynb", ("doejane", "12345", "67890", "a_2_b.ipynb", True)),
    ("doejane_12345_text.html", ("doejane", "12345", "", "text.html", False)),
])
def test_canvas_download_names(member, expected):
    found = collect.parse_name(member)
    assert (found.name, found.user_id, found.attachment_id, found.file_name, found.late) == expected
    assert collect.parse_name("no_ids_here.ipynb") is None


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.links += [value for name, value in attrs if name in ("href", "src") and value]


def test_feedback_zips_per_assignment_whose_links_resolve_inside_them(tmp_path):
    out, subs = tmp_path / "out", tmp_path / "subs"
    subs.mkdir()
    results = [_result("jdoe", "week1", "day1_fake"), _result("jdoe", "week1", "day2_fake", pending=5.0),
               _result("jdoe", "week2", "day7_fake"), _result("sroe", "week1", "day1_fake")]
    for result in results:
        page = page_path(out, result)
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(render_page(result, "../../index.html", []), encoding="utf-8")
    (out / "feedback" / "old-style.zip").write_bytes(b"")  # every assignment in one zip, as before: removed
    (subs / feedback_zips.COLLECTED).write_text(json.dumps(
        {"week1": {"jdoe": {"canvas_user_id": "12345", "attachment_ids": ["67890"], "late": False}}}))
    made = upload.write(results, out, _roster(tmp_path), subs)
    folder = out / "upload" / "feedback"
    assert sorted(p.relative_to(folder).as_posix() for p in made.zips) == \
        ["week1/jdoe_12345_67890_feedback.zip", "week1/sroe.zip", "week2/jdoe.zip"]
    assert not (folder / "old-style.zip").exists()
    for path in made.zips:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            assignment = path.parent.name
            assert "index.html" in names
            assert all(n == "index.html" or n.startswith(f"{assignment}-") for n in names)  # this assignment only
            for name in names:
                parser = _Links()
                parser.feed(archive.read(name).decode())
                for link in parser.links:
                    if link.startswith(("data:", "#")):
                        continue
                    assert link.split("#")[0] in names, f"{path.name}/{name} links to {link}, not in the zip"
    with zipfile.ZipFile(folder / "week1" / "jdoe_12345_67890_feedback.zip") as archive:
        assert archive.namelist() == ["index.html", "week1-day1_fake.html", "week1-day2_fake.html"]
        index = archive.read("index.html").decode()
        assert "5 pending a GPU run" in index and "class overview" not in archive.read("week1-day1_fake.html").decode()
    # Canvas's bulk upload reads the first two all-digit parts of a name as the user and attachment ids
    with zipfile.ZipFile(folder / "week1-canvas-bulk.zip") as bulk:
        [name] = bulk.namelist()
    assert [p for p in name.split("_") if p.isdigit()][:2] == ["12345", "67890"]
    assert not (folder / "week2-canvas-bulk.zip").exists()
    assert any("without Canvas ids" in line for line in made.lines)
