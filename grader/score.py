"""Score an executed notebook: correctness from its test cells, performance from the spec.

Correctness uses nbgrader's own rule (``determine_grade``) on each test cell, with two fixes: a
test cell that never ran scores 0 (nbgrader would give an output-less cell full marks), and text
on stderr in a cell without an error (a harmless warning) no longer zeroes the cell. Performance
items are computed here, in the grader, from the recorded benchmark rows and the reference
solution's rows from the same run; the notebook's own preview does not count.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbformat import NotebookNode
from nbgrader.utils import determine_grade, is_grade, is_solution

from course.spec import ExerciseSpec, Threshold, all_specs, geometric_mean
from grader import results
from grader.results import ItemResult

ShapeKey = tuple[int, ...]
# spec id -> shape -> GFLOP/s of the reference solution, measured in this grading run
ReferenceRates = dict[str, dict[ShapeKey, float]]


def performance_cells() -> dict[str, tuple[ExerciseSpec, Threshold]]:
    """Every performance grade-cell id the course's specs define."""
    return {spec.grade_id(t): (spec, t) for spec in all_specs() for t in spec.thresholds}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Events the notebook recorded; lines that are not JSON objects are skipped."""
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def _run_state(cell: NotebookNode) -> str:
    """"completed", "interrupted" (the run ended while the cell ran) or "not run".

    Read from nbclient's per-cell timing stamps: papermill marks every unfinished cell "completed"
    when a run ends, so its own status cannot tell a cell that crashed from one that passed.
    """
    stamps = cell.get("metadata", {}).get("execution", {})
    if "shell.execute_reply" in stamps or "iopub.status.idle" in stamps:
        return "completed"
    return "interrupted" if stamps else "not run"


def without_harmless_stderr(cell: NotebookNode) -> NotebookNode:
    """A copy of ``cell`` whose stderr text is shown as stdout when the cell raised no error."""
    cell = copy.deepcopy(cell)
    outputs = cell.get("outputs", [])
    if any(o.get("output_type") == "error" for o in outputs):
        return cell
    for output in outputs:
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            output["name"] = "stdout"
    return cell


def _error_message(cell: NotebookNode) -> str:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            text = str(output.get("evalue", "")).strip()
            return f"{output.get('ename', 'Error')}: {text}" if text else str(output.get("ename", "Error"))
    return ""


def _stdout(cell: NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout").strip()


def correctness_items(nb: NotebookNode, notebook_status: str) -> list[ItemResult]:
    perf_ids = performance_cells()
    items = []
    for cell in nb.cells:
        if not is_grade(cell) or cell.metadata.nbgrader["grade_id"] in perf_ids:
            continue
        grade_id = cell.metadata.nbgrader["grade_id"]
        max_score = float(cell.metadata.nbgrader["points"])
        if is_solution(cell):
            score, _ = determine_grade(cell)
            status = results.PENDING if score is None else results.FAILED
            items.append(ItemResult(grade_id, results.CORRECTNESS, score, max_score, status,
                                    "needs manual grading" if score is None else "no answer given"))
            continue
        state = _run_state(cell)
        if state != "completed":
            why = (f"the run ended ({notebook_status}) while this cell was running" if state == "interrupted"
                   else f"not run: the run ended ({notebook_status}) before this cell")
            status = results.FAILED if state == "interrupted" else results.NOT_RUN
            items.append(ItemResult(grade_id, results.CORRECTNESS, 0.0, max_score, status, why))
            continue
        score, _ = determine_grade(without_harmless_stderr(cell))
        score = float(score or 0.0)
        status = (results.PASSED if score >= max_score else results.PARTIAL if score > 0 else results.FAILED)
        message = _error_message(cell) if status == results.FAILED else _stdout(cell)
        items.append(ItemResult(grade_id, results.CORRECTNESS, score, max_score, status, message[:4000]))
    return items


@dataclass
class BenchRow:
    shape: ShapeKey
    student_gflops: float
    baseline_gflops: float
    error: str | None


def bench_rows(events: Iterable[dict[str, Any]], spec_id: str) -> list[BenchRow]:
    rows = []
    for event in events:
        if event.get("kind") == "bench" and event.get("spec") == spec_id and event.get("measured"):
            try:
                rows.append(BenchRow(tuple(int(n) for n in event["shape"]), float(event["student_gflops"]),
                                     float(event["baseline_gflops"]), event.get("error")))
            except (KeyError, TypeError, ValueError):
                continue
    return rows


def _describe(threshold: Threshold) -> str:
    unit = " GFLOP/s" if threshold.kind == "absolute" else ""
    bands = ", ".join(f">={level:g}{unit}: {credit:.0%}" for level, credit in threshold.bands)
    return f"{threshold.precision}; {bands}"


def _level(threshold: Threshold, rows: list[BenchRow], reference: dict[ShapeKey, float]) -> tuple[float, str]:
    if threshold.kind == "absolute":
        level = geometric_mean([r.student_gflops for r in rows])
        return level, f"{level:.0f} GFLOP/s"
    if threshold.kind == "vs_baseline":
        level = geometric_mean([r.student_gflops / r.baseline_gflops if r.baseline_gflops else 0.0 for r in rows])
        return level, f"{level:.2f} of the library baseline"
    missing = [r.shape for r in rows if not reference.get(r.shape)]
    if missing:
        raise LookupError(f"the reference solution has no measurement for shapes {missing}")
    level = geometric_mean([r.student_gflops / reference[r.shape] for r in rows])
    return level, f"{level:.2f} of the reference solution"


def performance_items(nb: NotebookNode, events: list[dict[str, Any]], on_gpu: bool,
                      reference: ReferenceRates) -> list[ItemResult]:
    perf_ids = performance_cells()
    checks = [e for e in events if e.get("kind") == "check"]
    items = []
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if not is_grade(cell) or grade_id not in perf_ids:
            continue
        spec, threshold = perf_ids[grade_id]
        item = ItemResult(grade_id, results.PERFORMANCE, 0.0, threshold.points, results.FAILED,
                          threshold=_describe(threshold))
        items.append(item)
        if not on_gpu:
            item.score, item.status = None, results.PENDING
            item.message = "pending a GPU run: performance is not measured without a GPU"
            continue
        rows = bench_rows(events, spec.id)
        failed_checks = [c for c in checks if c.get("spec_id") == spec.id and not c.get("passed")]
        if not rows:
            item.message = "the benchmark did not run (see the benchmark cell's error)"
            continue
        if failed_checks:
            item.message = "performance counts only for a correct kernel: " + str(failed_checks[0].get("message"))
            continue
        errors = [r.error for r in rows if r.error]
        try:
            level, shown = _level(threshold, rows, reference.get(spec.id, {}))
        except LookupError as error:
            item.status, item.message = results.NOT_RUN, str(error)
            continue
        item.measured = shown
        item.score = threshold.score(level)
        credit = threshold.credit(level)
        item.status = results.PASSED if credit >= 1 else results.PARTIAL if credit > 0 else results.FAILED
        item.message = f"{shown}: {credit:.0%} of the points ({threshold.description})"
        if errors:
            item.message += f"; shapes that scored 0: {errors[0]}"
    return items
