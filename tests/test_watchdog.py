"""The watched judge: a replay that never ends costs only its own kernel's items, and a judge that cannot start
is the grader's fault (grader_error), never a student's zero. Runs on a CPU through a stand-in judge
(tests/judge_hooks.py) whose replay of one graded function sleeps."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from grader.flow.settings import Settings
from grader.flow.task import grader_environment
from grader.gpu.gpu_gate import GpuGate
from grader.intake.layout import course_notebooks
from grader.judge import verdict as judge
from grader.judge import watchdog
from grader.run.recording import kernel_calls, notebook_plan
from grader.score import results, score

NOTEBOOK = next(nb for nb in course_notebooks() if nb.key == "week1/day4_first_triton_kernel")
ANSWERS = {"programs_needed": 4, "masked_lanes": 24, "saxpy_intensity": 1 / 6,
           "add_gbps": 3 * 4 * 2**28 / 1.25e-3 / 1e9}
QUIZ = ("test_programs_needed", "test_masked_lanes", "test_saxpy_intensity", "test_add_gbps")


def _job(tmp_path, floor=1.0):
    plan = notebook_plan(NOTEBOOK)
    export = tmp_path / "export"
    export.mkdir()
    (export / "export.json").write_text(json.dumps(
        {"answers": {name: {"value": value} for name, value in ANSWERS.items()}, "kernels": {}}))
    job = {"device": "cpu", "export": str(export), "notebook": str(NOTEBOOK.student_path), "tests": plan.tests,
           "kernels": kernel_calls(NOTEBOOK, Settings("gpu", "GPU"), 1, "alice"), "run_seed": 1, "student": "alice",
           "verdict": str(tmp_path / "verdict.json"), "checkpoints": str(tmp_path / "parts"),
           "watchdog": {"floor": floor, "factor": 50.0, "reference": {}},
           "replayed": str(tmp_path / "replayed"), "replay_error": None, "built": str(tmp_path / "built")}
    (tmp_path / "judge.json").write_text(json.dumps(job))
    return job, plan


def _run(tmp_path, job, module, env, limit=300.0, gate=None):
    scratch = tmp_path / "scratch"  # as on a GPU: -P from a folder where no grader is found by the cwd
    scratch.mkdir(exist_ok=True)
    return watchdog.run([sys.executable, "-P", "-m", module, str(tmp_path / "judge.json")], job, env, scratch,
                        tmp_path / "judge.log", limit, gate, "0")


def _busy_while(gate, work):
    """(what ``work()`` returned, whether the gate's GPU 0 was seen held while it ran)."""
    seen, stop = [], threading.Event()

    def look():
        while not stop.is_set():
            seen.append(gate.busy("0"))
            time.sleep(0.01)

    watcher = threading.Thread(target=look)
    watcher.start()
    try:
        return work(), any(seen)
    finally:
        stop.set()
        watcher.join()


def test_the_judge_holds_its_gpu_alone_for_its_gpu_work_and_says_how_long(tmp_path, monkeypatch):
    monkeypatch.setenv("ALONE_SECONDS", "0.5")
    job, _ = _job(tmp_path)
    gate = GpuGate(idle=lambda gpu: True)
    verdict, held = _busy_while(gate, lambda: _run(tmp_path, job, "tests.judge_hooks",
                                                   grader_environment(dict(os.environ)), gate=gate))
    assert "error" not in verdict, verdict.get("error")
    assert held and not gate.busy("0")
    assert 0.5 <= verdict["seconds"]["gpu_exclusive"] < 30 and verdict["seconds"]["gpu_wait"] < 1


def test_a_judge_that_never_had_its_gpu_alone_is_a_grader_fault_not_a_grade(tmp_path, monkeypatch):
    monkeypatch.setenv("ALONE_SECONDS", "0.1")
    job, _ = _job(tmp_path)
    gate = GpuGate(idle=lambda gpu: False, drain_limit=0.1, thaw_seconds=0.1, retry_drain=0.1, busy_limit=0.5)
    verdict = _run(tmp_path, job, "tests.judge_hooks", grader_environment(dict(os.environ)), gate=gate)
    assert "could not have its GPU alone" in verdict.get("error", ""), verdict.get("error")
    assert "still busy after" in verdict["error"] and not gate.busy("0")


def test_a_judge_stopped_while_it_holds_the_gpu_gives_it_back(tmp_path, monkeypatch):
    monkeypatch.setenv("ALONE_SECONDS", "0.1")
    monkeypatch.setenv("HANG_SPEC", "w1d4.saxpy")
    job, _ = _job(tmp_path)
    gate = GpuGate(idle=lambda gpu: True)
    verdict = _run(tmp_path, job, "tests.judge_hooks", grader_environment(dict(os.environ)), gate=gate)
    assert verdict["stopped"] == ["w1d4.saxpy"] and "error" not in verdict
    assert not gate.busy("0")
    with gate.exclusive("0") as hold:  # nobody holds it: given at once
        assert hold.waited < 1


def test_a_replay_that_never_ends_costs_only_its_kernels_items(tmp_path, monkeypatch):
    monkeypatch.setenv("HANG_SPEC", "w1d4.saxpy")
    job, plan = _job(tmp_path)
    began = time.monotonic()
    verdict = _run(tmp_path, job, "tests.judge_hooks", grader_environment(dict(os.environ)))
    elapsed = time.monotonic() - began
    assert "error" not in verdict, verdict.get("error")
    assert verdict["stopped"] == ["w1d4.saxpy"]
    items = {i.item: i for i in score.items(NOTEBOOK.key, plan.master, verdict, True, "not judged")}
    assert all(items[q].status == results.PASSED for q in QUIZ)  # judged first, kept across the restart
    for item in ("test_saxpy_visible", "test_saxpy_hidden", "perf_w1d4_saxpy_vs_torch"):
        assert items[item].score == 0 and "stopped: the kernel ran past 1 s (its replay at" in items[item].message
    assert items["test_vector_add_visible"].status == results.PASSED  # judged after the restart
    assert "starting the judge again" in (tmp_path / "judge.log").read_text()
    assert elapsed < 90  # the sleeping replay would hold the judge for 600 s


def test_a_judge_that_cannot_start_ends_without_a_verdict(tmp_path):
    job, _ = _job(tmp_path)
    # Without the repository on PYTHONPATH, a judge started with -P from a scratch folder cannot import it.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    verdict = _run(tmp_path, job, "tests.judge_hooks", env)
    assert verdict["error"].startswith("the judge ended without a verdict (exit code 1")
    assert "No module named 'tests" in (tmp_path / "judge.log").read_text()


def test_the_judges_limit_keeps_what_it_finished(tmp_path, monkeypatch):
    monkeypatch.setenv("HANG_SPEC", "w1d4.saxpy")
    job, _ = _job(tmp_path, floor=600.0)  # no replay limit: the judge's own limit ends it
    verdict = _run(tmp_path, job, "tests.judge_hooks", grader_environment(dict(os.environ)), limit=20.0)
    assert verdict["error"] == "the judge ran past its 20 s limit for one notebook"
    assert all(verdict["tests"][q]["passed"] for q in QUIZ)


def test_answers_are_judged_and_saved_before_any_kernel(tmp_path, monkeypatch):
    job, _ = _job(tmp_path)
    seen = {}

    def failing_judge_cpu(sub_job):
        seen["tests saved"] = (tmp_path / "parts" / "tests.json").is_file()
        raise ImportError("the CPU judge could not import something")

    monkeypatch.setattr(judge, "judge_cpu", failing_judge_cpu)
    verdict = judge.judge(job)
    assert seen == {"tests saved": True}
    assert all(verdict["tests"][q]["passed"] for q in QUIZ)
    assert "ImportError: the CPU judge could not import something" in verdict["error"]


def test_the_watched_judge_process_gives_the_in_process_verdict(tmp_path):
    job, _ = _job(tmp_path)
    watched = _run(tmp_path, job, "grader.judge.verdict", grader_environment(dict(os.environ)))
    assert watched.pop("stopped") == []
    in_process = judge.judge({**job, "checkpoints": str(tmp_path / "fresh-parts")})
    assert watched == json.loads(json.dumps(in_process))
    assert set(watched["kernels"]) == {"w1d4.saxpy", "w1d4.vector_add"} and watched["tests"]


def test_a_judge_whose_cuda_context_broke_is_started_again_for_the_other_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("BREAK_SPEC", "w1d4.saxpy")
    job, _ = _job(tmp_path)
    verdict = _run(tmp_path, job, "tests.judge_hooks", grader_environment(dict(os.environ)))
    assert "error" not in verdict and verdict["stopped"] == []
    assert set(verdict["kernels"]) == {"w1d4.saxpy", "w1d4.vector_add"}
    assert "a CUDA error broke the judge's context: starting it again" in (tmp_path / "judge.log").read_text()


def test_a_judge_prepares_while_another_holds_the_gpu_and_is_paused_once_it_uses_the_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("ALONE_SECONDS", "0.1")
    monkeypatch.setenv("PREPARED_FILE", str(tmp_path / "prepared"))
    job, _ = _job(tmp_path)
    gate = GpuGate(idle=lambda gpu: True)
    holding, held_until = threading.Event(), []

    def other_judge():  # holds until the judge has prepared (a loaded CI machine can take seconds), at most 120 s
        with gate.exclusive("0"):
            holding.set()
            deadline = time.time() + 120.0
            while not (tmp_path / "prepared").exists() and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # the judge, paused once it asks for the GPU, must wait out the rest of the hold
            held_until.append(time.time())

    other = threading.Thread(target=other_judge)
    other.start()
    holding.wait()
    verdict = _run(tmp_path, job, "tests.judge_hooks", grader_environment(dict(os.environ)), gate=gate)
    other.join()
    assert "error" not in verdict, verdict.get("error")
    # Its CPU-only start-up (imports, the answers' tests) ran while the other held the GPU ...
    assert float((tmp_path / "prepared").read_text()) < held_until[0]
    # ... and from its "device" request it was paused: it asked for the GPU alone only after the other let go
    # (had it run on, it would have waited at the gate for the rest of the other's hold).
    assert verdict["seconds"]["gpu_wait"] < 0.5
    assert (tmp_path / "verdict.json").stat().st_mtime >= held_until[0]
