"""The build stage (no GPU): the notebook's kernels built from source in a fresh sandbox and, on a GPU, compiled
for it in the judge's cache; on a CPU, the plans replayed on the judge's inputs through the interpreter.
"""

from __future__ import annotations

import shutil
from typing import Any

from course import spec as specs
from course.recorder.plan_format import NOMINAL_TARGET
from grader.flow.settings import gpu_target
from grader.flow.task import Graded, Staged, Task, _grader_fault, _job
from grader.kernel_build.compile_ttgir import compile_built
from grader.run.execute import Outcome, build, replay_cpu
from grader.run.recording import WALL_NOTEBOOK
from grader.score import results
from grader.wall import scratch_folders

REPLAY_START_SECONDS = 120.0  # a CPU replay's sandbox and imports, on a loaded machine


COMPILE_SECONDS = 600.0  # the TTGIR compile stage's limit, as the build's (its failure only costs the judge time)


def _cpu_replays(jobs: list[dict[str, Any]], exported: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls a CPU grading replays: Triton kernels' (a host function's value is data, CUDA C waits for a GPU)
    whose plan has launches and no problem (the judge fails the others as recorded, with nothing to replay)."""
    replays = []
    kernels = exported.get("kernels") if isinstance(exported.get("kernels"), dict) else {}
    for job in jobs:
        spec = specs.get(job["spec"])
        if spec.kind != "kernel" or spec.language == "cuda":
            continue
        entry = kernels.get(spec.id)
        calls = entry.get("calls") if isinstance(entry, dict) and isinstance(entry.get("calls"), dict) else {}
        plans = {key: (call.get("plan") if isinstance(call, dict) else None) for key, call in calls.items()}
        kept = [c for c in job["calls"] if isinstance(plans.get(c["key"]), dict) and plans[c["key"]].get("launches")
                and not plans[c["key"]].get("problems")]
        if kept:
            replays.append({"spec": spec.id, "calls": kept})
    return replays


def build_stage(task: Task, staged: Staged) -> Staged:
    """The CPU's part (no GPU): the kernels built from source in a fresh sandbox and, on a GPU, compiled for it
    by the grader; on a CPU the plans replayed on the judge's inputs through the interpreter."""
    outcome, jobs = staged.outcome, staged.jobs
    on_gpu = task.settings.device == "gpu"
    # On a CPU the kernels are built (for a nominal GPU) only where an exercise bans some call: the ban is
    # checked on the compiled kernel (grader.judge.ir_rules).
    if on_gpu or any(specs.get(j["spec"]).forbidden_calls for j in jobs):
        fresh = scratch_folders.make_scratch("gpu-course-build-")
        try:
            built = build(_job(task, fresh, task.run / "build.log"), task.run / WALL_NOTEBOOK,
                          task.run / "export" / "export.json", gpu_target() if on_gpu else NOMINAL_TARGET,
                          task.run / "built")
            outcome.timings.update(built.timings)
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
        if built.status == results.BUILD_LIMIT:  # the student's kernels: nothing can be judged
            staged.failed = Graded(Outcome(results.BUILD_LIMIT, built.message, outcome.timings), None)
            return staged
        if built.status != results.OK:  # no kernel can be judged: nothing here is the student's zero
            staged.failed = Graded(_grader_fault(outcome, built.message), None, outcome.status)
            return staged
        if on_gpu and task.judge_cache:  # the judge then finds its kernels compiled in its cache
            outcome.timings.update(compile_built(task.run / "built", gpu_target(), task.judge_cache,
                                                 task.run / "compile.log", COMPILE_SECONDS).timings)
    replayed = [] if on_gpu else _cpu_replays(jobs, staged.exported)
    if replayed:  # the plans run again on the judge's inputs, in a sandbox holding only the kernels' source
        fresh = scratch_folders.make_scratch("gpu-course-replay-")
        try:
            # The recording cell ran the same launches within one cell's limit; the replay adds its start-up.
            done = replay_cpu(_job(task, fresh, task.run / "replay.log"), task.run / WALL_NOTEBOOK,
                              task.run / "export" / "export.json", replayed, task.run / "replayed",
                              task.settings.cell_timeout + REPLAY_START_SECONDS)
            staged.replay_error = done.message or None
            outcome.timings.update(done.timings)
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
    return staged
