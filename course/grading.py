"""What a notebook's performance cells call: benchmark, show the table, and preview the points.

The notebook only measures and shows. The grader computes the points itself from the recorded
measurements (and the reference solution's, from the same run), so what these cells print is a
preview for the student, not the grade.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from course import bench, plot
from course.spec import ExerciseSpec, Shape, get

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def performance(spec_id: str | ExerciseSpec, fn: Callable[..., Any],
                shapes: Sequence[Shape] | None = None) -> bench.PerfReport:
    """Benchmark ``fn`` against the spec's library and print the table."""
    report = bench.measure(spec_id, fn, shapes)
    print(report.table())
    return report


def preview(report: bench.PerfReport, threshold_name: str) -> None:
    """Print what one performance item would earn from this run (the grader decides the grade)."""
    spec = get(report.spec_id)
    threshold = spec.threshold(threshold_name)
    if not report.measured:
        print(f"{threshold.name}: pending a GPU run ({report.not_measured}); {threshold.description}")
        return
    if threshold.kind == "vs_reference":
        print(f"{threshold.name}: measured by the grader against the reference solution; "
              f"{threshold.description}")
        return
    level = threshold.level(report.times())
    print(f"{threshold.name}: {threshold.shown(level, spec.library_name)} -> about {threshold.score(level):g} of "
          f"{threshold.points:g} points; {threshold.description}")


def plot_report(report: bench.PerfReport) -> Figure | None:
    """The rate of yours and the library's over the benchmark shapes (``None`` when nothing was measured)."""
    if not report.measured or not report.rows:
        return None
    spec = get(report.spec_id)
    labels = ["x".join(str(n) for n in row.shape) for row in report.rows]
    series = {"yours": [r.student_gflops for r in report.rows],
              spec.library_name: [r.library_gflops for r in report.rows]}
    return plot.gflops_vs_size(series, labels, f"{spec.title} on {report.device_name}", ylabel=spec.rate_unit)
