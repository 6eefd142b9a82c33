"""The class page (index.html) counts only submitted notebooks, names raw and final scores, and never says "-0 points".

The class is built here as stored results (no sandbox, no GPU): four students of Week 1 Day 7, one of whom
submitted nothing, one late with 20% taken off and one late with nothing to take off (a score of 0).
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import jinja2
import pytest

from grader.lms.term import LATE
from grader.report import feedback, overview
from grader.report.tables import expected_items
from grader.score import results
from grader.score.results import ItemResult, NotebookResult

ASSIGNMENT, NOTEBOOK = "week1", "day7_fast_matmul"
KEY = f"{ASSIGNMENT}/{NOTEBOOK}"


def _items(share: float) -> list[ItemResult]:
    """Every item of the notebook, ``share`` of each one's points earned."""
    return [ItemResult(grade_id, kind, points * share, points,
                       results.PASSED if share == 1 else results.PARTIAL if share else results.FAILED)
            for grade_id, kind, points in expected_items(ASSIGNMENT, NOTEBOOK)]


def _class() -> list[NotebookResult]:
    def result(student: str, status: str = results.OK, share: float = 0.0, **fields) -> NotebookResult:
        return NotebookResult(student, ASSIGNMENT, NOTEBOOK, status, items=_items(share), grader_version="test",
                              device="cpu", sandbox="bubblewrap", **fields)

    full = result("ada", share=1.0)
    late = result("bo", share=0.9, late_status=LATE, late_note="submitted 2 days late, 20% taken off")
    late.late_penalty = round(late.score * 0.2, 4)
    nothing_to_lose = result("cy", late_status=LATE, late_note="submitted 1 day late, 10% taken off")
    missing = result("dee", results.MISSING, message="no notebook was submitted")
    return [full, late, nothing_to_lose, missing]


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[list[NotebookResult], str]:
    out = tmp_path_factory.mktemp("class-page")
    all_results = _class()
    index = feedback.write_pages(all_results, out)
    return all_results, index.read_text(encoding="utf-8")


def _score_row(text: str) -> list[str]:
    table = text[text.index('id="score-table"'):]
    table = table[:table.index("</table>")]
    [row] = [r for r in re.findall(r"<tr>(.*?)</tr>", table, re.S) if KEY in r]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in cells]


def test_a_missing_notebook_is_not_a_submission_nor_a_score_of_zero(page):
    all_results, _ = page
    [view] = overview.build(all_results, lambda r: r.student).notebooks
    assert view.submissions == 3 and view.missing == 1
    assert len(view.fractions) == len(view.final_fractions) == 3  # dee's missing notebook is not drawn at 0%
    rates = {r.item: r for r in view.items}
    assert all(rate.decided == 3 for rate in rates.values())  # nor counted as failing every item


def test_the_score_table_names_raw_and_final_scores(page):
    all_results, text = page
    assert re.search(r"<th[^>]*>submitted</th>\s*<th[^>]*>missing</th>", text)
    for header in ("median raw", "median final", "mean raw", "mean final"):
        assert f">{header}</th>" in text
    cells = _score_row(text)
    assert cells[:3] == [KEY, "3", "1"], cells
    raw = [1.0, 0.9, 0.0]
    final = [1.0, 0.9 * 0.8, 0.0]
    assert cells[3:7] == ["90%", f"{100 * 0.72:.0f}%", f"{100 * sum(raw) / 3:.0f}%", f"{100 * sum(final) / 3:.0f}%"]
    assert "The plot shows final scores." in text and "raw score less the late penalty" in text
    assert 'alt="final score (after late penalties) per notebook, submitted notebooks only"' in text


def test_without_penalties_the_page_says_final_is_raw(tmp_path: Path):
    on_time = [r for r in _class() if r.late_status != LATE]
    text = feedback.write_pages(on_time, tmp_path).read_text(encoding="utf-8")
    assert "no late penalties here, so final = raw" in text


def test_the_late_list_says_no_minus_zero_points(page):
    all_results, text = page
    late = overview.build(all_results, lambda r: r.student).late
    notes = {link.label.split(":")[0]: link.note for link in late}
    assert notes["bo"].startswith(f"-{all_results[1].late_penalty:g} points; submitted 2 days late")
    assert notes["cy"] == "submitted 1 day late, 10% taken off"  # a score of 0 loses nothing: no points named
    assert "-0 points" not in text and "-0 points" not in "".join(notes.values())
    assert 'id="late-list"' in text and "bo: week1/day7_fast_matmul" in text


def test_the_similarity_page_is_linked_when_written(page):
    all_results, text = page
    assert 'id="similarity-link"' not in text  # not written: no link to a page that is not there
    view = overview.build(all_results, lambda r: r.student, similarity_page="similarity.html")
    environment = jinja2.Environment(loader=jinja2.PackageLoader("grader", "templates"), autoescape=True,
                                     undefined=jinja2.StrictUndefined)
    linked = environment.get_template("index.html").render(o=view, rows=[], files=[])
    assert '<a id="similarity-link" href="similarity.html">Similar submissions</a>' in linked
