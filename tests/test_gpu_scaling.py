"""bench/gpu_scaling.py on synthetic grading runs: utilisation read from nvidia-smi's CSV, the comparison of each
GPU set with the first, and the two-GPU targets met or not from the numbers."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from bench import gpu_scaling as script
from bench import throughput as tp
from tests.test_grading_throughput import row, write_result


def test_utilisation_per_gpu_skips_lines_that_are_not_two_numbers(tmp_path):
    csv = tmp_path / "u.csv"
    csv.write_text("0, 100\n1, 0\n0, 50\n1, [N/A]\n0, 0\ngarbage\n1, 30\n0,")
    got = {u.gpu: u for u in script.read_utilisation(csv)}
    assert (got["0"].samples, got["0"].mean_percent, round(got["0"].busy_share, 3)) == (3, 50.0, 0.667)
    assert (got["1"].samples, got["1"].mean_percent, got["1"].busy_share) == (2, 15.0, 0.5)
    assert script.read_utilisation(tmp_path / "absent.csv") == []


def _run(work: Path, gpus: str, wall: float, rate: float, score: float) -> None:
    out = work / script.run_name(gpus)
    for student in ("fast_correct-c1", "slow_correct-c1"):
        write_result(out, student, scores={"test_a": score if student.startswith("slow") else 2.0},
                     perf_rows=[row(rate, 1000.0, 900.0)], timings={"notebook": 20.0, "gpu_exclusive": 4.0})
    (work / f"{script.run_name(gpus)}.json").write_text(json.dumps({"command": [], "returncode": 0,
                                                                     "wall_seconds": wall + 3}))
    (out / "schedule.json").write_text(json.dumps({"schedule": "pipeline", "wall_seconds": wall,
                                                   "limits": {"gpus": gpus.split(","), "runs": 6}}))


def test_two_gpus_against_one_targets_met(tmp_path, capsys):
    _run(tmp_path, "0", 100.0, 900.0, 2.0)
    _run(tmp_path, "0,1", 50.0, 909.0, 2.0)
    (tmp_path / "gpus-0_1.smi.csv").write_text("0, 80\n1, 60\n0, 0\n1, 20\n")
    assert script.main(["--reuse", "--work", str(tmp_path), "--notebooks", tp.W1D7,
                        "--json", str(tmp_path / "r.json")]) == 0
    printed = capsys.readouterr().out
    assert "speed-up: 2.00x" in printed and "verdicts: identical" in printed
    assert "largest difference 1.0%" in printed and "GPU 1: mean utilisation 40%, busy in 100% of 2" in printed
    assert "more than 3% apart: 0; the largest:" in printed and printed.count("1.0%: ") == 4  # each listed once
    assert "NOT MET" not in printed and "utilisation: not sampled" in printed  # the 1-GPU run had no CSV
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["compared"]["0,1"]["speed_up"] == 2.0 and report["runs"]["0"]["notebooks"] == 2


def test_sets_that_graded_nothing_meet_no_verdict_target(tmp_path, capsys):
    for gpus in ("0", "0,1"):  # e.g. both gradings refused: no CUDA GPU
        (tmp_path / script.run_name(gpus)).mkdir()
        (tmp_path / f"{script.run_name(gpus)}.json").write_text(json.dumps({"command": [], "returncode": 2,
                                                                             "wall_seconds": 1.0}))
    assert script.main(["--reuse", "--work", str(tmp_path), "--notebooks", tp.W1D7]) == 0
    printed = capsys.readouterr().out
    assert "not measured: identical verdicts (no item was graded)" in printed and "met      identical" not in printed


def test_a_slower_second_set_a_changed_verdict_and_a_moved_ratio_each_miss_their_target(tmp_path, capsys):
    _run(tmp_path, "0", 100.0, 900.0, 2.0)
    _run(tmp_path, "0,1", 60.0, 950.0, 0.0)
    assert script.main(["--reuse", "--work", str(tmp_path), "--notebooks", tp.W1D7]) == 0
    printed = capsys.readouterr().out
    assert "speed-up: 1.67x" in printed and "verdicts: 1 DIFFER" in printed
    assert "more than 3% apart: 4; the largest:" in printed  # student/reference and /baseline, 2 students
    assert "    5.6%: " in printed  # 900 -> 950, each ratio listed with how far it moved
    assert printed.count("NOT MET") == 3


def test_each_gpus_idle_time_between_holds_is_split_by_what_the_notebooks_were_doing():
    stage = lambda label, name, gpu, start, end: {"label": label, "stage": name, "gpu": gpu,  # noqa: E731
                                                  "start": start, "end": end}
    schedule = {"wall_seconds": 20.0, "limits": {"gpus": ["0", "1"]}, "timeline": {
        "stages": [stage("a", "run", "0", 0.0, 2.0), stage("a", "build", None, 2.0, 3.0),
                   stage("a", "judge", "0", 3.0, 6.0),  # prepares 3-4, holds 4-6
                   stage("b", "run", "0", 0.0, 8.0), stage("b", "build", None, 8.0, 9.0),
                   stage("b", "judge", "0", 12.0, 14.0)],  # waits 9-12 (for a slot or its reference), holds 13-14
        "holds": [{"gpu": "0", "start": 4.0, "end": 6.0}, {"gpu": "0", "start": 13.0, "end": 14.0}]}}
    first, second = tp.gpu_timelines(schedule)
    assert (first.gpu, first.held, first.first_hold, first.last_hold_end) == ("0", 3.0, 4.0, 14.0)
    idle = {cause: round(seconds, 1) for cause, seconds in first.idle.items()}
    # 6-8: b runs; 8-9: b builds; 9-12: b waits; 12-13: b's judge prepares
    assert idle == {"judge preparing": 1.0, "notebooks waiting for a judge": 3.0, "runs and builds only": 3.0,
                    "nothing": 0.0}
    assert second.first_hold is None and second.held == 0.0
    lines = tp.timeline_lines([first, second])
    assert "held alone 3 s of 20 s (15%)" in lines[0] and "runs and builds only 3 s" in lines[0]
    assert lines[1] == "  GPU 1: never held by a judge"
    assert tp.gpu_timelines(None) == [] and tp.gpu_timelines({"wall_seconds": 5.0}) == []


def test_a_gpus_pace_and_the_class_projected_at_it():
    held = [("0", 10.0, 14.0), ("0", 15.0, 19.0), ("0", 20.0, 22.0), ("1", 12.0, 18.0)]
    schedule = {"timeline": {"holds": [{"gpu": gpu, "start": start, "end": end} for gpu, start, end in held]}}
    first, second = tp.gpu_periods(schedule)
    assert (first.gpu, first.seconds, first.holds, first.ramp, first.per_notebook) == ("0", 12.0, 3, 10.0, 4.0)
    assert (second.seconds, second.holds, second.ramp, second.per_notebook) == (6.0, 1, 12.0, 6.0)
    # the longest ramp, then 4200 notebooks at the mean pace (5 s) shared among the GPUs
    assert tp.period_projection([first, second], 4200, (1, 8)) == {1: 12.0 + 21000.0, 8: 12.0 + 2625.0}
    assert tp.gpu_periods(None) == [] and tp.period_projection([]) == {}
    line = tp.timeline_lines([], [first, second])[-1]
    assert "GPU 0 4.0 s (3 holds)" in line and "8 GPUs 0.7 h" in line


def test_references_first_grades_one_student_once_and_every_set_starts_with_its_references(tmp_path, monkeypatch):
    import subprocess

    from bench import grading_throughput as gt

    batch = tmp_path / "batch"
    for student, notebook in (("b-c1", "week1/x.ipynb"), ("a-c1", "week1/x.ipynb"), ("a-c2", "week1/x.ipynb"),
                              ("c-c1", "week2/y.ipynb"), ("d-c1", "week2/y.ipynb")):
        (batch / student / notebook).parent.mkdir(parents=True)
        (batch / student / notebook).write_text("{}")
    graded = []

    class FakeGrader:  # stands in for `python -m grader grade`: notes what it saw in its OUT when started
        def __init__(self, command, **_):
            source, out = Path(command[4]), Path(command[6])
            graded.append((sorted(p.name for p in source.iterdir()), (out / "reference" / "r.txt").is_file(),
                           command[command.index("--gpus") + 1]))
            (out / "reference").mkdir(parents=True, exist_ok=True)
            (out / "reference" / "r.txt").write_text("graded")

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(subprocess, "Popen", FakeGrader)
    args = script.parser().parse_args(["--work", str(tmp_path), "--references-first"])
    args.device = "gpu"
    references = script.grade_references(tmp_path, batch, args)
    for gpus in args.gpu_sets:
        gt.run_grader(tmp_path, batch, script.run_name(gpus), ["--gpus", gpus], args, references)
    everyone = ["a-c1", "a-c2", "b-c1", "c-c1", "d-c1"]
    assert graded == [(["a-c1", "c-c1"], False, "0"), (everyone, True, "0"), (everyone, True, "0,1")]


def test_the_host_cpu_load_is_sampled_while_a_set_grades_and_reported(tmp_path, capsys):
    stop = threading.Event()
    sampler = threading.Thread(target=script.sample_cpu, args=(tmp_path / "c.txt", 0.05, stop))
    sampler.start()
    deadline = time.monotonic() + 0.4
    while time.monotonic() < deadline:  # keep one core busy meanwhile
        pass
    stop.set()
    sampler.join()
    load = script.read_cpu_load(tmp_path / "c.txt")
    assert load is not None and load.samples >= 3 and 0.0 < load.mean_busy <= 1.0
    (tmp_path / "bad.txt").write_text("0.95\nnot a number\n0.5\n")
    assert script.read_cpu_load(tmp_path / "bad.txt") == script.CpuLoad(2, 0.725, 0.5)
    assert script.read_cpu_load(tmp_path / "absent.txt") is None
    _run(tmp_path, "0", 100.0, 900.0, 2.0)
    _run(tmp_path, "0,1", 50.0, 909.0, 2.0)
    (tmp_path / "gpus-0_1.cpu.txt").write_text("1.0\n0.5\n")
    assert script.main(["--reuse", "--work", str(tmp_path), "--notebooks", tp.W1D7]) == 0
    printed = capsys.readouterr().out
    assert "host CPUs: not sampled" in printed  # the 1-GPU set had none
    assert "host CPUs: mean 75% busy, at least 90% busy in 50% of 2 samples" in printed


def test_keep_references_reuses_an_earlier_calls_references_and_grades_none(tmp_path, monkeypatch):
    graded = []
    monkeypatch.setattr(script.gt, "run_grader", lambda *a, **k: graded.append(a))
    args = script.parser().parse_args(["--references-first", "--keep-references", "--work", str(tmp_path)])
    batch = tmp_path / "batch"
    (batch / "s1" / "week1").mkdir(parents=True)
    (batch / "s1" / "week1" / "n.ipynb").write_text("{}")
    assert script.grade_references(tmp_path, batch, args) == tmp_path / "references"
    assert len(graded) == 1  # nothing kept yet: graded
    (tmp_path / "references" / "reference").mkdir(parents=True)
    assert script.grade_references(tmp_path, batch, args) == tmp_path / "references"
    assert len(graded) == 1


def test_the_judges_own_work_in_their_holds_and_the_graders_cpu_time_are_reported(tmp_path, capsys):
    out = tmp_path / script.run_name("0")
    for student, own in (("fast_correct-c1", 3.0), ("slow_correct-c1", 5.0)):
        write_result(out, student, scores={"test_a": 2.0}, perf_rows=[row(900.0, 1000.0, 900.0)],
                     timings={"notebook": 20.0, "gpu_exclusive": 6.0, "drain": 0.5, "in_hold": own})
    (tmp_path / "gpus-0.json").write_text(json.dumps({"command": [], "returncode": 0, "wall_seconds": 103}))
    (out / "schedule.json").write_text(json.dumps({"schedule": "pipeline", "wall_seconds": 100.0,
                                                   "grader_cpu_seconds": 150.0, "limits": {"gpus": ["0"]}}))
    assert script.main(["--reuse", "--work", str(tmp_path), "--notebooks", tp.W1D7, "--gpu-sets", "0"]) == 0
    printed = capsys.readouterr().out
    assert "judges' holds: mean 6.0 s, of which draining 0.5 s and the judge's own work 4.0 s" in printed
    assert "the grader's own process: 150 CPU s over 100 s (1.50 cores)" in printed
