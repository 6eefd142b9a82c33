"""A notebook's stages in a graded OUT's schedule.json timeline: its label there, the holds of its GPU, and its judge's
span split into what it waited for, its hand-over and its start-up (what bench/pipeline_simulation.py's jobs are
built from)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.graded_results import Record

REFERENCE = "reference "  # the label the grader gives a reference solution's stages ("reference <notebook>")


def label(record: Record) -> str:
    """The notebook's label in schedule.json's timeline (the submission's key)."""
    return f"{record.student}/{record.notebook}"


def timeline_spans(schedule: dict[str, Any] | None) -> dict[str, dict[str, tuple[float, float, str | None]]]:
    """label -> stage -> (start, end, gpu) from schedule.json's timeline (empty without one)."""
    found: dict[str, dict[str, tuple[float, float, str | None]]] = {}
    for event in ((schedule or {}).get("timeline") or {}).get("stages") or []:
        gpu = event.get("gpu")
        found.setdefault(event["label"], {})[event["stage"]] = (float(event["start"]), float(event["end"]),
                                                                None if gpu is None else str(gpu))
    return found


def _holds(schedule: dict[str, Any] | None, gpu: str | None) -> list[tuple[float, float]]:
    return [(h["start"], h["end"]) for h in ((schedule or {}).get("timeline") or {}).get("holds") or []
            if str(h["gpu"]) == gpu]


def held_during(schedule: dict[str, Any] | None, gpu: str | None, start: float, end: float) -> float:
    """Seconds ``gpu`` was held alone between ``start`` and ``end`` (schedule.json's holds)."""
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in _holds(schedule, gpu))


@dataclass(frozen=True)
class JudgeSplit:
    """A judge's span in the timeline, split: before the judge process's own timing ("judge") began, the others'
    holds it waited through (``waited``), the hand-over from the last of them (``handover``: from that hold's end
    to its timing's start) and the rest, its start-up (``start``, CPU only)."""

    start: float
    waited: float
    handover: float


def judge_split(record: Record, schedule: dict[str, Any] | None) -> JudgeSplit | None:
    """``JudgeSplit`` of one result's judge, None where the timeline has no span of it or the result no "judge".
    The others' holds before its timing are all counted as waited through (its start-up may have run beside
    some of them): ``start`` is a lower bound."""
    span = timeline_spans(schedule).get(label(record), {}).get("judge")
    if span is None or "judge" not in record.timings:
        return None
    begin, end, gpu = span
    timed = max(begin, end - record.timings["judge"])
    waited = held_during(schedule, gpu, begin, timed)
    ended = [b for a, b in _holds(schedule, gpu) if begin < b <= timed]
    handover = timed - max(ended) if ended else 0.0
    return JudgeSplit(max(0.0, timed - begin - waited - handover), waited, handover)


def judge_splits(records: Sequence[Record], schedule: dict[str, Any] | None) -> dict[str, JudgeSplit]:
    """label -> ``judge_split`` for every result the timeline has a judge of."""
    return {label(r): split for r in records if (split := judge_split(r, schedule)) is not None}


def judge_prep(record: Record, handover: float = 0.0) -> float:
    """A judge's GPU work before its hold: its "judge" less its gpu_exclusive and gpu_wait (0 without them), and
    the hand-over it waited before its timing began."""
    if "gpu_exclusive" not in record.timings:
        return handover
    return handover + max(0.0, record.timings.get("judge", 0.0) - record.timings["gpu_exclusive"]
                          - record.timings.get("gpu_wait", 0.0))


def judge_hold(record: Record) -> float:
    """A judge's hold: gpu_exclusive, or where it was not recorded the judge's whole time (an upper bound)."""
    return record.timings.get("gpu_exclusive", record.timings.get("judge", 0.0))
