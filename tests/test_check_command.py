"""`make check NB=...` (python -m grader check): the TA's grade of one notebook, as its student sees it."""

import subprocess
import sys

import nbformat
import pytest

from grader.authoring import demo
from grader.intake.layout import REPO, course_notebooks

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]
NOTEBOOK = next(nb for nb in course_notebooks() if nb.key == "week1/day7_fast_matmul")


def _check(path, out):
    return subprocess.run([sys.executable, "-m", "grader", "check", str(path), "--out", str(out), "--device", "cpu"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def test_a_stub_is_not_graded_yet_and_the_total_says_what_is_pending(tmp_path):
    done = _check(NOTEBOOK.student_path, tmp_path / "out")
    assert "not graded yet: still a stub" in done.stdout and " ok " not in done.stdout.split("total:")[0][-200:]
    quiz = [line for line in done.stdout.splitlines() if line.strip().startswith("test_flops_4096")]
    assert quiz and quiz[0].rstrip().endswith("not answered yet"), quiz  # a quiz answer, not code, is missing
    assert "total: 0 of 9 points decided here; 5 more pending a GPU run" in done.stdout
    assert (tmp_path / "out" / "feedback" / "you" / "week1-day7_fast_matmul.html").exists()
    # The week's other notebooks were not submitted to a check of this one: no verdict for them, exit 0.
    assert done.returncode == 0, done.stderr[-1000:]
    assert "\nweek1/day1_host_baseline:" not in done.stdout


def test_a_copy_named_notebook_is_checked_and_hidden_messages_stay_hidden(tmp_path):
    def answers_of(student):
        return demo.parse_answers((demo.DEMO_CLASS / "week1" / "day7_fast_matmul" / f"{student}.py").read_text())

    # slow_correct's answers (one wrong) with fast_correct's kernel: the test took 44 s with slow_correct's, 17 s so
    answers = {**answers_of("slow_correct"), "matmul_kernel": answers_of("fast_correct")["matmul_kernel"]}
    path = tmp_path / "day7_fast_matmul-Copy1.ipynb"
    nbformat.write(demo.fill(NOTEBOOK, answers), str(path))
    done = _check(path, tmp_path / "out")
    assert "checking" in done.stdout and "day7_fast_matmul-Copy1.ipynb" in done.stdout
    assert "total: 8 of 9 points decided here" in done.stdout, done.stdout[-2000:]
    page = (tmp_path / "out" / "feedback" / "you" / "week1-day7_fast_matmul.html").read_text()
    # slow_correct's wrong answer fails a hidden test: the page names what it covers, not its message.
    assert "hidden tests" in page and "N / BLOCK_N = 1024 / 64 programs" not in page
