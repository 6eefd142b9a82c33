"""Reference solutions graded once and shared (grader/flow/reference.py, `python -m grader references`, `grade
--references-from`): the Slurm executor's references job grades them, and each task takes them instead of grading
them again, but only where they were graded on the task's own device, grader version and shapes."""

from __future__ import annotations

import nbformat
import pytest

from grader import cli, pipeline
from grader.authoring.release import student_version
from grader.flow import settings as grading_settings
from grader.flow.settings import Settings
from grader.flow.task import Graded, Staged
from grader.intake.layout import course_notebooks
from grader.pipeline import grade
from grader.run import recording
from grader.run.execute import Outcome
from grader.score import results

DAY7 = next(nb for nb in course_notebooks() if nb.key == "week1/day7_fast_matmul")
SEED = 5


def _timed_verdict(settings: Settings) -> dict:
    """A verdict in which every benchmarked kernel of Day 7 passed and was timed: one that anchors grades."""
    jobs = recording.kernel_calls(DAY7, settings, SEED, "reference", True)
    return {"kernels": {job["spec"]: {"sets": {"bench": {"passed": True, "messages": []}},
                                      "bench": {"rows": [{"shape": [1024] * 3, "student_ms": 0.2}]}}
                        for job in jobs}}


@pytest.fixture
def stages(monkeypatch) -> list[tuple[str, dict | None]]:
    """Stand-in stages on a pretend GPU: each judged task's key and the reference it was judged against."""
    judged: list[tuple[str, dict | None]] = []

    class Recorded(pipeline.GradingStages):
        def run(self, task, gpu, pause):
            return Staged(Outcome(results.OK), [], {})

        def build(self, task, staged):
            return staged

        def judge(self, task, staged, gpu, gate):
            judged.append((task.key, task.reference))
            return Graded(Outcome(results.OK), _timed_verdict(task.settings), results.OK)

    monkeypatch.setattr(pipeline, "GradingStages", Recorded)
    monkeypatch.setattr(grading_settings, "visible_gpus", lambda: ("0",))
    return judged


def _class(root):
    for student in ("alice", "bob"):
        path = root / student / DAY7.assignment / f"{DAY7.name}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(student_version(DAY7), str(path))
    return root


def _settings(name: str = "GPU (a test)", **more) -> Settings:
    return Settings("gpu", name, sandbox=False, seed=SEED, **more)


def test_a_task_takes_the_shared_references_graded_on_its_device_and_grades_them_itself_otherwise(tmp_path, stages):
    shared = tmp_path / "references"
    (tmp_path / "nobody").mkdir()
    grade(tmp_path / "nobody", shared, _settings(), log=lambda _: None, references=[(DAY7.assignment, DAY7.name)])
    assert [key for key, _ in stages] == ["reference"]  # graded with no student to wait for it
    assert (shared / "reference" / DAY7.assignment / DAY7.name / "device.txt").is_file()

    stages.clear()
    out = tmp_path / "task"
    graded = grade(_class(tmp_path / "class"), out, _settings(shared_references=str(shared), force=True),
                   log=lambda _: None)
    assert sorted(key for key, _ in stages) == ["alice", "bob"]  # no reference graded again, --force or not
    copied = out / "reference" / DAY7.assignment / DAY7.name
    assert all(ref["verdict"] == str(copied / "verdict.json") for _, ref in stages)
    source = shared / "reference" / DAY7.assignment / DAY7.name
    assert {p.relative_to(copied): p.read_bytes() for p in copied.rglob("*") if p.is_file()} == \
        {p.relative_to(source): p.read_bytes() for p in source.rglob("*") if p.is_file()}
    day7 = [r for r in graded if r.notebook == DAY7.name]
    assert day7 and not any("reference solution" in r.message for r in day7), [r.message for r in day7]

    stages.clear()  # a task on another kind of GPU: the shared ones are not its own, so it grades its own
    grade(_class(tmp_path / "class2"), tmp_path / "other", _settings("another GPU", shared_references=str(shared)),
          log=lambda _: None)
    assert sorted(key for key, _ in stages) == ["alice", "bob", "reference"]


def test_the_references_command_names_its_notebooks_and_grades_nothing_on_a_cpu(tmp_path, capsys):
    out = tmp_path / "references"
    assert cli.main(["references", "--out", str(out), "--notebook", "week1/day7_fast_matmul", "--device", "cpu"]) == 0
    assert "graded on a GPU only; nothing to do" in capsys.readouterr().out
    assert not (out / "reference").exists()
    assert cli.main(["references", "--out", str(out), "--notebook", "week1/day99", "--device", "cpu"]) == 2
    assert "--notebook week1/day99: not a course notebook" in capsys.readouterr().err
