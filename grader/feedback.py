"""Feedback pages: one HTML page per student and notebook, and an index for the TA."""

from __future__ import annotations

import base64
from collections import defaultdict
from pathlib import Path

import jinja2

from course.plot import gflops_vs_size, to_png
from grader.export import items_of
from grader.results import NotebookResult

_templates = jinja2.Environment(loader=jinja2.PackageLoader("grader", "templates"),
                                autoescape=jinja2.select_autoescape(["html"]))


def _plots(result: NotebookResult) -> list[str]:
    by_spec: dict[str, list[dict]] = defaultdict(list)
    for row in result.perf_rows:
        by_spec[row["spec"]].append(row)
    pngs = []
    for spec_id, rows in sorted(by_spec.items()):
        labels = ["×".join(str(n) for n in row["shape"]) for row in rows]
        series = {"yours": [row["student_gflops"] for row in rows],
                  "reference": [row["reference_gflops"] for row in rows],
                  "library": [row["baseline_gflops"] for row in rows]}
        figure = gflops_vs_size(series, labels, f"{spec_id} on {result.device}")
        pngs.append(base64.b64encode(to_png(figure)).decode("ascii"))
    return pngs


def page_path(out: Path, result: NotebookResult) -> Path:
    return out / "feedback" / result.student / f"{result.assignment}-{result.notebook}.html"


def write_pages(all_results: list[NotebookResult], out: Path) -> Path:
    """Write every feedback page and the index; returns the index's path."""
    page = _templates.get_template("feedback.html")
    rows = []
    for result in all_results:
        items = items_of(result)
        score = sum(i.score or 0.0 for i in items)
        max_score = sum(i.max_score for i in items)
        pending = sum(i.max_score for i in items if i.score is None)
        path = page_path(out, result)
        path.parent.mkdir(parents=True, exist_ok=True)
        html = page.render(r=result, items=items, score=score, max_score=max_score, pending=pending,
                           plots=_plots(result))
        path.write_text(html, encoding="utf-8")
        rows.append({"student": result.student, "notebook": f"{result.assignment}/{result.notebook}",
                     "status": result.status, "score": score, "max_score": max_score, "pending": pending,
                     "device": result.device, "sandbox": result.sandbox or "unknown",
                     "link": str(path.relative_to(out))})
    index = out / "index.html"
    index.write_text(_templates.get_template("index.html").render(rows=rows), encoding="utf-8")
    return index
