"""A student who edits nbgrader metadata cannot change what is graded: the notebook is rebuilt from the master."""

from __future__ import annotations

import nbformat
import pytest
from nbformat import NotebookNode

from grader.authoring.release import master_version, student_version
from grader.intake.layout import course_notebooks
from grader.intake.sanitize import Sanitized, sanitize
from grader.score import gradebook, results

NOTEBOOK = next(nb for nb in course_notebooks() if nb.key == "week1/day7_fast_matmul")
KERNEL = "def matmul(a, b):\n    return 'my kernel'"
ANSWERS = "flops_4096 = 2 * 4096**3  # my answers"
MASTER = master_version(NOTEBOOK)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    url = gradebook.db_url(tmp_path_factory.mktemp("gradebook"))
    gradebook.register(url, [NOTEBOOK])
    return url


def _cell(nb: NotebookNode, grade_id: str) -> NotebookNode:
    return next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _submission() -> NotebookNode:
    nb = student_version(NOTEBOOK)
    _cell(nb, "matmul_kernel").source = KERNEL
    _cell(nb, "answers").source = ANSWERS
    return nb


def _graded(nb: NotebookNode) -> list[tuple[str, dict, str | None]]:
    """Every nbgrader cell in order: type, metadata, and source unless it is an answer."""
    return [(c.cell_type, dict(c.metadata.nbgrader), None if c.metadata.nbgrader.get("solution") else c.source)
            for c in nb.cells if "nbgrader" in c.metadata]


def _sanitize(tmp_path, nb: NotebookNode, db: str) -> Sanitized:
    path = tmp_path / "submitted.ipynb"
    nbformat.write(nb, str(path))
    cleaned = sanitize(path, NOTEBOOK.assignment, NOTEBOOK.name, "student", db)
    assert cleaned.status == results.OK, cleaned.message
    return cleaned


def _assert_master_graded(cleaned: Sanitized, kernel: str = KERNEL, answers: str = ANSWERS) -> None:
    assert _graded(cleaned.notebook) == _graded(MASTER)
    assert _cell(cleaned.notebook, "matmul_kernel").source == kernel
    assert _cell(cleaned.notebook, "answers").source == answers


def _noted(cleaned: Sanitized, *words: str) -> bool:
    return any(all(word in note for word in words) for note in cleaned.notes)


def _ordinary_sources(nb: NotebookNode) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code" and "nbgrader" not in c.metadata]


def test_an_untouched_submission_keeps_its_answers_without_notes(tmp_path, db):
    cleaned = _sanitize(tmp_path, _submission(), db)
    _assert_master_graded(cleaned)
    assert cleaned.notes == []


def test_raised_points_are_restored(tmp_path, db):
    nb = _submission()
    _cell(nb, "test_matmul_visible").metadata.nbgrader["points"] = 100
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    assert _noted(cleaned, "points of test_matmul_visible", "2", "100")


def test_a_test_cell_with_its_grade_flag_off_is_still_graded(tmp_path, db):
    nb = _submission()
    _cell(nb, "test_matmul_hidden").metadata.nbgrader["grade"] = False
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    assert _cell(cleaned.notebook, "test_matmul_hidden").metadata.nbgrader["grade"] is True
    assert _noted(cleaned, "'grade'", "test_matmul_hidden")


def test_a_test_cell_relabelled_as_an_answer_keeps_the_course_tests(tmp_path, db):
    nb = _submission()
    cell = _cell(nb, "test_matmul_visible")
    cell.metadata.nbgrader.update(solution=True, locked=False)
    cell.source = "pass  # my own test"
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    assert _noted(cleaned, "'solution'", "test_matmul_visible")
    assert _noted(cleaned, "test_matmul_visible was edited")


def test_an_answer_cell_relabelled_as_locked_keeps_the_answer(tmp_path, db):
    nb = _submission()
    _cell(nb, "answers").metadata.nbgrader.update(solution=False, locked=True)
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    assert _noted(cleaned, "'solution'", "answers")


def test_a_renamed_test_cell_with_a_passing_body_is_not_graded(tmp_path, db):
    nb = _submission()
    cell = _cell(nb, "test_matmul_visible")
    cell.metadata.nbgrader["grade_id"] = "test_mine"
    cell.source = "pass  # always passes"
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    assert _noted(cleaned, "test_matmul_visible was missing")
    assert _noted(cleaned, "'test_mine' claimed 2 points")
    assert "pass  # always passes" in _ordinary_sources(cleaned.notebook)


def test_a_renamed_but_unedited_test_cell_is_recognised_by_its_code(tmp_path, db):
    nb = _submission()
    _cell(nb, "test_matmul_visible").metadata.nbgrader["grade_id"] = "test_mine"
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    assert _noted(cleaned, "test_matmul_visible", "grade id changed to 'test_mine'")
    assert not any("assert_correct" in source for source in _ordinary_sources(cleaned.notebook))


def test_a_duplicated_test_cell_with_a_passing_body_is_not_graded(tmp_path, db):
    nb = _submission()
    original = _cell(nb, "test_matmul_visible")
    copy = nbformat.from_dict(original)
    copy.id, copy.source = "my-copy", "pass  # the copy passes"
    nb.cells.insert(nb.cells.index(original), copy)
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    assert _noted(cleaned, "second cell claims to be test_matmul_visible")
    assert "pass  # the copy passes" in _ordinary_sources(cleaned.notebook)


def test_a_new_grade_cell_is_not_graded(tmp_path, db):
    nb = _submission()
    bonus = nbformat.v4.new_code_cell("print('bonus')", id="bonus")
    bonus.metadata.nbgrader = {"grade": True, "grade_id": "bonus", "points": 10, "locked": True,
                               "solution": False, "schema_version": 3}
    nb.cells.append(bonus)
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    assert _noted(cleaned, "'bonus' claimed 10 points", "not graded")
    assert cleaned.notebook.cells[-1].source == "print('bonus')"


def test_a_notebook_stripped_of_all_grader_metadata_is_graded(tmp_path, db):
    nb = _submission()
    for n, cell in enumerate(nb.cells):
        cell.metadata.pop("nbgrader", None)
        cell.id = f"renamed-{n}"
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    assert _noted(cleaned, "answer cell matmul_kernel had lost its grader metadata", "matched by position")
    assert _noted(cleaned, "answer cell answers had lost its grader metadata", "matched by position")
    assert _noted(cleaned, "test_matmul_visible, test_matmul_hidden", "lost their grader metadata")
    assert len(cleaned.notebook.cells) == len(nb.cells)


def test_reordered_cells_run_in_the_course_order(tmp_path, db):
    nb = _submission()
    answers, tf32, flops = (_cell(nb, g) for g in ("answers", "test_tf32", "test_flops_4096"))
    nb.cells.remove(answers)
    nb.cells.insert(0, answers)
    nb.cells.remove(tf32)
    nb.cells.insert(nb.cells.index(flops), tf32)
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    assert _noted(cleaned, "answer cell answers was moved")
    assert _noted(cleaned, "cell test_tf32 was moved")


def test_a_notebook_with_no_cells_is_rebuilt_with_every_stub(tmp_path, db):
    nb = _submission()
    nb.cells = []
    cleaned = _sanitize(tmp_path, nb, db)
    stub = _cell(MASTER, "matmul_kernel").source
    _assert_master_graded(cleaned, kernel=stub, answers=_cell(MASTER, "answers").source)
    assert "raise NotImplementedError" in stub or "YOUR CODE HERE" in stub
    assert _noted(cleaned, "no cells")


def test_an_answer_cell_without_metadata_is_matched_by_position(tmp_path, db):
    nb = _submission()
    cell = _cell(nb, "matmul_kernel")
    del cell.metadata["nbgrader"]
    cell.id = "anything"
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    assert _noted(cleaned, "your answer cell matmul_kernel had lost its grader metadata; it was matched by position")


def test_an_answer_cell_beside_a_helper_is_told_apart_by_its_cell_id(tmp_path, db):
    nb = _submission()
    cell = _cell(nb, "matmul_kernel")
    del cell.metadata["nbgrader"]
    nb.cells.insert(nb.cells.index(cell) + 1, nbformat.v4.new_code_cell("HELPER = 1", id="helper"))
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    kernel = _cell(cleaned.notebook, "matmul_kernel")
    assert cleaned.notebook.cells[cleaned.notebook.cells.index(kernel) + 1].source == "HELPER = 1"


def test_an_answer_that_cannot_be_told_apart_gets_the_stub(tmp_path, db):
    nb = _submission()
    cell = _cell(nb, "matmul_kernel")
    del cell.metadata["nbgrader"]
    cell.id = "anything"
    nb.cells.insert(nb.cells.index(cell) + 1, nbformat.v4.new_code_cell("HELPER = 1", id="helper"))
    nb.cells.remove(_cell(nb, "answers"))
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned, kernel=_cell(MASTER, "matmul_kernel").source,
                          answers=_cell(MASTER, "answers").source)
    assert _noted(cleaned, "answer cell matmul_kernel", "2 cells could be it", "stub")
    assert _noted(cleaned, "answer cell answers was missing; the stub was put back")
    assert KERNEL in _ordinary_sources(cleaned.notebook)


def test_a_parameters_tag_on_a_students_cell_is_removed(tmp_path, db):
    nb = _submission()
    mine = nbformat.v4.new_code_cell("grading = False", id="mine")
    mine.metadata.tags = ["parameters"]
    nb.cells.insert(0, mine)
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    tagged = [c for c in cleaned.notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert [_cell(cleaned.notebook, "parameters")] == tagged
    assert _noted(cleaned, "'parameters'")


def test_outputs_are_cleared_and_the_course_kernelspec_is_used(tmp_path, db):
    nb = _submission()
    nb.metadata.kernelspec = {"name": "python3", "display_name": "mine", "language": "python"}
    _cell(nb, "matmul_kernel").outputs = [nbformat.v4.new_output("stream", text="fast!")]
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    assert cleaned.notebook.metadata.kernelspec == MASTER.metadata.kernelspec
    assert all(not c.get("outputs") for c in cleaned.notebook.cells)


def test_odd_metadata_values_do_not_crash_the_grader(tmp_path, db):
    nb = _submission()
    _cell(nb, "test_tf32").metadata.nbgrader["points"] = "lots"
    _cell(nb, "setup").metadata.nbgrader["grade_id"] = 5
    nb.cells[0].metadata.nbgrader = "yes"
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    assert _noted(cleaned, "points of test_tf32", "lots")
    assert _noted(cleaned, "cell setup had lost its grader metadata; the grader recognised it by its code")


def test_an_older_format_4_notebook_without_cell_ids_is_graded(tmp_path, db):
    nb = _submission()
    nb.nbformat_minor = 4
    for cell in nb.cells:
        del cell["id"]
    cleaned = _sanitize(tmp_path, nb, db)
    _assert_master_graded(cleaned)
    assert cleaned.notes == []
    ids = [c.id for c in cleaned.notebook.cells]
    assert len(set(ids)) == len(ids)


def test_a_changed_kernelspec_is_put_back_with_a_note(tmp_path):
    nb = student_version(NOTEBOOK)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "submitted.ipynb"
    nbformat.write(nb, str(path))
    cleaned = sanitize(path, NOTEBOOK.assignment, NOTEBOOK.name, "student", "unused")
    assert cleaned.notebook.metadata.kernelspec.name == "gpu-kernels-course"
    assert any("python3" in note for note in cleaned.notes)
