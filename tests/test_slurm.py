"""Grading through Slurm (grader/slurm.py): the chunks, the array script, the retry and the gathering on fakes;
then for real, on a one-node Slurm cluster started here (tests/slurm_cluster.py), against a local run's grades."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader import cli, slurm
from grader.authoring import demo
from grader.commands import grading as grading_commands
from grader.commands import options
from grader.flow import stopping
from grader.flow.settings import Settings
from grader.score.results import GRADER_ERROR
from tests.slurm_cluster import Cluster, unavailable

DAY1 = "week1/day1_host_baseline"


def _class(root: Path, notebooks: dict[str, int]) -> Path:
    for student, count in notebooks.items():
        for i in range(count):
            path = root / student / "week1" / f"nb{i}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}")
    return root


def test_students_are_grouped_by_notebooks_and_never_split(tmp_path):
    root = _class(tmp_path, {"a": 3, "b": 3, "c": 1, "d": 5})
    assert [[p.name for p in group] for group in slurm.chunks(root, 4)] == [["a"], ["b", "c"], ["d"]]
    assert [[p.name for p in group] for group in slurm.chunks(root, 100)] == [["a", "b", "c", "d"]]


def test_the_array_script_carries_slurms_options_and_the_grade_options(tmp_path):
    options = slurm.SlurmOptions(partition="gpu", account="course", time="01:00:00", gres="gpu:1", cpus_per_task=16)
    text = slurm.script(tmp_path / "work dir", ["--device", "gpu", "--seed", "7"], options)
    for directive in ("--partition=gpu", "--account=course", "--time=01:00:00", "--gres=gpu:1",
                      "--cpus-per-task=16"):
        assert f"#SBATCH {directive}" in text
    assert "'" + str(tmp_path / "work dir") + "'/task-$SLURM_ARRAY_TASK_ID" in text
    # a task run again keeps what it finished before it was stopped; --force given to the head reaches every task
    assert '--out "$here/out" --device gpu --seed 7' in text
    assert '--out "$here/out" --force --device gpu' in slurm.script(tmp_path, ["--device", "gpu"], options, force=True)
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_a_new_staging_carries_each_students_earlier_results_into_the_students_new_task(tmp_path, monkeypatch):
    root, work = _class(tmp_path / "class", {"ann": 1, "bob": 1}), tmp_path / "out" / "slurm"
    first = slurm.stage(work, [[root / "ann"], [root / "bob"]])
    for folder, student in zip(first, ("ann", "bob"), strict=True):
        for kind in ("results", "runs"):
            (folder / "out" / kind / student / "week1").mkdir(parents=True)
            (folder / "out" / kind / student / "week1" / "nb0.json").write_text(student)
    again = slurm.stage(work, [[root / "ann", root / "bob"]])  # regrouped: both in one task now
    for student in ("ann", "bob"):
        for kind in ("results", "runs"):
            assert (again[0] / "out" / kind / student / "week1" / "nb0.json").read_text() == student
    assert not (work.parent / "slurm.earlier").exists() and not (work / "task-1").exists()
    # a task of the earlier grading still running there: nothing is moved or removed
    running = slurm.out_lock.Holder(4242, "node7", 0.0, "python -m grader grade", 0.0)
    monkeypatch.setattr(slurm.out_lock, "busy", lambda out: running if out == again[0] / "out" else None)
    with pytest.raises(slurm.SlurmError, match="still grades .*task-0: pid 4242 on node7"):
        slurm.stage(work, [[root / "ann"], [root / "bob"]])
    # nor while the earlier grading's references job still grades into its folder
    monkeypatch.setattr(slurm.out_lock, "busy", lambda out: running if out == work / slurm.REFERENCES else None)
    with pytest.raises(slurm.SlurmError, match="still grades .*references: pid 4242 on node7"):
        slurm.stage(work, [[root / "ann"], [root / "bob"]])
    assert (again[0] / "out" / "results" / "ann" / "week1" / "nb0.json").exists()


def test_a_tasks_script_waits_for_its_grader_to_stop_when_slurm_signals_the_task(tmp_path):
    """Slurm's SIGTERM reaches every process of a task: the script outlives its grader's stop, then records it."""
    text = slurm.script(tmp_path, [], slurm.SlurmOptions())
    grader = (f"{shlex.quote(sys.executable)} -c 'import signal, sys, time; signal.signal(signal.SIGTERM, "
              "lambda *_: (time.sleep(1), sys.exit(143))); time.sleep(60)' &")
    (tmp_path / "task-0").mkdir()
    task = subprocess.Popen(["bash", "-c", "\n".join(grader if line.endswith(" &") else line
                                                     for line in text.splitlines())],
                            env={**os.environ, "SLURM_ARRAY_TASK_ID": "0"}, start_new_session=True)
    time.sleep(1.0)
    os.killpg(task.pid, signal.SIGTERM)
    assert task.wait(timeout=30) == 0
    assert (tmp_path / "task-0" / slurm.FINISHED).read_text().strip() == "143"


def test_a_stopped_head_cancels_its_job_and_waits_for_slurm_to_end_its_tasks(tmp_path, monkeypatch):
    root = _class(tmp_path / "class", {"ann": 1})
    monkeypatch.setattr(slurm, "submit", lambda script_path, indices=None, after=None: "77")

    def stopped_while_waiting(*args, **kwargs):
        raise stopping.Stopped(signal.SIGTERM)

    monkeypatch.setattr(slurm, "wait", stopped_while_waiting)
    listed = iter([1, 1, 0])  # squeue: the task still listed, then gone
    monkeypatch.setattr(slurm, "queued", lambda job: next(listed))
    commands = []
    monkeypatch.setattr(slurm.subprocess, "run", lambda argv, **kwargs: commands.append(argv))
    monkeypatch.setattr(slurm.time, "sleep", lambda seconds: None)
    with pytest.raises(stopping.Stopped) as stopped:
        slurm.grade(root, tmp_path / "out", [], slurm.SlurmOptions(), Settings("cpu", "CPU"), log=lambda line: None)
    assert commands == [["scancel", "77"]] and next(listed, "used up") == "used up"
    assert stopped.value.line() == "stopped by SIGTERM: 0 of 1 Slurm tasks finished; Slurm job 77 cancelled, its " \
                                   "tasks ended; run the same command again to finish"
    assert slurm.out_lock.busy(tmp_path / "out") is None


def test_a_stopped_head_cancels_the_references_job_as_well_as_the_array(tmp_path, monkeypatch):
    root = tmp_path / "class"
    for student in ("ann", "bob"):
        (root / student / DAY1).parent.mkdir(parents=True)
        (root / student / f"{DAY1}.ipynb").write_text("{}")
    ids = iter(["77", "78"])  # the references job, then the array
    monkeypatch.setattr(slurm, "submit", lambda script_path, indices=None, after=None: next(ids))

    def stopped_while_waiting(*args, **kwargs):
        raise stopping.Stopped(signal.SIGTERM)

    monkeypatch.setattr(slurm, "wait", stopped_while_waiting)
    listed = {"78": iter([1, 0]), "77": iter([1, 0])}  # each still listed, then gone once cancelled
    monkeypatch.setattr(slurm, "queued", lambda job: next(listed[job]))
    commands = []
    monkeypatch.setattr(slurm.subprocess, "run", lambda argv, **kwargs: commands.append(argv))
    monkeypatch.setattr(slurm.time, "sleep", lambda seconds: None)
    with pytest.raises(stopping.Stopped):
        slurm.grade(root, tmp_path / "out", [], slurm.SlurmOptions(notebooks_per_task=1), Settings("cpu", "CPU"),
                    log=lambda line: None)
    assert commands == [["scancel", "78"], ["scancel", "77"]]


def test_hidden_paths_reach_the_grading_settings():
    args = cli.parser().parse_args(["grade", "subs", "--device", "cpu", "--hide", "/class", "--hide", "/head-out"])
    assert grading_commands._settings(args).hide == ("/class", "/head-out")


def test_only_options_away_from_their_defaults_are_forwarded():
    args = cli.parser().parse_args(["grade", "subs", "--device", "cpu", "--seed", "9", "--no-sandbox",
                                    "--executor", "slurm", "--runs", "3", "--assignment", "week1",
                                    "--term", "term.toml"])
    # each task grades the week asked for; the term is the head's alone (it applies it to the gathered grades)
    assert options._forwarded(args) == ["--assignment", "week1", "--device", "cpu", "--runs", "3", "--seed", "9",
                                    "--no-sandbox"]


def test_a_failing_squeue_is_asked_again_and_never_read_as_an_empty_queue(tmp_path, monkeypatch):
    answers = iter([None, None, 1, None, 0])
    monkeypatch.setattr(slurm, "queued", lambda job: next(answers))
    slurm.wait("7", [], 0.0, "job 7")  # returns only at the 0
    assert next(answers, "used up") == "used up"
    monkeypatch.setattr(slurm, "queued", lambda job: None)
    with pytest.raises(slurm.SlurmError, match="squeue failed 3 times"):
        slurm.wait("7", [], 0.0, "job 7", squeue_failures=3)


def _fake_slurm(monkeypatch, graded: Path, finishes: dict[int, list[bool]]) -> list[list[int]]:
    """submit/wait stand-ins: task i finishes on attempt k when finishes[i][k] (``graded``'s results copied in)."""
    submitted: list[list[int]] = []

    def submit(script_path: Path, indices: list[int], after: str | None = None) -> str:
        submitted.append(indices)
        attempt = len(submitted) - 1
        for index in indices:
            folder = script_path.parent / f"task-{index}"
            if finishes[index][attempt]:
                for submission in (folder / "submissions").iterdir():
                    shutil.copytree(graded / "results" / submission.name, folder / "out" / "results" /
                                    submission.name, dirs_exist_ok=True)
                (folder / slurm.FINISHED).write_text("0\n")
        return str(100 + attempt)

    monkeypatch.setattr(slurm, "submit", submit)
    monkeypatch.setattr(slurm, "wait", lambda *args, **kwargs: None)
    return submitted


@pytest.fixture(scope="module")
def graded_locally(tmp_path_factory) -> dict[str, Path]:
    """The Day 1 demo students, graded on this machine (the grades every Slurm run must equal)."""
    root = tmp_path_factory.mktemp("slurm-local")
    demo.build(root / "subs", keys={DAY1})
    assert cli.main(["grade", str(root / "subs"), "--out", str(root / "out"), "--device", "cpu", "--seed", "5",
                     "--allow-ungraded"]) == 0
    return {"subs": root / "subs", "out": root / "out"}


def _grades(out: Path) -> dict[tuple[str, str], tuple[str, dict[str, float | None]]]:
    found = {}
    for path in (out / "results").glob("*/*/*.json"):
        result = json.loads(path.read_text())
        found[(result["student"], f"{result['assignment']}/{result['notebook']}")] = (
            result["status"], {item["item"]: item["score"] for item in result["items"]})
    return found


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_task_that_does_not_finish_runs_again_once_then_its_notebooks_are_grader_errors(
        tmp_path, monkeypatch, graded_locally):
    students = sorted(p.name for p in graded_locally["subs"].iterdir())
    assert len(students) >= 3
    # task 0 finishes at once, task 1 on its second try, task 2 never
    submitted = _fake_slurm(monkeypatch, graded_locally["out"], {0: [True, True], 1: [False, True], 2: [False, False]})
    results = slurm.grade(graded_locally["subs"], tmp_path / "out", ["--device", "cpu"],
                          slurm.SlurmOptions(notebooks_per_task=1), Settings("cpu", "CPU"), log=lambda line: None)
    assert submitted == [[0, 1, 2], [1, 2]]
    by_student = {}
    for result in results:
        by_student.setdefault(result.student, set()).add(result.status)
    assert by_student[students[2]] == {GRADER_ERROR}  # every one of its notebooks, none left out
    assert GRADER_ERROR not in by_student[students[0]] | by_student[students[1]]
    local = _grades(graded_locally["out"])
    assert {k: v for k, v in _grades(tmp_path / "out").items() if k[0] != students[2]} == \
        {k: v for k, v in local.items() if k[0] != students[2]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = unavailable()
    if reason:
        pytest.skip(f"no Slurm test cluster: {reason}: NOT RUN, not counted as passed")
    started = Cluster(tmp_path_factory.mktemp("slurm-cluster"))
    started.start()
    yield started
    started.stop()


@pytest.mark.sandbox
@pytest.mark.slow
def test_the_class_graded_through_slurm_gets_a_local_runs_grades(tmp_path, monkeypatch, cluster, graded_locally):
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    # no --device: as on a GPU cluster, the head submits the references job and the array starts after it; with no
    # GPU visible (Slurm hands the tasks this environment) the job grades nothing and the tasks grade on the CPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    out = tmp_path / "out"
    assert cli.main(["grade", str(graded_locally["subs"]), "--out", str(out), "--seed", "5",
                     "--allow-ungraded", "--executor", "slurm", "--notebooks-per-task", "1"]) == 0
    script = (out / "slurm" / "grade.sbatch").read_text()
    # each task's sandboxes see neither the class nor the head's OUT (the other tasks' students)
    assert f"--hide {graded_locally['subs'].resolve()} --hide {out.resolve()}" in script
    assert f"--references-from {out / 'slurm' / 'references'}" in script
    [log] = (out / "slurm" / "logs").glob("references-*.log")
    assert "reference solutions are graded on a GPU only; nothing to do" in log.read_text()
    tasks = sorted((out / "slurm").glob("task-*"))
    assert len(tasks) >= 2 and all(slurm.finished(t) for t in tasks)  # several tasks, each ran to its end
    assert _grades(out) == _grades(graded_locally["out"])
    assert (out / "gradebook.db").is_file() and (out / "grades.csv").is_file()


@pytest.mark.sandbox
@pytest.mark.slow
def test_slurm_failing_after_some_tasks_ran_keeps_their_grades_and_names_the_error(tmp_path, monkeypatch,
                                                                                   graded_locally):
    _fake_slurm(monkeypatch, graded_locally["out"], {0: [True], 1: [False], 2: [True]})
    real_submit = slurm.submit
    calls = []

    def submit(script_path, indices, after=None):
        calls.append(indices)
        if len(calls) == 2:
            raise slurm.SlurmError("sbatch failed: the partition is down")
        return real_submit(script_path, indices)

    monkeypatch.setattr(slurm, "submit", submit)
    results = slurm.grade(graded_locally["subs"], tmp_path / "out", ["--device", "cpu"],
                          slurm.SlurmOptions(notebooks_per_task=1), Settings("cpu", "CPU"), log=lambda line: None)
    student = sorted(p.name for p in graded_locally["subs"].iterdir())[1]
    mine = [r for r in results if r.student == student]
    assert mine and all(r.status == GRADER_ERROR and "the partition is down" in r.message for r in mine)
    assert all(r.status != GRADER_ERROR for r in results if r.student != student)


def test_a_task_of_a_week_is_finished_with_that_weeks_results(tmp_path):
    """With --assignment (make WEEK=), a task leaves results only for that week: finished, not waited on forever."""
    folder = tmp_path / "task-0"
    for key in (DAY1, "week2/day1_profiling"):
        path = folder / "submissions" / "ann" / f"{key}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    (folder / slurm.FINISHED).write_text("0")
    week1, _ = slurm.find_submissions(folder / "submissions", ("week1",))
    for submission in week1:
        slurm.result_path(folder / "out", submission).parent.mkdir(parents=True, exist_ok=True)
        slurm.result_path(folder / "out", submission).write_text("{}")
    assert slurm.finished(folder, ("week1",)) and not slurm.finished(folder)


def test_the_references_are_graded_once_by_a_job_every_task_waits_for_and_takes_from(tmp_path, monkeypatch):
    """Each task would grade the class's reference solutions again: one job grades them, the array starts after it
    and each task's grade takes them (--references-from). Not on a CPU, which grades no reference, nor for one task."""
    root = tmp_path / "class"
    for student, key in (("ann", DAY1), ("bob", DAY1), ("cy", "week2/day1_profiling")):
        (root / student / key).parent.mkdir(parents=True)
        (root / student / f"{key}.ipynb").write_text("{}")
    jobs: list[tuple[str, list[int] | None, str | None]] = []

    def submit(script_path: Path, indices: list[int] | None = None, after: str | None = None) -> str:
        jobs.append((script_path.name, indices, after))
        for index in indices or []:
            (script_path.parent / f"task-{index}" / slurm.FINISHED).write_text("0\n")
        return str(40 + len(jobs))

    monkeypatch.setattr(slurm, "submit", submit)
    monkeypatch.setattr(slurm, "wait", lambda *args, **kwargs: None)
    monkeypatch.setattr(slurm, "gather", lambda *args: [])
    monkeypatch.setattr(slurm, "finished", lambda folder, assignments=(): (folder / slurm.FINISHED).is_file())
    out, options = tmp_path / "out", slurm.SlurmOptions(notebooks_per_task=1, gres="gpu:1")
    slurm.grade(root, out, ["--assignment", "week1,week2", "--seed", "7"], options, Settings("cpu", "login node"),
                log=lambda line: None)
    assert jobs == [("references.sbatch", None, None), ("grade.sbatch", [0, 1, 2], "41")]
    work = out / "slurm"
    references = (work / "references.sbatch").read_text()
    command = shlex.split(references.splitlines()[-1])
    assert command[:6] == ["exec", sys.executable, "-m", "grader", "references", "--out"]
    assert command[6] == str(work / "references")
    # the notebooks any student submitted, each once; the week goes (the job is told its notebooks); the seed stays
    assert command[7:13] == ["--notebook", DAY1, "--notebook", "week2/day1_profiling", "--seed", "7"]
    assert command[13:] == ["--hide", str(root.resolve()), "--hide", str(out.resolve())]
    # the shared references lie in the head's OUT, which every sandbox of the job and the tasks has hidden: no
    # student's run can read them or write into them before another task takes them
    assert (work / "references").resolve().is_relative_to(out.resolve())
    assert "#SBATCH --gres=gpu:1" in references
    assert subprocess.run(["bash", "-n"], input=references, text=True).returncode == 0
    assert f"--references-from {work / 'references'} --assignment week1,week2" in (work / "grade.sbatch").read_text()

    for grade_args, classes in ((["--device", "cpu"], {"ann": 1, "bob": 1}), ([], {"ann": 2})):
        jobs.clear()
        slurm.grade(_class(tmp_path / f"class{len(classes)}", classes), tmp_path / f"out{len(classes)}", grade_args,
                    slurm.SlurmOptions(notebooks_per_task=1), Settings("cpu", "CPU"), log=lambda line: None)
        assert [name for name, _, _ in jobs] == ["grade.sbatch"]
        assert "--references-from" not in (tmp_path / f"out{len(classes)}" / "slurm" / "grade.sbatch").read_text()
