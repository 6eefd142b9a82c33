"""The CSV exports: earned, graded maximum and pending points kept apart; the wide table LMSs import."""

from __future__ import annotations

import csv

from grader.intake.layout import safe_id
from grader.report import terminal
from grader.report.tables import (
    GRADES_CSV,
    NBGRADER_CSV,
    STUDENT_COLUMNS,
    expected_items,
    export,
    items_of,
)
from grader.score import results
from grader.score.results import ItemResult, NotebookResult

ASSIGNMENT, NOTEBOOK = "week1", "day7_fast_matmul"


def _full_marks_on_a_cpu(student: str) -> NotebookResult:
    """Every correctness item passed (provisionally); performance pending, as on a CPU."""
    items = [ItemResult(grade_id, kind, None if kind == results.PERFORMANCE else points, points,
                        results.PENDING if kind == results.PERFORMANCE else results.PASSED,
                        provisional=kind == results.CORRECTNESS)
             for grade_id, kind, points in expected_items(ASSIGNMENT, NOTEBOOK)]
    return NotebookResult(student, ASSIGNMENT, NOTEBOOK, results.OK, items=items, student_id=safe_id(student),
                          submitted_file=f"{ASSIGNMENT}/{NOTEBOOK}.ipynb", sandbox="bubblewrap")


def _other_notebook(student: str, score: float) -> NotebookResult:
    """A second notebook (not in the course: its items are only its own), to give the wide table two columns."""
    item = ItemResult("q1", results.CORRECTNESS, score, 4.0, results.PASSED if score == 4 else results.FAILED)
    return NotebookResult(student, "week2", "day1_profiling", results.OK, items=[item], student_id=safe_id(student))


def _read(path):
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def test_a_full_marks_cpu_run_reads_earned_of_graded_with_pending_apart(tmp_path):
    export([_full_marks_on_a_cpu("alice")], tmp_path)
    [row] = _read(tmp_path / "students.csv")
    assert tuple(row) == STUDENT_COLUMNS
    assert (row["earned"], row["graded_max"], row["pending"], row["max_score"]) == ("9", "9", "5", "14")
    assert (row["correctness_earned"], row["correctness_graded_max"], row["correctness_pending"]) == ("9", "9", "0")
    assert (row["performance_earned"], row["performance_graded_max"], row["performance_pending"]) == ("0", "0", "5")
    assert row["provisional_points"] == "9" and row["not_graded_normally"] == "0" and row["messages"] == ""


def test_a_notebook_that_did_not_run_counts_every_point_as_decided(tmp_path):
    timeout = NotebookResult("bob", ASSIGNMENT, NOTEBOOK, results.TIMEOUT, "a cell ran past its 600 s limit",
                             stopped_at="cell 'matmul_kernel' (cell 10 of 27 as the grader ran it)",
                             failure_tail="KeyboardInterrupt")
    export([timeout], tmp_path)
    [row] = _read(tmp_path / "students.csv")
    assert (row["earned"], row["graded_max"], row["pending"]) == ("0", "14", "0")
    assert row["not_graded_normally"] == "1"
    assert "ran past its 600 s limit" in row["messages"] and "matmul_kernel" in row["messages"]
    items = _read(tmp_path / GRADES_CSV)
    assert len(items) == len(expected_items(ASSIGNMENT, NOTEBOOK))
    assert {r["status"] for r in items} == {results.NOT_RUN} and {r["notebook_status"] for r in items} == {"timeout"}
    assert all("stopped in cell 'matmul_kernel'" in r["notebook_message"] for r in items)


def test_the_wide_table_has_one_row_per_student_and_one_column_per_notebook(tmp_path):
    all_results = [_full_marks_on_a_cpu("john smith"), _other_notebook("john smith", 4.0),
                   _full_marks_on_a_cpu("-dash"), _other_notebook("zoë", 1.0),
                   NotebookResult("zoë", ASSIGNMENT, NOTEBOOK, results.MISSING, "no week1/ folder was submitted",
                                  student_id=safe_id("zoë"))]
    written = export(all_results, tmp_path)
    rows = _read(written.wide)
    with written.wide.open(encoding="utf-8", newline="") as f:
        header = next(csv.reader(f))
    assert header == ["student", "student_id", "week1/day7_fast_matmul", "week2/day1_profiling", "raw_total",
                      "late_penalty", "total"]
    assert [r["student"] for r in rows] == ["-dash", "john smith", "zoë"]  # the folder names as given
    by = {r["student"]: r for r in rows}
    assert by["john smith"]["student_id"] == safe_id("john smith") != "john smith"
    assert (by["john smith"]["week1/day7_fast_matmul"], by["john smith"]["week2/day1_profiling"],
            by["john smith"]["total"]) == ("9", "4", "13")
    assert (by["-dash"]["week1/day7_fast_matmul"], by["-dash"]["week2/day1_profiling"]) == ("9", "")
    assert (by["zoë"]["week1/day7_fast_matmul"], by["zoë"]["total"]) == ("0", "1")
    students = {r["student"]: r for r in _read(written.students)}
    assert set(students) == set(by)
    assert students["zoë"]["notebooks"] == "week1/day7_fast_matmul: missing; week2/day1_profiling: ok"


def test_every_result_is_a_row_even_without_items(tmp_path):
    odd = NotebookResult("carol", "week9", "unknown", results.GRADER_ERROR, "scoring failed")
    assert items_of(odd) == []
    export([odd], tmp_path)
    [row] = _read(tmp_path / GRADES_CSV)
    assert (row["student"], row["status"], row["notebook_status"]) == ("carol", results.GRADER_ERROR,
                                                                          results.GRADER_ERROR)
    assert row["message"] == "scoring failed"


def test_spreadsheet_formulas_are_defused_but_names_kept(tmp_path):
    export([_full_marks_on_a_cpu("-dash"), _full_marks_on_a_cpu("=HYPERLINK(\"x\")"),
            _full_marks_on_a_cpu("-cmd|' /C calc'!A0")], tmp_path)
    names = [r["student"] for r in _read(tmp_path / "students.csv")]
    assert "-dash" in names and "'=HYPERLINK(\"x\")" in names and "'-cmd|' /C calc'!A0" in names


def test_nbgrader_export_in_out_is_pointed_away_from_grades_csv(tmp_path):
    written = export([_full_marks_on_a_cpu("alice")], tmp_path)
    config = written.nbgrader_config.read_text(encoding="utf-8")
    assert 'c.CourseDirectory.db_url = "sqlite:///gradebook.db"' in config
    # on ExportPlugin, the trait `nbgrader export --to FILE` sets (tests/test_term.py runs it)
    assert f'c.ExportPlugin.to = "{NBGRADER_CSV}"' in config and NBGRADER_CSV != GRADES_CSV
    assert {p.name for p in written} == {"grades.csv", "students.csv", "grades-wide.csv", "nbgrader_config.py"}


def test_the_console_table_keeps_a_long_student_name_apart_from_its_notebook():

    rows = [_full_marks_on_a_cpu(name) for name in ("ann", "last_group_too_tall-c1")]
    header, *lines = terminal.summary_table(rows).splitlines()
    [long_row] = [line for line in lines if line.startswith("last_group_too_tall-c1")]
    assert long_row.split()[:3] == ["last_group_too_tall-c1", f"{ASSIGNMENT}/{NOTEBOOK}", "ok"]
    assert header.index("notebook") == long_row.index(ASSIGNMENT + "/") == lines[0].index(ASSIGNMENT + "/")
