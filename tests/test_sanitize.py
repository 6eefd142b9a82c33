"""Locked and test cells come back from the master copy; unreadable files become a status."""

import nbformat
import pytest

from grader.authoring.release import student_version
from grader.intake.layout import course_notebooks
from grader.intake.sanitize import sanitize
from grader.score import gradebook, results

NOTEBOOK = next(nb for nb in course_notebooks() if nb.key == "week1/day7_fast_matmul")


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    out = tmp_path_factory.mktemp("gradebook")
    url = gradebook.db_url(out)
    gradebook.register(url, [NOTEBOOK])
    return url


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _sanitize(tmp_path, nb, db):
    path = tmp_path / "submitted.ipynb"
    nbformat.write(nb, str(path))
    return sanitize(path, NOTEBOOK.assignment, NOTEBOOK.name, "student", db)


def test_an_edited_test_cell_is_restored_with_its_hidden_tests(tmp_path, db):
    nb = student_version(NOTEBOOK)
    _cell(nb, "test_matmul_visible").source = "pass  # trust me"
    cleaned = _sanitize(tmp_path, nb, db)
    assert cleaned.status == results.OK
    assert "assert_correct" in _cell(cleaned.notebook, "test_matmul_visible").source
    assert '"hidden"' in _cell(cleaned.notebook, "test_matmul_hidden").source
    assert any("test_matmul_visible" in note for note in cleaned.notes)


def test_a_deleted_test_cell_is_added_back(tmp_path, db):
    nb = student_version(NOTEBOOK)
    nb.cells = [c for c in nb.cells if c is not _cell(nb, "test_matmul_hidden")]
    cleaned = _sanitize(tmp_path, nb, db)
    assert "assert_correct" in _cell(cleaned.notebook, "test_matmul_hidden").source
    assert any("test_matmul_hidden" in note for note in cleaned.notes)


def test_a_retyped_test_cell_is_turned_back_into_code(tmp_path, db):
    nb = student_version(NOTEBOOK)
    cell = _cell(nb, "test_matmul_visible")
    cell.cell_type = "markdown"
    del cell["outputs"], cell["execution_count"]
    cleaned = _sanitize(tmp_path, nb, db)
    assert _cell(cleaned.notebook, "test_matmul_visible").cell_type == "code"


def test_the_students_answers_are_kept(tmp_path, db):
    nb = student_version(NOTEBOOK)
    _cell(nb, "matmul_kernel").source = "def matmul(a, b):\n    return 'mine'"
    cleaned = _sanitize(tmp_path, nb, db)
    assert _cell(cleaned.notebook, "matmul_kernel").source.endswith("return 'mine'")


NBFORMAT_3 = b'{"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": []}]}'
NO_CELLS = b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}}'


@pytest.mark.parametrize("content", [b"{ not json", b"", b'{"cells": 3}', b"\xff\xfe garbage", b"\x00\x01\x02" * 50,
                                     NBFORMAT_3, NO_CELLS, b"[1, 2]", b'"a string"', b"[" * 100_000])
def test_an_unreadable_file_is_corrupt_not_a_crash(tmp_path, db, content):
    path = tmp_path / "submitted.ipynb"
    path.write_bytes(content)
    cleaned = sanitize(path, NOTEBOOK.assignment, NOTEBOOK.name, "student", db)
    assert cleaned.status == results.CORRUPT and "notebook" in cleaned.message


def test_an_untouched_notebook_has_no_notes_although_hidden_tests_come_back(tmp_path, db):
    cleaned = _sanitize(tmp_path, student_version(NOTEBOOK), db)
    assert cleaned.notes == []
    assert '"hidden"' in _cell(cleaned.notebook, "test_matmul_hidden").source


def _drop_test_tf32_from_the_masters(monkeypatch) -> None:
    original = gradebook.master_version

    def without_one_test(notebook):
        nb = original(notebook)
        nb.cells = [c for c in nb.cells if c is not _cell(nb, "test_tf32")]
        return nb

    monkeypatch.setattr(gradebook, "master_version", without_one_test)


def test_a_gradebook_from_other_notebooks_is_refused_clearly(tmp_path, monkeypatch):
    from grader.score.results import NotebookResult

    url = gradebook.db_url(tmp_path)
    gradebook.register(url, [NOTEBOOK])
    gradebook.record(url, NotebookResult("s", NOTEBOOK.assignment, NOTEBOOK.name, results.MISSING), None)
    _drop_test_tf32_from_the_masters(monkeypatch)
    with pytest.raises(gradebook.GradebookMismatch, match="new OUT folder"):
        gradebook.register(url, [NOTEBOOK])


def test_a_new_gradebook_is_a_copy_of_the_first_made_from_the_same_masters(tmp_path, monkeypatch):
    import sqlite3

    monkeypatch.setenv("GRADER_CACHE", str(tmp_path / "cache"))

    def cells(out):
        with sqlite3.connect(out / "gradebook.db") as db:
            return sorted(db.execute("SELECT name, type FROM base_cell").fetchall())

    made, copied = tmp_path / "made", tmp_path / "copied"
    for out in (made, copied):
        out.mkdir()
        gradebook.register(gradebook.db_url(out), [NOTEBOOK])
    assert [p.suffix for p in (tmp_path / "cache" / "gradebooks").iterdir()] == [".db"]  # one template, no .part
    assert cells(copied) == cells(made) and any(name == "test_tf32" for name, _ in cells(made))
    _drop_test_tf32_from_the_masters(monkeypatch)
    other = tmp_path / "other"
    other.mkdir()
    gradebook.register(gradebook.db_url(other), [NOTEBOOK])  # other masters: made again, not the old copy
    assert not any(name == "test_tf32" for name, _ in cells(other))
    assert len(list((tmp_path / "cache" / "gradebooks").iterdir())) == 2
