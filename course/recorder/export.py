"""What leaves the sandbox after a graded run: launch plans and answers, as plain data.

The grader appends one cell to the notebook it runs; that cell calls ``write(globals(), request)``.
For each graded function named in the request it records the launch plan of one call per judged
shape (``course.recorder.plan``), which the judge replays (on a CPU: ``grader.replay.replay_cpu``). The values of the
answer variables the grader's test cells read are written as JSON (exact built-in types only:
a subclass of ``int`` is reported as an unsupported type, never as an ``int``), arrays as ``.npy``.
Each answer and each graded function is encoded on its own: one that cannot be encoded becomes an
``{"unsupported": why}`` answer or an ``{"error": why}`` entry, and the others are exported as usual.
Nothing here is trusted by the grader: it is data for the judge to check.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from course import spec
from course.recorder import alone, plan

MAX_DEPTH = 16
MAX_ITEMS = 10_000
# Python refuses to turn an int of more than 4300 digits into text (sys.get_int_max_str_digits), and JSON is text.
MAX_INT_DIGITS = 4300


def encode_answer(value: Any, arrays: Path, name: str, depth: int = 0) -> dict[str, Any]:
    """Tagged JSON for one answer value; arrays go to ``arrays/<name>.npy``."""
    kind = type(value)
    if kind is int and (abs(value).bit_length() - 1) * math.log10(2) >= MAX_INT_DIGITS:
        return {"unsupported": f"an int of more than {MAX_INT_DIGITS} digits, which Python will not write as text"}
    if value is None or kind in (bool, int, str):
        return {"value": value}
    if value is Ellipsis:  # a quiz answer still at its placeholder: the test cell says "not answered yet"
        return {"ellipsis": True}
    if kind is float:
        return {"value": value} if math.isfinite(value) else {"float": repr(value)}
    if depth < MAX_DEPTH and kind in (list, tuple) and len(value) <= MAX_ITEMS:
        items = [encode_answer(v, arrays, f"{name}.{i}", depth + 1) for i, v in enumerate(value)]
        return {kind.__name__: items}
    if depth < MAX_DEPTH and kind is dict and len(value) <= MAX_ITEMS and all(type(k) is str for k in value):
        return {"dict": {k: encode_answer(v, arrays, f"{name}.{k}", depth + 1) for k, v in value.items()}}
    if kind in (np.ndarray, torch.Tensor):
        array = value.detach().cpu().numpy() if kind is torch.Tensor else value
        if array.dtype.kind not in "biuf":
            return {"unsupported": f"an array of {array.dtype} (only numbers and booleans)"}
        arrays.mkdir(parents=True, exist_ok=True)
        path = arrays / f"{len(list(arrays.iterdir()))}.npy"
        np.save(path, np.ascontiguousarray(array), allow_pickle=False)
        return {"array": path.name, "torch": kind is torch.Tensor}
    return {"unsupported": f"a value of type {kind.__module__}.{kind.__qualname__}"}


# NumPy has no bfloat16: a bf16 output travels as its raw 16 bits, marked so, and the judge views them back.


def _call_host(fn: Any, inputs: tuple[Any, ...], arrays: Path, name: str) -> dict[str, Any]:
    """A host function's returned value, as data (no plan: its speed is not graded)."""
    try:
        return {"value": encode_answer(fn(*inputs), arrays, name)}
    except Exception as error:  # a student's function may raise anything; the judge reports it
        return {"error": f"the function raised {type(error).__name__}: {str(error)[:300]}"}


def _alternatives(fn: Callable[..., Any], inputs: tuple[Any, ...], tuners: list[Any]) -> list[dict[str, Any]]:
    """One plan per candidate configuration of each autotuner that benchmarked more than one (the others keep the
    run's choice), for the judge to time with the GPU held alone: the run's benchmark shared the GPU with other
    runs, so its choice is only a hint ([] where no autotuner had a choice to make)."""
    found = []
    for tuner in tuners:
        configs = alone.candidates(tuner)
        if len(configs) < 2:
            continue
        picked = getattr(tuner, "best_config", None)
        for config in configs:
            with alone.forcing(tuner, config):
                _, recorded = plan.record_call(fn, inputs)
            found.append({"config": str(config)[:300], "run_picked": config is picked, "plan": recorded})
    return found


def _record_kernel(namespace: dict[str, Any], job: dict[str, Any], device: str, arrays: Path) -> dict[str, Any]:
    exercise = spec.get(job["spec"])
    fn = namespace.get(exercise.function)
    if not callable(fn):
        return {"error": f"the notebook defines no function {exercise.function!r} (its cell may have failed "
                         "or been deleted)", "calls": {}}
    calls = {}
    for call in job["calls"]:
        shape, started = tuple(call["shape"]), time.perf_counter()
        if exercise.kind == "host":
            # The inputs are made inside the hold: the grader's drain before it would finish the work they queue.
            with alone.gpu_alone() if exercise.timed_in_run else contextlib.nullcontext():
                inputs = exercise.make_inputs(shape, int(call["seed"]), device)
                calls[call["key"]] = _call_host(fn, inputs, arrays, f"{exercise.id}-{call['key']}")
            calls[call["key"]]["seconds"] = time.perf_counter() - started
            continue
        inputs = exercise.make_inputs(shape, int(call["seed"]), device)
        if job.get("warmup"):
            plan.install()  # its checks apply to the warm-up call too (e.g. descriptors past their tensor)
            warm = exercise.make_inputs(shape, int(call["seed"]), device)
            # Only a benchmark call's plan is timed by the judge: there it times every candidate configuration.
            tuners = alone.autotuners(namespace) if device == "cuda" and call["key"].startswith("bench-") else []
            alone.forget_choices(tuners)  # this shape's benchmarks, not an earlier call's, rank the candidates
            try:  # compiles and autotunes outside the recording, on inputs of its own
                fn(*warm)
                if device == "cuda":
                    torch.cuda.synchronize()
            except Exception:  # the recorded call reports the same failure
                pass
            del warm
        else:
            tuners = []
        out, recorded = plan.record_call(fn, inputs)
        calls[call["key"]] = {"plan": recorded}
        alternatives = _alternatives(fn, inputs, tuners) if tuners and not recorded["problems"] else []
        if alternatives:
            calls[call["key"]]["alternatives"] = alternatives
        calls[call["key"]]["seconds"] = time.perf_counter() - started
        del out, inputs
    return {"calls": calls}


def _encoded(encode: Callable[[], dict[str, Any]], failed: str, what: str) -> str:
    """One entry of the export as JSON text; ``{failed: why}`` when it cannot be encoded, so only it is lost."""
    try:
        return json.dumps(encode())
    except Exception as error:  # e.g. a value Python will not write as text: this entry only
        return json.dumps({failed: f"{what} could not be exported ({type(error).__name__}: {error})"[:500]})


def _json_object(entries: dict[str, str]) -> str:
    return "{" + ", ".join(f"{json.dumps(key)}: {text}" for key, text in entries.items()) + "}"


def write(namespace: dict[str, Any], request_path: str) -> None:
    """Record what the request asks for from the notebook's ``namespace`` into the request's folder."""
    request = json.loads(Path(request_path).read_text(encoding="utf-8"))
    out = Path(request["out"])
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    answers = {}
    for name in request.get("answers", []):
        answers[name] = _encoded(lambda n=name: encode_answer(namespace[n], out / "arrays", n) if n in namespace
                                 else {"missing": True}, "unsupported", "the value")
    kernels, calls, failures = {}, 0, []
    device = request["device"]
    for job in request.get("kernels", []):
        try:
            recorded = _record_kernel(namespace, job, device, out / "arrays")
        except Exception as error:  # e.g. out of memory while making inputs: reported, not raised
            recorded = {"error": f"recording failed: {type(error).__name__}: {error}"[:500], "calls": {}}
            failures.append(recorded["error"])
        calls += len(recorded["calls"])
        kernels[job["spec"]] = _encoded(lambda r=recorded: r, "error", "the launch plan")
    seconds = json.dumps(time.perf_counter() - began)
    text = f'{{"answers": {_json_object(answers)}, "kernels": {_json_object(kernels)}, "seconds": {seconds}}}'
    (out / "export.json").write_text(text, encoding="utf-8")
    print(f"grader: recorded {calls} kernel calls and {len(answers)} answers for the judge")
    if failures:  # shown as this cell's error, so the run's status says what went wrong (e.g. a CUDA error)
        raise RuntimeError(failures[0])
