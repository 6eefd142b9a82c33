"""Pure functions behind ``bench/grading_throughput.py``: read two graded OUT folders, compare them, and
project the grading time of a class from the measured per-notebook stage times.

Nothing here runs the grader or touches a GPU; every function takes results (or their folder) and returns data.

The projection model (stated again in the script's output) is a discrete-event simulation of the grader's pipeline
(``bench.pipeline_simulation.simulate``; grader.flow.schedule and grader.gpu.gpu_gate), driven by the measured
stage times of each notebook:
- its run ("notebook": the sandbox's running seconds, frozen time left out) in one of ``runs`` slots, on the GPU
  with the fewest runs; a run is frozen while its GPU is held alone (its slot kept), and its last "gpu_alone"
  seconds it holds the GPU alone itself (grader.run.run_alone);
- its build ("build" + "compile" + "replay") in one of ``builds`` slots;
- once built and once its reference solution is judged, its judge, in one of ``judges_per_gpu`` slots per GPU: a
  start-up (CPU only, never frozen), its GPU work before its hold ("judge" - "gpu_exclusive" - "gpu_wait", frozen
  while another holds the GPU), then its hold ("gpu_exclusive"; "judge", an upper bound, where not recorded), one
  holder per GPU at a time, first come first served.
No result records a judge's start-up: schedule.json's timeline does. A judge's span there, before the judge's own
timing ("judge") begins, is its start-up, the other judges' holds it waited through, and the hand-over from the
last of them to its timing's start (``bench.judge_spans.judge_split``); the start-up is what is left (a lower
bound: it may have run beside some of those holds) and the hand-over counts as GPU work before its hold.
The references are graded first, as the grader does: a measured batch's own (the timeline's "reference <nb>"
labels: their runs and builds as measured, their runs' frozen seconds taken off, their judges at their notebook's
mean), a class's once per notebook at its notebook's mean cost, a Slurm task's once per task (each task grades
into an OUT of its own, grader.slurm). The wall time is from the first run's start to the last hold's end, the
drain (the last notebooks' builds and judges after the last run) included. The limits are the grader's
(grader.flow.settings.limits_for) unless given.
Not simulated: CPU cores (the stage times carry the contention they were measured under; the script takes the
larger of the simulation and the CPU bound below), the runs' shared use of the GPU (not measured), the grader's
start before its scheduler, and for Slurm the tasks' queueing and start and the gathering of results.
The throughput bounds beside it (``model_bounds``), each a lower bound on G GPUs over the class's notebooks, from
each notebook's mean stage times (``NotebookCost``): GPU sum(E)/G, E = "gpu_exclusive" + "gpu_alone"; CPU
sum(C) x cores_per_stage / (cores per GPU x G), C = the run's running seconds, the build, the TTGIR compile, the
CPU replay and the judge less its "gpu_wait"; runs sum(R)/(runs_per_gpu x G), R = running + "frozen" seconds;
builds sum(B)/(builds_per_gpu x G); and GPU+runs (``bench.pipeline_simulation.held_plus_runs``): a run is frozen
while its GPU is held, so per GPU the holds and the runs' progress never overlap,
(sum(E) + sum(running - gpu_alone) x G / runs) / G, which the simulation comes close to where the GPUs are busy.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.graded_results import Record
from bench.judge_spans import JudgeSplit, judge_prep, label

W1D7 = "week1/day7_fast_matmul"
# Stages in the order a notebook goes through them (seconds); any other numeric key is listed after these.
STAGES = ("notebook", "kernel_start", "recording", "frozen", "gpu_alone", "build", "compile", "replay", "judge",
          "judge_compile", "gpu_wait", "gpu_exclusive", "drain", "total")
# The stages the grader is meant to time: any of them no result recorded is named in the output.
EXPECTED = ("notebook", "build", "compile", "replay", "judge", "gpu_exclusive", "gpu_wait", "frozen")
CPU_STAGES = ("notebook", "build", "compile", "replay", "judge")
BUILD_STAGES = ("build", "compile", "replay")
@dataclass(frozen=True)
class StageStats:
    stage: str
    count: int  # results that recorded this stage
    absent: int  # results that did not (absent, not zero)
    mean: float | None = None
    median: float | None = None
    max: float | None = None


def stage_stats(records: Sequence[Record]) -> list[StageStats]:
    """Mean, median and max seconds of each stage over the results that recorded it (known stages first)."""
    keys = {k for r in records for k in r.timings}
    ordered = [s for s in STAGES if s in keys] + sorted(keys - set(STAGES))
    stats = []
    for stage in ordered:
        values = [r.timings[stage] for r in records if stage in r.timings]
        stats.append(StageStats(stage, len(values), len(records) - len(values), statistics.fmean(values),
                                statistics.median(values), max(values)))
    return stats


def stages_never_recorded(records: Sequence[Record], stages: Iterable[str] = EXPECTED) -> list[str]:
    return [s for s in stages if not any(s in r.timings for r in records)]


def per_hour(count: int, wall_seconds: float) -> float:
    return count * 3600.0 / wall_seconds


@dataclass(frozen=True)
class Spread:
    count: int
    mean: float
    max: float


def exclusive_seconds(records: Sequence[Record], notebook: str | None = None) -> Spread | None:
    """GPU-exclusive seconds per notebook (of ``notebook`` only, when given): its judge's and its run's holds,
    None where no judge's was recorded."""
    values = [r.timings["gpu_exclusive"] + r.timings.get("gpu_alone", 0.0) for r in records
              if "gpu_exclusive" in r.timings and (notebook is None or r.notebook == notebook)]
    return Spread(len(values), statistics.fmean(values), max(values)) if values else None


@dataclass(frozen=True)
class VerdictDifference:
    student: str
    notebook: str
    item: str  # "(status)" for the notebook's status, "(result)" for a notebook graded in one run only
    first: Any
    second: Any

    def __str__(self) -> str:
        return f"{self.student} {self.notebook} {self.item}: {self.first} -> {self.second}"


def verdict_differences(first: Sequence[Record], second: Sequence[Record]) -> list[VerdictDifference]:
    """Every notebook status and item score that differs between two runs (and every notebook only one has)."""
    a, b = {r.key: r for r in first}, {r.key: r for r in second}
    found = []
    for key in sorted(a.keys() | b.keys()):
        if key not in a or key not in b:
            found.append(VerdictDifference(*key, "(result)", a[key].status if key in a else "none",
                                           b[key].status if key in b else "none"))
            continue
        if a[key].status != b[key].status:
            found.append(VerdictDifference(*key, "(status)", a[key].status, b[key].status))
        for item in sorted(a[key].scores.keys() | b[key].scores.keys()):
            mine, theirs = a[key].scores.get(item, "none"), b[key].scores.get(item, "none")
            if mine != theirs:
                found.append(VerdictDifference(*key, item, mine, theirs))
    return found


def seeds(records: Sequence[Record]) -> list[int | None]:
    """The grading runs' seeds the results hold (one, when the run was one)."""
    return sorted({r.run_seed for r in records}, key=str)


def item_count(records: Sequence[Record]) -> int:
    return sum(len(r.scores) for r in records)


RATIOS = (("baseline_rate", "student/baseline"), ("reference_rate", "student/reference"))


def ratios(record: Record) -> dict[tuple[str, str, str], float]:
    """(spec, shape, which) -> the timing ratio the grade rests on, for every perf row timed on both sides."""
    found = {}
    for row in record.perf_rows:
        student = row.get("student_rate")
        for column, name in RATIOS:
            other = row.get(column)
            if student and other:
                found[(str(row.get("spec")), json.dumps(row.get("shape"), separators=(",", ":")), name)] = \
                    student / other
    return found


@dataclass(frozen=True)
class RatioDifference:
    student: str
    notebook: str
    spec: str
    shape: str
    ratio: str  # "student/baseline" or "student/reference"
    first: float | None  # None: not timed in that run
    second: float | None

    @property
    def relative(self) -> float:
        """|second - first| / first; infinite where only one run timed it."""
        if self.first is None or self.second is None:
            return float("inf")
        return abs(self.second - self.first) / self.first

    def __str__(self) -> str:
        shown = [f"{v:.4f}" if v is not None else "not timed" for v in (self.first, self.second)]
        return f"{self.student} {self.notebook} {self.spec} {self.shape} {self.ratio}: {shown[0]} -> {shown[1]}"


def ratio_differences(first: Sequence[Record], second: Sequence[Record]) -> list[RatioDifference]:
    """Every timing ratio of every notebook graded in both runs, largest relative difference first."""
    b = {r.key: r for r in second}
    found = []
    for record in first:
        if record.key not in b:
            continue
        mine, theirs = ratios(record), ratios(b[record.key])
        for where in sorted(mine.keys() | theirs.keys()):
            found.append(RatioDifference(*record.key, *where, mine.get(where), theirs.get(where)))
    return sorted(found, key=lambda d: d.relative, reverse=True)


@dataclass(frozen=True)
class Target:
    name: str
    met: bool | None  # None: not measured here (the text says why)
    measured: str

    @property
    def mark(self) -> str:
        return {True: "met", False: "NOT MET", None: "not measured"}[self.met]


def graded_on_cpu(records: Sequence[Record]) -> bool:
    return any(r.device.startswith("CPU") for r in records)


def targets(pipeline: Sequence[Record], w1d7_per_hour: float | None, gpus: int | None,
            verdicts: Sequence[VerdictDifference], ratio_diffs: Sequence[RatioDifference]) -> list[Target]:
    """The grading-throughput targets (each one's name states it), judged from the measurement. ``w1d7_per_hour``
    is None where the batch was not Week 1 Day 7 alone; ``gpus`` is the pipeline's GPU count (None where the
    grader did not record it)."""
    found = []
    exclusive = exclusive_seconds(pipeline, W1D7)
    found.append(Target("GPU-exclusive time per W1D7 notebook <= 10 s (the largest)",
                        None if exclusive is None else exclusive.max <= 10.0,
                        "no gpu_exclusive timing recorded" if exclusive is None
                        else f"max {exclusive.max:.1f} s, mean {exclusive.mean:.1f} s over {exclusive.count}"))
    if graded_on_cpu(pipeline):
        found.append(Target(">= 300 W1D7 notebooks per hour on one GPU", None, "graded on a CPU"))
    elif w1d7_per_hour is None:
        found.append(Target(">= 300 W1D7 notebooks per hour on one GPU", None,
                            "the batch held other notebooks (grade W1D7 alone for this one)"))
    elif gpus is not None and gpus != 1:
        found.append(Target(">= 300 W1D7 notebooks per hour on one GPU", None,
                            f"{w1d7_per_hour:.0f}/h, but on {gpus} GPUs"))
    else:
        found.append(Target(">= 300 W1D7 notebooks per hour on one GPU", w1d7_per_hour >= 300.0,
                            f"{w1d7_per_hour:.0f}/h" + (" (GPU count not recorded by the grader)"
                                                        if gpus is None else "")))
    if not item_count(pipeline):
        found.append(Target("verdicts identical to the one-at-a-time run", None, "no item was graded"))
    else:
        found.append(Target("verdicts identical to the one-at-a-time run", not verdicts,
                            "identical" if not verdicts else f"{len(verdicts)} differ"))
    if not ratio_diffs:
        found.append(Target("every timing ratio within 3% of the one-at-a-time run", None,
                            "no ratio was timed in either run (on a CPU nothing is timed)"))
    else:
        top = ratio_diffs[0]
        largest = "a ratio timed in one run only" if math.isinf(top.relative) else f"largest {top.relative:.1%}"
        found.append(Target("every timing ratio within 3% of the one-at-a-time run", top.relative <= 0.03,
                            f"{largest} over {len(ratio_diffs)} ratios"))
    return found


# ---- the projection ---------------------------------------------------------------------------------------


COST_PARTS = ("exclusive", "cpu", "run", "build")  # E, C, R, B


@dataclass(frozen=True)
class NotebookCost:
    """What grading one notebook costs (the means over its measured results), in the model's terms."""

    notebook: str
    exclusive: float  # E: GPU seconds held alone
    cpu: float  # C: CPU core-seconds (at one core per stage)
    run: float  # R: the run's wall seconds, frozen time included
    build: float  # B: the build's wall seconds
    samples: int
    source: str  # where the numbers come from
    exclusive_stage: str  # "gpu_exclusive", or "judge" where no result recorded gpu_exclusive (an upper bound)
    device: str = ""  # the devices measured on ("" where extrapolated)
    running: float = 0.0  # the run's running seconds ("notebook", frozen left out), ``alone`` included
    alone: float = 0.0  # of which the run held the GPU alone ("gpu_alone")
    prep: float = 0.0  # its judge's own seconds besides its hold ("judge" less "gpu_exclusive" and "gpu_wait")
    judge_start: float | None = None  # its judge's start-up (the timeline's judge span less "judge"); None: unmeasured


def cpu_seconds(record: Record) -> float:
    """C of one notebook: its run's running seconds, build, compile, replay, and judge less its gpu_wait."""
    return sum(record.timings.get(s, 0.0) for s in CPU_STAGES) - record.timings.get("gpu_wait", 0.0)


def run_seconds(record: Record) -> float:
    """R of one notebook: its run's running seconds and the seconds it was frozen, its slot held throughout."""
    return record.timings.get("notebook", 0.0) + record.timings.get("frozen", 0.0)


def build_seconds(record: Record) -> float:
    return sum(record.timings.get(s, 0.0) for s in BUILD_STAGES)


def exclusive_stage(records: Sequence[Record]) -> str:
    """The stage counted as the GPU held alone: "gpu_exclusive" where any result recorded it (a result without
    it, whose judge never ran, held the GPU 0 s), else "judge" (the judge's whole wall time: an upper bound)."""
    return "gpu_exclusive" if any("gpu_exclusive" in r.timings for r in records) else "judge"


def notebook_costs(records: Sequence[Record], source: str,
                   splits: dict[str, JudgeSplit] | None = None) -> dict[str, NotebookCost]:
    """The mean cost of each notebook over its records; ``splits``: label -> its judge's span split
    (``judge_splits``), where the timeline measured it."""
    by_notebook: dict[str, list[Record]] = {}
    for record in records:
        by_notebook.setdefault(record.notebook, []).append(record)
    costs = {}
    for notebook, group in sorted(by_notebook.items()):
        stage = exclusive_stage(group)
        held = statistics.fmean(r.timings.get(stage, 0.0) + r.timings.get("gpu_alone", 0.0) for r in group)
        costs[notebook] = NotebookCost(notebook, held,
                                       statistics.fmean(cpu_seconds(r) for r in group),
                                       statistics.fmean(run_seconds(r) for r in group),
                                       statistics.fmean(build_seconds(r) for r in group), len(group), source, stage,
                                       ", ".join(sorted({r.device for r in group if r.device})),
                                       statistics.fmean(r.timings.get("notebook", 0.0) for r in group),
                                       statistics.fmean(r.timings.get("gpu_alone", 0.0) for r in group),
                                       statistics.fmean(judge_prep(r, split.handover if (split := (splits or {}).get(
                                           label(r))) else 0.0) for r in group),
                                       statistics.fmean(timed) if (timed := [(splits or {})[label(r)].start
                                                                            for r in group
                                                                            if label(r) in (splits or {})]) else None)
    return costs


def class_costs(notebooks: Sequence[str], *measured: dict[str, NotebookCost]) -> dict[str, NotebookCost]:
    """A cost for each of the class's ``notebooks``: from the first measurement that has it; a notebook none
    measured gets the mean of those measured, and its source says so, naming them."""
    found = {}
    for notebook in notebooks:
        for costs in measured:
            if notebook in costs:
                found[notebook] = costs[notebook]
                break
    known = list(found.values())
    if not known:
        raise ValueError("no notebook of the class was measured")
    names = ", ".join(c.notebook for c in known)
    started = [c.judge_start for c in known if c.judge_start is not None]
    for notebook in notebooks:
        if notebook not in found:
            found[notebook] = NotebookCost(
                notebook, *(statistics.fmean(getattr(c, part) for c in known) for part in COST_PARTS),
                0, f"EXTRAPOLATED: not measured; the mean of {names}",
                "/".join(sorted({c.exclusive_stage for c in known})), "",
                *(statistics.fmean(getattr(c, part) for c in known) for part in ("running", "alone", "prep")),
                statistics.fmean(started) if started else None)
    # a judge's start-up no timeline measured: the mean of those measured (0 where none was)
    start = statistics.fmean(started) if started else None
    return {n: found[n] if found[n].judge_start is not None or start is None
            else dataclasses.replace(found[n], judge_start=start) for n in notebooks}


@dataclass(frozen=True)
class Machine:
    """Where a class is graded: ``gpus`` GPUs in all, and per GPU its share of the host's cores and of the
    grader's concurrency limits."""

    name: str
    gpus: int
    cores_per_gpu: float
    runs_per_gpu: float = 4.0  # the grader's default --runs: 4 per GPU (while the CPUs allow)
    builds_per_gpu: float = 4.0  # the grader's default --builds: a quarter of the CPUs (16 cores per GPU here)


@dataclass(frozen=True)
class Projection:
    machine: Machine
    students: int
    notebooks: int
    bounds: dict[str, float]  # "GPU", "CPU", "runs", "builds" -> the class's seconds under that bound alone
    ramp: float = 0.0  # seconds before the first hold of a GPU, which no bound counts

    @property
    def wall_seconds(self) -> float:
        return self.ramp + max(self.bounds.values())

    @property
    def bound(self) -> str:
        return max(self.bounds, key=lambda k: self.bounds[k])

    @property
    def per_gpu_hour(self) -> float:
        return per_hour(self.students * self.notebooks, self.wall_seconds) / self.machine.gpus


def model_bounds(exclusive: float, cpu: float, run: float, build: float, machine: Machine,
                 cores_per_stage: float = 1.0) -> dict[str, float]:
    """Seconds under each bound for work totalling these seconds (E, C, R, B) on ``machine``."""
    g = machine.gpus
    return {"GPU": exclusive / g, "CPU": cpu * cores_per_stage / (machine.cores_per_gpu * g),
            "runs": run / (machine.runs_per_gpu * g), "builds": build / (machine.builds_per_gpu * g)}


def project(costs: dict[str, NotebookCost], students: int, machine: Machine,
            cores_per_stage: float = 1.0, ramp: float = 0.0) -> Projection:
    """The wall time of ``students`` x the notebooks in ``costs`` on ``machine`` (the model in this module's
    docstring)."""
    totals = [students * sum(getattr(c, part) for c in costs.values()) for part in COST_PARTS]
    return Projection(machine, students, len(costs), model_bounds(*totals, machine, cores_per_stage), ramp)


def batch_model(records: Sequence[Record], machine: Machine, cores_per_stage: float = 1.0,
                ramp: float = 0.0) -> Projection:
    """What the model says a measured batch should take (to set beside its measured wall time), with its bounds."""
    stage = exclusive_stage(records)
    totals = (sum(r.timings.get(stage, 0.0) + r.timings.get("gpu_alone", 0.0) for r in records),
              sum(cpu_seconds(r) for r in records), sum(run_seconds(r) for r in records),
              sum(build_seconds(r) for r in records))
    return Projection(machine, 1, len(records), model_bounds(*totals, machine, cores_per_stage), ramp)


def ramp_seconds(schedule: dict[str, Any] | None) -> float:
    """A batch's ramp: the longest time from the start of its schedule to a GPU's first hold (0 without one)."""
    return max((p.ramp for p in gpu_periods(schedule)), default=0.0)


IDLE_CAUSES = ("judge preparing", "notebooks waiting for a judge", "runs and builds only", "nothing")


@dataclass(frozen=True)
class GpuTimeline:
    """One GPU over a pipeline run (schedule.json's timeline): how long it was held alone, when judging began
    and ended there, and why it was not held in between (seconds per cause in ``IDLE_CAUSES``)."""

    gpu: str
    wall: float
    held: float
    first_hold: float | None
    last_hold_end: float | None
    idle: dict[str, float]

    @property
    def held_share(self) -> float:
        return self.held / self.wall if self.wall else 0.0


def _active(spans: Sequence[tuple[float, float]], t: float) -> int:
    return sum(start <= t < end for start, end in spans)


CLASS_NOTEBOOKS = 300 * 14  # the course's class: 300 students x its 14 notebooks


@dataclass(frozen=True)
class Period:
    """A GPU's measured pace in a pipeline run: from its first hold to its last, ``seconds`` for ``holds``
    judges (about one hold per notebook), after ``ramp`` seconds before its first hold."""

    gpu: str
    seconds: float
    holds: int
    ramp: float

    @property
    def per_notebook(self) -> float:
        return self.seconds / self.holds if self.holds else math.inf


def _holds_by_gpu(schedule: dict[str, Any] | None) -> dict[str, list[tuple[float, float]]]:
    """schedule.json's holds as (start, end) in time order, per GPU, the GPUs in index order (the run's listed GPUs
    included, with none)."""
    holds = ((schedule or {}).get("timeline") or {}).get("holds") or []
    listed = ((schedule or {}).get("limits") or {}).get("gpus") or []
    gpus = sorted({str(h["gpu"]) for h in holds} | {str(g) for g in listed}, key=lambda g: (len(g), g))
    return {gpu: sorted((h["start"], h["end"]) for h in holds if str(h["gpu"]) == gpu) for gpu in gpus}


def gpu_periods(schedule: dict[str, Any] | None) -> list[Period]:
    """Each held GPU's pace (``Period``) from schedule.json's timeline."""
    return [Period(gpu, mine[-1][1] - mine[0][0], len(mine), mine[0][0])
            for gpu, mine in _holds_by_gpu(schedule).items() if mine]


def period_projection(periods: Sequence[Period], notebooks: int = CLASS_NOTEBOOKS,
                      gpus: Sequence[int] = (1, 8, 32)) -> dict[int, float]:
    """Seconds for ``notebooks`` on each count of GPUs at the run's measured pace: the longest ramp, then the
    notebooks shared evenly, each GPU at the mean pace of the run's GPUs. An extrapolation: it assumes each
    GPU keeps the cores per GPU of the measured host and the notebooks cost what the batch's did."""
    if not periods:
        return {}
    pace = statistics.mean(p.per_notebook for p in periods)
    ramp = max(p.ramp for p in periods)
    return {g: ramp + notebooks * pace / g for g in gpus}


def gpu_timelines(schedule: dict[str, Any] | None, step: float = 0.1) -> list[GpuTimeline]:
    """Each GPU's holds and the causes of its idle time between its first hold and its last, sampled every
    ``step`` seconds: the first cause that applies, in ``IDLE_CAUSES`` order ("judge preparing": a judge of
    this GPU has started and does not hold it; "waiting": a notebook is built and its judge has not started,
    for a judge slot or its reference; "runs and builds only": some notebook is in its run or build)."""
    ran = (schedule or {}).get("timeline") or {}
    wall = float((schedule or {}).get("wall_seconds") or 0.0)
    stages = ran.get("stages") or []
    by_label: dict[str, dict[str, dict[str, Any]]] = {}
    for event in stages:
        by_label.setdefault(event["label"], {})[event["stage"]] = event
    waiting = [(e["build"]["end"], e["judge"]["start"] if "judge" in e else wall)
               for e in by_label.values() if "build" in e]
    busy = [(e["start"], e["end"]) for e in stages if e["stage"] in ("run", "build")]
    found = []
    for gpu, held in _holds_by_gpu(schedule).items():
        judging = [(e["start"], e["end"]) for e in stages if e["stage"] == "judge" and str(e["gpu"]) == gpu]
        idle = dict.fromkeys(IDLE_CAUSES, 0.0)
        if held:
            t = held[0][0]
            while t < held[-1][1]:
                if not _active(held, t):
                    cause = ("judge preparing" if _active(judging, t) else
                             "notebooks waiting for a judge" if _active(waiting, t) else
                             "runs and builds only" if _active(busy, t) else "nothing")
                    idle[cause] += step
                t += step
        found.append(GpuTimeline(gpu, wall, sum(end - start for start, end in held),
                                 held[0][0] if held else None, held[-1][1] if held else None, idle))
    return found


def timeline_lines(timelines: Sequence[GpuTimeline], periods: Sequence[Period] = ()) -> list[str]:
    """One line per GPU: held share, first and last hold, and its idle seconds between them by cause; then, from
    ``periods``, the pace per notebook and the course's class (``CLASS_NOTEBOOKS``) projected at that pace."""
    lines = []
    for t in timelines:
        if t.first_hold is None:
            lines.append(f"  GPU {t.gpu}: never held by a judge")
            continue
        causes = ", ".join(f"{cause} {seconds:.0f} s" for cause, seconds in t.idle.items() if seconds >= 0.05)
        lines.append(f"  GPU {t.gpu}: held alone {t.held:.0f} s of {t.wall:.0f} s ({t.held_share:.0%}); first hold at "
                     f"{t.first_hold:.0f} s, last ended at {t.last_hold_end:.0f} s; idle between: {causes or 'none'}")
    if periods:
        paces = ", ".join(f"GPU {p.gpu} {p.per_notebook:.1f} s ({p.holds} holds)" for p in periods)
        hours = ", ".join(f"{g} GPU{'s' if g > 1 else ''} {seconds / 3600:.1f} h"
                          for g, seconds in period_projection(periods).items())
        lines.append(f"  pace per notebook between first and last hold: {paces}; at that pace 300 x 14 notebooks "
                     f"take {hours} (extrapolated from this batch)")
    return lines
