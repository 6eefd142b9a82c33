"""A TA's term between grading runs: one `publish` writes every output from the stored results, the term (remembered
in OUT) and the TA's overrides, so the CSVs, the Canvas file, the gradebook, the pages and the zips agree, and nothing
is regraded; submission times the student could have written are refused; names the class lacks are errors."""

from __future__ import annotations

import csv
import json
import os
import shutil
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from grader import cli
from grader.authoring import demo
from grader.commands import grading as grading_commands
from grader.lms import term
from grader.score.results import NotebookResult

DAY1 = "week1/day1_host_baseline"
NOTEBOOK = "day1_host_baseline"
DUE = datetime(2026, 10, 5, 23, 59, tzinfo=UTC)
TERM = ("[due]\nweek1 = 2026-10-05T23:59:00Z\n[late]\npolicy = \"per_day\"\nper_day = 0.1\ncap = 0.5\n"
        "from_exchange = true\n")


def _stamp(folder: Path, when: datetime) -> None:
    (folder / "timestamp.txt").write_text(when.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))  # nbgrader submit's format


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Three students hand in Day 1's solution: erin late by the LMS's record, frank on time, gina late by her
    timestamp.txt."""
    root = tmp_path_factory.mktemp("publish")
    demo.build(root / "demo", keys={DAY1})
    solution = root / "demo" / "fast_correct" / "week1" / f"{NOTEBOOK}.ipynb"
    subs = root / "subs"
    for student in ("erin", "frank", "gina"):
        notebook = subs / student / "week1" / f"{NOTEBOOK}.ipynb"
        notebook.parent.mkdir(parents=True)
        shutil.copy(solution, notebook)
        os.utime(notebook, ((DUE - timedelta(days=2)).timestamp(),) * 2)
    term.write_submitted_at(subs, "erin", "week1", DUE + timedelta(days=1, hours=12))
    _stamp(subs / "frank" / "week1", DUE - timedelta(days=1))
    _stamp(subs / "gina" / "week1", DUE + timedelta(days=1, hours=12))
    # the roster collect leaves beside the class (Canvas's gradebook export): each folder is a SIS Login ID
    (subs / "roster.csv").write_text("Student,ID,SIS User ID,SIS Login ID,Section\n"
                                     + "".join(f"{name.title()} Doe,{100 + n},u{n},{name},A\n"
                                               for n, name in enumerate(("erin", "frank", "gina"))))
    (root / "term.toml").write_text(TERM)
    out = root / "out"
    assert cli.main(["grade", str(subs), "--out", str(out), "--device", "cpu", "--seed", "7", "--allow-ungraded",
                     "--assignment", "week1", "--term", str(root / "term.toml")]) == 0
    return root


@pytest.fixture
def copy(graded, tmp_path):
    """The graded class's OUT and submissions, copied: each test changes its own."""
    shutil.copytree(graded / "out", tmp_path / "out")
    shutil.copytree(graded / "subs", tmp_path / "subs")
    known = json.loads((tmp_path / "out" / "term.json").read_text())
    (tmp_path / "out" / "term.json").write_text(json.dumps({**known, "submissions": str(tmp_path / "subs")}))
    shutil.copy(graded / "term.toml", tmp_path / "term.toml")
    return tmp_path


def _rows(path: Path, key: str = "student") -> dict[str, dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return {row[key]: row for row in csv.DictReader(f)}


def _canvas(out: Path) -> dict[str, float]:
    """Each student's week 1 points in the Canvas file (its column's name may carry Canvas's id), by the folder
    name the roster gives as the SIS Login ID; each row carries the roster's Canvas id."""
    with (out / "upload" / "canvas-grades.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    [column] = [c for c in rows[0] if c.startswith("week1")]
    found = {}
    for row in rows[1:]:
        assert row["ID"] == str(100 + ("erin", "frank", "gina").index(row["SIS Login ID"]))
        found[row["SIS Login ID"]] = float(row[column])
    return found


def _results_files(out: Path) -> dict[str, tuple[bytes, int]]:
    """The stored results of the notebooks handed in (a missing notebook's result is written at every grade)."""
    return {str(p.relative_to(out)): (p.read_bytes(), p.stat().st_mtime_ns) for p in (out / "results").rglob("*.json")
            if json.loads(p.read_text())["status"] != "missing"}


def _zipped(out: Path, student: str) -> list[str]:
    """The pages in the student's feedback zips (named by the student; one per assignment or one in all)."""
    pages = []
    for path in (out / "upload" / "feedback").rglob(f"*{student}*.zip"):
        with zipfile.ZipFile(path) as archive:
            pages += [archive.read(name).decode() for name in archive.namelist() if name.endswith(".html")]
    return pages


def _first_item(out: Path, student: str) -> dict[str, str]:
    return next(r for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))
                if r["student"] == student and r["kind"] == "correctness" and float(r["score"] or 0) > 0)


@pytest.mark.sandbox
@pytest.mark.slow
def test_one_publish_applies_an_extension_an_override_and_a_corrected_time_everywhere(copy, capsys):
    graded = copy
    out, subs = graded / "out", graded / "subs"
    before = _rows(out / "students.csv")
    assert float(before["erin"]["late_penalty"]) > 0 and float(before["gina"]["late_penalty"]) > 0
    assert float(before["frank"]["late_penalty"]) == 0
    assert "the LMS's record" in _first_item(out, "erin")["late_note"]
    kept = _results_files(out)
    assert "late penalty" in (out / "feedback" / "erin" / f"week1-{NOTEBOOK}.html").read_text()

    (graded / "extended.toml").write_text(TERM + "[extensions]\nerin = { week1 = 3 }\n")
    item = _first_item(out, "frank")
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:  # the override's score: nbgrader's, as formgrader
        gb.find_grade(item["item"], NOTEBOOK, "week1", "frank").manual_score = 0.0
        gb.db.commit()
    (out / "overrides.json").write_text(json.dumps({f"frank/week1/{NOTEBOOK}/{item['item']}": {
        "score": 0.0, "why": "the answer was copied", "auto_score": float(item["score"])}}))
    _stamp(subs / "gina" / "week1", DUE - timedelta(hours=1))  # the corrected time
    assert cli.main(["publish", str(out), "--term", str(graded / "extended.toml")]) == 0
    assert "a different term file from the one used before" in capsys.readouterr().out

    assert _results_files(out) == kept  # nothing regraded
    students = _rows(out / "students.csv")
    wide, canvas = _rows(out / "grades-wide.csv"), _canvas(out)
    assert float(students["erin"]["late_penalty"]) == 0 and float(students["gina"]["late_penalty"]) == 0
    assert float(students["frank"]["earned"]) == pytest.approx(float(before["frank"]["earned"]) - float(item["score"]))
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        assert gb.find_submission("week1", "erin").extension == timedelta(days=3)
        assert gb.find_grade(item["item"], NOTEBOOK, "week1", "frank").manual_score == 0.0
        scores = {s: gb.find_submission_notebook(NOTEBOOK, "week1", s) for s in ("erin", "frank", "gina")}
        for student, notebook in scores.items():
            assert notebook.late_submission_penalty == 0
            assert notebook.score == pytest.approx(float(students[student]["earned"]))
    for student in ("erin", "frank", "gina"):
        final = float(students[student]["final"])
        assert float(wide[student][DAY1]) == pytest.approx(final) == canvas[student]
        page = (out / "feedback" / student / f"week1-{NOTEBOOK}.html").read_text()
        [zipped] = [z for z in _zipped(out, student) if f"<title>{student} · {DAY1}</title>" in z]
        assert "late penalty" not in page and "late penalty" not in zipped
        assert ("TA override to 0" in zipped) == ("TA override to 0" in page) == (student == "frank")
    row = next(r for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))
               if r["student"] == "frank" and r["item"] == item["item"])
    assert row["score"] == "0" and "TA override to 0" in row["message"] and "the answer was copied" in row["message"]
    page = (out / "feedback" / "frank" / f"week1-{NOTEBOOK}.html").read_text()
    assert "the answer was copied" in page and page.count('class="badge override-badge"') == 1
    assert "extension of 3 days" in _first_item(out, "erin")["late_note"]
    assert (out / "term.toml").read_text() == (graded / "extended.toml").read_text()

    # The term is remembered: export and publish without --term keep the extension and the override.
    assert cli.main(["export", "--out", str(out)]) == 0
    assert "published with" in capsys.readouterr().out
    assert _rows(out / "students.csv") == students
    assert _results_files(out) == kept

    # The automatic score under the override moved since it was set: the override counts, and a warning says so.
    record = json.loads((out / "overrides.json").read_text())
    record[f"frank/week1/{NOTEBOOK}/{item['item']}"]["auto_score"] = 0.5
    (out / "overrides.json").write_text(json.dumps(record))
    assert cli.main(["publish", str(out)]) == 0
    assert "the override still counts" in capsys.readouterr().out
    assert _rows(out / "students.csv")["frank"]["earned"] == students["frank"]["earned"]


@pytest.mark.sandbox
@pytest.mark.slow
def test_the_override_command_and_one_from_formgrader(copy):
    out = copy / "out"
    item = _first_item(out, "gina")
    assert cli.main(["override", str(out), "gina", DAY1, item["item"], "1", "--why", "partial credit"]) == 0
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        assert gb.find_grade(item["item"], NOTEBOOK, "week1", "gina").manual_score == 1.0
        gb.find_grade(item["item"], NOTEBOOK, "week1", "gina").manual_score = 0.5  # changed in formgrader
        gb.db.commit()
    assert cli.main(["publish", str(out)]) == 0
    row = next(r for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))
               if r["student"] == "gina" and r["item"] == item["item"])
    assert row["score"] == "0.5" and "set in formgrader; no reason recorded" in row["message"]
    assert cli.main(["override", str(out), "gina", DAY1, "no_such_item", "1", "--why", "x"]) == 2
    assert cli.main(["override", str(out), "Gina", DAY1, item["item"], "1", "--why", "x"]) == 2


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_misspelled_extension_is_an_error_naming_the_closest_student(copy, capsys):
    graded = copy
    (graded / "misspelled.toml").write_text(TERM + "[extensions]\nErin = { week1 = 3 }\n")
    assert cli.main(["publish", str(graded / "out"), "--term", str(graded / "misspelled.toml")]) == 2
    assert "'Erin': no student is called that (the closest is 'erin')" in capsys.readouterr().err


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_regrade_of_one_student_keeps_the_others_the_seed_and_the_override(copy, capsys):
    graded, out = copy, copy / "out"
    kept = _results_files(out)
    item = _first_item(out, "frank")
    assert cli.main(["override", str(out), "frank", DAY1, item["item"], "0", "--why", "copied"]) == 0
    record = json.loads((out / "overrides.json").read_text())
    record[f"frank/week1/{NOTEBOOK}/{item['item']}"]["auto_score"] = 0.25  # as if the automatic score was this
    (out / "overrides.json").write_text(json.dumps(record))
    assert cli.main(["grade", str(graded / "subs"), "--out", str(out), "--device", "cpu", "--allow-ungraded",
                     "--assignment", "week1", "--student", "frank"]) == 0
    now = _results_files(out)
    changed = {path for path in now if now[path] != kept.get(path)}
    assert changed == {f"results/frank/week1/{NOTEBOOK}.json"}
    assert json.loads((out / changed.pop()).read_text())["run_seed"] == 7
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        assert gb.find_grade(item["item"], NOTEBOOK, "week1", "frank").manual_score == 0
    assert "the override still counts" in capsys.readouterr().out
    assert float(_first_row(out, "frank", item["item"])["score"]) == 0


def _first_row(out: Path, student: str, item: str) -> dict[str, str]:
    return next(r for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))
                if r["student"] == student and r["item"] == item)


def _result(**times: str) -> NotebookResult:
    return NotebookResult("erin", "week1", NOTEBOOK, "ok", submitted_file=f"week1/{NOTEBOOK}.ipynb", **times)


def test_times_the_student_could_write_are_refused_unless_the_folders_came_from_the_exchange(tmp_path):
    import tomllib

    late = (DUE + timedelta(days=2)).isoformat()
    upload = term.parse(tomllib.loads(TERM.replace("from_exchange = true\n", "")), {"week1", "week2"})
    lateness = upload.lateness(_result(timestamp_txt=late, file_mtime=late))
    assert lateness.status == term.NO_TIME and lateness.fraction == 0
    assert "timestamp.txt ignored: the student's upload could have set it" in lateness.note
    lateness = upload.lateness(_result(timestamp_txt=late), lms_time=DUE.isoformat())
    assert lateness.status == term.ON_TIME and "(the LMS's record)" in lateness.note
    assert "timestamp.txt ignored" in lateness.note  # the upload's own time, named though the LMS's counted
    exchange = term.parse(tomllib.loads(TERM), {"week1", "week2"})
    assert exchange.lateness(_result(timestamp_txt=late)).status == term.LATE
    term.write_submitted_at(tmp_path, "erin", "week1", datetime.fromisoformat("2026-10-06T01:00:00-04:00"))
    (tmp_path / "bad.json").write_text("{}")
    assert term.read_submitted_at(tmp_path) == {("erin", "week1"): "2026-10-06T05:00:00+00:00"}
    (tmp_path / term.SUBMITTED_AT).write_text(json.dumps({"erin": {"week1": "2026-10-06 01:00"}}))
    assert term.read_submitted_at(tmp_path)[("erin", "week1")].startswith("unreadable")


def _stored(out: Path, student: str, notebook: str, seed: int = 7) -> None:
    path = out / "results" / student / "week1" / f"{notebook}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(NotebookResult(student, "week1", notebook, "ok", run_seed=seed).to_json()))


def test_a_targeted_regrade_forgets_only_what_it_names_and_keeps_the_seed(tmp_path, capsys):
    out = tmp_path / "out"
    for student in ("erin", "frank"):
        for notebook in (NOTEBOOK, "day2_gpu_arrays"):
            _stored(out, student, notebook)
    assert grading_commands._regrade(out, ["frank"], [f"week1/{NOTEBOOK}"], None) == 7
    assert sorted(str(p.relative_to(out / "results")) for p in (out / "results").rglob("*.json")) == [
        "erin/week1/day1_host_baseline.json", "erin/week1/day2_gpu_arrays.json", "frank/week1/day2_gpu_arrays.json"]
    assert grading_commands._regrade(out, [], ["week1/day2_gpu_arrays"], 3) == 3  # every student's, with the seed given
    assert not list((out / "results").rglob("day2_gpu_arrays.json"))
    with pytest.raises(ValueError, match=r"--student 'Erin': no such student .* \(the closest is 'erin'\)"):
        grading_commands._regrade(out, ["Erin"], [], None)
    with pytest.raises(ValueError, match=r"the closest is 'week1/day1_host_baseline'"):
        grading_commands._regrade(out, [], ["week1/day1_host_baselin"], None)
    _stored(out, "gina", NOTEBOOK, seed=8)
    with pytest.raises(ValueError, match="graded with 2 seeds: give one with --seed"):
        grading_commands._regrade(out, ["gina"], [], None)
