"""The pipeline's trust rules: no sandbox, no grading (unless asked); secret, reproducible seeds; answers to export."""

import pytest

from grader.flow.settings import SandboxUnavailable, Settings
from grader.intake.layout import course_notebooks
from grader.pipeline import grade
from grader.run import recording
from grader.wall import sandbox

NOTEBOOK = next(nb for nb in course_notebooks() if nb.key == "week1/day7_fast_matmul")


def _class_with_a_missing_notebook(root):
    (root / "alice" / "week1").mkdir(parents=True)
    return root


def test_without_the_sandbox_grading_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "unavailable_reason", lambda: "bwrap is not installed")
    with pytest.raises(SandboxUnavailable, match="--no-sandbox"):
        grade(_class_with_a_missing_notebook(tmp_path / "class"), tmp_path / "out", Settings("cpu", "CPU"))


def test_no_sandbox_grades_and_every_result_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "unavailable_reason", lambda: "bwrap is not installed")
    notes = []
    graded = grade(_class_with_a_missing_notebook(tmp_path / "class"), tmp_path / "out",
                   Settings("cpu", "CPU", sandbox=False), log=notes.append)  # one result per week1 notebook
    assert graded and all(result.sandbox.startswith("NONE") for result in graded)
    assert any("--no-sandbox" in note for note in notes)


def test_judged_shapes_and_seeds_come_from_the_run_seed():
    settings = Settings("cpu", "CPU")

    def calls(seed, student="alice"):
        [job] = recording.kernel_calls(NOTEBOOK, settings, seed, student)
        return [(c["shape"], c["seed"]) for c in job["calls"]]

    assert calls(1) == calls(1)
    assert calls(1) != calls(2)
    assert [s for s, _ in calls(1, "bob")] == [s for s, _ in calls(1)]  # same shapes for everyone in a run
    assert [seed for _, seed in calls(1, "bob")] != [seed for _, seed in calls(1)]  # but not the same inputs


def test_the_bench_shapes_come_from_the_spec_on_a_gpu():
    [job] = recording.kernel_calls(NOTEBOOK, Settings("gpu", "GPU"), 1, "alice")
    assert job["bench_shapes"] == [list(s) for s in (
        (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (3000, 2000, 1500))]


def test_the_answers_exported_are_what_the_master_tests_read():
    assert recording.notebook_plan(NOTEBOOK).answers == [
        "a_reads_per_element", "flops_4096", "step_intensity", "tf32_would_pass"]
