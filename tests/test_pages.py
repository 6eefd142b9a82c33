"""The feedback pages and the class overview as a person sees them, in a real headless browser.

The demo class is graded once on the CPU, through the sandboxed pipeline, and its pages are opened in
chromium; a small class with GPU-shaped results (performance measured, a timeout, a missing notebook,
hostile student output) checks what a CPU run cannot show. A copy of each page gets a probe script
that, after the page has loaded, writes what the browser sees (images decoded, table rows, widths,
the visible text) into the DOM, which ``--dump-dom`` returns. Without chromium, or without bubblewrap
for the demo class, those tests are skipped and reported as NOT RUN, never passed.
"""

from __future__ import annotations

import copy
import html
import io
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import unquote

import pytest

from grader.authoring import demo
from grader.report import feedback, overview
from grader.report.tables import expected_items, items_of
from grader.report.terminal import _Progress
from grader.score import results
from grader.score.results import ItemResult, NotebookResult
from grader.wall import sandbox

# Debian's chromium; on GitHub's Ubuntu 24.04 images, the image's own Chromium (Ubuntu ships it only as a snap).
CHROMIUM = next((path for path in (shutil.which("chromium"), "/usr/bin/chromium", shutil.which("chromium-browser"),
                                   shutil.which("google-chrome")) if path and os.path.exists(path)), None)
needs_browser = pytest.mark.skipif(
    CHROMIUM is None, reason="NOT RUN, not counted as passed: no chromium (apt-get install chromium; .ci/run does)")
SANDBOX_REASON = sandbox.unavailable_reason()
WIDTH, HEIGHT = 1280, 900  # a laptop's window
ASSIGNMENT, NOTEBOOK = "week1", "day7_fast_matmul"
HOSTILE = '</pre></code><script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'
_PROBE = """<script id="probe">
window.addEventListener("load", () => {
  const box = (e) => e.getBoundingClientRect();
  const report = {
    title: document.title,
    text: document.body.innerText,
    images: [...document.images].map(i => ({alt: i.alt, plot: i.dataset.plot || "", src: i.src.slice(0, 22),
      loaded: i.complete && i.naturalWidth > 0, width: i.naturalWidth, shown: box(i).width})),
    tables: Object.fromEntries([...document.querySelectorAll("table[id]")].map(t => [t.id,
      [...t.querySelectorAll("tbody tr")].map(r => ({kind: r.className,
                                                    cells: [...r.cells].map(c => c.innerText.trim())}))])),
    messages: [...document.querySelectorAll("pre.message")].map(p => box(p).width),
    highlighted: document.querySelectorAll(".code-cell .highlight pre span[class]").length,
    codeCells: document.querySelectorAll(".code-cell").length,
    scripts: [...document.scripts].filter(s => s.id !== "probe").length,
    handlers: document.querySelectorAll("[onerror], [onload], [onclick]").length,
    links: [...document.querySelectorAll("a[href]")].map(a => a.getAttribute("href")),
    ids: [...document.querySelectorAll("[id]")].map(e => e.id),
    scrollWidth: document.documentElement.scrollWidth, viewport: window.innerWidth,
    height: document.documentElement.scrollHeight,
  };
  const out = document.createElement("pre");
  out.id = "probe-report";
  out.textContent = JSON.stringify(report);
  document.body.appendChild(out);
});
</script>"""


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def look(page: Path, width: int = WIDTH, height: int = HEIGHT) -> dict:
    """What chromium shows of ``page`` once loaded: the probe's report."""
    probe = page.with_name(page.stem + ".probe.html")  # beside the page, so relative links resolve the same
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    try:
        done = _chromium(f"--window-size={width},{height}", "--virtual-time-budget=5000", "--dump-dom",
                         probe.as_uri(), profile=page.parent / ".chromium-profile")
    finally:
        probe.unlink()
    found = re.search(r'<pre id="probe-report">(.*?)</pre>', done.stdout, re.S)
    assert found, f"chromium returned no report for {page} (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def screenshot(page: Path, target: Path, width: int = WIDTH, height: int | None = None) -> Path:
    """A PNG of ``page`` as chromium draws it, the whole page's height unless given."""
    height = height or min(look(page, width)["height"], 16000)
    _chromium(f"--window-size={width},{height}", "--virtual-time-budget=5000", f"--screenshot={target}",
              page.as_uri(), profile=page.parent / ".chromium-profile")
    assert target.read_bytes().startswith(b"\x89PNG"), f"no screenshot of {page}"
    return target


def _rows(view: dict, table: str, kind: str | None = None) -> list[list[str]]:
    """The cells of each body row of table #``table`` (only rows of class ``kind`` when given)."""
    assert table in view["tables"], f"no table #{table}; tables: {sorted(view['tables'])}"
    return [row["cells"] for row in view["tables"][table] if kind is None or row["kind"] == kind]


def _assert_images_fine(view: dict) -> None:
    broken = [i for i in view["images"] if not i["loaded"]]
    assert not broken, f"broken images: {broken}"
    assert all(i["src"].startswith("data:image/png") for i in view["images"]), "an image is not inline"
    assert all(i["shown"] >= 300 for i in view["images"]), f"a plot is drawn too small: {view['images']}"


def _assert_fits(view: dict) -> None:
    assert view["scrollWidth"] <= view["viewport"] + 1, "the page scrolls sideways at a normal width"


def _assert_static(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    external = re.findall(r'(?:src|href)\s*=\s*["\']?\s*(?:https?:)?//[^"\' >]*', text, re.I)
    assert not external, f"{page} fetches from the network: {external[:3]}"
    assert "<script" not in text.lower(), f"{page} has a script"


# ---------------------------------------------------------------------------------------------------------
# The demo class, graded once on the CPU through the sandboxed pipeline.

@pytest.fixture(scope="module")
def demo_class(tmp_path_factory):
    if SANDBOX_REASON is not None:
        pytest.skip(f"NOT RUN, not counted as passed: the sandbox cannot run here ({SANDBOX_REASON})")
    from grader.flow.settings import Settings, resolve_device
    from grader.pipeline import grade

    root, out = tmp_path_factory.mktemp("demo-class"), tmp_path_factory.mktemp("demo-pages")
    demo.build(root, keys={"week1/day7_fast_matmul"})  # the pages of one notebook's class; the others are missing
    device, name = resolve_device("cpu")
    stream, logged = io.StringIO(), []
    progress = _Progress(stream)
    started = time.monotonic()
    all_results = grade(root, out, Settings(device=device, device_name=name, runs=2), log=logged.append,
                        progress=progress)
    progress.close()
    index = feedback.write_pages(all_results, out)
    return {"out": out, "index": index, "results": all_results, "progress": stream.getvalue(),
            "seconds": time.monotonic() - started}


def test_grading_shows_progress_with_the_time_left(demo_class):
    lines = [line for line in demo_class["progress"].splitlines() if line.strip()]
    total = len(demo_class["results"])
    assert len(lines) == total, demo_class["progress"]
    assert lines[-1].startswith(f"{total}/{total} ") and all(" left)" in line for line in lines)
    assert re.search(r"about \d\d:\d\d left", lines[0]), lines[0]


def test_every_page_is_static_and_self_contained(demo_class):
    pages = [demo_class["index"], *sorted((demo_class["out"] / "feedback").rglob("*.html"))]
    assert len(pages) == 1 + len(demo_class["results"])
    for page in pages:
        _assert_static(page)


@needs_browser
def test_the_overview_in_a_browser(demo_class):
    view = look(demo_class["index"])
    _assert_images_fine(view)
    _assert_fits(view)
    plots = [i["plot"] for i in view["images"]]
    # One pass-rate plot per notebook that someone submitted: Day 7's (the others say that nobody did).
    submitted = {(r.assignment, r.notebook) for r in demo_class["results"] if r.status != results.MISSING}
    assert plots.count("scores") == 1 and plots.count("pass-rates") == len(submitted) == 1, plots
    notebooks = {(r.assignment, r.notebook) for r in demo_class["results"]}
    nobody = notebooks - submitted
    assert demo_class["index"].read_text(encoding="utf-8").count("Nobody submitted this notebook") == len(nobody) > 0
    statuses = {row[0].split(" (")[0]: row for row in _rows(view, "status-table")}
    assert statuses["ok"][1] == "5" and statuses["kernel died"][1] == "1", statuses
    assert "crashes: week1/day7_fast_matmul" in statuses["kernel died"][2]
    for name in ("timeout", "corrupt file"):
        assert statuses[name][1] == "0"
    # The demo students submitted Day 7 alone: every other Week 1 notebook is missing, and counted.
    missing = sum(r.status == results.MISSING for r in demo_class["results"])
    assert missing and statuses["missing"][1] == str(missing)
    every = _rows(view, "all-table")
    assert sorted(row[0] for row in every) == sorted(r.student for r in demo_class["results"])
    assert all(row[1].startswith("week1/day") and row[2] and " / " in row[3] for row in every)
    scores = _rows(view, "score-table")
    # submitted, missing, median raw and final, mean raw and final (no term file: final = raw), points, pending
    assert ["week1/day7_fast_matmul", "6", "0", "0%", "0%", "20%", "20%", "14", "5"] in scores, scores
    assert len(scores) == len(notebooks)
    assert "Pending a GPU run" in view["text"] and "performance-pending" in view["ids"]
    for link in view["links"]:
        if not link.startswith("#"):
            assert (demo_class["out"] / unquote(link)).is_file(), f"the overview links to a missing file: {link}"


@needs_browser
def test_each_student_page_in_a_browser(demo_class):
    for result in (r for r in demo_class["results"] if r.status != results.MISSING):
        page = feedback.page_path(demo_class["out"], result)
        view = look(page)
        _assert_images_fine(view)
        _assert_fits(view)
        items = items_of(result)
        rows = _rows(view, "items")
        assert len(rows) == 2 * len(items), f"{page}: {len(rows)} rows for {len(items)} items"
        assert len(_rows(view, "items", "item-row")) == len(_rows(view, "items", "message-row")) == len(items)
        for item_row, message_row, item in zip(rows[::2], rows[1::2], items, strict=True):
            assert item_row[0] == item.item and item_row[3], item_row  # the verdict is filled
            assert message_row[0], f"{item.item}: empty message cell"
        assert view["messages"] and min(view["messages"]) >= 700, f"messages squeezed: {view['messages']}"
        assert view["codeCells"] == len(result.code), "a code cell is missing"
        if result.code:  # a missing notebook has no code to show
            assert view["highlighted"] > 20, "code is not highlighted"
        assert "Pending a GPU run" in view["text"] and "performance-pending" in view["ids"]
        assert "bubblewrap" in view["text"] and "sandbox" in view["ids"]
        assert ("provisional" in view["ids"]) == any(i.provisional for i in items)
        assert ("failure" in view["ids"]) == (result.status != results.OK)
        if result.status != results.OK:
            assert overview.STATUS_LABELS.get(result.status, result.status) in view["text"]
            for shown in (getattr(result, "stopped_at", ""), getattr(result, "failure_tail", "")):
                assert " ".join(shown.split()) in " ".join(view["text"].split())
        back = [link for link in view["links"] if link.endswith("index.html")]
        assert back and (page.parent / back[0]).resolve() == demo_class["index"].resolve()


@needs_browser
def test_overview_screenshot(demo_class, tmp_path):
    """Chromium draws the overview: a full-page PNG with the plots in it, not a blank page.
    (docs/overview.png, in the README, is such a screenshot of the demo class graded on an H100.)"""
    from PIL import Image

    shot = screenshot(demo_class["index"], tmp_path / "overview.png")
    with Image.open(shot) as image:
        assert image.width == WIDTH and image.height > 2 * HEIGHT
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 20) or []) > 200  # text, tables and plots


# ---------------------------------------------------------------------------------------------------------
# A small class as a GPU run leaves it (built here: no GPU or sandbox needed).

GPU = "NVIDIA H100 80GB HBM3"
SHAPES = ([1024, 1024, 1024], [2048, 2048, 2048], [4096, 4096, 4096], [3000, 2000, 1500])


def _items(perf: dict[str, tuple[float, str]] | None, correct: bool = True) -> list[ItemResult]:
    found = []
    for grade_id, kind, points in expected_items(ASSIGNMENT, NOTEBOOK):
        if kind == results.PERFORMANCE:
            credit, measured = (perf or {}).get(grade_id, (0.0, ""))
            status = results.PASSED if credit >= 1 else results.PARTIAL if credit > 0 else results.FAILED
            found.append(ItemResult(grade_id, kind, points * credit, points, status,
                                    f"{measured}: {credit:.0%} of the points" if measured else
                                    "performance counts only for a kernel that passes every correctness check",
                                    measured=measured, threshold="fp32 (ieee)"))
        else:
            found.append(ItemResult(grade_id, kind, points if correct else 0.0, points,
                                    results.PASSED if correct else results.FAILED,
                                    "PASS M=512, N=512, K=512: relative error 1.1e-07 <= 1e-05" if correct else
                                    "FAIL M=1000, N=1030, K=515: relative error inf > 1e-05"))
    return found


def _rows_gpu(fraction: float) -> list[dict]:
    rows = []
    for shape, cublas in zip(SHAPES, (30400.0, 46919.0, 51297.0, 36526.0), strict=True):
        rows.append({"spec": "w1d7_matmul_fp32", "shape": shape, "error": None, "baseline_rate": cublas,
                     "unit": "GFLOP/s", "baseline_name": "cuBLAS",
                     "reference_rate": 0.9 * cublas, "student_rate": fraction * cublas})
    return rows


def _result(student: str, status: str = results.OK, **fields) -> NotebookResult:
    known = {k: v for k, v in fields.items() if k in NotebookResult.__dataclass_fields__}
    return NotebookResult(student, ASSIGNMENT, NOTEBOOK, status, grader_version="test", device=GPU,
                          sandbox="bubblewrap", run_seed=7, **known)


def _gpu_class() -> list[NotebookResult]:
    fast = _result("ada", items=_items({"perf_w1d7_matmul_fp32_floor": (1.0, "38236 GFLOP/s"),
                                        "perf_w1d7_matmul_fp32_vs_cublas": (1.0, "0.95 of the library baseline"),
                                        "perf_w1d7_matmul_fp32_vs_reference": (1.0, "1.05 of the reference")}),
                   perf_rows=_rows_gpu(0.95), submitted_file="week1/day7.ipynb",
                   found="graded week1/day7.ipynb: the only notebook in week1/ (renamed)",
                   code=[{"id": "matmul_kernel", "source": "@triton.jit\ndef k(x):\n    pass"}])
    slow = _result("bo", items=_items({"perf_w1d7_matmul_fp32_floor": (1.0, "8676 GFLOP/s"),
                                       "perf_w1d7_matmul_fp32_vs_cublas": (0.25, "0.25 of the library baseline")}),
                   perf_rows=_rows_gpu(0.2))
    untimed = {"error": "not timed: M=3000, N=2000, K=1500: recording failed: AcceleratorError: CUDA error: an illegal "
                        "memory access was encountered\nSearch for `cudaErrorIllegalAddress' in https://docs.nvidia.com"
                        "/cuda/cuda-runtime-api/group__CUDART__TYPES.html_an_unbroken_token_that_is_long_" + "x" * 80,
               "student_rate": 0.0}
    wrong = _result("cy", items=_items(None, correct=False), perf_rows=[*_rows_gpu(1.3)[:3],
                                                                         {**_rows_gpu(1.3)[3], **untimed}])
    stuck = _result("dee", results.TIMEOUT, message="a cell ran past its 600 s limit",
                    stopped_at="cell 'matmul_kernel' (cell 12 of 30 as the grader ran it)",
                    failure_tail="Traceback (most recent call last):\n  File \"<cell>\", line 3\nKeyboardInterrupt")
    missing = _result("eve", results.MISSING, message="no notebook was submitted")
    hostile = _result(HOSTILE[:40].replace("/", "_"), results.KERNEL_DIED, message=HOSTILE, stopped_at=HOSTILE,
                      failure_tail=HOSTILE, items=[ItemResult("test_flops_4096", results.CORRECTNESS, 0.0, 1.0,
                                                              results.FAILED, HOSTILE, measured=HOSTILE)],
                      code=[{"id": "answers", "source": HOSTILE}], integrity=[HOSTILE])
    hostile.student_id = "hostile"
    return [fast, slow, wrong, stuck, missing, hostile]


@pytest.fixture(scope="module")
def gpu_class(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-pages")
    all_results = _gpu_class()
    return {"out": out, "index": feedback.write_pages(all_results, out), "results": all_results}


def test_the_overview_counts_the_class():
    view = overview.build(_gpu_class(), lambda r: f"feedback/{r.student_id}.html")
    counts = {s.status: s.count for s in view.statuses}
    assert counts[results.OK] == 3 and counts[results.TIMEOUT] == 1 and counts[results.MISSING] == 1
    # what needs a TA: the timeout and the dead kernel; the missing notebook is counted apart
    assert counts[results.KERNEL_DIED] == 1 and view.problems == 2 and view.missing == 1
    [timeout] = [s for s in view.statuses if s.status == results.TIMEOUT]
    assert timeout.notebooks[0].href == "feedback/dee.html"
    [notebook] = view.notebooks
    rates = {r.item: r for r in notebook.items}
    # among the five who submitted: eve's missing notebook is not a failure of every item
    assert rates["test_matmul_visible"].passed == 2 and rates["test_matmul_visible"].decided == 5
    assert notebook.submissions == 5 and notebook.missing == 1 and len(notebook.fractions) == 5
    assert rates["perf_w1d7_matmul_fp32_vs_cublas"].counts[results.PARTIAL] == 1
    [perf] = view.performance
    assert [s.student for s in perf.scored] == ["ada", "bo"]  # cy's kernel is fast but wrong: not scored
    assert perf.reference_vs_baseline == pytest.approx(0.9) and perf.median_vs_baseline == pytest.approx(0.575)
    assert not view.performance_pending and notebook.plot and view.score_plot and perf.plot


def test_student_output_is_escaped_in_the_html(gpu_class):
    page = feedback.page_path(gpu_class["out"], gpu_class["results"][-1]).read_text(encoding="utf-8")
    assert "<script>" not in page and "onerror=\"" not in page and "<img src=x" not in page
    assert html.escape(HOSTILE, quote=False)[:30] in page or "&lt;/pre&gt;" in page
    _assert_static(feedback.page_path(gpu_class["out"], gpu_class["results"][-1]))
    _assert_static(gpu_class["index"])


@needs_browser
def test_gpu_pages_show_the_performance(gpu_class):
    fast = gpu_class["results"][0]
    view = look(feedback.page_path(gpu_class["out"], fast))
    _assert_images_fine(view)
    _assert_fits(view)
    table = _rows(view, "perf-table", "perf-row")
    assert len(table) == len(fast.perf_rows) and not _rows(view, "perf-table", "perf-note")
    for row in table:
        assert row[0] == "w1d7_matmul_fp32" and all(cell for cell in row[1:8]), row
        assert row[5] == "GFLOP/s (cuBLAS)"
        assert float(row[6]) == pytest.approx(0.95, abs=0.01) and float(row[7]) == pytest.approx(1.06, abs=0.01)
    assert [i["plot"] for i in view["images"]] == ["performance"]
    assert "Pending a GPU run" not in view["text"] and "provisional" not in view["ids"]
    if "found" in NotebookResult.__dataclass_fields__:
        assert "file graded: week1/day7.ipynb" in view["text"] and "(renamed)" in view["text"]
    index = look(gpu_class["index"])
    _assert_images_fine(index)
    assert [i["plot"] for i in index["images"]].count("performance") == 1
    assert "performance-pending" not in index["ids"]
    assert "38236 GFLOP/s" in index["text"]


@needs_browser
def test_a_shape_the_judge_could_not_time_is_explained_and_fits(gpu_class):
    wrong = gpu_class["results"][2]
    view = look(feedback.page_path(gpu_class["out"], wrong))
    _assert_images_fine(view)
    _assert_fits(view)
    rows = _rows(view, "perf-table", "perf-row")
    assert len(rows) == len(wrong.perf_rows) and rows[-1][2] == "—" and rows[-1][6] == "—"
    [note] = _rows(view, "perf-table", "perf-note")
    assert note[0].startswith("not timed: M=3000") and "cudaErrorIllegalAddress" in note[0]


@needs_browser
def test_a_failed_run_is_explained(gpu_class):
    stuck = gpu_class["results"][3]
    view = look(feedback.page_path(gpu_class["out"], stuck))
    assert "failure" in view["ids"] and "timeout" in view["text"]
    if "stopped_at" in NotebookResult.__dataclass_fields__:
        assert "stopped-at" in view["ids"] and "cell 'matmul_kernel' (cell 12 of 30" in view["text"]
        assert "failure-tail" in view["ids"] and "KeyboardInterrupt" in view["text"]
    missing = look(feedback.page_path(gpu_class["out"], gpu_class["results"][4]))
    assert "no notebook was submitted" in missing["text"] and "No code was graded." in missing["text"]


@needs_browser
def test_hostile_output_stays_text_in_the_browser(gpu_class):
    for page in (feedback.page_path(gpu_class["out"], gpu_class["results"][-1]), gpu_class["index"]):
        view = look(page)
        assert view["title"] != "pwned" and view["scripts"] == 0 and view["handlers"] == 0, page
        assert all(i["src"].startswith("data:image/png") for i in view["images"])
        assert HOSTILE in view["text"] or "<script>document.title=" in view["text"]


def test_pages_render_a_result_written_by_an_older_grader(tmp_path):
    """A stored result without the newer fields (student_id, stopped_at, ...) still gets its pages."""
    result = copy.deepcopy(_gpu_class()[3])
    data = {k: v for k, v in result.to_json().items()
            if k not in ("student_id", "stopped_at", "failure_tail", "found", "submitted_file")}
    old = NotebookResult.from_json(data)
    index = feedback.write_pages([old], tmp_path)
    assert "a cell ran past its 600 s limit" in feedback.page_path(tmp_path, old).read_text(encoding="utf-8")
    assert index.is_file()


def test_the_class_plots_render_and_check_their_input():
    from course import plot

    figures = [plot.score_distribution({"week1/day7": [0.0, 0.5, 1.0], "week2/day7": []}),
               plot.pass_rates(["a", "b"], [0.5, 1.0], ["1/2", "2/2"], [True, False]),
               plot.class_performance(["ada", "bo"], [0.95, 0.2], {"reference solution": 0.9, "cuBLAS": 1.0}, "t"),
               plot.class_performance([f"s{i}" for i in range(300)], [i / 300 for i in range(300)], {}, "many")]
    assert all(plot.to_png(f).startswith(b"\x89PNG") for f in figures)
    with pytest.raises(ValueError, match="2 items"):
        plot.pass_rates(["a", "b"], [0.5])
    with pytest.raises(ValueError, match="1 students"):
        plot.class_performance(["a"], [0.1, 0.2], {}, "t")
    with pytest.raises(ValueError, match="no notebooks"):
        plot.score_distribution({})



def test_plots_drawn_ahead_are_the_ones_the_pages_show_and_none_is_drawn_again(tmp_path, monkeypatch):
    measured = _gpu_class()[:3]
    broken = _result("zed", perf_rows=[{"spec": "x"}])  # rows no plot can be drawn from: the worker's draw raises
    with feedback.PlotsAhead(tmp_path) as ahead:  # in a process of its own, as results come in
        for result in [broken, *measured, _result("eve", results.MISSING)]:
            ahead.submit(result)
    cache = tmp_path / "feedback" / feedback.PLOT_CACHE
    # the measured three, drawn after broken's failure; nothing for the missing notebook
    assert len(list(cache.glob("*.json"))) == 3 and not list(cache.glob("*.tmp"))
    drawn_here = [feedback.plots(r.perf_rows, r.device) for r in measured]
    assert [feedback.cached_plots(r.perf_rows, r.device, cache) for r in measured] == drawn_here

    def no_drawing(*_):
        raise AssertionError("a plot drawn again at the end")

    monkeypatch.setattr(feedback, "plots", no_drawing)
    feedback.write_pages(measured, tmp_path)
    assert all(png in (tmp_path / "feedback" / "ada" / f"{ASSIGNMENT}-{NOTEBOOK}.html").read_text()
               for png in drawn_here[0])
    monkeypatch.undo()
    late = _result("fay", perf_rows=_rows_gpu(0.5))  # never drawn ahead: the pages draw it
    feedback.write_pages([late], tmp_path)
    assert "data:image/png;base64," in (tmp_path / "feedback" / "fay" / f"{ASSIGNMENT}-{NOTEBOOK}.html").read_text()


@needs_browser
def test_the_similarity_page_of_the_graded_demo_class(demo_class):
    """The similarity step on what the grader stored for the demo class: its sanitized notebooks, read back."""
    from grader.report import similarity

    page = similarity.write_similarity_page(demo_class["out"], demo_class["results"])
    _assert_static(page)
    view = look(page)
    _assert_fits(view)
    [day7] = _rows(view, "similarity-summary")  # the other notebooks are missing: nothing to compare
    assert day7[0] == "week1/day7_fast_matmul" and day7[1] == "5" and day7[2] == "10", day7
    assert day7[5] == "unchanged_stub"  # the stubs as released are nobody's own code
    assert "A list for a TA to read, never a penalty." in view["text"]
    for link in view["links"]:
        if not link.startswith("#"):
            assert (demo_class["out"] / unquote(link)).is_file(), f"the similarity page links to a missing file: {link}"
