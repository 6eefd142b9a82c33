"""Correctness of a student's function against an exercise spec.

Each shape gets fresh seeded random inputs; the call runs under ``course.guard.Guard`` with
allocations poisoned (NaN), so library matmuls are refused and unwritten elements show; the output's
type, shape and device are checked, then its relative error against the spec's higher-precision
reference. NaN and Inf never pass. Messages say which shape failed, by how much, and where.
A host function (``kind="host"``: plain Python) runs without the guard, and what it returns is judged
as the grader's judge will receive it (``as_exported``); a spec's ``accept`` rule, where it has one,
replaces the relative-error test.

On a CPU (the Triton interpreter) ``check`` first prints the known interpreter/GPU divergences found
in the source of the kernels the function launches (``course.divergence``). An exercise that forbids
some library calls (``ExerciseSpec.forbidden_calls``) fails every shape of a function whose kernels
make them, on either device.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from course import device, divergence, record
from course.guard import ForbiddenCallError, Guard, KernelDefinedTooEarly, user_cuda_kernels
from course.recorder import plan
from course.spec import TOLERANCES, ExerciseSpec, Shape, get

VISIBLE = "visible"
HIDDEN = "hidden"


@dataclass
class CheckResult:
    spec_id: str
    shape: Shape
    passed: bool
    message: str
    rel_error: float | None = None
    tolerance: float | None = None
    seconds: float = 0.0

    def line(self) -> str:
        mark = "PASS" if self.passed else "FAIL"
        return f"[{mark}] {self.message}"


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in fp64; NaN or Inf anywhere in ``out`` gives inf."""
    out64 = out.detach().to(torch.float64)
    ref64 = ref.detach().to(out64.device, torch.float64)
    if not torch.isfinite(out64).all():
        return math.inf
    denominator = torch.linalg.vector_norm(ref64).item()
    numerator = torch.linalg.vector_norm(out64 - ref64).item()
    return numerator / denominator if denominator > 0 else numerator


def _worst_element(out: torch.Tensor, ref: torch.Tensor) -> str:
    out64 = out.detach().to(torch.float64)
    ref64 = ref.detach().to(out64.device, torch.float64)
    bad = ~torch.isfinite(out64)
    if bad.any():
        count = int(bad.sum())
        index = tuple(int(i) for i in torch.nonzero(bad)[0])
        return (
            f"{count} of {out64.numel()} elements are NaN or Inf, first at {index} "
            "(NaN usually means the element was never written: check your masks and grid)"
        )
    diff = (out64 - ref64).abs()
    flat = int(torch.argmax(diff))
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape))
    return f"worst element at {index}: got {out64[index].item():.6g}, expected {ref64[index].item():.6g}"


def _explain_exception(error: BaseException) -> str:
    if isinstance(error, ForbiddenCallError | KernelDefinedTooEarly):
        return str(error)
    if isinstance(error, NotImplementedError):
        return "not implemented yet: the function still raises NotImplementedError"
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (line {frames[-1].lineno} of {frames[-1].name})" if frames else ""
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    return f"raised {type(error).__name__}{where}: {first}"[:500]


def compare(spec: ExerciseSpec, shape: Shape, out: Any, ref: Any, on: str) -> CheckResult:
    """Judge one output against the reference for ``shape``."""
    label = spec.shape_label(shape)

    def fail(message: str, rel: float | None = None) -> CheckResult:
        return CheckResult(spec.id, shape, False, f"{label}: {message}", rel, spec.tolerance)

    if isinstance(out, torch.Tensor):
        expected_shape = tuple(spec.output_shape(shape))
        if tuple(out.shape) != expected_shape:
            return fail(f"output shape {tuple(out.shape)}, expected {expected_shape}")
        if out.dtype != spec.output_dtype:
            return fail(f"output dtype {out.dtype}, expected {spec.output_dtype} (no downcasting)")
        if out.device.type != on:
            return fail(f"output is on {out.device.type}, expected {on}")
    elif spec.accept is None or isinstance(ref, torch.Tensor):  # a tensor answer needs a tensor
        expected = "a NumPy array or a torch.Tensor" if spec.kind == "host" else "a torch.Tensor"
        return fail(f"returned {type(out).__name__}, expected {expected}")
    if spec.accept is not None:
        passed, message = spec.accept(out, ref, shape)
        return CheckResult(spec.id, shape, bool(passed), f"{label}: {message}", None, spec.tolerance)
    rel = relative_error(out, ref)
    if rel <= spec.tolerance:
        return CheckResult(
            spec.id, shape, True, f"{label}: relative error {rel:.2e} <= {spec.tolerance:.0e}", rel, spec.tolerance
        )
    return fail(f"relative error {rel:.2e} > {spec.tolerance:.0e}; {_worst_element(out, ref)}", rel)


def as_exported(value: Any, depth: int = 0) -> tuple[Any, str | None]:
    """A host function's returned value as the grader's judge receives it, or why the grader refuses it.

    The same rules as ``course.recorder.export``: exact built-in types, lists, tuples and dicts of them, and
    numeric arrays (a NumPy array arrives as a torch.Tensor). A NumPy scalar or a subclass is refused.
    """
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value, None
    if kind in (list, tuple, dict) and depth < 16:
        if kind is dict and not all(type(k) is str for k in value):
            return None, "a dict whose keys are not all str"
        keys = list(value) if kind is dict else range(len(value))
        converted = []
        for key in keys:
            item, problem = as_exported(value[key], depth + 1)
            if problem:
                return None, problem
            converted.append(item)
        return (dict(zip(keys, converted, strict=True)) if kind is dict else kind(converted)), None
    if kind in (np.ndarray, torch.Tensor):
        array = value.detach().cpu() if kind is torch.Tensor else value
        if kind is np.ndarray:
            if array.dtype.kind not in "biuf":
                return None, f"an array of {array.dtype}"
            array = torch.from_numpy(np.ascontiguousarray(array))
        return array, None
    if isinstance(value, np.generic):
        return None, f"a NumPy scalar ({kind.__name__}): convert it with float() or int()"
    return None, f"a value of type {kind.__module__}.{kind.__qualname__}"


def _check_host(spec: ExerciseSpec, fn: Callable[..., Any], shape: Shape, seed: int) -> CheckResult:
    """Call a host function once and judge its value the way the grader's judge does.

    No guard (plain Python is the exercise); the value is seen as the judge receives it (``as_exported``),
    and the reference is made afterwards from fresh inputs of the same seed, never from inputs the
    function has used.
    """
    label = spec.shape_label(shape)
    on = device.info().torch_device
    started = time.perf_counter()
    try:
        out, problem = as_exported(fn(*spec.make_inputs(shape, seed, on)))
    except Exception as error:  # a student's function may raise anything; it becomes a message
        out, problem = None, _explain_exception(error)
    else:
        if problem:
            problem = f"the grader does not accept what it returned: {problem}"
    seconds = time.perf_counter() - started
    if problem:
        result = CheckResult(spec.id, shape, False, f"{label}: {problem}")
    else:
        reference = spec.reference(spec.make_inputs(shape, seed, on))
        if isinstance(reference, torch.Tensor):
            reference = reference.cpu()
        result = compare(spec, shape, out, reference, "cpu")
    result.seconds = seconds
    return result


def check_one(spec: ExerciseSpec, fn: Callable[..., Any], shape: Shape, seed: int) -> CheckResult:
    """Run ``fn`` once on fresh inputs of ``shape`` under the guard and judge its output."""
    if spec.kind == "host":
        return _check_host(spec, fn, shape, seed)
    on = device.info().torch_device
    started = time.perf_counter()
    try:
        inputs = spec.make_inputs(shape, seed, on)
        reference = spec.reference(inputs)
        with Guard(poison=True) as guard:
            out, unreplayable = _call(spec, fn, inputs)
        if on == "cuda":
            torch.cuda.synchronize()
    except Exception as error:  # a student's function may raise anything; it becomes a message
        result = CheckResult(spec.id, shape, False, f"{spec.shape_label(shape)}: {_explain_exception(error)}")
        result.seconds = time.perf_counter() - started
        return result
    seconds = time.perf_counter() - started
    if spec.kind == "kernel" and not guard.launched and not (on == "cuda" and user_cuda_kernels(fn, *inputs)):
        result = CheckResult(
            spec.id, shape, False, f"{spec.shape_label(shape)}: no Triton or CUDA kernel was launched"
        )
    else:
        result = compare(spec, shape, out, reference, on)
        if result.passed and unreplayable:
            result = CheckResult(spec.id, shape, False, f"{spec.shape_label(shape)}: the values are right, but the "
                                 f"grader cannot replay this call: {unreplayable}")
    result.seconds = seconds
    return result


def _call(spec: ExerciseSpec, fn: Callable[..., Any], inputs: tuple[Any, ...]) -> tuple[Any, str | None]:
    """``fn(*inputs)``; for a kernel exercise, recorded as the grader records it, with the first reason its
    judge could not replay the call (e.g. a torch op such as ``x.contiguous()`` or ``x + y``), or None."""
    if spec.kind != "kernel":
        return fn(*inputs), None
    raised: list[Exception] = []

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as error:  # re-raised below, so the caller explains it as before
            raised.append(error)
            raise

    out, recorded = plan.record_call(call, tuple(inputs))
    if raised:
        raise raised[0]
    # Whether a kernel ran is check_one's own test (it also recognises CUDA C kernels).
    problems = [p for p in recorded["problems"] if not p.startswith("no Triton kernel was launched")]
    return out, problems[0] if problems else None


def shapes_for(spec: ExerciseSpec, which: str | Sequence[Shape]) -> tuple[Shape, ...]:
    if isinstance(which, str):
        shape_set = {VISIBLE: spec.visible_shapes, HIDDEN: spec.hidden_shapes}[which]
        return shape_set.for_device(device.info().has_gpu)
    return tuple(tuple(s) for s in which)


def warn_divergences(spec: ExerciseSpec, fn: Callable[..., Any]) -> list[divergence.Divergence]:
    """On a CPU, print the known interpreter/GPU divergences in the kernels ``fn`` launches; returns them."""
    if spec.kind != "kernel" or not device.info().interpret:
        return []
    try:
        found = divergence.check_function(fn, precision_matters=spec.tolerance < TOLERANCES["tf32"])
    except Exception:  # reading arbitrary student source must never break the check itself
        return []
    if found:
        print(divergence.report(found, getattr(fn, "__name__", "")))
    return found


def forbidden_problem(spec: ExerciseSpec, fn: Callable[..., Any]) -> str | None:
    """Why ``fn``'s kernels break the spec's ban on some library calls (e.g. tl.dot), or None."""
    if not spec.forbidden_calls:
        return None
    try:
        kernels, roots = divergence.kernels_of(fn)
        return divergence.forbidden_problem(kernels, roots, spec.forbidden_calls)
    except Exception:  # a preview only: the judge reads the launched kernels' source itself
        return None


def check(spec_id: str | ExerciseSpec, fn: Callable[..., Any], shapes: str | Sequence[Shape] = VISIBLE,
          seed: int = 0) -> list[CheckResult]:
    """Check ``fn`` on each shape ("visible", "hidden" or a list); never raises for a bad ``fn``."""
    spec = get(spec_id)
    results: list[CheckResult] = []
    warn_divergences(spec, fn)
    banned = forbidden_problem(spec, fn)
    if banned:
        return [CheckResult(spec.id, shape, False, f"{spec.shape_label(shape)}: {banned}")
                for shape in shapes_for(spec, shapes)]
    for i, shape in enumerate(shapes_for(spec, shapes)):
        if results and _gpu_unusable(results[-1]):
            # A CUDA error poisons the context: later shapes cannot run, and say so.
            results.append(CheckResult(spec.id, shape, False, f"{spec.shape_label(shape)}: not run, the GPU is "
                                       "unusable after the CUDA error above (restart the kernel)"))
            continue
        # Hidden shapes get other seeds than visible ones, so the two sets never share inputs.
        offset = 1000 if shapes == HIDDEN else 0
        with record.timed_phase("checks"):
            result = check_one(spec, fn, shape, seed + offset + i)
        record.event("check", which=shapes if isinstance(shapes, str) else "custom", **asdict(result))
        results.append(result)
    return results


def _gpu_unusable(result: CheckResult) -> bool:
    return not result.passed and ("CUDA error" in result.message or "AcceleratorError" in result.message)


def assert_correct(spec_id: str | ExerciseSpec, fn: Callable[..., Any],
                   shapes: str | Sequence[Shape] = VISIBLE, seed: int = 0) -> None:
    """Check ``fn`` and raise ``AssertionError`` listing every failing shape; print a summary.

    When the grader runs the notebook this preview is skipped: the judge decides, from the recorded plan.
    A CUDA C exercise without a GPU prints that it is pending and raises nothing.
    """
    spec = get(spec_id)
    if device.grading():
        warn_divergences(spec, fn)
        print(f"{spec.title}: checked by the grader's judge, outside this notebook")
        return
    if spec.language == "cuda" and not device.info().has_gpu:
        print(f"{spec.title}: pending a GPU run (CUDA C kernels cannot run without a GPU; the grader's GPU "
              "judge checks them)")
        return
    results = check(spec, fn, shapes, seed)
    report = "\n".join(r.line() for r in results)
    if not all(r.passed for r in results):
        failed = sum(not r.passed for r in results)
        raise AssertionError(f"{spec.title}: {failed} of {len(results)} shapes failed\n{report}")
    print(f"{spec.title}: all {len(results)} shapes correct\n{report}")
