"""Student notebooks are generated from solutions/, hold only stubs, and never drift."""

import copy
import json

import nbformat
import pytest
from nbgrader.utils import is_grade, is_locked, is_solution

from course.spec import all_specs
from grader.authoring import release
from grader.intake.layout import course_notebooks

NOTEBOOKS = course_notebooks()


def test_there_is_at_least_one_course_notebook():
    assert any(nb.key == "week1/day7_fast_matmul" for nb in NOTEBOOKS)


def test_committed_student_notebooks_match_a_fresh_release():
    assert release.drifted() == []


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.key for nb in NOTEBOOKS])
def test_student_notebooks_hold_stubs_not_solutions(notebook):
    text = notebook.student_path.read_text()
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
    student = nbformat.read(str(notebook.student_path), as_version=4)
    solution_cells = [c for c in student.cells if is_solution(c)]
    quiz = [c for c in solution_cells if " = ...  # " in c.source]
    assert len(quiz) == 1, "one answer cell, its answers at their placeholders"
    assert all("raise NotImplementedError()" in c.source for c in solution_cells if c is not quiz[0])


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.key for nb in NOTEBOOKS])
def test_locked_cells_carry_checksums(notebook):
    student = nbformat.read(str(notebook.student_path), as_version=4)
    locked = [c for c in student.cells if is_locked(c)]
    assert locked and all(c.metadata.nbgrader.get("checksum") for c in locked)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.key for nb in NOTEBOOKS])
def test_notebooks_are_committed_without_outputs(notebook):
    for path in (notebook.solution_path, notebook.student_path):
        for cell in json.loads(path.read_text())["cells"]:
            assert not cell.get("outputs") and cell.get("execution_count") is None, path


def test_hidden_tests_stay_in_the_master_copy():
    notebook = next(nb for nb in NOTEBOOKS if nb.key == "week1/day7_fast_matmul")
    master = release.master_version(notebook)
    hidden = next(c for c in master.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_matmul_hidden")
    assert '"hidden"' in hidden.source


def test_performance_cells_match_their_spec():
    notebook = next(nb for nb in NOTEBOOKS if nb.key == "week1/day7_fast_matmul")
    cells = {c.metadata.nbgrader["grade_id"]: c for c in release.master_version(notebook).cells if is_grade(c)}
    spec = next(s for s in all_specs() if s.id == "w1d7.matmul_fp32")
    for threshold in spec.thresholds:
        cell = cells[spec.grade_id(threshold)]
        assert float(cell.metadata.nbgrader["points"]) == threshold.points
        assert f'"{threshold.name}"' in cell.source


def test_a_reference_only_region_leaves_no_trace_in_the_student_copy():
    source = ("@triton.jit\ndef kernel(x):\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION\n\n\n"
              f"{release.REFERENCE_ONLY}\n@triton.jit\ndef helper(x):\n    pass\n### END SOLUTION\n\n\n"
              "def wrapper(x):\n    ### BEGIN SOLUTION\n    return helper(x)\n    ### END SOLUTION")
    kept, removed = release.split_reference_only(source, "END SOLUTION")
    assert removed == {"helper"} and "helper" not in kept.replace("return helper(x)", "")
    assert kept.count("\n\n\n") == 1 and kept.startswith("@triton.jit\ndef kernel") and "def wrapper" in kept


@pytest.mark.parametrize("region", [
    "    ### BEGIN SOLUTION (reference only)\n    def helper(): pass\n    ### END SOLUTION",  # indented
    "### BEGIN SOLUTION (reference only)\nprint(1)\n### END SOLUTION",  # neither a definition nor an assignment
    "### BEGIN SOLUTION (reference only)\ndef helper(): pass",  # never closed
    "### BEGIN SOLUTION (reference only)\ndef helper(:\n### END SOLUTION",  # not Python
])
def test_a_reference_only_region_that_would_leave_a_broken_student_copy_is_refused(region):
    with pytest.raises(release.ReleaseError):
        release.split_reference_only(region, "END SOLUTION")


def test_the_reference_s_second_transpose_kernel_is_not_in_the_student_copy():
    notebook = next(nb for nb in NOTEBOOKS if nb.key == "week2/day2_coalescing")
    assert "transpose_salign_kernel" in notebook.solution_path.read_text()
    assert "salign" not in notebook.student_path.read_text()


def test_a_master_copy_that_still_uses_a_reference_only_name_is_refused():
    solution = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "### BEGIN SOLUTION (reference only)\nHELPER_SOURCE = 'x'\n### END SOLUTION\nkernel = compile(HELPER_SOURCE)")])
    master = copy.deepcopy(solution)
    master.cells[0].source = release.split_reference_only(master.cells[0].source, "END SOLUTION")[0]
    with pytest.raises(release.ReleaseError, match="HELPER_SOURCE"):
        release.check_reference_only_unused(solution, master, "END SOLUTION")


def test_a_cell_whose_only_region_is_reference_only_is_refused():
    cell = nbformat.v4.new_code_cell("KEPT = 1\n### BEGIN SOLUTION (reference only)\nHELPER = 2\n### END SOLUTION")
    cell.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "c", "locked": False}
    resources = {"nbgrader": {"assignment": "a", "notebook": "n"}, "language": "python"}
    with pytest.raises(release.ReleaseError, match="needs a region the student writes"):
        release.ClearSolutionsAndAnswers().preprocess_cell(cell, resources, 0)


def _grade_cell(nb, grade_id: str):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def test_release_writes_the_solutions_table_and_points_from_its_specs(tmp_path, monkeypatch):
    # On a copy of one solution: a hand-edited points value and table row are written back, then the student copy.
    from grader.intake import layout

    notebook = next(nb for nb in NOTEBOOKS if nb.key == "week1/day7_fast_matmul")
    floor, row = "perf_w1d7_matmul_fp32_floor", "| `floor` | at least 500 GFLOP/s | {} |"
    solution = release.read(notebook.solution_path)
    _grade_cell(solution, floor).metadata.nbgrader["points"] = 5
    table = next(c for c in solution.cells if c.cell_type == "markdown" and row.format(1) in c.source)
    table.source = table.source.replace(row.format(1), row.format(5))
    monkeypatch.setattr(layout, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(layout, "REPO", tmp_path)
    copied = notebook.solution_path
    copied.parent.mkdir(parents=True)
    copied.write_text(release.serialize(solution), encoding="utf-8")
    assert release.drifted([notebook])[0].startswith(f"{copied} differs from its specs ({floor}: points 5 -> 1")
    assert release.release([notebook]) == [copied, notebook.student_path]
    written = release.read(copied)
    assert _grade_cell(written, floor).metadata.nbgrader["points"] == 1 and row.format(1) in written.cells[0].source
    assert release.drifted([notebook]) == []
