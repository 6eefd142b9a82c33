"""Which configuration of an autotuned kernel the judge grades: the fastest, timed by the judge with the GPU alone.

A run autotunes while other runs share its GPU, so the configuration its benchmark picked depends on who else
ran (two copies of one notebook once read 0.939 and 1.002 of the reference in one class). The recorder keeps one
plan per candidate configuration (``course.recorder.export``: those the notebook's autotuner benchmarked, after its
own pruning, at most ``course.recorder.alone.JUDGED`` per autotuner, the run's fastest first). The judge, holding
the GPU alone, times every candidate the plan checks allow in the same rounds, and grades the fastest whose timed
outputs were right. The run's pick is only a hint: the order the candidates come in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ALTERNATIVES = 16  # read at most, whatever a run wrote (grader.build_kernels builds as many)
TIMING_SECONDS = (0.25, 2.0)  # the candidates' rounds: at least, at most, per graded shape


@dataclass(frozen=True)
class Alternative:
    config: str  # the configuration as the notebook's autotuner printed it
    run_picked: bool  # the one the run's own benchmark chose
    plan: dict[str, Any]


def alternatives(recorded: Any) -> list[Alternative]:
    """The recorded call's candidate configurations, each well formed (untrusted data: anything else is left out)."""
    found = recorded.get("alternatives") if isinstance(recorded, dict) else None
    if not isinstance(found, list):
        return []
    return [Alternative(str(a.get("config", "?"))[:300], a.get("run_picked") is True, a["plan"])
            for a in found[:ALTERNATIVES] if isinstance(a, dict) and isinstance(a.get("plan"), dict)]


def choose(recorded: Any, usable: Callable[[dict[str, Any]], bool],
           time_plans: Callable[[list[dict[str, Any]]], list[float | None]]) -> tuple[Any, dict[str, Any] | None]:
    """(the plan to grade, what the choice was; None where there was none to make).

    ``usable(plan)``: whether the plan passes the judge's checks and one replay with a right result at this shape.
    ``time_plans(plans)``: each plan's median ms with the GPU alone, or None where it failed or its output was wrong.
    Where no candidate could be timed, the run's own plan is graded (and fails or is timed as any plan).
    """
    candidates = alternatives(recorded)
    plan = recorded.get("plan") if isinstance(recorded, dict) else None
    if len(candidates) < 2:
        return plan, None
    allowed = [i for i, candidate in enumerate(candidates) if usable(candidate.plan)]
    times = time_plans([candidates[i].plan for i in allowed]) if allowed else []
    timed = {i: ms for i, ms in zip(allowed, times, strict=True) if ms is not None}
    note: dict[str, Any] = {
        "configs": [c.config for c in candidates],
        "times_ms": [round(timed[i], 4) if i in timed else None for i in range(len(candidates))],
        "run_picked": next((c.config for c in candidates if c.run_picked), None),
        "picked": None,
    }
    if not timed:
        return plan, note
    best = min(timed, key=lambda i: (timed[i], i))
    note["picked"] = candidates[best].config
    return candidates[best].plan, note
