"""A judge for the watchdog's tests (``python -P -m tests.judge_hooks JOB.json``): grader.judge.verdict, where the
kernel verdicts are stand-ins, the graded function named by ``$HANG_SPEC`` runs a replay that never ends, and
the one named by ``$BREAK_SPEC`` asks to be started again, as after a CUDA error that broke the context. With
``$ALONE_SECONDS`` set, the verdicts are made holding the GPU alone (``watch.WATCH.alone``), taking that long,
after the judge has said it uses the GPU (``watch.WATCH.device``), and its CPU-only preparation before that writes
the wall-clock time it ended into ``$PREPARED_FILE`` where that is set.

It imports only through PYTHONPATH (``tests`` is not installed), as the real judge must find the grader.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

from course import spec as specs
from grader.judge import parts, watch
from grader.judge import verdict as judge


def _judge_cpu(job: dict[str, Any]) -> dict[str, Any]:
    alone = os.environ.get("ALONE_SECONDS")
    if alone:
        if os.environ.get("PREPARED_FILE"):
            with open(os.environ["PREPARED_FILE"], "w", encoding="utf-8") as prepared:
                prepared.write(repr(time.time()))
        watch.WATCH.device()
    with watch.WATCH.alone() if alone else contextlib.nullcontext():
        if alone:
            time.sleep(float(alone))
        return _verdicts(job)


def _verdicts(job: dict[str, Any]) -> dict[str, Any]:
    kernels = {}
    for spec_job in job["kernels"]:
        spec = specs.get(spec_job["spec"])
        if spec.id == os.environ.get("HANG_SPEC"):
            shape = tuple(spec_job["calls"][0]["shape"])
            with watch.WATCH.running(spec.id, f"its replay at {spec.shape_label(shape)}",
                                     watch.replay_limit(job, spec, shape)):
                time.sleep(600)
        sets = {call["set"]: {"passed": True, "provisional": False, "messages": ["PASS judged by the stand-in"]}
                for call in spec_job["calls"]}
        kernels[spec.id] = {"sets": sets, "bench": {"measured": False, "reason": "a stand-in", "rows": []}}
        if spec.id == os.environ.get("BREAK_SPEC"):  # as judge_gpu after a CUDA error, with functions left
            parts.Checkpoints(job["checkpoints"]).save(parts.kernel_part(spec.id), kernels[spec.id])
            raise watch.StartAgain(spec.id)
    return {"kernels": kernels}


judge.judge_cpu = _judge_cpu

if __name__ == "__main__":
    raise SystemExit(judge.main(sys.argv[1:]))
