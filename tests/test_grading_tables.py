"""Each notebook's grading table and every grade cell's points are written by `make release` from the table its specs
declare (course.grading_table): a hand edit of either, in a solution notebook, fails here until release writes it
again. Written by hand, the tables drifted from what the specs grade."""

from __future__ import annotations

import copy

import nbformat
import pytest

from course import grading_table
from course import spec as specs
from grader.authoring import release
from grader.intake.layout import course_notebooks

GRADED = [nb for nb in course_notebooks()
          if any(c.metadata.get("nbgrader", {}).get("grade") for c in release.read(nb.solution_path).cells)]
DAY7 = next(nb for nb in GRADED if nb.key == "week1/day7_fast_matmul")


@pytest.mark.parametrize("notebook", GRADED, ids=lambda nb: nb.key)
def test_every_graded_notebook_declares_its_table(notebook):
    assert grading_table.for_notebook(notebook.key) is not None, \
        f"{notebook.key}: no GradingTable in its spec module (course/grading_table.py says how)"


@pytest.mark.parametrize("notebook", GRADED, ids=lambda nb: nb.key)
def test_the_solution_states_the_table_and_points_release_writes(notebook):
    if grading_table.for_notebook(notebook.key) is None:
        pytest.skip(f"{notebook.key} declares no table (the test above fails): NOT CHECKED")
    _, changed = release.tabled_solution(notebook)
    assert changed == [], f"{notebook.key} was edited by hand ({changed}): run `make release`"


def test_a_hand_edit_of_a_row_or_of_points_is_found_and_written_back():
    table = grading_table.for_notebook(DAY7.key)
    nb = release.read(DAY7.solution_path)
    grading_table.apply(nb, table)
    edited = copy.deepcopy(nb)
    floor = "perf_w1d7_matmul_fp32_floor"
    perf = next(c for c in edited.cells if c.metadata.get("nbgrader", {}).get("grade_id") == floor)
    perf.metadata.nbgrader["points"] = 3
    holder = next(c for c in edited.cells if c.cell_type == "markdown" and grading_table.HEADER[0] in c.source)
    holder.source = holder.source.replace("| `floor` | at least 500 GFLOP/s | 1 |",
                                          "| `floor` | at least 400 GFLOP/s | 1 |")
    assert grading_table.apply(edited, table) == ["perf_w1d7_matmul_fp32_floor: points 3 -> 1", "the grading table"]
    assert nbformat.writes(edited) == nbformat.writes(nb)


def test_a_threshold_row_states_the_specs_steps_and_points():
    lines = grading_table.for_notebook(DAY7.key).lines()
    assert "| `floor` | at least 500 GFLOP/s | 1 |" in lines
    assert ("| `vs_cublas` | your speed / cuBLAS fp32 speed: 25%, 40%, 55%, 70% earn a quarter, half, three quarters, "
            "all | 2 |") in lines
    assert ("| `vs_reference` | your speed / the course's reference kernel: 30%, 50%, 70%, 85% earn the same steps "
            "| 2 |") in lines


def test_a_table_must_name_every_grade_cell_of_its_notebook():
    table = grading_table.for_notebook(DAY7.key)
    short = grading_table.GradingTable(DAY7.key, table.rows[:-1])  # no understanding check
    with pytest.raises(ValueError, match="test_a_reads"):
        grading_table.apply(release.read(DAY7.solution_path), short)


def test_one_row_states_one_set_of_steps():
    day7 = specs.get("w1d7.matmul_fp32")
    with pytest.raises(ValueError, match="one set of steps"):
        grading_table.Speed("both", "", ((day7, "vs_cublas"), (day7, "vs_reference")))
