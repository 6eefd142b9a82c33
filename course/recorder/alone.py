"""The recorder's asks for the GPU alone (the grader's side is ``grader.run.run_alone``), and the autotuners' retune.

Where several notebooks' runs share a GPU, the grader gives a run that asks the GPU alone for a moment: the
other runs are paused, this one goes on. The recorder asks around the only work of a run whose result depends
on how busy the GPU is: a host exercise whose answer is a time measured on the GPU, and the autotuning behind a
graded kernel's launches (the judge replays the configuration the autotuner picked). Outside a grading run
(no channel in the environment) ``gpu_alone`` asks nothing.
"""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

ENV = "COURSE_GPU_ALONE"  # set by the grader (grader.run.run_alone.ENV) to the folder holding the two FIFOs
ANSWER_SECONDS = 600.0
# Beside other runs a configuration's benchmark may read slow by any amount (other runs' kernels, or a pause at the
# gate between the two events of one timing), so a window around the shared fastest can miss the true best: on two
# H200s a 25% window kept an 8192^3 pick 8% slower than the best (bench/RESULTS.md in the course's online repository).
# So this many of the fastest configurations of the shared benchmark are benchmarked again, alone: all of a usual list,
# and a bound on the GPU time alone that a long list can take.
RETIMED = 8


@contextlib.contextmanager
def gpu_alone() -> Iterator[bool]:
    """Hold this run's GPU alone inside the block, where the grader shares it among runs; yields whether held."""
    folder = os.environ.get(ENV)
    if not folder:
        yield False
        return
    try:
        ask = os.open(Path(folder) / "ask", os.O_WRONLY | os.O_NONBLOCK)
        grant = os.open(Path(folder) / "grant", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:  # no grader on the other side: go on sharing
        yield False
        return
    try:
        os.write(ask, b"alone\n")
        ready, _, _ = select.select([grant], [], [], ANSWER_SECONDS)
        held = bool(ready) and os.read(grant, 1) == b"1"
        try:
            yield held
        finally:
            if held:
                os.write(ask, b"release\n")
    finally:
        os.close(ask)
        os.close(grant)


def autotuners(namespace: Mapping[str, Any]) -> list[Any]:
    """The Triton autotuners among ``namespace``'s values (also under ``triton.heuristics`` or another wrapper)."""
    from triton.runtime.autotuner import Autotuner

    found: list[Any] = []
    for value in list(namespace.values()):
        for _ in range(8):  # a wrapper keeps what it wraps in .fn
            if isinstance(value, Autotuner) and not any(value is seen for seen in found):
                found.append(value)
            try:
                value = None if isinstance(value, type) else getattr(value, "fn", None)
            except Exception:  # a value whose attribute lookup raises wraps no autotuner we could find
                value = None
            if value is None:
                break
    return found


def forget_choices(tuners: list[Any]) -> None:
    """Make each autotuner benchmark its configurations again at its next call (its kernels stay compiled)."""
    for tuner in tuners:
        tuner.cache.clear()
        tuner.cache_results = False  # not from the disk cache written while the GPU was shared


def candidates(tuner: Any, most: int | None = None) -> list[Any]:
    """The ``most`` (default RETIMED) fastest configurations of ``tuner``'s last benchmark, fastest first ([] if
    it has none)."""
    most = RETIMED if most is None else most
    timings = getattr(tuner, "configs_timings", None) or {}

    def ms(timing: Any) -> float:  # a timing is a number, or (median, low, high) quantiles
        return float(timing[0] if isinstance(timing, list | tuple) else timing)

    return sorted(timings, key=lambda config: ms(timings[config]))[:most]


@contextlib.contextmanager
def choosing_again(tuners: list[Any], most: int | None = None) -> Iterator[bool]:
    """Inside the block, each autotuner whose last benchmark timed more than one configuration chooses again among
    its ``candidates`` at its next call; yields whether any will. Their full lists come back after the block (the
    choice stays in each one's cache)."""
    saved = [(tuner, tuner.configs) for tuner in tuners]
    retuned = False
    for tuner in tuners:
        chosen_from = candidates(tuner, most)
        if len(chosen_from) > 1:
            forget_choices([tuner])
            tuner.configs = chosen_from
            retuned = True
    try:
        yield retuned
    finally:
        for tuner, configs in saved:
            tuner.configs = configs
