"""The CPU judge: the outputs of the sandboxed CPU replay (and of host exercises) compared with the reference;
provisional verdicts, neither precision nor speed measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from grader.judge import ir_rules, provenance
from grader.judge.exported import Unsupported, _calls_of, decode_answer, read_export
from grader.judge.kernel_source import _allowed, _notebook_cells, _read_definitions, divergence_notes, forbidden_problem
from grader.judge.parts import bounded
from grader.kernel_build import build_kernels


def read_replayed(folder: Path) -> dict[str, Any]:
    """What the CPU replay (``grader.replay.replay_cpu``) returned: spec id -> call key -> its output file or an
    error."""
    path = folder / "replayed.json"
    if not path.is_file() or path.stat().st_size > 2**20:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _cpu_check(spec: Any, call: dict[str, Any], recorded: Any, replayed: Any, outputs: Path,
               definitions: build_kernels.Definitions,
               built: tuple[dict[str, str], dict[str, str]] | None = None) -> tuple[bool, str]:
    """Provisional: the output of the plan's replay on the judge's inputs against the reference for their seed."""
    import torch

    from course.check import compare
    from course.recorder.plan_format import BF16_BITS

    shape = tuple(call["shape"])
    label = spec.shape_label(shape)
    plan = recorded.get("plan") if isinstance(recorded, dict) else None
    if not isinstance(plan, dict):
        return False, f"{label}: no launch plan was recorded"
    if plan.get("problems"):
        return False, f"{label}: {plan['problems'][0]}"
    if not plan.get("launches"):
        return False, f"{label}: no Triton kernel was launched by the graded function"
    for launch in plan["launches"]:
        problem = build_kernels.kernel_problem(definitions, str(launch.get("kernel")))
        if problem:  # the GPU judge would refuse to build it: say so now
            return False, f"{label}: {problem}"
    banned = forbidden_problem(spec, plan, definitions)
    if not banned and built is not None:  # the kernels as compiled for a nominal GPU (grader.judge.ir_rules)
        banned = ir_rules.plan_problem(plan, *built, spec.forbidden_calls)
    if banned:
        return False, f"{label}: {banned}"
    if not isinstance(replayed, dict):
        return False, f"{label}: not replayed"
    if replayed.get("error"):
        return False, f"{label}: {str(replayed['error'])[:600]}"
    name = replayed.get("output")
    path = outputs / Path(str(name)).name if name else None
    if path is None or not path.is_file():
        return False, f"{label}: the replay returned no output"
    out = torch.from_numpy(np.load(path, allow_pickle=False))
    if replayed.get("output_dtype") == BF16_BITS:  # NumPy has no bf16: the replay kept its bits
        if out.dtype != torch.int16:
            return False, f"{label}: the output's bf16 bits are malformed"
        out = out.view(torch.bfloat16)
    reference = spec.reference(spec.make_inputs(shape, call["seed"], "cpu"))
    result = compare(spec, shape, out, reference, "cpu")
    return result.passed, result.message


def _host_check(spec: Any, call: dict[str, Any], recorded: Any, arrays: Path, on: str) -> tuple[bool, str]:
    """A host function's returned value (data from the sandbox) against the reference made here."""
    import torch

    from course.check import compare

    shape = tuple(call["shape"])
    label = spec.shape_label(shape)
    if not isinstance(recorded, dict) or "value" not in recorded:
        reason = recorded.get("error") if isinstance(recorded, dict) else None
        return False, f"{label}: {reason or 'no value was returned'}"
    value = decode_answer(recorded["value"], arrays)
    if isinstance(value, Unsupported):
        return False, f"{label}: returned {value!r}"
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    reference = spec.reference(spec.make_inputs(shape, call["seed"], on))
    if isinstance(reference, torch.Tensor):
        reference = reference.cpu()
    result = compare(spec, shape, value, reference, "cpu")
    return result.passed, result.message


def _judge_host(spec: Any, spec_job: dict[str, Any], export: dict[str, Any], arrays: Path, on: str) -> dict[str, Any]:
    calls, error = _calls_of(export, spec.id)
    sets: dict[str, Any] = {}
    for call in spec_job["calls"]:
        verdict = sets.setdefault(call["set"], {"passed": True, "messages": [], "provisional": False})
        if error or call["key"] not in calls:
            passed, message = False, f"{spec.shape_label(tuple(call['shape']))}: {error or 'not recorded'}"
        else:
            try:
                passed, message = _host_check(spec, call, calls[call["key"]], arrays, on)
            except Exception as failure:  # a value of the wrong kind makes a spec's check raise: a failed shape
                passed, message = False, f"{spec.shape_label(tuple(call['shape']))}: {type(failure).__name__}: " \
                                         f"{str(failure)[:300]}"
        verdict["passed"] &= passed
        verdict["messages"].append(("PASS " if passed else "FAIL ") + bounded(message))
    return {"sets": sets, "bench": {"measured": False, "reason": "a host function is not timed"}}


def judge_cpu(job: dict[str, Any]) -> dict[str, Any]:
    from course import spec as specs

    export = read_export(Path(job["export"]))
    replayed = read_replayed(Path(job["replayed"]))
    definitions = _read_definitions(job["notebook"])
    kernels = {}
    for spec_job in job["kernels"]:
        spec = specs.get(spec_job["spec"])
        if spec.kind == "host":
            kernels[spec.id] = _judge_host(spec, spec_job, export, Path(job["export"]) / "arrays", "cpu")
            continue
        if spec.language == "cuda":  # no interpreter for CUDA C: neither passed nor failed here
            sets = {call["set"]: {"pending": True, "passed": False, "provisional": True,
                                  "messages": ["pending a GPU run: CUDA C kernels run only on a GPU"]}
                    for call in spec_job["calls"]}
            kernels[spec.id] = {"sets": sets, "bench": {"measured": False, "reason": "pending a GPU run"}}
            continue
        calls, error = _calls_of(export, spec.id)
        allowed = _allowed(spec, _notebook_cells(job["notebook"])) if spec.kernel_cells else None
        built = ir_rules.read_built(Path(job["built"])) if spec.forbidden_calls else None
        results_of = replayed.get(spec.id) if isinstance(replayed.get(spec.id), dict) else {}
        sets: dict[str, Any] = {}
        for call in spec_job["calls"]:
            verdict = sets.setdefault(call["set"], {"passed": True, "messages": [], "provisional": True})
            if error or call["key"] not in calls:
                passed, message = False, f"{spec.shape_label(tuple(call['shape']))}: {error or 'not recorded'}"
            else:
                result = results_of.get(call["key"], {"error": f"not replayed: {job['replay_error']}"}
                                        if job.get("replay_error") else None)
                passed, message = _cpu_check(spec, call, calls[call["key"]], result,
                                             Path(job["replayed"]) / "outputs", definitions, built)
                foreign = passed and allowed and provenance.foreign_launch(calls[call["key"]].get("plan"), allowed)
                if foreign:
                    passed, message = False, f"{spec.shape_label(tuple(call['shape']))}: {foreign}"
            verdict["passed"] &= passed
            verdict["messages"].append(("PASS " if passed else "FAIL ") + bounded(message))
        notes = divergence_notes(spec, calls, definitions)
        for verdict in sets.values():
            verdict["messages"].extend(notes)
        kernels[spec.id] = {"sets": sets, "bench": {"measured": False, "reason": "pending a GPU run"}}
    return {"kernels": kernels}
