"""Turn the judge's verdicts into one item per graded cell of the master copy.

The items are the master notebook's grade cells, whatever the submitted notebook's metadata says.
A kernel's correctness cells and performance cells come from the judge's replay (provisional on
a CPU, where performance is pending); the other test cells from the master copies the judge ran
against the exported answers; answer cells worth points by themselves need a human. Nothing here
reads what the notebook printed.
"""

from __future__ import annotations

from typing import Any

from nbformat import NotebookNode
from nbgrader.utils import is_grade, is_solution

from course.spec import ExerciseSpec, ShapeTimes, Threshold, all_specs, for_notebook, get, rate
from grader.score import results
from grader.score.results import ItemResult

PROVISIONAL = "provisional (CPU run: the GPU judge decides)"


def performance_cells(specs: list[ExerciseSpec] | None = None) -> dict[str, tuple[ExerciseSpec, Threshold]]:
    return {spec.grade_id(t): (spec, t) for spec in (all_specs() if specs is None else specs) for t in spec.thresholds}


def correctness_cells(specs: list[ExerciseSpec]) -> dict[str, tuple[ExerciseSpec, str]]:
    return {grade_id: (spec, which) for spec in specs for grade_id, which in spec.correctness_cells.items()}


def grade_cells(master: NotebookNode) -> list[NotebookNode]:
    return [c for c in master.cells if is_grade(c)]


def test_cells(master: NotebookNode, specs: list[ExerciseSpec]) -> list[dict[str, str]]:
    """The master test cells the judge runs against answers: every test cell no spec decides."""
    decided = set(performance_cells(specs)) | set(correctness_cells(specs))
    return [{"grade_id": c.metadata.nbgrader["grade_id"], "source": c.source} for c in grade_cells(master)
            if not is_solution(c) and c.metadata.nbgrader["grade_id"] not in decided]


def _times(rows: list[dict[str, Any]]) -> list[ShapeTimes]:
    """The judge's benchmark rows as the spec's per-shape times (the judge names the library's "baseline_ms")."""
    return [ShapeTimes(r["shape"], r["work"], r.get("student_ms"), r.get("baseline_ms"), r.get("reference_ms"))
            for r in rows]


def _performance(item: ItemResult, spec: ExerciseSpec, threshold: Threshold, kernel: dict[str, Any],
                 correct: bool, on_gpu: bool) -> None:
    if not on_gpu:
        item.score, item.status = None, results.PENDING
        item.message = "pending a GPU run: performance is not measured without a GPU"
        return
    bench = kernel.get("bench") or {}
    rows = bench.get("rows") or []
    if not rows:
        item.message = str(bench.get("reason") or "the judge did not measure this kernel")
        return
    if not correct:
        item.message = "performance counts only for a kernel that passes every correctness check"
        return
    try:
        level = threshold.level(_times(rows))
    except LookupError as error:
        item.status, item.message = results.NOT_RUN, str(error)
        return
    shown = threshold.shown(level, spec.library_name)
    item.measured = shown
    item.score = threshold.score(level)
    credit = threshold.credit(level)
    item.status = results.PASSED if credit >= 1 else results.PARTIAL if credit > 0 else results.FAILED
    item.message = f"{shown}: {credit:.0%} of the points ({threshold.description})"
    errors = [r["error"] for r in rows if r.get("error")]
    if errors:
        item.message += f"; a shape that scored 0: {errors[0]}"


def items(notebook_key: str, master: NotebookNode, verdict: dict[str, Any] | None, on_gpu: bool,
          unjudged: str) -> list[ItemResult]:
    """One item per master grade cell. ``unjudged`` says why, when there is no verdict at all."""
    specs = for_notebook(notebook_key)
    perf, correctness = performance_cells(specs), correctness_cells(specs)
    verdict = verdict or {}
    kernels = verdict.get("kernels") or {}
    tests = verdict.get("tests") or {}
    found: list[ItemResult] = []
    for cell in grade_cells(master):
        grade_id = cell.metadata.nbgrader["grade_id"]
        points = float(cell.metadata.nbgrader.get("points", 0))
        if grade_id in perf:
            spec, threshold = perf[grade_id]
            item = ItemResult(grade_id, results.PERFORMANCE, 0.0, points, results.FAILED,
                              threshold=threshold.bands_text)
            kernel = kernels.get(spec.id)
            if kernel is None:
                item.message = unjudged if on_gpu else "pending a GPU run"
                item.score, item.status = (0.0, results.NOT_RUN) if on_gpu else (None, results.PENDING)
            else:
                correct = all(s.get("passed") for s in (kernel.get("sets") or {}).values())
                _performance(item, spec, threshold, kernel, correct, on_gpu)
        elif grade_id in correctness:
            spec, which = correctness[grade_id]
            shape_set = ((kernels.get(spec.id) or {}).get("sets") or {}).get(which)
            if shape_set is None:
                item = ItemResult(grade_id, results.CORRECTNESS, 0.0, points, results.NOT_RUN, unjudged)
            elif shape_set.get("pending") and not on_gpu:  # a CUDA C kernel graded without a GPU
                item = ItemResult(grade_id, results.CORRECTNESS, None, points, results.PENDING,
                                  "\n".join(shape_set.get("messages") or ["pending a GPU run"]))
            else:
                passed = bool(shape_set.get("passed"))
                item = ItemResult(grade_id, results.CORRECTNESS, points if passed else 0.0, points,
                                  results.PASSED if passed else results.FAILED, "\n".join(shape_set["messages"]))
                item.provisional = bool(shape_set.get("provisional"))
        elif is_solution(cell):
            item = ItemResult(grade_id, results.CORRECTNESS, None, points, results.PENDING, "needs manual grading")
        else:
            test = tests.get(grade_id)
            if test is None:
                item = ItemResult(grade_id, results.CORRECTNESS, 0.0, points, results.NOT_RUN, unjudged)
            else:
                passed = bool(test.get("passed"))
                item = ItemResult(grade_id, results.CORRECTNESS, points if passed else 0.0, points,
                                  results.PASSED if passed else results.FAILED, str(test.get("message", ""))[:4000])
        found.append(item)
    return found


def perf_rows(verdict: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The judge's benchmark rows as rates (GFLOP/s or GB/s, as the spec says), for reports and plots."""
    rows = []
    for spec_id, kernel in ((verdict or {}).get("kernels") or {}).items():
        spec = get(spec_id)
        for row in ((kernel.get("bench") or {}).get("rows") or []):
            rows.append({"spec": spec_id, "shape": row["shape"], "error": row.get("error"),
                         # The pages and plots read the library under its output names, "baseline_*".
                         "unit": spec.rate_unit, "baseline_name": spec.library_name,
                         "student_rate": rate(row["work"], row.get("student_ms")),
                         "baseline_rate": rate(row["work"], row.get("baseline_ms")),
                         "reference_rate": rate(row["work"], row.get("reference_ms")),
                         # an autotuned kernel: the configurations the judge timed and the one it graded
                         **{k: row[k] for k in ("configs", "reference_configs") if k in row}})
    return rows
