"""Device work of a chosen duration that runs asynchronously, as every GPU launch does (Week 1, Day 2).

The work itself lives beside the day's spec, in ``course.exercises.async_device``: the graded timer is judged
on it, and the grader loads specs without any day helper. This name is the one the day's notebook imports.
"""

from __future__ import annotations

from course.exercises.async_device import (  # noqa: F401 (re-exported for the notebook)
    DEVICES,
    MAX_LAUNCH_MS,
    SIMULATED,
    SPIN_JIT_OPTIONS,
    SimulatedDevice,
    Workload,
    launch,
    prepare,
    spin_body,
    synchronize,
)
