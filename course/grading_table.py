"""A notebook's grading table, declared beside its specs: the one source of its rows and of every cell's points.

Each graded notebook's spec module declares one ``GradingTable``: rows of grade cells with their points (``Cells``)
and rows of performance items (``Speed``), whose points and steps come from the spec's thresholds. The course's
release step writes the table into the notebook's "How it is graded" section and every grade cell's ``points:`` from it
(``apply``), so neither is edited by hand; a test fails where a solution notebook differs from what it writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from course import spec as specs

HEADER = ("| item | what is checked | points |", "|---|---|---|")


@dataclass(frozen=True)
class Cells:
    """A row for grade cells worth points of their own (correctness checks, answers): grade id -> points."""

    item: str
    checked: str
    points: dict[str, float]

    def cells(self) -> dict[str, float]:
        return dict(self.points)

    def line(self, previous: specs.Threshold | None) -> str:
        return f"| {self.item} | {self.checked} | {_number(sum(self.points.values()))} |"


@dataclass(frozen=True)
class Speed:
    """A row for one performance threshold, or the same threshold of several specs (its steps stated once)."""

    item: str
    checked: str  # what is compared, before the steps ("your speed / cuBLAS fp32 speed"); empty: the steps alone
    thresholds: tuple[tuple[specs.ExerciseSpec, str], ...]

    def __post_init__(self) -> None:
        bands = {threshold.bands for threshold in self._thresholds()}
        if len(bands) != 1:
            raise ValueError(f"the row {self.item!r} states one set of steps for thresholds that differ")

    def _thresholds(self) -> list[specs.Threshold]:
        return [spec.threshold(name) for spec, name in self.thresholds]

    def first(self) -> specs.Threshold:
        return self._thresholds()[0]

    def cells(self) -> dict[str, float]:
        return {spec.grade_id(spec.threshold(name)): spec.threshold(name).points for spec, name in self.thresholds}

    def line(self, previous: specs.Threshold | None) -> str:
        steps = self.first().steps_text(previous)
        checked = f"{self.checked}: {steps}" if self.checked else steps
        points = " + ".join(_number(t.points) for t in self._thresholds())
        return f"| {self.item} | {checked} | {points} |"


@dataclass(frozen=True)
class GradingTable:
    notebook: str  # "week1/day7_fast_matmul"
    rows: tuple[Cells | Speed, ...]

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for row in self.rows:
            twice = seen & set(row.cells())
            if twice:
                raise ValueError(f"{self.notebook}: grade cells {sorted(twice)} stand in two rows")
            seen |= set(row.cells())

    def points(self) -> dict[str, float]:
        """Grade id -> points, for every grade cell of the notebook."""
        return {grade_id: points for row in self.rows for grade_id, points in row.cells().items()}

    def lines(self) -> list[str]:
        lines, previous = list(HEADER), None
        for row in self.rows:
            lines.append(row.line(previous))
            previous = row.first() if isinstance(row, Speed) else previous
        return lines


_TABLES: dict[str, GradingTable] = {}


def register(table: GradingTable) -> GradingTable:
    if table.notebook in _TABLES and _TABLES[table.notebook] is not table:
        raise ValueError(f"two grading tables for {table.notebook}")
    _TABLES[table.notebook] = table
    return table


def for_notebook(key: str) -> GradingTable | None:
    """The table declared for a notebook ("week1/day7_fast_matmul"), or None where none is."""
    specs.all_specs()  # the spec modules declare the tables
    return _TABLES.get(key)


def _number(points: float) -> str:
    return f"{points:g}"


def _grade_cells(nb: Any) -> Iterator[Any]:
    return (cell for cell in nb.cells if cell.get("metadata", {}).get("nbgrader", {}).get("grade"))


def apply(nb: Any, table: GradingTable) -> list[str]:
    """Write ``table`` into notebook ``nb`` (a notebook node, changed in place): the markdown table under its header,
    and every grade cell's points. Returns what it changed, in words (empty: the notebook already said it)."""
    points = table.points()
    graded = {cell.metadata.nbgrader["grade_id"] for cell in _grade_cells(nb)}
    if graded != set(points):
        raise ValueError(f"{table.notebook}: the table's cells {sorted(set(points) - graded)} are not in the "
                         f"notebook, its grade cells {sorted(graded - set(points))} not in the table")
    changed = []
    for cell in _grade_cells(nb):
        grade_id = cell.metadata.nbgrader["grade_id"]
        if cell.metadata.nbgrader.get("points") != points[grade_id]:
            changed.append(f"{grade_id}: points {cell.metadata.nbgrader.get('points')} -> {points[grade_id]:g}")
            cell.metadata.nbgrader["points"] = int(points[grade_id]) if points[grade_id].is_integer() \
                else points[grade_id]
    def header(line: str) -> bool:  # the table's first line (this module's, or one a notebook had before it)
        return line.startswith("| item |") and line.rstrip().endswith("| points |")

    holders = [cell for cell in nb.cells if cell.cell_type == "markdown" and any(map(header, cell.source.split("\n")))]
    if len(holders) != 1:
        raise ValueError(f"{table.notebook}: {len(holders)} markdown cells hold a grading table ({HEADER[0]!r})")
    lines = holders[0].source.split("\n")
    start = next(i for i, line in enumerate(lines) if header(line))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    if lines[start:end] != table.lines():
        changed.append("the grading table")
        holders[0].source = "\n".join([*lines[:start], *table.lines(), *lines[end:]])
    return changed
