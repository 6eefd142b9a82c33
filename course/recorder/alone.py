"""The recorder's asks for the GPU alone (the grader's side: ``grader.run.run_alone``), and autotuners' candidates.

Where several notebooks' runs share a GPU, the grader gives a run that asks the GPU alone for a moment: the
other runs are paused, this one goes on. The recorder asks around the only work of a run whose result depends
on how busy the GPU is: a host exercise whose answer is a time measured on the GPU. An autotuned kernel's choice
is not made here: the recorder keeps one plan per candidate configuration, and the judge times them with the GPU
held alone and grades the fastest (``grader.judge.config_choice``). Outside a grading run (no channel in the
environment) ``gpu_alone`` asks nothing.
"""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

ENV = "COURSE_GPU_ALONE"  # set by the grader (grader.run_alone.ENV) to the folder holding the two FIFOs
ANSWER_SECONDS = 600.0
# The judge times each candidate configuration of an autotuned kernel with the GPU held alone: at most this many
# per autotuner and graded call, the fastest of the run's own (shared, so only a hint) benchmark first. Eight holds
# every list in the course (Week 2 Day 7 declares 6 after pruning) and bounds a long list's GPU time alone.
JUDGED = 8


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


def candidates(tuner: Any, most: int = JUDGED) -> list[Any]:
    """The ``most`` fastest configurations of ``tuner``'s last benchmark, fastest first ([] if it has none)."""
    timings = getattr(tuner, "configs_timings", None) or {}

    def ms(timing: Any) -> float:  # a timing is a number, or (median, low, high) quantiles
        return float(timing[0] if isinstance(timing, list | tuple) else timing)

    return sorted(timings, key=lambda config: ms(timings[config]))[:most]


@contextlib.contextmanager
def forcing(tuner: Any, config: Any) -> Iterator[None]:
    """Inside the block ``tuner`` runs ``config`` without benchmarking (an autotuner with one configuration uses
    it); its list comes back after the block, and its cached choices were never touched."""
    saved = tuner.configs
    tuner.configs = [config]
    try:
        yield
    finally:
        tuner.configs = saved
