"""Grade many notebooks at once, each stage on the resource it needs, every timing on a GPU held alone.

A notebook goes through three stages (``grader.pipeline``): its run in the sandbox (``runs`` at once over all
GPUs, each on the GPU with the fewest runs; the runs of one GPU share it, and nothing they do is timed by the
judge; where a run measures the GPU itself, autotuning or timing a graded answer, it asks for the GPU alone for
that moment, ``grader.run.run_alone``), its
build (CPU only: ``builds`` at once), and its judge (``judges_per_gpu`` judge processes per GPU, each on the GPU
with the fewest judges). A judge does its GPU work, the replays and the timings, with the GPU held alone at the
gate (``grader.gpu.gpu_gate``): one holder per GPU at a time, the runs on that GPU paused meanwhile. A notebook's
judge starts only once its reference solution is judged (the student's timings are compared with it).

``one_at_a_time`` (the serial schedule) grades one notebook at a time, stage after stage, with nothing beside
it: the baseline that the pipeline's verdicts and timing ratios are compared with
(``bench/grading_throughput.py``).

Every submitted notebook yields exactly one ``Graded``; a stage that raises yields a grader_error, never a lost
notebook. Results come back through futures; the caller alone writes the gradebook.

Leaving the scheduler's context on an exception (a stop signal: ``grader.flow.stopping``) stops it: queued stages are
dropped, no stage starts, and ``kill`` is called every 0.1 s until every stage's thread has ended: it kills the
processes the stages run, whose threads then see them end and unwind. What the futures get meanwhile is never
recorded (the caller has stopped reading them).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Protocol

from grader.gpu.gpu_gate import GpuGate, Pausable

# Judges per GPU by default: one holds it while the others prepare. Four were measured against two on two H200s
# (bench/RESULTS.md): the idle time between holds per notebook hardly moved and each hold grew (4.4 to 5.3 s).
JUDGES_PER_GPU = 2


@dataclass(frozen=True)
class Limits:
    """How much of each resource the grading may use at once."""

    gpus: tuple[str, ...]  # the grader's CUDA indices; () on a CPU
    runs: int  # sandboxed notebook runs at once, over all GPUs
    builds: int  # builds (and CPU replays) at once
    judges_per_gpu: int = JUDGES_PER_GPU  # judge processes per GPU: one holds the GPU alone, the others prepare
    # Runs and builds together at most this many at once (a CPU grading, where both are interpreter work on the
    # same cores); None: each stage only by its own limit.
    cpu_slots: int | None = None

    def describe(self) -> dict[str, Any]:
        return {"gpus": list(self.gpus), "runs": self.runs, "builds": self.builds,
                "judges_per_gpu": self.judges_per_gpu, "cpu_slots": self.cpu_slots}


class Stages(Protocol):
    """What one notebook's grading does at each stage (``grader.pipeline``'s functions, or a test's fakes)."""

    def run(self, task: Any, gpu: str | None, pause: Pausable | None) -> Any: ...
    def build(self, task: Any, staged: Any) -> Any: ...
    def judge(self, task: Any, staged: Any, gpu: str | None, gate: GpuGate | None) -> Any: ...
    def fault(self, stage: str, error: BaseException) -> Any: ...  # the result of a stage that raised


@dataclass(frozen=True)
class StageEvent:
    """One stage of one notebook as it ran: on which GPU (None: none), from when to when (``time.monotonic``)."""

    label: str
    stage: str  # run, build or judge
    gpu: str | None
    start: float
    end: float


# (task, what its reference's future gave) -> (the task to judge, None) or (None, its result without a judge)
Prepare = Callable[[Any, Any], tuple[Any, Any]]


class _Least:
    """Hands out the GPU with the fewest current users of one kind (runs or judges)."""

    def __init__(self, gpus: tuple[str, ...]) -> None:
        self._users = dict.fromkeys(gpus, 0)
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def take(self) -> Any:
        if not self._users:
            yield None
            return
        with self._lock:
            gpu = min(self._users, key=lambda g: (self._users[g], int(g) if g.isdigit() else 0))
            self._users[gpu] += 1
        try:
            yield gpu
        finally:
            with self._lock:
                self._users[gpu] -= 1


class Scheduler:
    """The three stages' pools; ``submit`` a notebook and get a future of its ``Graded``. Use as a context."""

    def __init__(self, limits: Limits, stages: Stages, gate: GpuGate | None, one_at_a_time: bool = False,
                 kill: Callable[[], object] | None = None) -> None:
        self.limits = limits
        self._stages = stages
        self._gate = gate
        # serial: a notebook's run starts only when the one before it is judged (submission order)
        self._one = threading.Semaphore(1) if one_at_a_time else None
        self._cpu = threading.Semaphore(limits.cpu_slots) if limits.cpu_slots else None
        judges = limits.judges_per_gpu * max(1, len(limits.gpus))
        self._runs = ThreadPoolExecutor(max(1, limits.runs), thread_name_prefix="run")
        self._builds = ThreadPoolExecutor(max(1, limits.builds), thread_name_prefix="build")
        self._judges = ThreadPoolExecutor(judges, thread_name_prefix="judge")
        self._run_gpus, self._judge_gpus = _Least(limits.gpus), _Least(limits.gpus)
        self.events: list[StageEvent] = []  # every stage that ran, in the order they ended
        self._events_lock = threading.Lock()
        self._kill = kill
        self._stopping = threading.Event()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @contextlib.contextmanager
    def _timed(self, label: str, stage: str, gpu: str | None) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            with self._events_lock:
                self.events.append(StageEvent(label, stage, gpu, start, time.monotonic()))

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        pools = (self._runs, self._builds, self._judges)
        if kind is not None:
            self._stopping.set()
            for pool in pools:
                pool.shutdown(wait=False, cancel_futures=True)
        with self._sweeping() if kind is not None and self._kill is not None else contextlib.nullcontext():
            for pool in pools:
                pool.shutdown(wait=True)

    @contextlib.contextmanager
    def _sweeping(self) -> Iterator[None]:
        """``kill`` now and every 0.1 s within: a stage between two processes may start one more."""
        ended = threading.Event()

        def sweep() -> None:
            while True:
                self._kill()
                if ended.wait(0.1):
                    return

        sweeper = threading.Thread(target=sweep, name="stop-sweep", daemon=True)
        sweeper.start()
        try:
            yield
        finally:
            ended.set()
            sweeper.join()

    def _submit(self, pool: ThreadPoolExecutor, work: Callable[[], None]) -> None:
        """``work`` into ``pool``, unless the scheduler is stopping (its pools refuse new work then)."""
        if self._stopping.is_set():
            return
        try:
            pool.submit(work)
        except RuntimeError:
            if not self._stopping.is_set():
                raise

    def submit(self, task: Any, reference: Future | None = None, prepare: Prepare | None = None,
               label: str = "") -> Future:
        """Grade ``task``; its judge waits for ``reference`` and takes ``prepare(task, reference's result)``.
        ``label`` names the notebook in ``events``."""
        done: Future = Future()

        def guarded(stage: str, work: Callable[[], None]) -> Callable[[], None]:
            def call() -> None:
                try:
                    if self._stopping.is_set():
                        raise RuntimeError("the grader is stopping")
                    work()
                except Exception as error:  # any failure is this notebook's grader_error, never a lost notebook
                    if not done.done():
                        done.set_result(self._stages.fault(stage, error))
            return call

        def run() -> None:
            if self._one is not None:
                while not self._one.acquire(timeout=0.5):
                    if self._stopping.is_set():
                        raise RuntimeError("the grader is stopping")
                done.add_done_callback(lambda _: self._one.release())
            with self._run_gpus.take() as gpu, self._cpu or contextlib.nullcontext():
                use = contextlib.nullcontext(None)
                if self._gate is not None and gpu is not None:
                    use = self._gate.shared(gpu)
                with use as pause, self._timed(label, "run", gpu):
                    staged = self._stages.run(replace(task, gpu=gpu) if gpu is not None else task, gpu, pause)
            self._submit(self._builds, guarded("build", lambda: build(staged)))

        def build(staged: Any) -> None:
            with self._cpu or contextlib.nullcontext(), self._timed(label, "build", None):
                staged = self._stages.build(task, staged)
            if reference is None:
                self._submit(self._judges, guarded("judge", lambda: judge(task, staged)))
            else:
                reference.add_done_callback(lambda ready: self._submit(
                    self._judges, guarded("judge", lambda: judge_after(ready, staged))))

        def judge_after(ready: Future, staged: Any) -> None:
            prepared, without_judge = prepare(task, ready.result()) if prepare is not None else (task, None)
            if prepared is None:  # the reference failed: nothing is judged
                done.set_result(without_judge)
                return
            judge(prepared, staged)

        def judge(judged: Any, staged: Any) -> None:
            with self._judge_gpus.take() as gpu, self._timed(label, "judge", gpu):
                done.set_result(self._stages.judge(judged, staged, gpu, self._gate))

        self._runs.submit(guarded("run", run))
        return done
