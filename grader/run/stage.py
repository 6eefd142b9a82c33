"""The run stage: the sanitized notebook and its recording cell run once in the sandbox (once more where a
neighbour's memory stop cost it its GPU allocation), and what it exported read back.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import nbformat

from grader.flow.task import Staged, Task, _job, _keep
from grader.gpu.gpu_gate import Pausable
from grader.intake.sanitize import for_the_sandbox
from grader.judge import exported as judge_export
from grader.run.execute import Outcome, execute
from grader.run.failure import _executed_cells
from grader.run.recording import WALL_NOTEBOOK, _recording_request, kernel_calls, with_recording_cell
from grader.score import results
from grader.wall import scratch_folders


def run_stage(task: Task, pause: Pausable | None = None) -> Staged:
    """The notebook's run in the sandbox with the recording cell (on its GPU, shared); never raises for anything
    the notebook does. ``pause``: its handle at the GPU gate. A run whose GPU allocation failed while the gate
    stopped another run of its GPU for holding too much memory runs once more: the memory was not its to lose."""
    jobs = kernel_calls(task.plan.notebook, task.settings, task.run_seed, task.key, task.bench_only)
    began = time.monotonic()
    outcome, exported = _run_once(task, jobs, pause)
    if pause is not None and pause.gate is not None and _ran_out_of_gpu_memory(task.run / "executed.ipynb") \
            and any(gpu == pause.gpu and when >= began and status == results.GPU_MEMORY
                    for gpu, when, status in pause.gate.stops):
        first = outcome.timings.get("notebook", 0.0)
        outcome, exported = _run_once(task, jobs, pause)
        outcome.timings["notebook_before_a_neighbours_memory_stop"] = first
    return Staged(outcome, jobs, exported)


def _run_once(task: Task, jobs: list[dict[str, Any]], pause: Pausable | None) -> tuple[Outcome, dict[str, Any]]:
    task.run.mkdir(parents=True, exist_ok=True)
    for stale in ("executed.ipynb", "outcome.json", "verdict.json"):
        (task.run / stale).unlink(missing_ok=True)
    for stale in ("export", "built", "judge-parts", "replayed"):
        shutil.rmtree(task.run / stale, ignore_errors=True)
    scratch = scratch_folders.make_scratch()
    try:
        request = _recording_request(jobs, task.plan, task.settings.device, scratch)
        (scratch / "request.json").write_text(json.dumps(request), encoding="utf-8")
        seen = for_the_sandbox(task.notebook)
        nbformat.write(seen, str(task.run / WALL_NOTEBOOK))  # what the build and the CPU replay read, too
        nbformat.write(with_recording_cell(seen, scratch / "request.json"), str(scratch / "submission.ipynb"))
        outcome = execute(_job(task, scratch, task.run / "sandbox.log"), pause)
        _keep(scratch, task.run)
        exported = judge_export.read_export(task.run / "export")
        recording = exported.get("seconds")
        if isinstance(recording, float):  # reported from inside the sandbox: shown, never used to score
            outcome.timings["recording"] = recording
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return outcome, exported


_OUT_OF_MEMORY = ("out of memory", "OutOfMemoryError", "CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation")


def _ran_out_of_gpu_memory(executed: Path) -> bool:
    """Whether a cell of the executed notebook failed for want of GPU memory."""
    for cell in _executed_cells(executed):
        for output in cell.get("outputs") or []:
            if isinstance(output, dict) and output.get("output_type") == "error":
                text = f"{output.get('ename', '')}: {output.get('evalue', '')}"
                if any(marker in text for marker in _OUT_OF_MEMORY):
                    return True
    return False
