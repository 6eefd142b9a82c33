"""Quiz answers: the released stub names each answer at its placeholder, and the checks read the answer specs."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbgrader.utils import is_grade, is_solution

import course
from course import answers, spec
from course.recorder.export import encode_answer
from grader.authoring import release
from grader.intake.layout import CourseNotebook, course_notebooks
from grader.judge import exported as judge_export
from grader.score import score

NOTEBOOKS = course_notebooks()
IDS = [nb.key for nb in NOTEBOOKS]


def quiz_names(notebook: CourseNotebook) -> set[str]:
    return {answer.name for answer in answers.QUIZZES[notebook.key]}


def answer_cell(nb: nbformat.NotebookNode, names: set[str]) -> nbformat.NotebookNode:
    (cell,) = [c for c in nb.cells if is_solution(c) and any(f"\n{n} = " in f"\n{c.source}" for n in names)]
    return cell


def quiz_tests(nb: nbformat.NotebookNode, names: set[str]) -> dict[str, str]:
    """Checked answer name -> source of its graded test cell."""
    tests = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and is_grade(cell) and not is_solution(cell):
            read = {n for n in names if f'"{n}", {n}' in cell.source}
            if read:
                (name,) = read
                tests[name] = cell.source
    return tests


def test_every_quiz_has_its_notebook():
    assert set(answers.QUIZZES) == set(IDS)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_the_shipped_answer_cell_defines_each_answer_as_a_placeholder_not_answered_yet(notebook):
    names = quiz_names(notebook)
    student = nbformat.read(str(notebook.student_path), as_version=4)
    namespace = {"course": course}
    exec(answer_cell(student, names).source, namespace)
    tests = quiz_tests(student, names)
    assert set(tests) == names
    for name, source in tests.items():
        assert namespace[name] is Ellipsis
        with pytest.raises(AssertionError) as raised:
            exec(source, dict(namespace))
        assert str(raised.value).startswith(f"{name}: not answered yet")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_the_judge_scores_the_shipped_placeholders_0_saying_not_answered_yet(notebook, tmp_path: Path):
    names = quiz_names(notebook)
    exported = {name: encode_answer(..., tmp_path, name) for name in names}
    verdicts = _judged(notebook, exported, tmp_path)
    assert {name: v["passed"] for name, v in verdicts.items()} == dict.fromkeys(names, False)
    for name, verdict in verdicts.items():
        assert verdict["message"].startswith(f"{name}: not answered yet")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_the_solution_answers_pass_the_visible_and_hidden_checks(notebook, tmp_path: Path):
    names = quiz_names(notebook)
    namespace = {"course": course}
    exec(answer_cell(release.read(notebook.solution_path), names).source, namespace)
    exported = {name: encode_answer(namespace[name], tmp_path, name) for name in names}
    verdicts = _judged(notebook, exported, tmp_path)
    assert verdicts == {name: {"passed": True, "message": ""} for name in names}


def _judged(notebook: CourseNotebook, exported: dict, arrays: Path) -> dict[str, dict]:
    """Answer name -> the judge's verdict on its master test cell (visible and hidden tests)."""
    master = release.master_version(notebook)
    by_id = {test["grade_id"]: test for test in score.test_cells(master, spec.for_notebook(notebook.key))}
    names = quiz_names(notebook)
    tests = {name: next(t for t in by_id.values() if t["source"] == source)
             for name, source in quiz_tests(master, names).items()}
    assert set(tests) == names and all("BEGIN HIDDEN TESTS" in t["source"] for t in tests.values())
    verdicts = judge_export.run_tests(list(tests.values()), exported, arrays)
    return {name: verdicts[test["grade_id"]] for name, test in tests.items()}


@pytest.mark.parametrize("name", [a.name for a in answers.ANSWERS.values() if a.form == answers.FRACTION])
def test_a_percent_where_a_fraction_is_asked_is_refused_saying_so(name):
    with pytest.raises(AssertionError, match=rf"^{name}: a fraction between 0 and 1 is asked, not a percent"):
        answers.check_answer(name, 25.0)
    answers.check_answer(name, 0.25)
    assert not answers.matches(name, 25.0, 0.25) and answers.matches(name, 0.25, 0.25)


@pytest.mark.parametrize(("name", "value", "said"), [
    ("programs_needed", True, "programs_needed: should be an int, not bool"),
    ("programs_needed", 4.0, "programs_needed: should be an int, not float"),
    ("programs_needed", -4, "programs_needed: a number of programs cannot be negative"),
    ("saxpy_intensity", np.float64(1 / 6), "saxpy_intensity: should be a float (or an int), not numpy.float64"),
    ("saxpy_intensity", "1/6", "saxpy_intensity: should be a float (or an int), not str"),
    ("tf32_would_pass", 0, "tf32_would_pass: should be True or False, not int"),
    ("low_both", "Latency", 'low_both: should be one of "memory", "compute", "latency"'),
    ("waiting_lines", "bcx", "waiting_lines: use only the letters a, b, c, d, e"),
])
def test_a_wrong_type_or_form_is_refused_with_a_clear_message(name, value, said):
    with pytest.raises(AssertionError) as raised:
        answers.check_answer(name, value)
    assert str(raised.value) == said
    assert not answers.matches(name, value, value)


def test_a_float_is_graded_within_the_tolerance_its_stub_states():
    assert answers.stub_line("saxpy_intensity") == (
        "saxpy_intensity = ...  # float: FLOP per byte (a multiply-add counts as 2), within 1%")
    assert answers.matches("saxpy_intensity", 1 / 6 * 1.009, 1 / 6)
    assert not answers.matches("saxpy_intensity", 1 / 6 * 1.011, 1 / 6)
    assert not answers.matches("saxpy_intensity", 10**400, 1 / 6)
    assert answers.matches("waiting_lines", "D, c, b", "bcd") and not answers.matches("waiting_lines", "bc", "bcd")


def test_release_renders_each_stub_comment_from_the_spec(monkeypatch: pytest.MonkeyPatch):
    notebook = next(nb for nb in NOTEBOOKS if nb.key == "week1/day4_first_triton_kernel")
    names = quiz_names(notebook)
    shipped = answer_cell(release.student_version(notebook), names).source
    assert "programs_needed = ...  # int: a number of programs\n" in shipped
    changed = dataclasses.replace(answers.ANSWERS["programs_needed"], unit="launched programs")
    monkeypatch.setitem(answers.ANSWERS, "programs_needed", changed)
    released = answer_cell(release.student_version(notebook), names).source
    assert released == shipped.replace("a number of programs", "a number of launched programs")


# A unit that could be read two ways, and the definition that makes it one: wherever a quiz question (or an
# answer's unit text) uses the unit, the same question states the definition.
UNIT_DEFINITIONS = (
    (r"\bKiB\b", "1 KiB = 1024 bytes"),
    (r"\bGB\b", "1 GB = 10**9 bytes"),
    (r"\bTB\b", "1 TB = 10**12 bytes"),
    (r"\bGFLOP", "1 GFLOP = 10**9 FLOPs"),
    (r"\bTFLOP", "1 TFLOP = 10**12 FLOPs"),
    (r"\bFLOP|floating-point operations", "a multiply-add counts as 2"),
)
AMBIGUOUS_UNITS = r"\b(KB|kB|MB|MiB|GiB|Kb|Mb)\b"  # none of these is defined in any question: use KiB or bytes


def quiz_questions(notebook: CourseNotebook) -> dict[str, str]:
    """"Q1" -> the question's comment text, for each question of the solution's answer cell."""
    cell = answer_cell(nbformat.read(str(notebook.solution_path), as_version=4), quiz_names(notebook))
    questions: dict[str, str] = {}
    for line in cell.source.splitlines():
        words = line.lstrip("# ").split(".", 1)
        if line.startswith("# Q") and words[0][1:].isdigit():
            questions[words[0]] = line
        elif line.startswith("#") and questions and "SOLUTION" not in line:
            questions[list(questions)[-1]] += "\n" + line
    return questions


def undefined_units(text: str) -> list[str]:
    missing = [definition for unit, definition in UNIT_DEFINITIONS
               if re.search(unit, text) and definition not in re.sub(r"\s*\n#\s*", " ", text)]
    return missing + [f"ambiguous unit {m}" for m in re.findall(AMBIGUOUS_UNITS, text)]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_every_quiz_question_defines_the_units_it_uses(notebook: CourseNotebook):
    questions = quiz_questions(notebook)
    assert len(questions) == len(answers.QUIZZES[notebook.key])
    undefined = {number: undefined_units(text) for number, text in questions.items() if undefined_units(text)}
    assert undefined == {}


def test_every_answer_unit_names_its_base():
    undefined = {name: undefined_units(answer.unit) for name, answer in answers.ANSWERS.items()
                 if undefined_units(answer.unit)}
    assert undefined == {}
    assert answers.ANSWERS["add_gbps"].describe() == "float: GB/s (1 GB = 10**9 bytes), within 0.1%"


def test_the_unit_check_catches_a_question_without_its_definition():
    assert undefined_units("# Q1. Fits in the 227 KB an H100 allows? (int)") == ["ambiguous unit KB"]
    assert undefined_units("# Q1. In 227 KiB? (int)") == ["1 KiB = 1024 bytes"]
    assert undefined_units("# Q4. Its bandwidth in GB/s. (float)") == ["1 GB = 10**9 bytes"]
    assert undefined_units("# Q1. FLOPs of a 4 x 4 x 4 matmul? (int)") == ["a multiply-add counts as 2"]
    assert undefined_units("# Q1. FLOPs (a multiply-add\n#     counts as 2) of a 4 x 4 x 4 matmul? (int)") == []
