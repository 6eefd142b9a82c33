"""Each notebook's grading table says what its spec grades: a threshold's row states the spec's points and, where it
states bands at all, the spec's levels ("the same steps": the row above's). Written by hand, the tables drifted."""

from __future__ import annotations

import re

import nbformat
import pytest

from course import spec as specs
from grader.intake.layout import course_notebooks

ROW = re.compile(r"^\|\s*`(?P<name>[a-z_0-9]+)`\s*\|(?P<text>.*)\|\s*(?P<points>[0-9.]+)\s*\|\s*$")
TIMED = [nb for nb in course_notebooks() if any(s.thresholds for s in specs.for_notebook(nb.key))]


def _rows(notebook) -> list[tuple[str, str, float]]:
    cells = nbformat.read(str(notebook.solution_path), as_version=4).cells
    lines = [line for cell in cells if cell.cell_type == "markdown" for line in cell.source.splitlines()]
    return [(m["name"], m["text"], float(m["points"])) for line in lines if (m := ROW.match(line.strip()))]


def test_the_tables_state_most_thresholds_bands():  # the check above is not vacuous
    stated = [text for nb in TIMED for name, text, _ in _rows(nb) if _stated_levels(text, "vs_baseline")]
    assert len(stated) >= 10


def _stated_levels(text: str, kind: str) -> list[float] | None:
    """The band levels a row's text states (fractions for a ratio, the number for an absolute floor), or None."""
    if kind == "absolute":
        found = re.findall(r"at least ([0-9][0-9,.]*)", text)
        return [float(f.replace(",", "")) for f in found] or None
    found = re.findall(r"([0-9]+(?:\.[0-9]+)?)%", text)
    return [float(f) / 100 for f in found] or None


@pytest.mark.parametrize("notebook", TIMED, ids=lambda nb: nb.key)
def test_each_threshold_row_states_the_specs_points_and_bands(notebook):
    thresholds = {t.name: t for s in specs.for_notebook(notebook.key) for t in s.thresholds}
    rows = [row for row in _rows(notebook) if row[0] in thresholds]
    if not rows:
        pytest.skip(f"{notebook.key} has no grading table (nothing it states can drift): NOT CHECKED")
    assert {name for name, _, _ in rows} == set(thresholds), f"{notebook.key}: a threshold without a table row"
    previous = None
    for name, text, points in rows:
        threshold = thresholds[name]
        assert points == threshold.points, f"{notebook.key} {name}: the table gives {points} points"
        levels = [level for level, _ in threshold.bands]
        stated = _stated_levels(text, threshold.kind)
        if stated is not None:
            assert stated == pytest.approx(levels), f"{notebook.key} {name}: the table says {stated}, the spec " \
                                                    f"grades {levels}"
        elif "the same steps" in text:
            assert previous is not None and levels == [level for level, _ in previous.bands], \
                f"{notebook.key} {name}: 'the same steps' as the row above, but the spec grades {levels}"
        previous = threshold
