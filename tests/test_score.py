"""Items come from the master copy's grade cells and the judge's verdict, never from notebook outputs."""

import pytest

from grader.authoring.release import master_version
from grader.intake.layout import course_notebooks
from grader.score import results, score

NOTEBOOK = next(nb for nb in course_notebooks() if nb.key == "week1/day7_fast_matmul")
MASTER = master_version(NOTEBOOK)
SPEC = "w1d7.matmul_fp32"


def _row(shape, student_ms, baseline_ms, reference_ms, error=None):
    flops = 2.0 * shape[0] * shape[1] * shape[2]
    return {"shape": list(shape), "work": flops, "student_ms": student_ms, "baseline_ms": baseline_ms,
            "reference_ms": reference_ms, "error": error}


def _verdict(correct=True, rows=(), tests_pass=True, provisional=False):
    sets = {which: {"passed": correct, "messages": [f"{'PASS' if correct else 'FAIL'} M=1"],
                    "provisional": provisional} for which in ("visible", "hidden")}
    tests = {t["grade_id"]: {"passed": tests_pass, "message": "" if tests_pass else "wrong"}
             for t in score.test_cells(MASTER, [])}
    return {"kernels": {SPEC: {"sets": sets, "bench": {"measured": True, "rows": list(rows)}}}, "tests": tests}


def _items(verdict, on_gpu=True, unjudged="not judged"):
    return {i.item: i for i in score.items(NOTEBOOK.key, MASTER, verdict, on_gpu, unjudged)}


def test_every_master_grade_cell_is_an_item_with_the_masters_points():
    items = _items(_verdict())
    master = {c.metadata.nbgrader["grade_id"]: c.metadata.nbgrader["points"] for c in score.grade_cells(MASTER)}
    assert {k: i.max_score for k, i in items.items()} == master


def test_performance_points_follow_the_bands():
    # 1 ms for 2*1024^3 flops = 2147 GFLOP/s; cuBLAS 0.6 ms: 0.60 of it; the reference 0.75 ms: 0.75 of it
    rows = [_row((1024, 1024, 1024), 1.0, 0.6, 0.75), _row((2048, 2048, 2048), 8.0, 4.8, 6.0)]
    items = _items(_verdict(rows=rows))
    assert items["perf_w1d7_matmul_fp32_floor"].score == 1.0
    assert items["perf_w1d7_matmul_fp32_vs_cublas"].score == pytest.approx(1.5)  # the 0.55 band: 75%
    assert items["perf_w1d7_matmul_fp32_vs_reference"].score == pytest.approx(1.5)  # the 0.70 band: 75%
    assert items["test_matmul_visible"].score == 2 and items["test_matmul_hidden"].score == 3


def test_no_performance_points_for_a_kernel_that_fails_a_correctness_check():
    items = _items(_verdict(correct=False, rows=[_row((1024, 1024, 1024), 1.0, 0.6, 0.75)]))
    perf = [i for i in items.values() if i.kind == results.PERFORMANCE]
    assert perf and all(i.score == 0 and "passes every correctness check" in i.message for i in perf)


def test_a_missing_reference_is_reported_not_guessed():
    items = _items(_verdict(rows=[_row((1024, 1024, 1024), 1.0, 0.6, None)]))
    vs_reference = items["perf_w1d7_matmul_fp32_vs_reference"]
    assert vs_reference.score == 0 and vs_reference.status == results.NOT_RUN
    assert "reference" in vs_reference.message


def test_on_a_cpu_performance_is_pending_and_kernel_verdicts_are_provisional():
    items = _items(_verdict(provisional=True), on_gpu=False)
    perf = [i for i in items.values() if i.kind == results.PERFORMANCE]
    assert all(i.score is None and i.status == results.PENDING for i in perf)
    assert items["test_matmul_visible"].provisional and not items["test_tf32"].provisional


def test_without_a_verdict_every_item_scores_zero_and_says_why():
    items = _items(None, unjudged="not judged: the notebook run ended with status timeout")
    assert all(i.score == 0 for i in items.values())
    assert "timeout" in items["test_matmul_hidden"].message and "timeout" in items["test_flops_4096"].message


def test_a_failed_answer_test_keeps_the_masters_message():
    items = _items(_verdict(tests_pass=False))
    assert items["test_tf32"].score == 0 and items["test_tf32"].message == "wrong"


def test_the_judges_rows_become_rates():
    [row] = score.perf_rows({"kernels": {SPEC: {"bench": {"rows": [_row((1024, 1024, 1024), 1.0, 0.5, None)]}}}})
    assert row["student_rate"] == pytest.approx(2147.48, rel=1e-3) and row["reference_rate"] == 0
    assert row["unit"] == "GFLOP/s" and row["baseline_name"] == "cuBLAS"
