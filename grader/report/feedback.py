"""Feedback pages: one HTML page per student and notebook, and the class overview (index) for the TA.

Pages are static and self-contained: styles and plots (PNG) are inline, nothing is fetched from the
network. Everything a student wrote or printed is escaped (jinja's autoescape; the code goes through
nbconvert's own highlighting, which escapes it with Pygments).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup
from nbconvert.filters.highlight import Highlight2HTML
from pygments.formatters import HtmlFormatter

from course.plot import gflops_vs_size
from grader.report import overview, similarity
from grader.report.pages import page_path
from grader.report.tables import items_of
from grader.score import results
from grader.score.results import ItemResult, NotebookResult

_templates = jinja2.Environment(loader=jinja2.PackageLoader("grader", "templates"),
                                autoescape=jinja2.select_autoescape(["html"]), undefined=jinja2.StrictUndefined)
_highlight = Highlight2HTML(pygments_lexer="ipython3")
CODE_CSS = HtmlFormatter(style="default").get_style_defs(".highlight")
PLOT_CACHE = ".plot-cache"  # under OUT/feedback
_PLOT_VERSION = 2  # part of the plot cache's key: raise it when the plots change


def plots(perf_rows: list[dict[str, Any]], device: str) -> list[str]:
    """One rate plot (base64 PNG) per exercise: the student's kernel, the reference solution and the library."""
    by_spec: dict[str, list[dict]] = defaultdict(list)
    for row in perf_rows:
        by_spec[row["spec"]].append(row)
    pngs = []
    for spec_id, rows in sorted(by_spec.items()):
        labels = ["×".join(str(n) for n in row["shape"]) for row in rows]
        series = {"yours": [row["student_rate"] for row in rows],
                  "reference solution": [row["reference_rate"] for row in rows],
                  f"{rows[0]['baseline_name']} (library)": [row["baseline_rate"] for row in rows]}
        figure = gflops_vs_size(series, labels, f"{spec_id} on {device}", ylabel=rows[0]["unit"])
        pngs.append(overview.png(figure))
    return pngs


def _plot_cache_path(perf_rows: list[dict[str, Any]], device: str, cache: Path) -> Path:
    key = hashlib.sha256(json.dumps([_PLOT_VERSION, perf_rows, device], sort_keys=True,
                                    default=str).encode()).hexdigest()
    return cache / f"{key}.json"


def cached_plots(perf_rows: list[dict[str, Any]], device: str, cache: Path) -> list[str]:
    """``plots`` through a cache in OUT: matplotlib takes about 0.15 s a plot, and every grading run rewrites
    every page, so a class of thousands of notebooks measured on a GPU would otherwise redraw them all."""
    path = _plot_cache_path(perf_rows, device, cache)
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(found, list) and all(isinstance(png, str) for png in found):
            return found
    except (OSError, ValueError):
        pass
    drawn = plots(perf_rows, device)
    cache.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(drawn), encoding="utf-8")
    os.replace(temporary, path)
    return drawn


def _draw_into_cache(perf_rows: list[dict[str, Any]], device: str, cache: str) -> None:
    cached_plots(perf_rows, device, Path(cache))


class PlotsAhead:
    """Draws each measured notebook's plots into OUT's plot cache as its result comes in, in one low-priority
    process of its own, so the pages written at the end of a batch only read them: drawn there, a class's plots
    (about 0.25 s a notebook) would hold the report back for minutes while every GPU idles. A plot it did not
    draw (it failed, or came late) is drawn by ``write_pages`` as before."""

    def __init__(self, out: Path) -> None:
        self.cache = out / "feedback" / PLOT_CACHE
        self._pool: ProcessPoolExecutor | None = None
        self._broken = False

    def submit(self, result: NotebookResult) -> None:
        if not result.perf_rows or self._broken:
            return
        try:
            if self._pool is None:
                # spawn: the grader has threads (the scheduler's), which a forked child would inherit mid-state
                self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_drawer_starts)
            self._pool.submit(_draw_into_cache, result.perf_rows, result.device, str(self.cache))
        except (BrokenProcessPool, OSError, RuntimeError):  # drawing ahead only saves time: never stop grading
            self._broken = True

    def __enter__(self) -> PlotsAhead:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if self._pool is not None:  # a stopped grading waits only for the plot being drawn
            self._pool.shutdown(wait=True, cancel_futures=kind is not None)


def _drawer_starts() -> None:
    """The drawer runs at the lowest priority, and leaves a stop signal sent to its whole terminal or Slurm job to
    its grader, which ends it cleanly by cancelling its queue (killed mid-plot, it would leave a partial file)."""
    os.nice(19)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)


def _perf_table(result: NotebookResult) -> list[dict[str, Any]]:
    rows = []
    for row in result.perf_rows:
        student, baseline, reference = (float(row.get(k) or 0.0) for k in
                                        ("student_rate", "baseline_rate", "reference_rate"))
        rows.append({"spec": row.get("spec", ""), "unit": row.get("unit", ""),
                     "baseline_name": row.get("baseline_name", ""),
                     "shape": "×".join(str(n) for n in row.get("shape", [])),
                     "student": student, "reference": reference, "baseline": baseline,
                     "vs_baseline": student / baseline if baseline else None,
                     "vs_reference": student / reference if reference else None, "error": row.get("error") or ""})
    return rows


def _performance_state(result: NotebookResult, items: list[ItemResult]) -> tuple[str, str]:
    """("measured" | "pending" | "absent" | "none", why) for the page's performance section."""
    perf = [i for i in items if i.kind == results.PERFORMANCE]
    if result.perf_rows:
        return "measured", ""
    if any(i.status == results.PENDING for i in perf):
        return "pending", next(i.message for i in perf if i.status == results.PENDING)
    if perf:
        return "absent", next((i.message for i in perf if i.message), "the judge did not measure this notebook")
    return "none", ""


def highlight(source: str) -> Markup:
    """The code as nbconvert highlights it (Pygments, IPython lexer): every character of it escaped."""
    return Markup(_highlight(source))


def _totals(items: list[ItemResult]) -> dict[str, float]:
    return {"earned": sum(i.score or 0.0 for i in items),
            "graded_max": sum(i.max_score for i in items if i.score is not None),
            "pending": sum(i.max_score for i in items if i.score is None),
            "max_score": sum(i.max_score for i in items),
            "provisional_points": sum(i.max_score for i in items if i.provisional)}


def _failure(result: NotebookResult) -> dict[str, str] | None:
    """Where a notebook that did not finish stopped, and the end of its traceback (fields another grader
    version may not have: absent ones are left out)."""
    if result.status == results.OK:
        return None
    stopped_at = getattr(result, "stopped_at", "") or ""
    message = result.message.replace(f"; it stopped in {stopped_at}", "") if stopped_at else result.message
    return {"status": result.status, "label": overview.STATUS_LABELS.get(result.status, result.status),
            "message": message, "stopped_at": stopped_at,
            "failure_tail": getattr(result, "failure_tail", "") or "", "found": getattr(result, "found", "") or ""}


def render_page(result: NotebookResult, index_href: str = "../../index.html", pngs: list[str] | None = None) -> str:
    """The student's page; ``pngs``: its performance plots, when already drawn."""
    items = items_of(result)
    state, why = _performance_state(result, items)
    if state == "measured" and pngs is None:
        pngs = plots(result.perf_rows, result.device)
    return _templates.get_template("feedback.html").render(
        r=result, student=overview.student_label(result), items=items, totals=_totals(items),
        provisional=[i for i in items if i.provisional], failure=_failure(result),
        submitted_file=getattr(result, "submitted_file", "") or "", found=getattr(result, "found", "") or "",
        perf_state=state, perf_why=why, perf_rows=_perf_table(result), plots=pngs if state == "measured" else [],
        code=[{"id": c.get("id", ""), "html": highlight(c.get("source", ""))} for c in result.code],
        code_css=Markup(CODE_CSS), index_href=index_href, sandboxed=result.sandbox == "bubblewrap")


def _csv_links(out: Path) -> list[dict[str, str]]:
    from grader.report import tables

    files = [(getattr(tables, "GRADES_CSV", "grades.csv"), "one row per graded item"),
             (getattr(tables, "STUDENTS_CSV", "students.csv"), "one row per student"),
             (getattr(tables, "WIDE_CSV", ""), "one row per student, one column per notebook"),
             ("gradebook.db", "nbgrader's gradebook")]
    return [{"name": name, "what": what} for name, what in files if name and (out / name).exists()]


def write_pages(all_results: list[NotebookResult], out: Path, similar: bool = False) -> Path:
    """Write every feedback page and the index (the class overview); returns the index's path. ``similar``: also the
    similar-submissions page, for the TA's outputs only (it names pairs of students)."""
    rows = []
    index = out / "index.html"

    def link(result: NotebookResult) -> str:
        return quote(Path(os.path.relpath(page_path(out, result), out)).as_posix())

    cache = out / "feedback" / PLOT_CACHE
    for result in all_results:
        path = page_path(out, result)
        path.parent.mkdir(parents=True, exist_ok=True)
        index_href = Path(os.path.relpath(index, path.parent)).as_posix()
        pngs = cached_plots(result.perf_rows, result.device, cache) if result.perf_rows else []
        path.write_text(render_page(result, index_href, pngs), encoding="utf-8")
        items = items_of(result)
        perf = [i for i in items if i.kind == results.PERFORMANCE and i.measured]
        rows.append({"student": overview.student_label(result), "notebook": overview.notebook_key(result),
                     "status": result.status, **_totals(items), "device": result.device,
                     "sandbox": result.sandbox or "unknown", "link": link(result),
                     "late_status": result.late_status, "late_penalty": result.late_penalty,
                     "final": result.final_score, "late_note": result.late_note,
                     "measured": "; ".join(i.measured for i in perf),
                     "provisional": any(i.provisional for i in items)})
    rows.sort(key=lambda row: (row["student"].casefold(), row["notebook"]))
    view = overview.build(all_results, link, similarity.write_similarity_page(out, all_results).name if similar else "")
    index.write_text(_templates.get_template("index.html").render(rows=rows, o=view, files=_csv_links(out)),
                     encoding="utf-8")
    return index
