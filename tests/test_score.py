"""Scoring rules: nbgrader's, minus its two traps; performance from thresholds and same-run rates."""

import nbformat
import pytest

from grader import results, score

DONE = {"iopub.status.busy": "t0", "shell.execute_reply": "t1", "iopub.status.idle": "t1"}


def _test_cell(grade_id, outputs, points=2, stamps=DONE):
    cell = nbformat.v4.new_code_cell("assert something")
    cell.metadata = {"nbgrader": {"grade": True, "grade_id": grade_id, "locked": True, "points": points,
                                  "solution": False, "schema_version": 3, "task": False},
                     "execution": dict(stamps)}
    cell.outputs = outputs
    cell.execution_count = 1 if stamps else None
    return cell


def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return nb


STDERR = nbformat.v4.new_output("stream", name="stderr", text="UserWarning: harmless\n")
ERROR = nbformat.v4.new_output("error", ename="AssertionError", evalue="M=100: relative error 1e-1", traceback=[])


def test_a_warning_on_stderr_does_not_zero_a_passing_test():
    [item] = score.correctness_items(_nb(_test_cell("t", [STDERR])), results.OK)
    assert item.score == 2 and item.status == results.PASSED


def test_an_error_scores_zero_with_its_message():
    [item] = score.correctness_items(_nb(_test_cell("t", [STDERR, ERROR])), results.OK)
    assert item.score == 0 and item.status == results.FAILED and "relative error" in item.message


def test_a_cell_that_never_ran_scores_zero():
    [item] = score.correctness_items(_nb(_test_cell("t", [], stamps={})), results.KERNEL_DIED)
    assert item.score == 0 and item.status == results.NOT_RUN


def test_a_cell_running_when_the_kernel_died_scores_zero():
    [item] = score.correctness_items(_nb(_test_cell("t", [], stamps={"iopub.status.busy": "t0"})),
                                     results.KERNEL_DIED)
    assert item.score == 0 and item.status == results.FAILED and "kernel_died" in item.message


def _perf_cells():
    return [_test_cell(grade_id, [], points=t.points) for grade_id, (_, t) in score.performance_cells().items()]


def _bench(shape, student, baseline, error=None):
    return {"kind": "bench", "spec": "w1d7.matmul_fp32", "measured": True, "shape": list(shape),
            "student_gflops": student, "baseline_gflops": baseline, "error": error}


def test_performance_is_pending_without_a_gpu():
    items = score.performance_items(_nb(*_perf_cells()), [], on_gpu=False, reference={})
    assert items and all(i.score is None and i.status == results.PENDING for i in items)


def test_performance_points_follow_the_bands():
    events = [_bench((1024, 1024, 1024), 30_000.0, 50_000.0), _bench((2048, 2048, 2048), 30_000.0, 50_000.0)]
    reference = {"w1d7.matmul_fp32": {(1024, 1024, 1024): 40_000.0, (2048, 2048, 2048): 40_000.0}}
    items = {i.item.rsplit("_", 1)[-1]: i for i in
             score.performance_items(_nb(*_perf_cells()), events, on_gpu=True, reference=reference)}
    assert items["floor"].score == 1.0 and "30000 GFLOP/s" in items["floor"].measured
    assert items["cublas"].score == pytest.approx(1.5)  # 0.60 of cuBLAS: the 0.55 band, 75%
    assert items["reference"].score == pytest.approx(1.5)  # 0.75 of the reference: the 0.70 band, 75%


def test_no_performance_points_for_a_wrong_kernel():
    events = [_bench((1024, 1024, 1024), 30_000.0, 50_000.0),
              {"kind": "check", "spec_id": "w1d7.matmul_fp32", "passed": False, "message": "M=1: NaN"}]
    items = score.performance_items(_nb(*_perf_cells()), events, on_gpu=True, reference={})
    assert all(i.score == 0 and "correct kernel" in i.message for i in items)


def test_a_missing_reference_is_reported_not_guessed():
    events = [_bench((1024, 1024, 1024), 30_000.0, 50_000.0)]
    items = score.performance_items(_nb(*_perf_cells()), events, on_gpu=True, reference={})
    vs_reference = next(i for i in items if i.item.endswith("vs_reference"))
    assert vs_reference.score == 0 and vs_reference.status == results.NOT_RUN and "reference" in vs_reference.message


def test_garbage_in_the_metrics_file_is_skipped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"kind": "bench"}\nnot json\n[1, 2]\n')
    assert score.read_metrics(path) == [{"kind": "bench"}]
