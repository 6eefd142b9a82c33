"""The class at a glance, for the TA's index page: statuses, scores, pass rates and performance.

Everything here is computed from the stored results (nothing is re-measured) and drawn as inline PNGs
(``course.plot``), so the index stays one static file with no network access.
"""

from __future__ import annotations

import base64
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from course.plot import class_performance, pass_rates, score_distribution, to_png
from grader.lms.term import LATE, NO_TIME
from grader.report.tables import items_of
from grader.score import results
from grader.score.results import ItemResult, NotebookResult

# Every notebook status the grader knows, in the order the overview lists them (those another version
# of results.py lacks are skipped; a status seen in the results but not listed here comes last).
_STATUS_NAMES = ("OK", "MISSING", "TIMEOUT", "GPU_HANG", "KERNEL_DIED", "CUDA_ERROR", "MEMORY", "GPU_MEMORY",
                 "OUTPUT_LIMIT", "SCRATCH_LIMIT", "BUILD_LIMIT", "CORRUPT", "AMBIGUOUS", "GRADER_ERROR")
KNOWN_STATUSES = tuple(getattr(results, name) for name in _STATUS_NAMES if hasattr(results, name))
STATUS_LABELS = {
    "ok": "ok (ran to its end)", "missing": "missing (nothing submitted)", "timeout": "timeout",
    "kernel_died": "kernel died", "cuda_error": "CUDA error", "memory": "memory limit", "output_limit": "output limit",
    "scratch_limit": "scratch file quota", "gpu_hang": "kernel never ended", "gpu_memory": "GPU memory limit",
    "build_limit": "compile limit",
    "corrupt": "corrupt file", "ambiguous": "ambiguous (several candidate files)", "grader_error": "grader error",
}


def png(figure: Any) -> str:
    """A matplotlib figure as base64 PNG, for ``<img src="data:image/png;base64,...">``."""
    return base64.b64encode(to_png(figure)).decode("ascii")


def notebook_key(result: NotebookResult) -> str:
    return f"{result.assignment}/{result.notebook}"


def student_label(result: NotebookResult) -> str:
    """The student's name as given, with the safe id when it differs (another grader version may lack it)."""
    student_id = getattr(result, "student_id", "") or result.student
    return result.student if student_id == result.student else f"{result.student} ({student_id})"


def geometric_mean(values: list[float]) -> float:
    """As the scorer counts a level: 0 when any value is not positive."""
    if not values or any(v <= 0 or math.isnan(v) for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclass
class Link:
    label: str
    href: str
    note: str = ""


@dataclass
class StatusCount:
    status: str
    label: str
    count: int
    notebooks: list[Link]

    @property
    def problem(self) -> bool:
        """Needs a TA: a notebook that was submitted and could not be graded normally (missing ones are counted
        apart, and only for assignments that are due or were asked for)."""
        return self.status not in (results.OK, results.MISSING)


@dataclass
class ItemRate:
    """How the class did on one graded item of one notebook."""

    item: str
    kind: str
    max_score: float
    counts: Counter = field(default_factory=Counter)  # item status -> students
    provisional: int = 0  # students whose verdict on it is provisional (CPU run)
    points: float = 0.0  # points earned by the class on it

    @property
    def decided(self) -> int:
        return sum(n for status, n in self.counts.items() if status != results.PENDING)

    @property
    def pending(self) -> int:
        return self.counts.get(results.PENDING, 0)

    @property
    def passed(self) -> int:
        return self.counts.get(results.PASSED, 0)

    @property
    def rate(self) -> float | None:
        return self.passed / self.decided if self.decided else None

    @property
    def mean_points(self) -> float | None:
        return self.points / self.decided if self.decided else None


@dataclass
class NotebookView:
    key: str
    submissions: int  # notebooks submitted: a missing one is never counted
    max_score: float
    fractions: list[float]  # each submitter's raw share of the notebook's points (before late penalties)
    items: list[ItemRate]
    pending_points: float  # the notebook's points not decided yet (per student, the most seen)
    plot: str = ""  # pass rates, base64 PNG
    nobody_submitted: bool = False  # every student's is missing: no plot of all-zero rates
    missing: int = 0  # students with no notebook: not in the scores, never drawn as 0%
    final_fractions: list[float] = field(default_factory=list)  # the same after late penalties

    @property
    def median(self) -> float | None:
        return statistics.median(self.fractions) if self.fractions else None

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.fractions) if self.fractions else None

    @property
    def final_median(self) -> float | None:
        return statistics.median(self.final_fractions) if self.final_fractions else None

    @property
    def final_mean(self) -> float | None:
        return statistics.fmean(self.final_fractions) if self.final_fractions else None


@dataclass
class StudentPerformance:
    student: str
    href: str
    vs_baseline: float  # geometric mean over the shapes of student / library GFLOP/s
    vs_reference: float
    gflops: float  # geometric mean of the student's GFLOP/s
    counts: bool  # the kernel passed its correctness checks, so its performance is scored
    timed: bool  # the judge timed it on at least one shape (not: it could not be replayed, or crashed)
    note: str = ""  # why a shape was not timed (the first such reason)


@dataclass
class PerformanceView:
    notebook: str
    spec: str
    devices: list[str]
    students: list[StudentPerformance]
    reference_vs_baseline: float | None  # the reference solution's fraction of the library, median over runs
    reference_rate: float | None
    baseline_rate: float | None
    unit: str = "GFLOP/s"
    baseline_name: str = "cuBLAS"
    plot: str = ""

    @property
    def scored(self) -> list[StudentPerformance]:
        return [s for s in self.students if s.counts]

    @property
    def unscored(self) -> list[StudentPerformance]:
        """Timed, but the kernel fails its correctness checks: its speed does not count."""
        return [s for s in self.students if s.timed and not s.counts]

    @property
    def untimed(self) -> list[StudentPerformance]:
        return [s for s in self.students if not s.timed and not s.counts]

    @property
    def median_vs_baseline(self) -> float | None:
        scored = self.scored
        return statistics.median(s.vs_baseline for s in scored) if scored else None


@dataclass
class Overview:
    total: int
    students: int
    statuses: list[StatusCount]
    notebooks: list[NotebookView]
    performance: list[PerformanceView]
    performance_pending: list[Link]  # notebooks whose performance waits for a GPU run
    pending_points: float  # over the class
    provisional_notebooks: int  # notebooks with at least one provisional verdict
    devices: list[str]
    sandboxes: Counter
    score_plot: str = ""
    late: list[Link] = field(default_factory=list)  # late notebooks, with their penalty
    untimed: list[Link] = field(default_factory=list)  # due, submitted, without a usable submission time
    late_points: float = 0.0  # taken off over the class
    similarity_page: str = ""  # the page of similar submissions, relative to the index ("" when not written)

    @property
    def problems(self) -> int:
        return sum(s.count for s in self.statuses if s.problem)

    @property
    def missing(self) -> int:
        return sum(s.count for s in self.statuses if s.status == results.MISSING)


def _statuses(all_results: list[NotebookResult], link: Callable[[NotebookResult], str]) -> list[StatusCount]:
    by_status: dict[str, list[NotebookResult]] = defaultdict(list)
    for result in all_results:
        by_status[result.status].append(result)
    order = list(KNOWN_STATUSES) + sorted(set(by_status) - set(KNOWN_STATUSES))
    counts = []
    for status in order:
        mine = by_status.get(status, [])
        links = [Link(f"{student_label(r)}: {notebook_key(r)}", link(r), _short(_summary(r))) for r in mine]
        counts.append(StatusCount(status, STATUS_LABELS.get(status, status), len(mine), links))
    return counts


def _summary(result: NotebookResult) -> str:
    summary = getattr(result, "summary", None)
    return summary if isinstance(summary, str) else result.message


def _late_note(result: NotebookResult) -> str:
    """The points a late notebook lost and why; nothing about points when none were taken off."""
    if result.late_penalty > 0:
        return "; ".join(part for part in (f"-{result.late_penalty:g} points", result.late_note) if part)
    return result.late_note or "late; no points taken off"


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _item_rates(mine: list[NotebookResult]) -> list[ItemRate]:
    rates: dict[str, ItemRate] = {}
    for result in mine:
        for item in items_of(result):
            rate = rates.setdefault(item.item, ItemRate(item.item, item.kind, item.max_score))
            rate.counts[item.status] += 1
            rate.provisional += bool(item.provisional)
            rate.points += item.score or 0.0
    return list(rates.values())


def _pass_rate_plot(key: str, rates: list[ItemRate]) -> str:
    shown = [r for r in rates if r.rate is not None]
    if not shown:
        return ""
    figure = pass_rates([r.item for r in shown], [r.rate for r in shown],
                        [f"{r.passed}/{r.decided}" for r in shown], [r.provisional > 0 for r in shown],
                        title=f"{key}: students with full marks, per graded item")
    return png(figure)


def _performance(all_results: list[NotebookResult], link: Callable[[NotebookResult], str]) -> list[PerformanceView]:
    grouped: dict[tuple[str, str], list[tuple[NotebookResult, list[dict[str, Any]]]]] = defaultdict(list)
    for result in all_results:
        by_spec: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in result.perf_rows:
            by_spec[str(row.get("spec", "?"))].append(row)
        for spec, rows in by_spec.items():
            grouped[(notebook_key(result), spec)].append((result, rows))
    views = []
    for (key, spec), entries in sorted(grouped.items()):
        students, reference_fractions, reference_rate, baseline_rate = [], [], [], []
        for result, rows in entries:
            student = [float(r.get("student_rate") or 0.0) for r in rows]
            baseline = [float(r.get("baseline_rate") or 0.0) for r in rows]
            reference = [float(r.get("reference_rate") or 0.0) for r in rows]
            vs_baseline = geometric_mean([s / b if b else 0.0 for s, b in zip(student, baseline, strict=True)])
            vs_reference = geometric_mean([s / r if r else 0.0 for s, r in zip(student, reference, strict=True)])
            if all(reference) and all(baseline):
                reference_fractions.append(geometric_mean([r / b for r, b in zip(reference, baseline, strict=True)]))
                reference_rate.append(geometric_mean(reference))
            if all(baseline):
                baseline_rate.append(geometric_mean(baseline))
            counts = any(i.kind == results.PERFORMANCE and i.measured for i in result.items)
            note = next((str(r["error"]) for r in rows if r.get("error")), "")
            students.append(StudentPerformance(student_label(result), link(result), vs_baseline, vs_reference,
                                               geometric_mean(student), counts, any(v > 0 for v in student),
                                               _short(note, 140)))
        view = PerformanceView(
            key, spec, sorted({r.device for r, _ in entries}), students,
            statistics.median(reference_fractions) if reference_fractions else None,
            statistics.median(reference_rate) if reference_rate else None,
            statistics.median(baseline_rate) if baseline_rate else None,
            str(entries[0][1][0].get("unit", "GFLOP/s")), str(entries[0][1][0].get("baseline_name", "cuBLAS")))
        lines = {f"{view.baseline_name} (library)": 1.0}
        if view.reference_vs_baseline:
            lines = {"reference solution": view.reference_vs_baseline, **lines}
        scored = [s for s in students if s.counts]
        title = (f"{spec}: each kernel that passes the correctness checks" if scored else
                 f"{spec}: every timed kernel (none passes the correctness checks)")
        shown = scored or students
        xlabel = f"fraction of {view.baseline_name} (geometric mean over the benchmark shapes)"
        figure = class_performance([s.student for s in shown], [s.vs_baseline for s in shown], lines, title=title,
                                   xlabel=xlabel)
        view.plot = png(figure)
        views.append(view)
    return views


def build(all_results: list[NotebookResult], link: Callable[[NotebookResult], str],
          similarity_page: str = "") -> Overview:
    """The overview of a class; ``link`` gives a result's feedback page, relative to the index, and
    ``similarity_page`` the page of similar submissions (grader/report/similarity.py), when it was written."""
    by_notebook: dict[str, list[NotebookResult]] = defaultdict(list)
    for result in all_results:
        by_notebook[notebook_key(result)].append(result)
    notebooks, pending_total = [], 0.0
    for key in sorted(by_notebook):
        mine = by_notebook[key]
        fractions, finals, maximum, pending = [], [], 0.0, 0.0
        for result in mine:
            items: list[ItemResult] = items_of(result)
            total = sum(i.max_score for i in items)
            maximum = max(maximum, total)
            waiting = sum(i.max_score for i in items if i.score is None)
            pending, pending_total = max(pending, waiting), pending_total + waiting
            if result.status == results.MISSING:  # nothing submitted: not a score of 0
                continue
            raw = sum(i.score or 0.0 for i in items)
            fractions.append(raw / total if total else 0.0)
            finals.append(max(0.0, raw - result.late_penalty) / total if total else 0.0)
        submitted = [r for r in mine if r.status != results.MISSING]
        missing = len(mine) - len(submitted)
        nobody = not submitted
        rates = _item_rates(submitted or mine)  # pass rates among the submitters; listed as missing when none
        notebooks.append(NotebookView(key, len(mine) - missing, maximum, fractions, rates, pending,
                                      "" if nobody else _pass_rate_plot(key, rates), nobody, missing, finals))
    score_plot = ""
    plotted = {n.key: n.final_fractions for n in notebooks if n.final_fractions}
    if plotted:
        title = ("Final scores, after late penalties (submitted notebooks only)"
                 if any(r.late_penalty for r in all_results) else
                 "Scores (no late penalties: final = raw; submitted notebooks only)")
        score_plot = png(score_distribution(plotted, title=title))
    performance = _performance(all_results, link)
    measured = {v.notebook for v in performance}
    waiting = [Link(key, "#notebook-" + key.replace("/", "-")) for key in sorted(by_notebook)
               if key not in measured and any(i.kind == results.PERFORMANCE and i.status == results.PENDING
                                              for r in by_notebook[key] for i in items_of(r))]
    return Overview(
        total=len(all_results),
        students=len({getattr(r, "student_id", "") or r.student for r in all_results}),
        statuses=_statuses(all_results, link), notebooks=notebooks, performance=performance,
        performance_pending=waiting, pending_points=pending_total,
        provisional_notebooks=sum(any(i.provisional for i in r.items) for r in all_results),
        devices=sorted({r.device for r in all_results if r.device}),
        sandboxes=Counter(r.sandbox or "unknown" for r in all_results), score_plot=score_plot,
        late=[Link(f"{student_label(r)}: {notebook_key(r)}", link(r), _late_note(r))
              for r in all_results if r.late_status == LATE],
        untimed=[Link(f"{student_label(r)}: {notebook_key(r)}", link(r), r.late_note)
                 for r in all_results if r.late_status == NO_TIME],
        late_points=sum(r.late_penalty for r in all_results), similarity_page=similarity_page)
