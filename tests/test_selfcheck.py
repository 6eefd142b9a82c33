"""``python -m course.selfcheck``: the student's own check, and the release metadata it reads."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course import divergence, selfcheck
from grader.authoring import release
from grader.authoring.demo import DEMO_CLASS, FROM_SOLUTION, fill, parse_answers
from grader.intake.layout import REPO, course_notebooks

NOTEBOOK = next(nb for nb in course_notebooks() if nb.key == "week1/day7_fast_matmul")
KERNEL_TESTS = ("test_matmul_visible", "test_matmul_hidden")
ANSWER_TESTS = ("test_flops_4096", "test_a_reads", "test_step_intensity", "test_tf32")


def run_check(path: Path, *options: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COURSE_DEVICE": "cpu"}
    return subprocess.run([sys.executable, "-m", "course.selfcheck", str(path), "--device", "cpu", *options],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def verdict_of(stdout: str, grade_id: str) -> str:
    match = re.search(rf"^\s+{re.escape(grade_id)}\s+\d+ pts?\s+(.*)$", stdout, re.MULTILINE)
    assert match, f"no line for {grade_id} in:\n{stdout}"
    return match.group(1)


def assert_never_ok(stdout: str) -> None:
    assert not re.search(r"\bok\b", stdout, re.IGNORECASE), stdout


def executed(answers_from: str) -> nbformat.NotebookNode:
    """The student notebook filled with a demo student's answers, as if it had run (no outputs yet)."""
    demo_file = DEMO_CLASS / "week1" / "day7_fast_matmul" / f"{answers_from}.py"
    return fill(NOTEBOOK, parse_answers(demo_file.read_text(encoding="utf-8")))


def cell(nb: nbformat.NotebookNode, grade_id: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def test_release_describes_hidden_tests_in_words_only():
    master = release.master_version(NOTEBOOK)
    notes = release.student_version(NOTEBOOK).metadata["course"]["hidden_tests"]
    assert set(notes) == {"test_matmul_hidden", *ANSWER_TESTS}
    assert notes["test_matmul_hidden"].startswith("The grader checks more shapes here")
    assert notes["test_tf32"] == release.HIDDEN_DEFAULT_NOTE
    hidden_lines = [line.strip() for c in master.cells
                    for line in c.source.split("### BEGIN HIDDEN TESTS")[-1].split("### END HIDDEN TESTS")[0]
                    .splitlines() if "HIDDEN TESTS" in c.source and len(line.strip()) > 3]
    assert hidden_lines and not [line for line in hidden_lines if any(line in note for note in notes.values())]
    committed = nbformat.read(str(NOTEBOOK.student_path), as_version=4)
    assert committed.metadata["course"]["hidden_tests"] == notes


def test_verdicts_on_a_gpu_preview_the_speed_and_quote_failures():
    nb = executed("fast_correct")
    new = nbformat.v4.new_output
    for grade_id in ("perf_w1d7_matmul_fp32_floor", "perf_w1d7_matmul_fp32_vs_cublas"):
        cell(nb, grade_id).outputs = [new("stream", name="stdout", text=f"{grade_id}: 41000 GFLOP/s\n")]
    cell(nb, "perf_w1d7_matmul_fp32_vs_reference").outputs = [
        new("error", ename="NameError", evalue="name 'perf' is not defined", traceback=[])]
    cell(nb, "test_a_reads").outputs = [
        new("error", ename="AssertionError", evalue="a_reads_per_element should be an int\nmore", traceback=[])]
    verdicts = {v.grade_id: v for v in selfcheck.annotate(nb, selfcheck.judge(nb, on_gpu=True))}
    assert verdicts["perf_w1d7_matmul_fp32_floor"].text == "preview: perf_w1d7_matmul_fp32_floor: 41000 GFLOP/s"
    assert verdicts["perf_w1d7_matmul_fp32_vs_reference"].text.startswith("failed: NameError")
    assert verdicts["test_a_reads"].text == "failed: AssertionError: a_reads_per_element should be an int"
    assert verdicts["test_a_reads"].details == ("more",)
    assert verdicts["test_matmul_visible"].text == "passed (visible tests)"
    # test_a_reads has hidden tests too, and its visible part failed: it counts as failed, beside the NameError.
    assert selfcheck.total_line(list(verdicts.values())).splitlines() == [
        "Of 14 points:",
        "     2  passed the visible tests; the grader runs them again on its GPU",
        "     3  passed a visible check of form only (an answer's type, not its value); hidden tests decide them",
        "     3  failed here, or are unfinished or not run (2 items)",
        "     6  are decided only by the grader (hidden tests, speed on its GPU)"]
    assert selfcheck.exit_status(list(verdicts.values())) == selfcheck.EXIT_FAILED


def test_on_a_gpu_the_speed_of_a_stub_is_not_previewed():
    nb = release.student_version(NOTEBOOK)
    perf = cell(nb, "perf_w1d7_matmul_fp32_floor")
    perf.outputs = [nbformat.v4.new_output("stream", name="stdout", text="floor: 0 GFLOP/s -> about 0 of 1\n")]
    verdicts = {v.grade_id: v for v in selfcheck.judge(nb, on_gpu=True)}
    assert verdicts["perf_w1d7_matmul_fp32_floor"].text == "not graded yet: still a stub (matmul_kernel above)"


@pytest.mark.parametrize("content", [None, "{not json", '{"cells": [], "metadata": {}, "nbformat": 4, '
                                                           '"nbformat_minor": 5}'],
                         ids=["missing", "corrupt", "no graded cells"])
def test_an_unusable_file_exits_2_with_a_message(tmp_path: Path, content: str | None,
                                                 capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "day7_fast_matmul.ipynb"
    if content is not None:
        path.write_text(content)
    assert selfcheck.main([str(path), "--device", "cpu"]) == 2
    stderr = capsys.readouterr().err
    assert stderr.startswith("cannot check: ") and str(path) in stderr


@pytest.mark.slow
def test_the_shipped_stub_is_not_graded_yet():
    done = run_check(NOTEBOOK.student_path)
    assert done.returncode == 1, done.stdout + done.stderr
    for grade_id in KERNEL_TESTS:
        assert verdict_of(done.stdout, grade_id).startswith("not graded yet: still a stub")
    for grade_id in ANSWER_TESTS:
        assert verdict_of(done.stdout, grade_id) == "not answered yet"
    assert verdict_of(done.stdout, "perf_w1d7_matmul_fp32_floor") == "pending a GPU run"
    assert "     9  failed here, or are unfinished or not run (6 items)\n" in done.stdout
    assert "     5  are decided only by the grader" in done.stdout and "passed" not in done.stdout
    assert_never_ok(done.stdout)


@pytest.mark.slow
def test_a_jupyter_copy_of_a_finished_notebook_passes_its_visible_tests(tmp_path: Path):
    path = tmp_path / "day7_fast_matmul-Copy1.ipynb"
    nbformat.write(executed("fast_correct"), str(path))
    before = path.read_bytes()
    done = run_check(path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "submit it as week1/day7_fast_matmul.ipynb" in done.stdout
    assert verdict_of(done.stdout, "test_matmul_visible") == "passed (visible tests)"
    assert verdict_of(done.stdout, "test_matmul_hidden").startswith("no visible test; the grader runs hidden tests: "
                                                                    "The grader checks more shapes")
    for grade_id in ANSWER_TESTS:
        assert verdict_of(done.stdout, grade_id) == ("visible part passed; the grader also runs hidden tests: "
                                                     "the grader checks the value of your answer")
    assert verdict_of(done.stdout, "perf_w1d7_matmul_fp32_vs_cublas") == "pending a GPU run"
    assert "     2  passed the visible tests" in done.stdout and "     4  passed a visible check of form" in done.stdout
    assert "     0  failed here, or are unfinished or not run\n" in done.stdout
    assert path.read_bytes() == before, "the student's file must not change"


@pytest.mark.slow
def test_a_cell_that_runs_too_long_is_stopped_and_the_rest_reported(tmp_path: Path):
    nb = nbformat.v4.new_notebook()
    for grade_id, source in (("test_slow", "import time\ntime.sleep(60)"), ("test_after", "x = 1")):
        nb.cells.append(nbformat.v4.new_code_cell(source, metadata={"nbgrader": {
            "grade": True, "grade_id": grade_id, "points": 1, "solution": False, "locked": True}}))
    path = tmp_path / "mine.ipynb"
    nbformat.write(nb, str(path))
    done = run_check(path, "--timeout", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert verdict_of(done.stdout, "test_slow").startswith("failed: CellTimeoutError: this cell ran longer than 2 s")
    assert verdict_of(done.stdout, "test_after").startswith("not run: CellTimeoutError in test_slow")
    assert "no course notebook is called mine.ipynb" in done.stdout


def graded(grade_id: str, source: str, points: float = 1, printed: str = "") -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source, metadata={"nbgrader": {
        "grade": True, "grade_id": grade_id, "points": points, "solution": False, "locked": True}})
    if printed:
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    return cell


UNMASKED = divergence.report([divergence.Divergence("unchecked-address", "copy_kernel", 7,
                                                    "tl.load of a block of addresses without a mask")], "copy")


def test_a_gpu_warning_is_shown_under_the_graded_cell_that_printed_it():
    nb = nbformat.v4.new_notebook()
    demo = nbformat.v4.new_code_cell("run_the_demo()", metadata={"nbgrader": {"grade": False, "grade_id": "demo"}})
    demo.outputs = [nbformat.v4.new_output("stream", name="stdout", text=UNMASKED)]
    nb.cells = [demo, graded("test_before", "check(add)"),
                graded("test_copy_visible", "check(copy)", 2, printed=f"{UNMASKED}\nchecked\n{UNMASKED}\n"),
                graded("test_after", "check(add)")]
    verdicts = {v.grade_id: v for v in selfcheck.annotate(nb, selfcheck.judge(nb, on_gpu=False))}
    assert verdicts["test_copy_visible"].warnings == (
        "GPU warning: [unchecked-address] copy_kernel, line 7: tl.load of a block of addresses without a mask\n"
        f"  fix: {divergence.RULES['unchecked-address'].fix}.",)
    assert verdicts["test_copy_visible"].text == "passed (visible tests); see the GPU warning below"
    assert verdicts["test_before"].warnings == verdicts["test_after"].warnings == ()
    # Everything passed, with a warning: a status of its own, so a script reading it does not see plain success.
    assert selfcheck.exit_status(list(verdicts.values())) == selfcheck.EXIT_WARNED == 3
    failed = dataclasses.replace(verdicts["test_after"], text="failed: AssertionError", ok=False)
    assert selfcheck.exit_status([*verdicts.values(), failed]) == selfcheck.EXIT_FAILED
    assert selfcheck.exit_status([verdicts["test_before"], verdicts["test_after"]]) == selfcheck.EXIT_OK


def test_help_names_every_exit_status(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        selfcheck.main(["--help"])
    shown = capsys.readouterr().out.split("exit status:")[1]
    for status in (selfcheck.EXIT_OK, selfcheck.EXIT_FAILED, selfcheck.EXIT_UNUSABLE, selfcheck.EXIT_WARNED):
        assert re.search(rf"^\s+{status}\s+\S", shown, re.MULTILINE), shown
    assert "GPU warning" in shown


@pytest.mark.slow
def test_a_failed_visible_part_of_an_item_with_hidden_tests_is_counted_as_failed(tmp_path: Path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["course"] = {"hidden_tests": {"test_answer": release.HIDDEN_DEFAULT_NOTE,
                                              "test_form": release.HIDDEN_DEFAULT_NOTE}}
    nb.cells = [nbformat.v4.new_code_cell("answer, form = '4', 4"),
                graded("test_plain", "x = 1"),
                graded("test_answer", 'assert isinstance(answer, int), "answer: should be an int"', 2),
                graded("test_form", 'assert isinstance(form, int), "form: should be an int"', 3)]
    path = tmp_path / "mine.ipynb"
    nbformat.write(nb, str(path))
    done = run_check(path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert verdict_of(done.stdout, "test_answer") == "failed: AssertionError: answer: should be an int"
    assert done.stdout.split("Of 6 points:\n")[1].splitlines() == [
        "     1  passed the visible tests; the grader runs them again on its GPU",
        "     3  passed a visible check of form only (an answer's type, not its value); hidden tests decide them",
        "     2  failed here, or are unfinished or not run (1 item)"]


def finished_with(key: str, grade_id: str, old: str, new: str) -> nbformat.NotebookNode:
    """A notebook as a student finished it (the solution), with one edit to one of its solution cells."""
    notebook = next(nb for nb in course_notebooks() if nb.key == key)
    source = cell(nbformat.read(str(notebook.solution_path), as_version=4), grade_id).source
    assert old in source
    return fill(notebook, {FROM_SOLUTION: "", grade_id: source.replace(old, new)})


@pytest.mark.slow
def test_a_day4_kernel_that_ignores_the_stride_of_y_fails_a_visible_check(tmp_path: Path):
    path = tmp_path / "day4_first_triton_kernel.ipynb"
    nbformat.write(finished_with("week1/day4_first_triton_kernel", "add_kernel", "y_ptr + offsets * stride_y",
                                 "y_ptr + offsets"), str(path))
    done = run_check(path, timeout=300)
    assert done.returncode == selfcheck.EXIT_FAILED, done.stdout + done.stderr
    assert verdict_of(done.stdout, "test_vector_add_visible").startswith("failed: "), done.stdout
    assert verdict_of(done.stdout, "test_saxpy_visible") == "passed (visible tests)"


@pytest.mark.slow
def test_a_kernel_without_a_mask_that_passes_here_exits_with_the_warning_status(tmp_path: Path):
    # Day 5's copy kernel without its load's mask: its visible checks pass in the interpreter, by luck.
    path = tmp_path / "day5_memory.ipynb"
    nbformat.write(finished_with("week1/day5_memory", "copy_kernel", "tl.load(x_ptr + offsets, mask=inside)",
                                 "tl.load(x_ptr + offsets)"), str(path))
    done = run_check(path, timeout=300)
    assert done.returncode == selfcheck.EXIT_WARNED, done.stdout + done.stderr
    assert "GPU warning: [unchecked-address] copy_kernel" in done.stdout
    assert "     0  failed here, or are unfinished or not run\n" in done.stdout
