"""The grader's pipeline simulated event by event (runs frozen while their GPU is held, builds, judges one holder at a
time per GPU, the references first), over jobs made from measured results or from per-notebook mean costs: the model
behind bench/grading_throughput.py's projection and its check against each measured batch."""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.graded_results import Record
from bench.judge_spans import (
    REFERENCE,
    JudgeSplit,
    held_during,
    judge_hold,
    judge_prep,
    judge_splits,
    label,
    timeline_spans,
)
from bench.throughput import NotebookCost, build_seconds


@dataclass(frozen=True)
class Job:
    """One notebook through the grader's pipeline (``grader.flow.schedule``), in seconds of its own work."""

    label: str
    notebook: str
    run: float  # the run's running seconds ("notebook": frozen time left out), its hold alone included
    alone: float = 0.0  # the last ``alone`` seconds of its run hold the GPU alone ("gpu_alone", run_alone)
    build: float = 0.0  # build + compile + replay
    start: float = 0.0  # its judge's start-up, CPU only, before it asks for its GPU (never frozen)
    prep: float = 0.0  # its judge's GPU work before its hold (loading its kernels), frozen while another holds
    hold: float = 0.0  # its judge's seconds with the GPU held alone ("gpu_exclusive")
    judged: bool = True  # False: nothing to judge (no judge ran)
    reference: str | None = None  # the label of the job whose judge must end before this one's judge starts


@dataclass(frozen=True)
class Span:
    label: str
    stage: str  # "run", "build", "judge" (a judge's span: from its slot taken to its hold's end)
    gpu: int | None
    start: float
    end: float


@dataclass(frozen=True)
class Simulation:
    wall: float  # from the first run's start to the last stage's end
    held: tuple[float, ...]  # per GPU, seconds held alone (judges' and runs' holds)
    last_run_end: float  # when the last run ended: what follows is the drain (builds and judges only)
    spans: tuple[Span, ...] = ()  # every stage, where asked for

    @property
    def drain(self) -> float:
        return self.wall - self.last_run_end


def simulate(jobs: Sequence[Job], gpus: int, runs: int, builds: int, judges_per_gpu: int,
             spans: bool = False) -> Simulation:
    """The grader's pipeline (``grader.flow.schedule``), event by event, over ``jobs`` submitted in their order
    (the grader's: the references first, then the students' notebooks).

    - A job's run takes one of ``runs`` slots (first come, first served), on the GPU with the fewest runs (lowest
      index on a tie). It needs ``run`` running seconds and runs only while its GPU is not held alone: a run is
      frozen while a judge (or another run) holds its GPU, its slot kept. Its last ``alone`` seconds it holds the
      GPU alone itself, queuing at the GPU's gate like a judge.
    - Then its build, in one of ``builds`` slots (CPU only), for ``build`` seconds.
    - Then, once built and once its reference's judge has ended, its judge, in one of ``judges_per_gpu`` slots per
      GPU (first come, first served, on the GPU with the fewest judges): ``start`` seconds of start-up (CPU only,
      never frozen), then ``prep`` seconds of GPU work, frozen like a run while another holds the GPU, then it
      queues at the GPU's gate (one holder at a time, first come, first served) and holds the GPU alone for
      ``hold`` seconds; its slot is given back when its hold ends.
    Nothing contends for CPU cores here: the measured stage times hold the contention they were measured under.
    """
    if gpus < 1 or runs < 1 or builds < 1 or judges_per_gpu < 1:
        raise ValueError("gpus, runs, builds and judges_per_gpu must be at least 1")
    now, eps = 0.0, 1e-9
    labels = {job.label for job in jobs}
    if len(labels) != len(jobs):
        raise ValueError("the jobs' labels must be unique")
    run_queue = deque(range(len(jobs)))
    # a run: [job, gpu, running seconds left, phase ("run", "gate", "hold", "ended"), start]
    running: list[list[Any]] = []
    runs_on, judges_on = [0] * gpus, [0] * gpus
    build_queue: deque[int] = deque()
    building: list[tuple[float, int, float]] = []  # (end, job, start)
    judge_queue: deque[int] = deque()
    # a judge: [job, gpu, phase ("start", "prep", "gate", "hold"), start-up's end or prep seconds left, start]
    judging: list[list[Any]] = []
    gate: list[deque[tuple[str, list[Any]]]] = [deque() for _ in range(gpus)]
    holder: list[tuple[float, str, list[Any]] | None] = [None] * gpus
    held = [0.0] * gpus
    judged: set[str] = set()
    waiting: dict[str, list[int]] = {}
    found: list[Span] = []
    done, last_run_end = 0, 0.0

    def least(counts: list[int]) -> int:
        return min(range(gpus), key=lambda g: (counts[g], g))

    def finish(i: int) -> None:
        nonlocal done
        done += 1
        judged.add(jobs[i].label)
        judge_queue.extend(waiting.pop(jobs[i].label, []))

    def built(i: int) -> None:
        job = jobs[i]
        if not job.judged:
            finish(i)
        elif job.reference is None or job.reference in judged or job.reference not in labels:
            judge_queue.append(i)
        else:
            waiting.setdefault(job.reference, []).append(i)

    while done < len(jobs):
        while run_queue and len(running) < runs:
            i = run_queue.popleft()
            g = least(runs_on)
            runs_on[g] += 1
            running.append([i, g, max(0.0, jobs[i].run - jobs[i].alone), "run", now])
        while build_queue and len(building) < builds:
            i = build_queue.popleft()
            building.append((now + max(0.0, jobs[i].build), i, now))
        while judge_queue and len(judging) < judges_per_gpu * gpus:
            i = judge_queue.popleft()
            g = least(judges_on)
            judges_on[g] += 1
            judging.append([i, g, "start", now + max(0.0, jobs[i].start), now])
        for g in range(gpus):
            if holder[g] is None and gate[g]:
                kind, entry = gate[g].popleft()
                seconds = jobs[entry[0]].alone if kind == "run" else jobs[entry[0]].hold
                holder[g] = (now + max(0.0, seconds), kind, entry)
                entry[3 if kind == "run" else 2] = "hold"
        free = [h is None for h in holder]
        nexts = [h[0] for h in holder if h is not None]
        nexts += [now + r[2] for r in running if r[3] == "run" and free[r[1]]]
        nexts += [b[0] for b in building]
        nexts += [j[3] for j in judging if j[2] == "start"]
        nexts += [now + j[3] for j in judging if j[2] == "prep" and free[j[1]]]
        if not nexts:
            raise RuntimeError("the simulated pipeline is stuck (a reference that is never judged?)")
        later = max(now, min(nexts))
        step = later - now
        for r in running:
            if r[3] == "run" and free[r[1]]:
                r[2] -= step
        for j in judging:
            if j[2] == "prep" and free[j[1]]:
                j[3] -= step
        for g in range(gpus):
            if holder[g] is not None:
                held[g] += step
        now = later
        for g in range(gpus):
            h = holder[g]
            if h is not None and h[0] <= now + eps:
                holder[g] = None
                kind, entry = h[1], h[2]
                if kind == "run":
                    entry[3] = "ended"
                    continue
                judging.remove(entry)
                judges_on[g] -= 1
                if spans:
                    found.append(Span(jobs[entry[0]].label, "judge", g, entry[4], now))
                finish(entry[0])
        for r in [r for r in running if r[3] == "ended" or (r[3] == "run" and r[2] <= eps)]:
            if r[3] == "run" and jobs[r[0]].alone > 0:
                r[3] = "gate"
                gate[r[1]].append(("run", r))
                continue
            running.remove(r)
            runs_on[r[1]] -= 1
            last_run_end = now
            if spans:
                found.append(Span(jobs[r[0]].label, "run", r[1], r[4], now))
            build_queue.append(r[0])
        for b in [b for b in building if b[0] <= now + eps]:
            building.remove(b)
            if spans:
                found.append(Span(jobs[b[1]].label, "build", None, b[2], now))
            built(b[1])
        for j in judging:
            if j[2] == "start" and j[3] <= now + eps:
                j[2], j[3] = "prep", max(0.0, jobs[j[0]].prep)
            if j[2] == "prep" and j[3] <= eps:
                j[2] = "gate"
                gate[j[1]].append(("judge", j))
    return Simulation(now, tuple(held), last_run_end, tuple(found))




def record_job(record: Record, split: JudgeSplit | None, start: float, reference: str | None = None) -> Job:
    """One measured notebook as a job; ``start``: its judge's start-up where ``split`` (the timeline) has none."""
    t = record.timings
    judged = "judge" in t or "gpu_exclusive" in t
    return Job(label(record), record.notebook, t.get("notebook", 0.0), t.get("gpu_alone", 0.0), build_seconds(record),
               (split.start if split else start) if judged else 0.0,
               judge_prep(record, split.handover if split else 0.0) if judged else 0.0,
               judge_hold(record) if judged else 0.0, judged, reference)


def batch_jobs(records: Sequence[Record], schedule: dict[str, Any] | None) -> tuple[list[Job], dict[str, Any]]:
    """A measured batch as the grader submitted it: the references it graded (the timeline's "reference <nb>"
    labels; none where it started with graded ones), then its results in (student, notebook) order, each judged
    after its notebook's reference. A reference's run and build are its own measured spans (its run's frozen
    seconds, the holds of its GPU during the run, taken off); no result records its judge: its hold and GPU work
    are the means of its notebook's results in the batch (of all of them where none has its notebook), its
    start-up the rest of its measured span less the others' holds in it. Also says what was measured."""
    splits = judge_splits(records, schedule)
    start = statistics.fmean(s.start for s in splits.values()) if splits else 0.0
    spans = timeline_spans(schedule)
    references = sorted(k[len(REFERENCE):] for k in spans if k.startswith(REFERENCE))
    students = [record_job(r, splits.get(label(r)), start, REFERENCE + r.notebook if r.notebook in references else None)
                for r in sorted(records, key=lambda r: (r.student, r.notebook))]
    jobs = []
    for notebook in references:
        mine = [j for j in students if j.notebook == notebook and j.judged] or [j for j in students if j.judged]
        stages = spans[REFERENCE + notebook]
        run = stages.get("run", (0.0, 0.0, None))
        build = stages.get("build", (0.0, 0.0, None))
        hold = statistics.fmean(j.hold for j in mine) if mine else 0.0
        prep = statistics.fmean(j.prep for j in mine) if mine else 0.0
        if "judge" in stages:
            begin, end, gpu = stages["judge"]
            own = end - begin - (held_during(schedule, gpu, begin, end) - hold)
            judge_start = max(0.0, own - hold - prep)
        else:
            judge_start = start
        jobs.append(Job(REFERENCE + notebook, notebook,
                        max(0.0, run[1] - run[0] - held_during(schedule, run[2], run[0], run[1])), 0.0,
                        build[1] - build[0], judge_start, prep, hold, "judge" in stages))
    return jobs + students, {"references": len(references), "judge_splits": len(splits), "judge_start_mean": start,
                             "judge_waited_mean": statistics.fmean(s.waited for s in splits.values()) if splits
                             else 0.0}


def grader_limits(gpus: int, cores: float, runs_per_gpu: int, judges_per_gpu: int, runs: int | None = None,
                  builds: int | None = None) -> tuple[int, int, int]:
    """(runs, builds, judges per GPU) as the grader resolves them (grader.flow.settings.limits_for) on ``gpus``
    GPUs and ``cores`` cores: runs min(``runs_per_gpu`` x GPUs, cores // 2), builds cores // 4, each at least 1;
    ``runs`` and ``builds``, where given, as the TA's --runs and --builds."""
    return (runs or max(1, min(runs_per_gpu * gpus, int(cores) // 2)), builds or max(1, int(cores) // 4),
            judges_per_gpu)


def cost_job(name: str, cost: NotebookCost, reference: str | None) -> Job:
    """A notebook at its mean cost as a job (a judge's start-up no timeline measured: 0)."""
    return Job(name, cost.notebook, cost.running, cost.alone, cost.build, cost.judge_start or 0.0, cost.prep,
               max(0.0, cost.exclusive - cost.alone), True, reference)


def class_jobs(costs: dict[str, NotebookCost], students: int, references: bool = True) -> list[Job]:
    """A class as jobs at its notebooks' mean costs: each notebook's reference first (where ``references``; at its
    notebook's mean cost), then each student's notebooks in order, each judged after its notebook's reference."""
    refs = [cost_job(REFERENCE + n, c, None) for n, c in costs.items()] if references else []
    return refs + [cost_job(f"s{s}/{n}", c, REFERENCE + n if references else None)
                   for s in range(students) for n, c in costs.items()]


@dataclass(frozen=True)
class SimulatedClass:
    """A class's simulated wall time on one grader, or for Slurm on tasks of ``per_task`` students in waves."""

    name: str
    gpus: int
    runs: int  # of one grader (one task)
    builds: int
    judges_per_gpu: int
    wall: float
    held_share: float  # of the GPUs' time (of one task's, for Slurm), held alone
    drain: float  # seconds after the last run's end (of one full task, for Slurm)
    tasks: int = 1
    waves: int = 1
    per_task: int = 0  # students per task (0: one grader for the whole class)
    references: float = 0.0  # seconds of the Slurm references job, before the tasks (0: none)


def simulate_class(name: str, costs: dict[str, NotebookCost], students: int, gpus: int, runs: int, builds: int,
                   judges_per_gpu: int) -> SimulatedClass:
    """One grader on ``gpus`` GPUs grading ``students`` x the notebooks in ``costs``, their references first."""
    sim = simulate(class_jobs(costs, students), gpus, runs, builds, judges_per_gpu)
    return SimulatedClass(name, gpus, runs, builds, judges_per_gpu, sim.wall,
                          sum(sim.held) / (gpus * sim.wall) if sim.wall else 0.0, sim.drain)


def simulate_slurm(name: str, costs: dict[str, NotebookCost], students: int, slots: int, notebooks_per_task: int,
                   runs: int, builds: int, judges_per_gpu: int) -> SimulatedClass:
    """A Slurm job array (grader.slurm): a one-GPU references job grading every notebook's reference, then tasks of
    whole students, at most ``notebooks_per_task`` notebooks each (grader.slurm.chunks; one student at least), each
    a one-GPU grader with its own OUT that takes those references; ``slots`` tasks at once (the cluster's GPUs), in
    waves of identical tasks. Slurm's queueing, the jobs' start-up and the gathering of results are not modelled."""
    per_task = max(1, notebooks_per_task // max(1, len(costs)))
    tasks = math.ceil(students / per_task)
    waves = math.ceil(tasks / slots)
    references = simulate([cost_job(REFERENCE + n, c, None) for n, c in costs.items()], 1, runs, builds,
                          judges_per_gpu).wall if tasks > 1 else 0.0
    full = simulate(class_jobs(costs, per_task, tasks == 1), 1, runs, builds, judges_per_gpu)
    left = students - per_task * (tasks - 1)  # the last task's students
    last = full if left == per_task else simulate(class_jobs(costs, left, tasks == 1), 1, runs, builds,
                                                  judges_per_gpu)
    in_last_wave = tasks - (waves - 1) * slots
    wall = references + (waves - 1) * full.wall + (full.wall if in_last_wave > 1 else last.wall)
    return SimulatedClass(name, slots, runs, builds, judges_per_gpu, wall,
                          sum(full.held) / full.wall if full.wall else 0.0, full.drain, tasks, waves, per_task,
                          references)


def held_plus_runs(exclusive: float, running: float, gpus: int, runs: int) -> float:
    """A lower bound the simulation comes close to where the GPUs are busy: a run is frozen while its GPU is held,
    so on each GPU the holds (``exclusive`` seconds in all, the runs' own holds alone included) and the runs'
    progress besides (``running`` seconds in all, their holds alone left out, ``runs`` at once over the ``gpus``)
    never overlap: (sum(E) + sum(running) x GPUs / runs) / GPUs."""
    return (exclusive + running * gpus / runs) / gpus
