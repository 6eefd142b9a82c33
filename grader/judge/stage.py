"""The judge stage: the judge's job for one notebook, run in-process (CPU) or in a watched process of its own
(GPU, held alone at the gate), with each replay's limit from the reference's timings.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from grader.flow.settings import Settings
from grader.flow.task import Graded, Staged, Task, _grader_fault, grader_environment
from grader.gpu import gpu_nodes
from grader.gpu.gpu_gate import GpuGate
from grader.judge import verdict as judge
from grader.judge import watchdog
from grader.score import results
from grader.wall import scratch_folders

JUDGE_MODULE = "grader.judge.verdict"


def _judge(task: Task, judge_job: dict[str, Any], gpu: str, gate: GpuGate | None) -> dict[str, Any]:
    path = task.run / "judge.json"
    path.write_text(json.dumps(judge_job), encoding="utf-8")
    if task.settings.device != "gpu":
        try:
            return judge.judge(judge_job)
        except Exception as error:  # the judge's own fault: a grader_error, never a student's zero
            return {"error": f"the judge failed: {type(error).__name__}: {error}"[:500]}
    scratch = scratch_folders.make_scratch("gpu-course-judge-")
    # Only judges write this cache, and only from course-built TTGIR (keyed by its hash), so it is shared.
    cache = task.judge_cache or scratch / "triton-cache"
    env = grader_environment(dict(os.environ, TRITON_CACHE_DIR=str(cache),
                                  CUDA_VISIBLE_DEVICES=gpu_nodes.cuda_visible(gpu)))
    # setpriv --pdeathsig: the judge dies with the grader, even when the grader is killed outright.
    guard = [setpriv, "--pdeathsig", "KILL", "--"] if (setpriv := shutil.which("setpriv")) else []
    try:
        return watchdog.run([*guard, sys.executable, "-P", "-m", JUDGE_MODULE, str(path)], judge_job, env, scratch,
                            task.run / "judge.log", task.settings.judge_timeout, gate, gpu)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _replay_watchdog(task: Task) -> dict[str, Any]:
    """The judge's per-replay limits: the floor and factor, and each kernel's reference seconds per unit of work."""
    per_work: dict[str, float] = {}
    try:
        kernels = results.read_json(Path(task.reference["verdict"])).get("kernels") if task.reference else {}
    except (OSError, ValueError, KeyError):
        kernels = {}
    for spec_id, kernel in (kernels or {}).items():
        rows = (kernel.get("bench") or {}).get("rows") or []
        rates = [row["student_ms"] / 1000 / row["work"] for row in rows if row.get("student_ms") and row.get("work")]
        if rates:
            per_work[spec_id] = max(rates)
    return {"floor": task.settings.replay_floor, "factor": task.settings.replay_factor, "reference": per_work}


def note_gpu_trouble(settings: Settings, gpu: str, verdict: dict[str, Any]) -> None:
    """Tell the TA, once per kind of trouble, when a judge could not be sure it had ``gpu`` alone (the gate's notes:
    no utilisation to read, or a GPU that stayed busy with the runs paused)."""
    for note in verdict.get("gpu_notes") or []:
        line = f"GPU {gpu}: {note}: timings taken then may include other notebooks' work"
        if line not in settings.notes:
            settings.notes.append(line)


def judge_stage(task: Task, staged: Staged, gpu: str | None = None, gate: GpuGate | None = None) -> Graded:
    """The judge's checks and timings (on a GPU: ``gpu``, held alone at ``gate`` while it replays and times)."""
    if staged.failed is not None:
        return staged.failed
    outcome = staged.outcome
    judge_job = {"device": task.settings.device, "export": str(task.run / "export"), "built": str(task.run / "built"),
                 "notebook": str(task.run / "sanitized.ipynb"),
                 "reference": task.reference, "run_seed": task.run_seed, "student": task.key, "kernels": staged.jobs,
                 "tests": task.plan.tests, "verdict": str(task.run / "verdict.json"),
                 "checkpoints": str(task.run / "judge-parts"), "watchdog": _replay_watchdog(task),
                 "replayed": str(task.run / "replayed"), "replay_error": staged.replay_error}
    verdict = _judge(task, judge_job, gpu or task.gpu or "0", gate)
    results.write_json_atomic(task.run / "verdict.json", verdict)
    note_gpu_trouble(task.settings, gpu or task.gpu or "0", verdict)
    for name, seconds in (verdict.get("seconds") or {}).items():
        outcome.timings[name] = float(seconds)
    if verdict.get("error"):
        return Graded(_grader_fault(outcome, str(verdict["error"])), verdict, outcome.status)
    return Graded(outcome, verdict)
