"""`make grade` on the demo class plus the awkward cases, through the real pipeline, on this machine."""

import csv
import subprocess
import sys

import nbformat
import pytest

from course.spec import for_notebook
from grader.authoring import demo
from grader.authoring.release import student_version
from grader.flow.settings import Settings, resolve_device
from grader.intake.layout import course_notebooks
from grader.pipeline import grade
from grader.score import results
from tests.conftest import HAS_GPU

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]
NOTEBOOK = next(nb for nb in course_notebooks() if nb.key == "week1/day7_fast_matmul")


def _class(root):
    demo.build(root)
    edited = student_version(NOTEBOOK)
    for cell in edited.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "test_matmul_visible":
            cell.source = "pass"
    (root / "edits_tests" / "week1").mkdir(parents=True)
    nbformat.write(edited, str(root / "edits_tests" / "week1" / "day7_fast_matmul.ipynb"))
    (root / "corrupt" / "week1").mkdir(parents=True)
    (root / "corrupt" / "week1" / "day7_fast_matmul.ipynb").write_text("{ this is not a notebook")
    (root / "misnamed" / "week1").mkdir(parents=True)
    (root / "misnamed" / "week1" / "day7.ipynb").write_text("{}")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    out = tmp_path_factory.mktemp("grades")
    _class(root)
    device, name = resolve_device("auto")
    notes = []
    all_results = grade(root, out, Settings(device=device, device_name=name, runs=2), log=notes.append)
    day7 = {r.student: r for r in all_results if f"{r.assignment}/{r.notebook}" == NOTEBOOK.key}
    return root, out, day7, notes, all_results


def _items(result):
    return {i.item: i for i in result.items}


def test_correct_students_get_every_correctness_point(graded):
    _, _, by_student, _, _ = graded
    for student in ("fast_correct", "slow_correct"):
        items = _items(by_student[student])
        assert by_student[student].status == results.OK
        for name in ("test_matmul_visible", "test_matmul_hidden"):
            assert items[name].score == items[name].max_score, items[name].message


def test_the_wrong_kernel_scores_zero_and_says_where(graded):
    items = _items(graded[2]["wrong_no_masks"])
    assert items["test_matmul_visible"].score == 0 and "NaN" in items["test_matmul_visible"].message
    assert items["test_matmul_hidden"].score == 0


def test_the_library_call_scores_zero_and_is_named(graded):
    items = _items(graded[2]["calls_torch"])
    assert items["test_matmul_visible"].score == 0
    assert "aten.mm" in items["test_matmul_visible"].message


def test_the_unchanged_stub_scores_zero(graded):
    result = graded[2]["unchanged_stub"]
    assert result.status == results.OK and result.score == 0
    assert "NotImplementedError" in _items(result)["test_matmul_visible"].message


def test_the_crash_is_a_status_and_the_batch_goes_on(graded):
    result = graded[2]["crashes"]
    expected = results.CUDA_ERROR if HAS_GPU else results.KERNEL_DIED
    assert result.status == expected and result.score == 0
    assert graded[2]["fast_correct"].status == results.OK


def test_edited_tests_are_restored_and_noted(graded):
    result = graded[2]["edits_tests"]
    assert _items(result)["test_matmul_visible"].score == 0
    assert any("test_matmul_visible" in note for note in result.integrity)


def test_a_corrupt_notebook_is_a_status(graded):
    assert graded[2]["corrupt"].status == results.CORRUPT


def test_a_misnamed_notebook_is_graded_when_it_is_the_only_one(graded):
    _, _, by_student, notes, _ = graded
    result = by_student["misnamed"]
    assert result.status == results.CORRUPT and result.submitted_file == "week1/day7.ipynb"
    assert "week1/day7.ipynb" in result.found
    assert any("misnamed" in note and "day7.ipynb" in note for note in notes)


@pytest.mark.skipif(HAS_GPU, reason="on a GPU performance is measured")
def test_performance_is_pending_on_a_cpu(graded):
    perf = [i for i in graded[2]["fast_correct"].items if i.kind == results.PERFORMANCE]
    assert len(perf) == 3 and all(i.status == results.PENDING and i.score is None for i in perf)


@pytest.mark.gpu
def test_performance_ranks_the_fast_student_above_the_slow_one(graded):
    def perf(student):
        return sum(i.score or 0 for i in graded[2][student].items if i.kind == results.PERFORMANCE)

    assert perf("fast_correct") > perf("slow_correct")


def test_outputs_for_the_ta(graded):
    _, out, by_student, _, _ = graded
    from grader.report.feedback import write_pages
    from grader.report.tables import export

    export(list(by_student.values()), out)
    index = write_pages(list(by_student.values()), out)
    rows = list(csv.DictReader((out / "grades.csv").open()))
    assert {r["student_id"] for r in rows} >= {"fast_correct", "corrupt", "crashes"}
    assert {r["kind"] for r in rows} == {"correctness", "performance"}
    page = (out / "feedback" / "fast_correct" / "week1-day7_fast_matmul.html").read_text()
    assert "test_matmul_hidden" in page and "matmul_kernel" in page
    assert "fast_correct" in index.read_text()


def test_stock_nbgrader_export_reads_the_gradebook(graded):
    _, out, _, _, _ = graded
    target = out / "nbgrader.csv"
    subprocess.run([sys.executable, "-m", "nbgrader", "export", f"--CourseDirectory.db_url=sqlite:///{out}/gradebook.db",
                    f"--CsvExportPlugin.to={target}"], cwd=out, check=True, capture_output=True)
    rows = {r["student_id"]: r for r in csv.DictReader(target.open())}
    assert float(rows["fast_correct"]["score"]) >= 5 and float(rows["unchanged_stub"]["score"]) == 0


def test_a_second_run_keeps_what_is_graded(graded):
    root, out, _, _, all_results = graded
    device, name = resolve_device("auto")
    notes = []
    again = grade(root, out, Settings(device=device, device_name=name), log=notes.append)
    assert any("already graded" in note for note in notes)

    def scores(found):
        return {(r.student, r.assignment, r.notebook): r.score for r in found}

    assert scores(again) == scores(all_results)


def _result_of(all_results, student, notebook):
    found = [r for r in all_results if r.student == student and f"{r.assignment}/{r.notebook}" == notebook.key]
    assert len(found) == 1, f"{student} {notebook.key}: {len(found)} results"
    return found[0]


@pytest.mark.parametrize("notebook", course_notebooks(), ids=lambda nb: nb.key)
def test_each_solution_earns_every_point_and_each_stub_none(graded, notebook):
    """Through `make grade`'s path: the solution's answers get every point this device can decide, the
    notebook as shipped gets none, and neither stops the grader."""
    demo_students = {path.stem for path in demo.demo_files(notebook)}
    assert {"fast_correct", "unchanged_stub"} <= demo_students, f"{notebook.key} needs both demo students"
    all_results = graded[4]
    solved = _result_of(all_results, "fast_correct", notebook)
    assert solved.status == results.OK, solved.message
    # CUDA C has no CPU interpreter: without a GPU its correctness items are pending too.
    cuda_checks = {grade_id for spec in for_notebook(notebook.key) if spec.language == "cuda"
                   for grade_id in spec.correctness_cells}
    for item in solved.items:
        if item.status == results.PENDING:
            assert (item.kind == results.PERFORMANCE or item.item in cuda_checks) and not HAS_GPU, \
                f"{item.item} is pending: {item.message}"
        else:
            assert item.score == item.max_score, f"{notebook.key} {item.item}: {item.message[:300]}"
    stub = _result_of(all_results, "unchanged_stub", notebook)
    assert stub.status == results.OK, stub.message
    assert all(not item.score for item in stub.items), {i.item: i.score for i in stub.items if i.score}


def test_a_grading_run_draws_no_teaching_picture(graded):
    """Picture cells draw only where `grading` is False: matplotlib costs a run a second or more of CPU, and a
    picture in the executed notebook is only bytes to save after every cell."""
    _, out, _, _, _ = graded
    executed = sorted((out / "runs" / "fast_correct").glob("*/*/executed.ipynb"))
    assert len(executed) == len(course_notebooks())
    drawn = {path.parent.name for path in executed
             if any("image/png" in output.get("data", {}) for cell in nbformat.read(str(path), as_version=4).cells
                    for output in cell.get("outputs", []))}
    assert not drawn, f"pictures drawn while grading: {sorted(drawn)}"


def test_no_cell_of_a_solution_raises(graded):
    """The grader runs on past a cell that raises (allow_errors), so a solution's scores alone would not show a
    cell that stops a student's Run All; every cell of every solution must run without an error."""
    _, out, _, _, _ = graded
    executed = sorted((out / "runs" / "fast_correct").glob("*/*/executed.ipynb"))
    assert len(executed) == len(course_notebooks())
    raised = {f"{path.parent.parent.name}/{path.parent.name} cell {index}": f"{output['ename']}: {output['evalue']}"
              for path in executed
              for index, cell in enumerate(nbformat.read(str(path), as_version=4).cells)
              for output in cell.get("outputs", []) if output.get("output_type") == "error"}
    assert not raised, raised


# Demo students whose mistake only a GPU shows (on a CPU they earn what fast_correct earns).
SAME_AS_CORRECT_ON_A_CPU = {("too_many_stages", "week2/day4_pipelining")}  # the interpreter ignores num_stages


@pytest.mark.parametrize("notebook", course_notebooks(), ids=lambda nb: nb.key)
def test_each_demo_mistake_costs_points(graded, notebook):
    """Every other demo student of the notebook (each names its mistake in its docstring) earns less than
    fast_correct, unless only a GPU can tell."""
    all_results = graded[4]
    solved = _result_of(all_results, "fast_correct", notebook)
    for student in sorted({path.stem for path in demo.demo_files(notebook)} - {"fast_correct", "unchanged_stub"}):
        result = _result_of(all_results, student, notebook)
        if student == "crashes":
            continue  # its status is checked above
        assert result.status == results.OK, f"{student}: {result.status} {result.message}"
        if (student, notebook.key) in SAME_AS_CORRECT_ON_A_CPU and not HAS_GPU:
            assert result.score == solved.score, student
        else:
            assert result.score < solved.score, f"{student} earned {result.score}, as much as fast_correct"
