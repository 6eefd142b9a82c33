"""A graded OUT folder read back: one ``Record`` per graded notebook from OUT/results, and OUT/schedule.json."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MISSING = "missing"  # a result for a notebook nobody submitted: nothing ran, nothing to time


@dataclass(frozen=True)
class Record:
    """One graded notebook, as its result JSON says."""

    student: str  # the student id (the folder under OUT/results)
    notebook: str  # "<assignment>/<notebook>"
    status: str
    scores: dict[str, float | None]  # item -> points (None: pending)
    timings: dict[str, float]
    perf_rows: list[dict[str, Any]] = field(default_factory=list)
    device: str = ""  # the grading device's name, "CPU (Triton interpreter)" on a CPU
    run_seed: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.student, self.notebook


def read_results(out: Path, notebooks: Iterable[str] | None = None) -> list[Record]:
    """Every result under ``out/results`` for ``notebooks`` (all when None), missing notebooks left out."""
    wanted = set(notebooks) if notebooks is not None else None
    found = []
    for path in sorted((out / "results").glob("*/*/*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        notebook = f"{data['assignment']}/{data['notebook']}"
        if data["status"] == MISSING or (wanted is not None and notebook not in wanted):
            continue
        found.append(Record(data.get("student_id") or data["student"], notebook, data["status"],
                            {i["item"]: i["score"] for i in data.get("items", [])},
                            {k: float(v) for k, v in (data.get("timings") or {}).items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool)},
                            list(data.get("perf_rows") or []), str(data.get("device", "")),
                            data.get("run_seed")))
    return found


def read_schedule(out: Path) -> dict[str, Any] | None:
    """OUT/schedule.json as the grader wrote it, or None where it did not."""
    path = out / "schedule.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
