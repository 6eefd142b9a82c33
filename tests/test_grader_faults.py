"""Faults are the grader's, and loud: a judge that fails or cannot start, or a reference solution that cannot be
graded, makes grader_error (never ok with a student's zero), named in the summary and the exit status."""

from __future__ import annotations

import nbformat
import pytest

from grader import cli, pipeline
from grader.authoring.release import student_version
from grader.flow import reference
from grader.flow import settings as grading_settings
from grader.flow.settings import Settings
from grader.flow.task import Graded, Staged
from grader.intake.layout import course_notebooks
from grader.judge import stage as judge_stage
from grader.judge import verdict as judge
from grader.pipeline import grade
from grader.run import recording
from grader.run.execute import Outcome
from grader.score import results
from grader.score.stored import load_results

DAY4 = next(nb for nb in course_notebooks() if nb.key == "week1/day4_first_triton_kernel")
DAY7 = next(nb for nb in course_notebooks() if nb.key == "week1/day7_fast_matmul")


def _class(root, notebook, students=("alice", "bob")):
    for student in students:
        path = root / student / notebook.assignment / f"{notebook.name}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(student_version(notebook), str(path))
    return root


def test_a_reference_that_cannot_be_graded_stops_its_students(tmp_path, monkeypatch):
    judged = []

    class ReferenceWithoutAVerdict(pipeline.GradingStages):
        def run(self, task, gpu, pause):
            return Staged(Outcome(results.OK), [], {})

        def build(self, task, staged):
            return staged

        def judge(self, task, staged, gpu, gate):
            judged.append(task.key)
            return Graded(Outcome(results.GRADER_ERROR, "a grader fault, not the notebook's: the judge ended without "
                                                       "a verdict (exit code 1; see judge.log)"), None, results.OK)

    monkeypatch.setattr(pipeline, "GradingStages", ReferenceWithoutAVerdict)
    monkeypatch.setattr(grading_settings, "visible_gpus", lambda: ("0",))
    settings = Settings("gpu", "GPU (a test)", sandbox=False)
    graded = grade(_class(tmp_path / "class", DAY7), tmp_path / "out", settings, log=lambda _: None)
    assert judged == ["reference"]  # no student's notebook was judged
    day7 = [r for r in graded if r.notebook == DAY7.name]
    assert {r.student for r in day7} == {"alice", "bob"}
    for result in day7:
        assert result.status == results.GRADER_ERROR
        assert "the reference solution of week1/day7_fast_matmul could not be graded" in result.message
        assert "the judge ended without a verdict" in result.message
    assert any("reference solution" in note for note in settings.notes)
    assert not (tmp_path / "out" / "reference" / "week1" / DAY7.name / "device.txt").exists()  # tried again next run


def test_a_relative_out_folder_reaches_every_stage_as_an_absolute_path(tmp_path, monkeypatch):
    """The GPU judge and the sandboxed stages run in scratch folders of their own: a path relative to the TA's
    folder (``make grade``'s default OUT=build/grades) would name nothing there."""
    seen = []

    class Recording(pipeline.GradingStages):
        def run(self, task, gpu, pause):
            seen.extend([task.run, task.judge_cache])
            return Staged(Outcome(results.OK), [], {})

        def build(self, task, staged):
            return staged

        def judge(self, task, staged, gpu, gate):
            return Graded(Outcome(results.OK), {"tests": {}, "kernels": {}})

    monkeypatch.setattr(pipeline, "GradingStages", Recording)
    monkeypatch.setattr(grading_settings, "visible_gpus", lambda: ("0",))
    monkeypatch.chdir(tmp_path)
    _class(tmp_path / "class", DAY4, students=("alice",))
    grade(pipeline.Path("class"), pipeline.Path("out"), Settings("gpu", "GPU (a test)", sandbox=False),
          log=lambda _: None)
    assert seen and all(path is None or path.is_absolute() for path in seen), seen
    assert (tmp_path / "out" / "schedule.json").is_file()


def test_a_reference_kernel_that_was_not_timed_cannot_anchor_grades():
    [job] = recording.kernel_calls(DAY7, Settings("gpu", "GPU"), 1, "reference", bench_only=True)
    verdict = {"kernels": {job["spec"]: {"sets": {"bench": {"passed": True, "messages": []}},
                                         "bench": {"rows": [{"shape": [1024] * 3, "student_ms": None,
                                                             "error": "not timed: the plan was refused"}]}}}}
    problem = reference._reference_problem(Graded(Outcome(results.OK), verdict), [job])
    assert "not timed: the plan was refused" in problem
    timed = {"kernels": {job["spec"]: {"sets": {"bench": {"passed": True, "messages": []}},
                                       "bench": {"rows": [{"shape": [1024] * 3, "student_ms": 0.2}]}}}}
    assert reference._reference_problem(Graded(Outcome(results.OK), timed), [job]) is None


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_judge_that_cannot_start_is_a_grader_error_for_every_notebook_and_a_nonzero_exit(tmp_path, monkeypatch,
                                                                                          capsys):
    def cannot_start(job):
        raise ModuleNotFoundError("No module named 'grader'")

    monkeypatch.setattr(judge, "judge", cannot_start)
    root = _class(tmp_path / "class", DAY4)
    argv = ["grade", str(root), "--out", str(tmp_path / "out"), "--device", "cpu", "--jobs", "2",
            "--allow-ungraded"]
    assert cli.main(argv) == 1  # a grader fault is never allowed away
    day4 = [r for r in load_results(tmp_path / "out") if r.notebook == DAY4.name]
    assert len(day4) == 2 and all(r.status == results.GRADER_ERROR for r in day4)
    assert all("No module named 'grader'" in r.message and not r.stopped_at for r in day4)
    captured = capsys.readouterr()
    assert "GRADER ERRORS: the grader failed on 2 notebook(s)" in captured.out
    assert "alice/week1/day4_first_triton_kernel: grader_error" in captured.out and "GRADER ERRORS" in captured.err


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.sandbox
def test_on_a_gpu_a_judge_process_that_cannot_start_stops_the_notebook_loudly(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(judge_stage, "JUDGE_MODULE", "grader.no_such_judge")  # as a judge that cannot import grader
    root = _class(tmp_path / "class", DAY4)
    argv = ["grade", str(root), "--out", str(tmp_path / "out"), "--device", "gpu", "--allow-ungraded"]
    assert cli.main(argv) == 1
    day4 = [r for r in load_results(tmp_path / "out") if r.notebook == DAY4.name]
    assert len(day4) == 2 and all(r.status == results.GRADER_ERROR for r in day4)
    # The reference solution's own judge failed first: no student's notebook was judged. (Their runs and builds
    # may have gone on meanwhile: the pipeline starts them while the reference is judged.)
    assert all("the reference solution of week1/day4_first_triton_kernel could not be graded" in r.message
               and "the judge ended without a verdict" in r.message for r in day4)
    assert not (tmp_path / "out" / "runs").exists() or not any((tmp_path / "out" / "runs").rglob("verdict.json"))
    assert "GRADER ERRORS" in capsys.readouterr().err


def test_a_judge_unsure_of_having_its_gpu_alone_is_told_to_the_ta_once():
    settings = Settings("gpu", "GPU")
    unread = {"gpu_notes": ["the GPU's utilisation could not be read: waited a fixed moment for queued work"]}
    for _ in range(3):
        judge_stage.note_gpu_trouble(settings, "1", unread)
    judge_stage.note_gpu_trouble(settings, "1", {"seconds": {}})
    assert settings.notes == ["GPU 1: the GPU's utilisation could not be read: waited a fixed moment for queued "
                              "work: timings taken then may include other notebooks' work"]
