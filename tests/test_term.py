"""The term (grader/lms/term.py): due dates, late policies and extensions, from the file to the gradebook (read back
through nbgrader's own API and its own `nbgrader export`), the CSVs and the pages; and a TA's week (--assignment)."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from grader import cli
from grader.authoring import demo
from grader.intake.layout import REPO, course_notebooks, find_submissions
from grader.lms import term
from grader.report import terminal
from grader.score.results import MISSING
from grader.score.stored import load_results

DAY1 = "week1/day1_host_baseline"
COURSE = {nb.assignment for nb in course_notebooks()}
DUE = datetime(2026, 10, 5, 23, 59, tzinfo=UTC)


def _parse(text: str) -> term.Term:
    import tomllib

    return term.parse(tomllib.loads(text), COURSE)


@pytest.mark.parametrize(("text", "says"), [
    ("[due]\nweek1 = 2026-10-05T23:59:00", "has no UTC offset"),
    ("[due]\nweek9 = 2026-10-05T23:59:00Z", "no assignment is called 'week9'"),
    ("[late]\npolicy = \"half\"", "policy = 'half': one of none, per_day, zero"),
    ("[late]\npolicy = \"per_day\"\nper_day = 10", "a fraction between 0 and 1"),
    ("[late]\npolicy = \"per_day\"", "needs per_day"),
    ("[late]\ntimes = [\"ctime\"]", "a list of lms, timestamp.txt, mtime"),
    ("[late]\nfrom_exchange = \"yes\"", "from_exchange = 'yes': true or false"),
    ("[due]\nweek_1 = 2026-10-05T23:59:00Z", "no assignment is called 'week_1' (the closest is 'week1')"),
    ("[extensions]\nalice = { week1 = 2 }", "week1 has no due date in [due] to extend"),
    ("[dues]\nweek1 = 2026-10-05T23:59:00Z", "unknown table(s) dues"),
])
def test_a_term_file_that_cannot_be_used_says_where_and_why(text, says):
    with pytest.raises(term.TermError) as error:
        _parse(text)
    assert says in str(error.value)


def test_a_term_file_that_is_not_toml_is_refused_with_its_path(tmp_path):
    path = tmp_path / "term.toml"
    path.write_text("[due\n")
    with pytest.raises(term.TermError, match=r"term\.toml is not valid TOML"):
        term.load(path, COURSE)


def test_the_shipped_example_term_is_valid():
    example = term.load(REPO / "term.example.toml", COURSE)
    assert example.policy == "per_day" and set(example.due) == COURSE and example.extensions


@pytest.mark.parametrize(("policy", "late", "fraction"), [
    ("policy = \"none\"", timedelta(days=3), 0.0),
    ("policy = \"zero\"", timedelta(seconds=1), 1.0),
    ("policy = \"per_day\"\nper_day = 0.1\ncap = 0.5", timedelta(seconds=1), 0.1),  # a started day counts
    ("policy = \"per_day\"\nper_day = 0.1\ncap = 0.5", timedelta(days=1, hours=12), 0.2),
    ("policy = \"per_day\"\nper_day = 0.1\ncap = 0.5", timedelta(days=6), 0.5),  # capped
    ("policy = \"per_day\"\nper_day = 0.1\ncap = 0.5\nzero_after_days = 7", timedelta(days=8), 1.0),
    ("policy = \"per_day\"\nper_day = 0.1", timedelta(0), 0.0),
])
def test_each_policy_takes_its_fraction(policy, late, fraction):
    assert _parse(f"[late]\n{policy}").fraction_lost(late.total_seconds()) == pytest.approx(fraction)


def _folder(root: Path, student: str, notebooks: list[str]) -> None:
    for key in notebooks:
        path = root / student / f"{key}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / f"{key}.ipynb", path)


def test_absent_notebooks_of_an_assignment_not_due_are_not_missing(tmp_path):
    _folder(tmp_path, "ann", [DAY1, "week2/day1_profiling"])
    found, _ = find_submissions(tmp_path, not_due=("week2",))
    week2 = [s for s in found if s.assignment == "week2"]
    assert [s.notebook for s in week2] == ["day1_profiling"] and week2[0].path is not None  # early work: graded
    assert {s.status for s in found if s.assignment == "week1" and s.notebook != "day1_host_baseline"} == {MISSING}
    every, _ = find_submissions(tmp_path)
    assert any(s.assignment == "week2" and s.status == MISSING for s in every)


def test_a_week_asked_for_is_graded_alone_and_its_absent_notebooks_are_missing(tmp_path):
    _folder(tmp_path, "ann", [DAY1])
    found, _ = find_submissions(tmp_path, assignments=("week2",))
    assert {s.assignment for s in found} == {"week2"} and {s.status for s in found} == {MISSING}


def test_an_unknown_week_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "subs").mkdir()
    assert cli.main(["grade", str(tmp_path / "subs"), "--out", str(tmp_path / "out"), "--device", "cpu",
                     "--assignment", "week9"]) == 2
    assert f"no such assignment (there are {', '.join(sorted(COURSE))})" in capsys.readouterr().err


# One graded class, then each term applied to it by `grader export`/`feedback` (no regrading): four students
# hand in the same Day 1 solution, so each one's raw score is the same and only its time differs.
TIMES = {
    "early": ("timestamp.txt", DUE - timedelta(days=1)),
    "late": ("mtime", DUE + timedelta(days=1, hours=12)),  # no timestamp.txt: the file's time
    "extended": ("timestamp.txt", DUE + timedelta(days=2)),  # with a 3-day extension
    "very_late": ("timestamp.txt", DUE + timedelta(days=10)),
}
BASE = "[due]\nweek1 = 2026-10-05T23:59:00Z\n[extensions]\nextended = { week1 = 3 }\n"
# The class's folders stand for nbgrader's exchange here: its timestamp.txt and file times are trusted.
PER_DAY = BASE + "[late]\nfrom_exchange = true\npolicy = \"per_day\"\nper_day = 0.1\ncap = 0.5\nzero_after_days = 7\n"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("term")
    demo.build(root / "demo", keys={DAY1})
    solution = root / "demo" / "fast_correct" / "week1" / "day1_host_baseline.ipynb"
    for student, (source, when) in TIMES.items():
        notebook = root / "subs" / student / "week1" / "day1_host_baseline.ipynb"
        notebook.parent.mkdir(parents=True)
        shutil.copy(solution, notebook)
        if source == "timestamp.txt":  # nbgrader submit's own format
            (notebook.parent / "timestamp.txt").write_text(when.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
            os.utime(notebook, (DUE.timestamp() + 99 * 86400,) * 2)  # a file time that must not be used
        else:
            os.utime(notebook, (when.timestamp(),) * 2)
    (root / "per_day.toml").write_text(PER_DAY)
    out = root / "out"
    assert cli.main(["grade", str(root / "subs"), "--out", str(out), "--device", "cpu", "--seed", "5",
                     "--allow-ungraded", "--assignment", "week1", "--term", str(root / "per_day.toml")]) == 0
    return root


def _apply(root: Path, text: str) -> Path:
    path = root / "applied.toml"
    path.write_text(text)
    out = root / "out"
    assert cli.main(["export", "--out", str(out), "--term", str(path)]) == 0
    assert cli.main(["feedback", "--out", str(out), "--term", str(path)]) == 0
    return out


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return {row.get("student") or row["Student"]: row for row in csv.DictReader(f)}


def _penalties(out: Path) -> dict[str, float]:
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        return {s: gb.find_submission_notebook("day1_host_baseline", "week1", s).late_submission_penalty
                for s in TIMES}


@pytest.mark.sandbox
@pytest.mark.slow
def test_per_day_penalties_reach_the_gradebook_the_csvs_and_the_pages(graded):
    out = _apply(graded, PER_DAY)
    students = _rows(out / "students.csv")
    # Each student's own points before the penalty: Day 1's timer items are timed on this machine's CPU, which
    # other tests may load, so two copies of one notebook need not earn the same.
    earned = {student: float(students[student]["earned"]) for student in TIMES}
    assert all(points > 0 for points in earned.values()), earned
    raw = earned["late"]
    expected = {"early": 0.0, "late": 0.2 * raw, "extended": 0.0, "very_late": earned["very_late"]}
    assert _penalties(out) == pytest.approx(expected)
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        assert gb.find_assignment("week1").duedate == DUE.replace(tzinfo=None)
        assert gb.find_submission("week1", "extended").extension == timedelta(days=3)
        assert gb.find_submission("week1", "late").timestamp == TIMES["late"][1].replace(tzinfo=None)
    for student, penalty in expected.items():
        assert float(students[student]["late_penalty"]) == pytest.approx(penalty)
        assert float(students[student]["final"]) == pytest.approx(earned[student] - penalty)
    wide, canvas = _rows(out / "grades-wide.csv"), _rows(out / "upload" / "canvas-grades.csv")
    assert float(wide["late"]["late_penalty"]) == pytest.approx(0.2 * raw)
    assert float(wide["late"]["week1/day1_host_baseline"]) == pytest.approx(0.8 * raw)
    # The Canvas file's column: the notebook's or its week's (nothing else of week 1 was handed in)
    [week1] = [column for column in canvas["late"] if column.startswith("week1")]
    assert float(canvas["late"][week1]) == pytest.approx(0.8 * raw)
    assert float(canvas["Points Possible"][week1]) >= 13
    items = [r for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))
             if r["student"] == "late" and r["notebook"] == "day1_host_baseline"]
    assert {(r["late_status"], r["late_penalty"]) for r in items} == {("late", f"{0.2 * raw:g}")}
    assert "the file's modification time" in items[0]["late_note"]
    page = (out / "feedback" / "late" / "week1-day1_host_baseline.html").read_text()
    assert f"late penalty\n{0.2 * raw:g}, final score <b>{0.8 * raw:g}</b>" in page
    assert "extension of 3 days" in (out / "feedback" / "extended" / "week1-day1_host_baseline.html").read_text()
    index = (out / "index.html").read_text()
    assert 'id="late-list"' in index and "2 late notebooks" in index
    stored = load_results(out)
    term.apply(stored, term.load(graded / "applied.toml"))
    [line] = [line for line in terminal.summary_table(stored).splitlines()
              if line.startswith("late ") and "day1_host_baseline" in line]
    assert line.endswith(f"-{0.2 * raw:g} -> {0.8 * raw:g}")  # the console's table too
    # nbgrader's own export, with --to (the config written in OUT once made nbgrader ignore it)
    exported = subprocess.run([sys.executable, "-m", "nbgrader", "export", "--to", "mine.csv"], cwd=out,
                              capture_output=True, text=True)
    assert exported.returncode == 0, exported.stderr
    by_student = {row["student_id"]: row for row in csv.DictReader((out / "mine.csv").open())
                  if row["assignment"] == "week1"}
    assert float(by_student["late"]["late_submission_penalty"]) == pytest.approx(0.2 * raw)
    assert float(by_student["very_late"]["score"]) == 0.0


@pytest.mark.sandbox
@pytest.mark.slow
def test_the_zero_and_none_policies_and_no_due_date(graded):
    out = _apply(graded, BASE + "[late]\nfrom_exchange = true\npolicy = \"zero\"\n")
    earned = {student: float(row["earned"]) for student, row in _rows(out / "students.csv").items()}
    assert _penalties(out) == {"early": 0.0, "late": earned["late"], "extended": 0.0, "very_late": earned["very_late"]}
    out = _apply(graded, BASE + "[late]\nfrom_exchange = true\npolicy = \"none\"\n")
    assert set(_penalties(out).values()) == {0.0}
    assert {r["student"]: r["late_status"] for r in csv.DictReader((out / "grades.csv").open())
            if r["notebook"] == "day1_host_baseline"}["very_late"] == "late"
    out = _apply(graded, "")  # no due date: nothing is late, and the earlier penalties are gone
    assert set(_penalties(out).values()) == {0.0}
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        assert gb.find_assignment("week1").duedate is None
    assert {r["late_status"] for r in csv.DictReader((out / "grades.csv").open())} == {"no_due_date"}


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_notebook_without_a_usable_time_is_not_penalised_and_says_why(graded):
    out = _apply(graded, PER_DAY.replace("zero_after_days = 7\n", "zero_after_days = 7\ntimes = [\"timestamp.txt\"]\n"))
    assert _penalties(out)["late"] == 0.0  # its only time was the file's, which this term does not accept
    row = next(r for r in csv.DictReader((out / "grades.csv").open())
               if r["student"] == "late" and r["notebook"] == "day1_host_baseline")
    assert row["late_status"] == "no_submission_time" and "not penalised; a TA decides" in row["late_note"]
    index = (out / "index.html").read_text()
    assert 'id="untimed"' in index and "due, without a submission time" in index


@pytest.mark.sandbox
@pytest.mark.slow
def test_the_next_week_keeps_this_weeks_grades_and_the_uploads_hold_both(graded):
    out = _apply(graded, PER_DAY)
    before = _rows(out / "grades-wide.csv")
    # week 2, due later: graded into the same OUT (nobody handed it in, so nothing runs)
    assert cli.main(["grade", str(graded / "subs"), "--out", str(out), "--device", "cpu", "--allow-ungraded",
                     "--assignment", "week2", "--term", str(graded / "per_day.toml")]) == 0
    wide, canvas = _rows(out / "grades-wide.csv"), _rows(out / "upload" / "canvas-grades.csv")
    for student in TIMES:
        assert wide[student]["week1/day1_host_baseline"] == before[student]["week1/day1_host_baseline"]
        assert wide[student]["week2/day7_optimized_gemm"] == "0"  # asked for, not handed in: missing, 0
        [week1] = [column for column in canvas[student] if column.startswith("week1")]
        assert float(canvas[student][week1]) == float(before[student]["week1/day1_host_baseline"])
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        assert gb.find_submission_notebook("day1_host_baseline", "week1", "late").score == \
            float(before["late"]["raw_total"])
    names = set()
    for path in (out / "upload" / "feedback").rglob("late*.zip"):  # one in all, or one per assignment
        with zipfile.ZipFile(path) as archive:
            names |= set(archive.namelist())
    assert {"week1-day1_host_baseline.html", "week2-day7_optimized_gemm.html"} <= names
    index = (out / "index.html").read_text()
    assert "missing (not submitted, assignment due)" in index
