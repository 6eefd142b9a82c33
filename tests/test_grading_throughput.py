"""bench/grading_throughput.py and its pure functions (bench/throughput.py), on synthetic result JSONs; and once
end to end on a tiny CPU batch, where the grader has ``--schedule``."""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench import grading_throughput as script
from bench import judge_spans as spans
from bench import pipeline_simulation as pipesim
from bench import throughput as tp
from bench.graded_results import Record, read_results, read_schedule
from grader.intake.layout import REPO
from grader.score.results import ItemResult, NotebookResult

DAY1 = "week1/day1_host_baseline"
H100 = "NVIDIA H100 80GB HBM3"


def write_result(out: Path, student: str, notebook: str = tp.W1D7, status: str = "ok",
                 scores: dict[str, float | None] | None = None, timings: dict[str, float] | None = None,
                 perf_rows: list[dict[str, Any]] | None = None, device: str = H100, seed: int = 7) -> None:
    """One result JSON as the grader writes it (through its own NotebookResult)."""
    assignment, name = notebook.split("/")
    items = [ItemResult(item, "correctness", score, 2.0, "passed" if score else "failed")
             for item, score in (scores if scores is not None else {"test_a": 2.0}).items()]
    result = NotebookResult(student, assignment, name, status, items=items, device=device,
                            timings=timings if timings is not None else {}, perf_rows=perf_rows or [],
                            run_seed=seed)
    path = out / "results" / student / assignment / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json()), encoding="utf-8")


def row(student: float | None, baseline: float | None, reference: float | None,
        shape: list[int] | None = None) -> dict[str, Any]:
    return {"spec": "w1d7.matmul_fp32", "shape": shape or [4096, 4096, 4096], "error": None, "unit": "GFLOP/s",
            "baseline_name": "cuBLAS", "student_rate": student, "baseline_rate": baseline, "reference_rate": reference}


def record(student: str = "s", notebook: str = tp.W1D7, timings: dict[str, float] | None = None,
           scores: dict[str, float | None] | None = None, perf_rows: list[dict[str, Any]] | None = None,
           status: str = "ok", device: str = H100) -> Record:
    return Record(student, notebook, status, scores if scores is not None else {"test_a": 2.0}, timings or {},
                     perf_rows or [], device, 7)


def test_read_results_leaves_out_missing_notebooks_and_others_not_asked_for(tmp_path):
    write_result(tmp_path, "a", timings={"notebook": 20.0, "judge": 9.5},
                 scores={"test_a": 2.0, "test_b": None}, perf_rows=[row(900.0, 1000.0, 950.0)])
    write_result(tmp_path, "a", DAY1)
    write_result(tmp_path, "b", status="missing", scores={})
    found = read_results(tmp_path, [tp.W1D7])
    assert [r.key for r in found] == [("a", tp.W1D7)]
    assert found[0].timings == {"notebook": 20.0, "judge": 9.5}
    assert found[0].scores == {"test_a": 2.0, "test_b": None}
    assert found[0].perf_rows[0]["student_rate"] == 900.0 and found[0].device == H100 and found[0].run_seed == 7
    assert {r.notebook for r in read_results(tmp_path)} == {tp.W1D7, DAY1}


def test_schedule_json_is_read_where_the_grader_wrote_it(tmp_path):
    assert read_schedule(tmp_path) is None
    (tmp_path / "schedule.json").write_text(json.dumps({"schedule": "pipeline", "gpus": ["0"], "wall_seconds": 12.5}))
    assert read_schedule(tmp_path)["wall_seconds"] == 12.5


def test_stage_statistics_count_absent_stages_as_absent_not_zero():
    records = [record(timings={"notebook": 10.0, "judge": 4.0, "zeta": 1.0}), record(timings={"notebook": 20.0}),
               record(timings={"notebook": 60.0, "build": 3.0})]
    stats = {s.stage: s for s in tp.stage_stats(records)}
    assert [s.stage for s in tp.stage_stats(records)] == ["notebook", "build", "judge", "zeta"]
    assert (stats["notebook"].mean, stats["notebook"].median, stats["notebook"].max) == (30.0, 20.0, 60.0)
    assert (stats["judge"].count, stats["judge"].absent, stats["judge"].mean) == (1, 2, 4.0)
    never = tp.stages_never_recorded(records)
    assert "gpu_exclusive" in never and "notebook" not in never and "build" not in never


def test_notebooks_per_hour_and_exclusive_seconds_per_notebook():
    assert tp.per_hour(30, 360.0) == 300.0
    records = [record(timings={"gpu_exclusive": 6.0}), record(timings={"gpu_exclusive": 9.0}),
               record(notebook=DAY1, timings={"gpu_exclusive": 1.0}), record(timings={"judge": 30.0})]
    assert tp.exclusive_seconds(records) == tp.Spread(3, 16.0 / 3, 9.0)
    assert tp.exclusive_seconds(records, tp.W1D7) == tp.Spread(2, 7.5, 9.0)
    assert tp.exclusive_seconds([record(timings={"judge": 3.0})]) is None


def test_identical_verdicts_give_no_difference_and_each_difference_is_listed():
    serial = [record("a", scores={"t1": 2.0, "t2": None}), record("b"), record("c")]
    assert tp.verdict_differences(serial, list(serial)) == []
    pipeline = [record("a", scores={"t1": 0.0, "t2": None}), record("b", status="timeout"),
                record("d")]
    found = {(d.student, d.item): (d.first, d.second) for d in tp.verdict_differences(serial, pipeline)}
    assert found == {("a", "t1"): (2.0, 0.0), ("b", "(status)"): ("ok", "timeout"),
                     ("c", "(result)"): ("ok", "none"), ("d", "(result)"): ("none", "ok")}
    assert tp.item_count(serial) == 4


def test_ratio_differences_are_relative_to_the_serial_run_and_largest_first():
    serial = [record("a", perf_rows=[row(800.0, 1000.0, 800.0), row(500.0, 1000.0, 1000.0, [1000, 1030, 515])]),
              record("b", perf_rows=[row(None, 1000.0, 900.0)])]  # b's kernel was not timed: no ratio
    pipeline = [record("a", perf_rows=[row(800.0, 1020.0, 800.0), row(500.0, 1000.0, 1000.0, [1000, 1030, 515])]),
                record("b", perf_rows=[row(None, 1000.0, 900.0)])]
    diffs = tp.ratio_differences(serial, pipeline)
    assert len(diffs) == 4  # two rows of a, two ratios each
    top = diffs[0]
    assert (top.student, top.ratio, top.shape) == ("a", "student/baseline", "[4096,4096,4096]")
    assert top.relative == pytest.approx(abs(800 / 1020 - 0.8) / 0.8)
    assert [d.relative for d in diffs[1:]] == [0.0, 0.0, 0.0]


def test_a_ratio_timed_in_one_run_only_is_the_largest_difference():
    diffs = tp.ratio_differences([record(perf_rows=[row(800.0, 1000.0, None)])],
                                 [record(perf_rows=[row(None, 1000.0, None)])])
    assert len(diffs) == 1 and math.isinf(diffs[0].relative) and "not timed" in str(diffs[0])


def test_targets_are_met_or_not_from_the_measurement():
    fast = [record(str(i), timings={"gpu_exclusive": 8.0}) for i in range(3)]
    close = [tp.RatioDifference("a", tp.W1D7, "spec", "[1]", "student/baseline", 1.0, 1.02)]
    met = tp.targets(fast, 320.0, 1, [], close)
    assert [t.met for t in met] == [True, True, True, True]
    slow = [*fast, record("x", timings={"gpu_exclusive": 12.0})]
    far = [tp.RatioDifference("a", tp.W1D7, "spec", "[1]", "student/baseline", 1.0, 1.04)]
    differ = [tp.VerdictDifference("a", tp.W1D7, "t", 2.0, 0.0)]
    assert [t.met for t in tp.targets(slow, 250.0, 1, differ, far)] == [False, False, False, False]


def test_a_ratio_timed_in_one_run_only_misses_the_ratio_target():
    once = [tp.RatioDifference("a", tp.W1D7, "spec", "[1]", "student/baseline", 1.0, None)]
    found = tp.targets([record(timings={"gpu_exclusive": 5.0})], 400.0, 1, [], once)[3]
    assert found.met is False and "timed in one run only" in found.measured


def test_targets_not_measured_say_so_rather_than_pass_or_fail():
    on_cpu = [record(timings={"notebook": 9.0}, device="CPU (Triton interpreter)")]
    found = tp.targets(on_cpu, 900.0, None, [], [])
    assert [t.met for t in found] == [None, None, True, None]
    assert "CPU" in found[1].measured
    gpu = [record(timings={"gpu_exclusive": 5.0})]
    assert tp.targets(gpu, None, 1, [], [])[1].met is None  # the batch held other notebooks
    two = tp.targets(gpu, 400.0, 2, [], [])[1]
    assert two.met is None and "2 GPUs" in two.measured
    unknown = tp.targets(gpu, 400.0, None, [], [])[1]
    assert unknown.met is True and "not recorded" in unknown.measured
    nothing = tp.targets([record(scores={})], None, 1, [], [])[2]  # a run that graded no item compares nothing
    assert nothing.met is None and nothing.measured == "no item was graded"


def test_a_notebooks_cost_is_the_mean_of_its_stage_times_in_the_models_terms():
    # "notebook" is the sandbox's running time, its frozen seconds already left out (grader.sandbox)
    records = [record("a", timings={"notebook": 30.0, "frozen": 5.0, "build": 10.0, "compile": 2.0, "judge": 12.0,
                                    "gpu_exclusive": 6.0, "gpu_wait": 4.0}),
               record("b", timings={"notebook": 8.0})]  # crashed in its run: no build, no judge
    assert tp.cpu_seconds(records[0]) == 30.0 + 10.0 + 2.0 + 12.0 - 4.0
    assert tp.run_seconds(records[0]) == 35.0  # its slot is taken while it is frozen
    assert tp.build_seconds(records[0]) == 12.0
    cost = tp.notebook_costs(records, "batch")[tp.W1D7]
    assert (cost.exclusive, cost.cpu, cost.run, cost.build) == (3.0, 29.0, 21.5, 6.0)
    assert (cost.samples, cost.exclusive_stage, cost.device) == (2, "gpu_exclusive", H100)
    judged_only = tp.notebook_costs([record(timings={"notebook": 30.0, "judge": 12.0})], "old")[tp.W1D7]
    assert (judged_only.exclusive, judged_only.exclusive_stage) == (12.0, "judge")


def test_no_stage_of_the_model_is_negative_however_long_a_run_was_frozen():
    # A Week 1 Day 7 run paused at the gate for longer than it ran (seen on an H100: C read -7.1 s when the frozen
    # seconds were taken off a running time that already left them out).
    frozen_long = record(timings={"notebook": 9.0, "frozen": 16.0, "build": 2.0, "judge": 7.0, "gpu_wait": 3.0,
                                  "gpu_exclusive": 5.0})
    cost = tp.notebook_costs([frozen_long], "batch")[tp.W1D7]
    assert min(cost.exclusive, cost.cpu, cost.run, cost.build) >= 0 and cost.cpu == 15.0 and cost.run == 25.0


def cost(notebook: str, exclusive: float, cpu: float, run: float = 20.0, build: float = 10.0,
         source: str = "m") -> tp.NotebookCost:
    return tp.NotebookCost(notebook, exclusive, cpu, run, build, 1, source, "gpu_exclusive")


def test_class_costs_take_each_notebook_from_the_first_measurement_and_name_what_they_extrapolate():
    batch = {tp.W1D7: cost(tp.W1D7, 6.0, 40.0, source="batch")}
    whole = {tp.W1D7: cost(tp.W1D7, 9.0, 50.0, source="from"), DAY1: cost(DAY1, 2.0, 20.0, 10.0, 0.0, "from")}
    costs = tp.class_costs([DAY1, tp.W1D7, "week2/day5_tma"], batch, whole)
    assert list(costs) == [DAY1, tp.W1D7, "week2/day5_tma"]
    assert costs[tp.W1D7].source == "batch" and costs[DAY1].source == "from"
    guessed = costs["week2/day5_tma"]
    assert (guessed.exclusive, guessed.cpu, guessed.run, guessed.build, guessed.samples) == (4.0, 30.0, 15.0, 5.0, 0)
    assert guessed.source.startswith("EXTRAPOLATED") and DAY1 in guessed.source and tp.W1D7 in guessed.source
    with pytest.raises(ValueError, match="no notebook"):
        tp.class_costs(["week2/day5_tma"], {})


def test_the_projection_is_the_largest_of_its_four_bounds():
    costs = {f"nb{i}": cost(f"nb{i}", 6.0, 45.0, run=20.0, build=10.0) for i in range(14)}
    one = tp.project(costs, 300, tp.Machine("1", 1, 16, runs_per_gpu=4, builds_per_gpu=4))
    n = 300 * 14
    assert one.bounds == {"GPU": n * 6.0, "CPU": n * 45.0 / 16, "runs": n * 20.0 / 4, "builds": n * 10.0 / 4}
    assert one.bound == "GPU" and one.wall_seconds == 25200.0 and one.per_gpu_hour == pytest.approx(600.0)
    node = tp.project(costs, 300, tp.Machine("node", 8, 16))
    assert node.wall_seconds == 3150.0
    assert tp.project(costs, 300, tp.Machine("slurm", 32, 16)).wall_seconds == 787.5
    starved = tp.project(costs, 300, tp.Machine("node", 8, 4))
    assert starved.bound == "CPU" and starved.wall_seconds == n * 45.0 / 32
    assert tp.project(costs, 300, tp.Machine("node", 8, 4), cores_per_stage=2).wall_seconds == 2 * starved.wall_seconds
    few_runs = tp.project(costs, 300, tp.Machine("node", 8, 16, runs_per_gpu=2))
    assert few_runs.bound == "runs" and few_runs.wall_seconds == n * 20.0 / 16


def test_the_model_applied_to_a_measured_batch_is_its_ramp_plus_its_largest_bound():
    records = [record(timings={"notebook": 20.0, "judge": 10.0, "gpu_exclusive": 5.0}) for _ in range(4)]
    # GPU: 4 x 5 s; CPU: 4 x 30 s over 16 cores; runs: 4 x 20 s over 4 at once
    assert tp.batch_model(records, tp.Machine("m", 1, 16, runs_per_gpu=8)).wall_seconds == 20.0
    assert tp.batch_model(records, tp.Machine("m", 1, 16, runs_per_gpu=2)).wall_seconds == 40.0
    slow_cpus = tp.batch_model(records, tp.Machine("m", 1, 2, runs_per_gpu=8), ramp=12.5)
    assert (slow_cpus.wall_seconds, slow_cpus.bound) == (72.5, "CPU")
    schedule = {"timeline": {"holds": [{"gpu": 0, "start": 31.0, "end": 36.0}, {"gpu": 0, "start": 36.5, "end": 40.0},
                                       {"gpu": 1, "start": 33.0, "end": 38.0}]}}
    assert tp.ramp_seconds(schedule) == 33.0 and tp.ramp_seconds(None) == 0.0


def _graded_work(work: Path, pipeline_scores: dict[str, float | None], pipeline_rate: float) -> None:
    """WORK as the script leaves it after grading two W1D7 students serially and through the pipeline."""
    for mode, wall in (("serial", 100.0), ("pipeline", 40.0)):
        out = work / mode
        for student in ("fast_correct-c1", "fast_correct-c2"):
            scores = pipeline_scores if mode == "pipeline" and student.endswith("c2") else {"test_a": 2.0}
            rate = pipeline_rate if mode == "pipeline" else 900.0
            write_result(out, student, scores=scores, perf_rows=[row(rate, 1000.0, 900.0)],
                         timings={"notebook": 25.0, "build": 13.0, "compile": 7.0, "judge": 11.0,
                                  **({"gpu_exclusive": 8.0, "frozen": 2.0} if mode == "pipeline" else {})})
        write_result(out, "fast_correct-c1", DAY1, status="missing", scores={})
        (work / f"{mode}.json").write_text(json.dumps({"command": ["x"], "returncode": 0, "wall_seconds": wall + 5}))
        if mode == "pipeline":
            holds = [{"gpu": "0", "start": 10.0, "end": 18.0}, {"gpu": "0", "start": 20.0, "end": 28.0}]
            (out / "schedule.json").write_text(json.dumps({"schedule": "pipeline", "wall_seconds": wall, "notebooks": 2,
                                                           "limits": {"gpus": ["0"], "runs": 4, "builds": 4},
                                                           "timeline": {"stages": [], "holds": holds}}))


def test_the_script_reports_both_runs_their_differences_targets_and_projection(tmp_path, capsys):
    _graded_work(tmp_path, {"test_a": 0.0}, 918.0)
    assert script.main(["--reuse", "--work", str(tmp_path), "--json", str(tmp_path / "r.json")]) == 0
    printed = " ".join(capsys.readouterr().out.split())  # long lines are wrapped
    assert "serial: 2 x week1/day7_fast_matmul; wall 105.0 s (measured around the grader" in printed
    assert "pipeline: 2 x week1/day7_fast_matmul; wall 40.0 s (the grader's schedule.json; 45.0 s" in printed
    assert "180 notebooks/h" in printed  # 2 in 40 s
    assert "GPU 0: held alone 16 s of 40 s (40%); first hold at 10 s" in printed  # the pipeline's timeline
    assert "pace per notebook between first and last hold: GPU 0 9.0 s (2 holds)" in printed
    assert "not recorded by any result (absent, not zero): replay, gpu_exclusive, gpu_wait, frozen" in printed
    assert "verdicts: 1 DIFFER" in printed and "fast_correct-c2 week1/day7_fast_matmul test_a: 2.0 -> 0.0" in printed
    assert "largest difference 2.0%" in printed
    assert "EXTRAPOLATED" in printed and "week2/day7_optimized_gemm" in printed
    assert printed.index("measured in the pipeline batch") < printed.index("EXTRAPOLATED")
    report = json.loads((tmp_path / "r.json").read_text())
    marks = {t["name"]: t["mark"] for t in report["comparison"]["targets"]}
    assert list(marks.values()) == ["met", "NOT MET", "NOT MET", "met"]
    assert report["modes"]["pipeline"]["notebooks"] == 2 and report["comparison"]["seeds"] == [7]
    node = report["projection"]["machines"][1]
    n = 300 * len(report["projection"]["class_notebooks"])  # the course's notebooks, the bonus left out
    # each notebook E = 8 s, C = 25 + 13 + 7 + 11 = 56 s (25 s of running), R = 25 + 2 frozen = 27 s, B = 20 s;
    # 8 GPUs, 128 cores; the ramp: the batch's first hold at 10 s
    assert node["bounds_seconds"] == {"GPU": n * 8.0 / 8, "CPU": n * 56.0 / 128, "runs": n * 27.0 / 48,
                                      "builds": n * 20.0 / 32}  # 6 runs and 4 builds per GPU
    # simulated: per GPU each notebook's 8 s hold, and the 25 / 6 s its run needs while the GPU is not held (the
    # judges' 3 s of GPU work besides the hold, frozen like the runs, overlap the runs); the references first
    assert node["bound"] == "simulated" and node["limits"] == {"runs": 48, "builds": 32, "judges_per_gpu": 2}
    assert node["wall_seconds"] == pytest.approx(n * (8.0 + 25.0 / 6) / 8, rel=0.02) and "limits" in printed
    [check] = report["projection"]["batch_checks"]
    # no reference in the timeline: both run 0-25 s, build 25-45 s, judge 45-48 s besides the hold, then the holds
    # one after the other: 48-56 s and 56-64 s
    assert (check["model_seconds"], check["measured_seconds"], check["references"]) == (64.0, 40.0, 0)
    assert check["error"] == pytest.approx(0.6) and "error +60.0%" in printed


def test_reuse_analyses_the_notebooks_the_batch_held(tmp_path, capsys):
    write_result(tmp_path / "serial", "a", DAY1, timings={"notebook": 9.0})
    write_result(tmp_path / "pipeline", "a", DAY1, timings={"notebook": 9.0})
    for mode in ("serial", "pipeline"):
        (tmp_path / f"{mode}.json").write_text(json.dumps({"command": [], "returncode": 0, "wall_seconds": 36.0}))
    (tmp_path / "batch.json").write_text(json.dumps({"notebooks": [DAY1], "copies": 1, "students": ["a"]}))
    assert script.main(["--reuse", "--work", str(tmp_path)]) == 0
    assert f"pipeline: 1 x {DAY1}; wall 36.0 s" in capsys.readouterr().out


def test_the_projection_alone_from_a_graded_class(tmp_path, capsys):
    whole = tmp_path / "whole"
    write_result(whole, "fast_correct", timings={"notebook": 20.0, "judge": 10.0})
    write_result(whole, "fast_correct", DAY1, timings={"notebook": 10.0, "judge": 2.0})
    assert script.main(["--project", "--from", str(whole), "--class-notebooks", f"{DAY1},{tp.W1D7}",
                        "--class-students", "100", "--json", str(tmp_path / "r.json")]) == 0
    printed = " ".join(capsys.readouterr().out.split())  # long lines are wrapped
    assert "projection: 100 students x 2 notebooks" in printed and "comparison" not in printed
    assert "the judge's wall time, an upper bound" in printed and "EXTRAPOLATED" not in printed
    one = json.loads((tmp_path / "r.json").read_text())["projection"]["machines"][0]
    assert one["bounds_seconds"]["GPU"] == 100 * 12.0 and one["bounds_seconds"]["CPU"] == 100 * 42.0 / 16


def test_without_both_runs_the_script_compares_nothing_and_without_any_says_so(tmp_path, capsys):
    _graded_work(tmp_path, {"test_a": 2.0}, 900.0)
    (tmp_path / "serial.json").unlink()
    script.main(["--reuse", "--work", str(tmp_path)])
    printed = capsys.readouterr().out
    assert "pipeline alone: nothing to compare" in printed and "verdicts:" not in printed
    (tmp_path / "pipeline.json").unlink()
    with pytest.raises(SystemExit, match="holds none of the runs"):
        script.main(["--reuse", "--work", str(tmp_path)])


def _grader_has_schedule() -> bool:
    from grader.cli import parser

    grade = parser()._subparsers._group_actions[0].choices["grade"]
    return any("--schedule" in action.option_strings for action in grade._actions)


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.skipif(not _grader_has_schedule(), reason="`python -m grader grade` has no --schedule yet")
def test_end_to_end_on_a_cpu(tmp_path, capsys):
    """One demo student, one copy, one cheap notebook, graded twice on the CPU: the same verdicts, no timings."""
    assert script.main(["--copies", "1", "--notebooks", DAY1, "--students", "fast_correct", "--device", "cpu",
                        "--work", str(tmp_path), "--json", str(tmp_path / "r.json")]) == 0
    printed = " ".join(capsys.readouterr().out.split())  # long lines are wrapped
    assert (tmp_path / "batch" / "fast_correct-c1" / "week1" / "day1_host_baseline.ipynb").is_file()
    report = json.loads((tmp_path / "r.json").read_text())
    for mode in ("serial", "pipeline"):
        assert report["modes"][mode]["run"]["returncode"] == 0
        assert report["modes"][mode]["notebooks"] == 1
        assert "--schedule" in report["modes"][mode]["run"]["command"]
    assert report["comparison"]["verdict_differences"] == [] and report["comparison"]["items_compared"] > 0
    assert "verdicts: identical" in printed and "a CPU's numbers, not a GPU's" in printed
    assert [t["met"] for t in report["comparison"]["targets"]][1:] == [None, True, None]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.sandbox
def test_on_a_gpu_the_pipeline_gives_the_serial_verdicts_and_records_its_exclusive_seconds(tmp_path):
    """Two W1D7 students graded serially and through the pipeline on one GPU: the same verdicts, every ratio timed
    in both runs, and each judged notebook's GPU-exclusive seconds recorded by the pipeline."""
    assert script.main(["--notebooks", tp.W1D7, "--students", "fast_correct,slow_correct", "--device", "gpu",
                        "--grade-args", "--gpus 0", "--work", str(tmp_path), "--json", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert [report["modes"][m]["run"]["returncode"] for m in ("serial", "pipeline")] == [0, 0]
    assert report["comparison"]["verdict_differences"] == []
    diffs = report["comparison"]["ratio_differences"]
    assert diffs and all(math.isfinite(d["relative"]) for d in diffs)
    pipeline = read_results(tmp_path / "pipeline", [tp.W1D7])
    assert len(pipeline) == 2 and all(r.timings.get("gpu_exclusive", 0) > 0 for r in pipeline)


def test_a_pipeline_run_alone_reports_its_throughput_targets_without_a_comparison():
    records = [record(f"s{i}", timings={"gpu_exclusive": 4.0 + i, "notebook": 15.0}) for i in range(3)]
    data = {"records": records, "schedule": {"limits": {"gpus": ["0"]}}, "per_hour": 450.0}
    lines, report = script.alone_block({"pipeline": data}, [tp.W1D7])
    assert "nothing to compare" in lines[0]
    marks = {t["name"]: t["mark"] for t in report["targets"]}
    assert marks == {"GPU-exclusive time per W1D7 notebook <= 10 s (the largest)": "met",
                     ">= 300 W1D7 notebooks per hour on one GPU": "met"}
    slow = {"records": [record("s", timings={"gpu_exclusive": 12.0})], "schedule": None, "per_hour": 200.0}
    _, report = script.alone_block({"pipeline": slow}, [tp.W1D7])
    assert [t["mark"] for t in report["targets"]] == ["NOT MET", "NOT MET"]


def test_a_grader_past_its_limit_prints_its_stacks_and_is_stopped(tmp_path):
    # The grader's own handler, with threads busy in Python meanwhile (as the pipeline's are): each one's stack
    # comes out whole, and the grader then ends by the SIGTERM it was sent, not by a crash in the dump.
    log = tmp_path / "grader.log"
    stand_in = ("import signal, threading, time\n"
                "from grader.cli import print_stacks\n"
                "signal.signal(signal.SIGUSR1, print_stacks)\n"
                "def spin_here():\n"
                "    while True:\n"
                "        sum(range(1000))\n"
                "for i in range(4):\n"
                "    threading.Thread(target=spin_here, name=f'spinner-{i}', daemon=True).start()\n"
                "print('ready', flush=True)\n"
                "time.sleep(600)\n")
    with open(log, "w") as out:
        grader = subprocess.Popen([sys.executable, "-c", stand_in], stdout=out, stderr=subprocess.STDOUT,
                                  cwd=REPO, start_new_session=True)
        deadline = time.monotonic() + 30
        while "ready" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        returncode = script.stop_with_stacks(grader)
    text = log.read_text()
    assert returncode == -signal.SIGTERM, text[-2000:]
    assert all(f"Thread spinner-{i} (most recent call last)" in text for i in range(4))
    assert text.count("in spin_here") >= 4 and "Thread MainThread" in text


def test_both_runs_start_with_the_references_given(tmp_path, monkeypatch):
    given = []

    def fake_build(work, notebooks, students, copies):
        (work / "batch" / "s-c1").mkdir(parents=True)
        return work / "batch"

    def fake_grader(work, batch, mode, grader_args, args, references=None):
        given.append((mode, references))  # and grades nothing: the script then says it has no runs

    monkeypatch.setattr(script, "build_batch", fake_build)
    monkeypatch.setattr(script, "run_grader", fake_grader)
    with pytest.raises(SystemExit, match="holds none of the runs"):
        script.main(["--work", str(tmp_path), "--references", str(tmp_path / "refs")])
    assert given == [("serial", tmp_path / "refs"), ("pipeline", tmp_path / "refs")]


# ---- the simulated pipeline ----------------------------------------------------------------------------------


def spans_of(sim: pipesim.Simulation) -> dict[tuple[str, str], tuple[float, float]]:
    return {(s.label, s.stage): (s.start, s.end) for s in sim.spans}


def test_three_notebooks_through_one_run_slot_take_a_hand_computed_wall_time():
    jobs = [pipesim.Job(f"n{i}", tp.W1D7, run=10.0, build=2.0, prep=1.0, hold=3.0) for i in range(3)]
    sim = pipesim.simulate(jobs, gpus=1, runs=1, builds=1, judges_per_gpu=1, spans=True)
    # n0 runs 0-10, builds 10-12, judges 12-13 and holds 13-16; n1 runs from 10 and is frozen 13-16: ends at 23;
    # n2 runs from 23, frozen 26-29: ends at 36, builds 36-38, judges 38-39, holds 39-42
    assert sim.wall == pytest.approx(42.0) and sim.held == pytest.approx((9.0,))
    spans = spans_of(sim)
    assert spans[("n1", "run")] == pytest.approx((10.0, 23.0)) and spans[("n2", "judge")] == pytest.approx((38.0, 42.0))
    assert sim.last_run_end == pytest.approx(36.0) and sim.drain == pytest.approx(6.0)  # the drain tail


def test_the_slowest_notebook_last_leaves_a_drain_no_throughput_bound_counts():
    quick = [pipesim.Job(f"q{i}", "a", run=5.0, build=1.0, hold=1.0) for i in range(8)]
    slow = pipesim.Job("slow", "b", run=5.0, build=30.0, start=4.0, prep=2.0, hold=6.0)
    sim = pipesim.simulate([*quick, slow], gpus=1, runs=8, builds=8, judges_per_gpu=2)
    # every run ends by about 13 s (frozen by the quick holds); then the slow one's build, start-up, GPU work and hold
    assert sim.drain == pytest.approx(30.0 + 4.0 + 2.0 + 6.0)
    bounds = max(sum(j.hold for j in [*quick, slow]), sum(j.run for j in [*quick, slow]) / 8)
    assert sim.wall > 3 * bounds


def test_no_stage_is_negative_and_nothing_is_lost_however_odd_the_costs():
    jobs = [pipesim.Job("a", "x", run=-3.0, build=-1.0, start=-2.0, prep=-1.0, hold=-4.0),
            pipesim.Job("b", "x", run=0.0), pipesim.Job("c", "x", run=2.0, judged=False),
            pipesim.Job("d", "x", run=4.0, alone=9.0, hold=1.0)]
    sim = pipesim.simulate(jobs, gpus=2, runs=3, builds=1, judges_per_gpu=1, spans=True)
    assert all(s.end >= s.start >= 0.0 for s in sim.spans) and sim.wall >= 0.0 and min(sim.held) >= 0.0
    assert {s.label for s in sim.spans if s.stage == "run"} == {"a", "b", "c", "d"}
    assert ("c", "judge") not in spans_of(sim) and ("d", "judge") in spans_of(sim)
    with pytest.raises(ValueError, match="unique"):
        pipesim.simulate([pipesim.Job("a", "x", 1.0), pipesim.Job("a", "x", 1.0)], 1, 1, 1, 1)
    with pytest.raises(ValueError, match="at least 1"):
        pipesim.simulate(jobs, 1, 0, 1, 1)


def test_a_judge_waits_for_its_reference_and_a_runs_hold_alone_freezes_the_others():
    jobs = [pipesim.Job("reference x", "x", run=10.0, hold=5.0), pipesim.Job("s/x", "x", run=1.0, hold=1.0,
                                                                       reference="reference x"),
            pipesim.Job("t/y", "y", run=6.0, alone=2.0)]
    spans = spans_of(pipesim.simulate(jobs, gpus=1, runs=3, builds=3, judges_per_gpu=2, spans=True))
    # t/y holds the GPU alone 4-6 s: the reference's run is frozen then and ends at 12, its hold 12-17
    assert spans[("t/y", "run")] == pytest.approx((0.0, 6.0))
    assert spans[("reference x", "run")] == pytest.approx((0.0, 12.0))
    assert spans[("s/x", "judge")] == pytest.approx((17.0, 18.0))  # built at 1 s, judged once the reference is


def test_holds_are_serial_per_gpu_and_spread_over_gpus():
    jobs = [pipesim.Job(f"n{i}", "x", run=0.0, hold=10.0) for i in range(4)]
    assert pipesim.simulate(jobs, gpus=1, runs=4, builds=4, judges_per_gpu=4).wall == pytest.approx(40.0)
    two = pipesim.simulate(jobs, gpus=2, runs=4, builds=4, judges_per_gpu=2)
    assert two.wall == pytest.approx(20.0) and two.held == pytest.approx((20.0, 20.0))


def _timeline(stages: list[tuple[str, str, float, float]], holds: list[tuple[float, float]]) -> dict[str, Any]:
    return {"wall_seconds": max(e for *_, e in stages), "limits": {"gpus": ["0"], "runs": 2, "builds": 2,
                                                                    "judges_per_gpu": 2},
            "timeline": {"stages": [{"label": lab, "stage": st, "gpu": None if st == "build" else "0", "start": a,
                                     "end": b} for lab, st, a, b in stages],
                         "holds": [{"gpu": "0", "start": a, "end": b} for a, b in holds]}}


def test_a_judges_span_splits_into_start_up_waiting_and_hand_over():
    # the judge's span 20-35 s; its own timing ("judge") the last 8 s (27-35); another judge held the GPU 22-26.4
    schedule = _timeline([("s/" + tp.W1D7, "judge", 20.0, 35.0)], [(22.0, 26.4), (28.0, 34.0)])
    result = record("s", timings={"judge": 8.0, "gpu_exclusive": 6.0, "gpu_wait": 0.0, "notebook": 10.0})
    split = spans.judge_split(result, schedule)
    assert (split.start, split.waited, split.handover) == pytest.approx((2.0, 4.4, 0.6))  # 7 - 4.4 - 0.6
    job = pipesim.record_job(result, split, 0.0)
    assert (job.start, job.prep, job.hold, job.run) == pytest.approx((2.0, 2.6, 6.0, 10.0))
    assert spans.judge_split(record("t", timings={"judge": 1.0}), schedule) is None


def test_a_batch_grades_its_references_first_with_their_frozen_seconds_taken_off():
    stages = [("reference " + tp.W1D7, "run", 0.0, 12.0), ("reference " + tp.W1D7, "build", 12.0, 14.0),
              ("reference " + tp.W1D7, "judge", 14.0, 24.0), ("b/" + tp.W1D7, "run", 0.0, 15.0),
              ("b/" + tp.W1D7, "build", 15.0, 17.0), ("b/" + tp.W1D7, "judge", 24.0, 30.0),
              ("a/" + tp.W1D7, "run", 0.0, 15.0), ("a/" + tp.W1D7, "build", 15.0, 17.0),
              ("a/" + tp.W1D7, "judge", 24.0, 31.0)]
    schedule = _timeline(stages, [(8.0, 10.0), (18.0, 23.0), (25.0, 29.0), (29.5, 30.5)])
    timed = {"notebook": 9.0, "frozen": 6.0, "build": 2.0, "judge": 5.0, "gpu_exclusive": 4.0}
    jobs, measured = pipesim.batch_jobs([record("b", timings=timed), record("a", timings=timed)], schedule)
    assert [j.label for j in jobs] == ["reference " + tp.W1D7, "a/" + tp.W1D7, "b/" + tp.W1D7]
    reference = jobs[0]
    assert reference.run == pytest.approx(10.0) and reference.build == pytest.approx(2.0)  # frozen 8-10 s
    assert reference.hold == pytest.approx(4.0) and reference.reference is None
    assert all(j.reference == "reference " + tp.W1D7 for j in jobs[1:]) and measured["references"] == 1
    sim = pipesim.simulate(jobs, 1, 2, 2, 2)
    assert sim.wall > 0 and min(j.start for j in jobs) >= 0.0


def test_the_grader_limits_and_slurm_waves():
    assert pipesim.grader_limits(1, 16, 6, 2) == (6, 4, 2)
    assert pipesim.grader_limits(8, 128, 6, 2) == (48, 32, 2)
    assert pipesim.grader_limits(8, 16, 6, 2) == (8, 4, 2)  # the cores cap the runs
    assert pipesim.grader_limits(1, 1, 6, 2) == (1, 1, 2) and pipesim.grader_limits(1, 16, 6, 2, 3, 5) == (3, 5, 2)
    costs = {n: cost(n, 5.0, 10.0) for n in ("a/x", "a/y")}
    costs = {n: dataclasses.replace(c, running=10.0, judge_start=1.0) for n, c in costs.items()}
    jobs = pipesim.class_jobs(costs, 3)
    assert [j.label for j in jobs[:3]] == ["reference a/x", "reference a/y", "s0/a/x"]
    assert jobs[2].reference == "reference a/x" and (jobs[2].run, jobs[2].hold, jobs[2].start) == (10.0, 5.0, 1.0)
    # the references job first (every notebook's reference, once), then tasks that take its references
    references = pipesim.simulate([j for j in jobs if j.reference is None], 1, 2, 2, 2).wall
    one_task = pipesim.simulate(pipesim.class_jobs(costs, 2, references=False), 1, 2, 2, 2).wall
    assert references > 0 and one_task < pipesim.simulate(pipesim.class_jobs(costs, 2), 1, 2, 2, 2).wall
    # 10 students, 4 notebooks a task = 2 students: 5 tasks on 2 GPUs, 3 waves
    slurm = pipesim.simulate_slurm("s", costs, 10, 2, 4, 2, 2, 2)
    assert (slurm.tasks, slurm.per_task, slurm.waves, slurm.references) == (5, 2, 3, pytest.approx(references))
    assert slurm.wall == pytest.approx(references + 3 * one_task)
    # 9 students: the fifth task has one student, alone in the last wave
    smaller = pipesim.simulate_slurm("s", costs, 9, 2, 4, 2, 2, 2)
    assert (smaller.tasks, smaller.waves) == (5, 3)
    assert smaller.wall == pytest.approx(references + 2 * one_task + pipesim.simulate(
        pipesim.class_jobs(costs, 1, references=False), 1, 2, 2, 2).wall)
    # one task: no references job (grader.slurm submits none), the task grades its own
    alone = pipesim.simulate_slurm("s", costs, 2, 2, 4, 2, 2, 2)
    assert (alone.tasks, alone.references) == (1, 0.0)
    assert alone.wall == pytest.approx(pipesim.simulate(pipesim.class_jobs(costs, 2), 1, 2, 2, 2).wall)
