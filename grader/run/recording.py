"""What a notebook's run records for the judge: its plan (master cells, tests, the answers they read), each
graded function's calls with their secret seeds, and the recording cell appended to the notebook.
"""

from __future__ import annotations

import ast
import builtins
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

from course import spec as specs
from grader.authoring.release import master_version
from grader.flow.settings import Settings
from grader.intake.layout import (
    CourseNotebook,
)
from grader.judge import parts
from grader.score import score

JUDGE_NAMESPACE = {"course", "math", "np", "torch"}


RECORDING_CELL = "recording"


WALL_NOTEBOOK = "wall.ipynb"  # the sanitized notebook with its hidden tests cleared: all a sandbox is given of it


def answer_names(tests: list[dict[str, str]]) -> list[str]:
    """Names the master test cells read but do not define: the answers the sandbox must export."""
    names: set[str] = set()
    for test in tests:
        tree = ast.parse(test["source"])
        loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        names |= loaded - stored
    return sorted(names - set(dir(builtins)) - JUDGE_NAMESPACE)


@dataclass(frozen=True)
class Plan:
    """What one notebook's grading records and judges: its master cells, tests and kernel calls."""

    notebook: CourseNotebook
    master: nbformat.NotebookNode
    tests: list[dict[str, str]]
    answers: list[str]


def notebook_plan(notebook: CourseNotebook) -> Plan:
    master = master_version(notebook)
    tests = score.test_cells(master, specs.for_notebook(notebook.key))
    return Plan(notebook, master, tests, answer_names(tests))


def kernel_calls(notebook: CourseNotebook, settings: Settings, run_seed: int, student: str,
                 bench_only: bool = False) -> list[dict[str, Any]]:
    """Each graded function's calls: the judged shapes (secret seeds) and, on a GPU, the benchmark shapes."""
    on_gpu = settings.device == "gpu"
    jobs = []
    for spec in specs.for_notebook(notebook.key):
        calls = []
        for which in ("visible", "hidden"):
            if bench_only:
                break
            for i, shape in enumerate(specs.judged_shapes(spec, which, on_gpu, run_seed)):
                key = f"{which}-{i}"
                calls.append({"key": key, "set": which, "shape": list(shape),
                              "seed": parts.derive_seed(run_seed, student, spec.id, key)})
        # Only a kernel with performance items is timed. The TA's override applies to the specs whose shapes
        # it fits (a notebook may grade a matmul and a copy); the others keep their own benchmark shapes.
        timed = on_gpu and spec.kind == "kernel" and bool(spec.thresholds)
        override = [s for s in settings.bench_shapes or [] if len(s) == len(spec.dims)]
        bench = [list(s) for s in (override or spec.bench_shapes.gpu)] if timed else []
        for i, shape in enumerate(bench):
            calls.append({"key": f"bench-{i}", "set": "bench", "shape": shape, "seed": 0})
        jobs.append({"spec": spec.id, "calls": calls, "bench_shapes": bench})
    return jobs


def _recording_request(jobs: list[dict[str, Any]], plan: Plan, device: str, scratch: Path) -> dict[str, Any]:
    """What the sandbox records. A kernel's inputs use public seeds: the judge's stay secret (it replays)."""
    recorded = []
    for job in jobs:
        # A host function's value is checked as returned, so it must see the judge's inputs.
        secret = specs.get(job["spec"]).kind == "kernel"
        calls = [{"key": c["key"], "shape": c["shape"], "seed": i if secret else c["seed"]}
                 for i, c in enumerate(job["calls"])]
        # On a GPU a warm-up call first (compiling and autotuning): a function that keeps its output between
        # calls then returns memory the recorded call did not allocate, which cannot be replayed. On a CPU the
        # interpreter neither compiles nor tunes, and a first call's plan is replayed like any other: no warm-up
        # (it would double the interpreter's time, which the replay spends again).
        recorded.append({"spec": job["spec"], "calls": calls, "warmup": device == "gpu"})
    return {"out": str(scratch / "export"), "device": "cuda" if device == "gpu" else "cpu",
            "answers": plan.answers, "kernels": recorded}


def with_recording_cell(nb: nbformat.NotebookNode, request_path: Path) -> nbformat.NotebookNode:
    nb = nbformat.from_dict(json.loads(nbformat.writes(nb)))
    cell = nbformat.v4.new_code_cell(
        "# Added by the grader: records your graded functions' launch plans and your answers for the judge.\n"
        f"import course.recorder.export\ncourse.recorder.export.write(globals(), {str(request_path)!r})")
    cell.metadata["tags"] = [RECORDING_CELL]
    nb.cells.append(cell)
    return nb
