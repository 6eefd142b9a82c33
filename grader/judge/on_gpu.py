"""The GPU judge: each graded function's plan replayed on the judge's inputs and checked, then timed beside the
reference's plan and the library at each benchmark shape, in this one process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grader.judge import config_choice, ir_rules, provenance
from grader.judge.exported import _calls_of, read_export
from grader.judge.kernel_source import _allowed, _notebook_cells, _read_definitions, forbidden_problem
from grader.judge.on_cpu import _judge_host
from grader.judge.parts import _record_fault, bounded, derive_seed
from grader.judge.watch import WATCH, StartAgain, replay_limit
from grader.replay import plan_checks


def judge_gpu(job: dict[str, Any], finished: Callable[[str, dict[str, Any]], None] = lambda *_: None,
              ) -> dict[str, Any]:
    """Replay and time every graded function of one notebook (run in a process of its own).

    ``finished(spec_id, verdict)`` is called as each function's verdict is made (the checkpoints of a
    watched judge). A failure of the judge itself on one function is reported and the others are judged.
    """
    import torch

    from course import device
    from course import spec as specs
    from grader.replay import gpu_replay as replay

    student_export = read_export(Path(job["export"]))
    reference_export = read_export(Path(job["reference"]["export"])) if job.get("reference") else {}
    # Until here no CUDA context and no GPU work (importing course asks the driver whether a GPU exists, nothing
    # more): a judge preparing beside another's timing is let be.
    WATCH.device()
    device.configure("gpu")
    started = time.perf_counter()
    student_kernels = replay.load_kernels(Path(job["built"]))
    reference_kernels = replay.load_kernels(Path(job["reference"]["built"])) if job.get("reference") else None
    compile_seconds = time.perf_counter() - started
    verdict: dict[str, Any] = {"kernels": {}, "seconds": {"judge_compile": compile_seconds}}
    # A kernel compiled here, not loaded from the cache grader.kernel_build.compile_ttgir filled, cost GPU time: made
    # visible.
    loads = [k for k in (student_kernels, reference_kernels) if k is not None]
    verdict["judge_kernels"] = {"loaded": sum(len(k.loaded) for k in loads),
                                "compiled": sum(len(k.compiled_here) for k in loads)}
    stream = torch.cuda.Stream()
    with WATCH.alone(), torch.cuda.stream(stream):
        # The judge's own seconds with the GPU alone: the grader's hold less this is its pausing and draining.
        alone_began = time.perf_counter()
        for spec_job in job["kernels"]:
            spec = specs.get(spec_job["spec"])
            try:
                if spec.kind == "host":
                    kernel = _judge_host(spec, spec_job, student_export, Path(job["export"]) / "arrays", "cuda")
                else:
                    kernel = _judge_spec(spec, spec_job, job, student_export, student_kernels,
                                         reference_export, reference_kernels)
            except Exception as error:  # the judge's own fault, never the student's: a grader_error
                _record_fault(verdict, f"judging {spec.id}", error)
                continue
            verdict["kernels"][spec.id] = kernel
            finished(spec.id, kernel)
            if (kernel.get("bench") or {}).get("broken") and job.get("checkpoints") and spec_job != job["kernels"][-1]:
                raise StartAgain(spec.id)
        verdict["seconds"]["in_hold"] = time.perf_counter() - alone_began
    verdict["seconds"]["judge"] = time.perf_counter() - started
    return verdict


def _judge_spec(spec: Any, spec_job: dict[str, Any], job: dict[str, Any], export: dict[str, Any],
                kernels: Any, reference_export: dict[str, Any], reference_kernels: Any) -> dict[str, Any]:
    import torch

    from course.check import compare
    from course.recorder import plan as plan_module
    from grader.replay import gpu_replay as replay

    calls, error = _calls_of(export, spec.id)
    output_shape = spec.output_shape
    sets: dict[str, Any] = {}
    broken: str | None = None  # a CUDA error ends all GPU work of this judge
    definitions = _read_definitions(job["notebook"]) if spec.forbidden_calls else None
    allowed = _allowed(spec, _notebook_cells(job["notebook"])) if spec.kernel_cells else None

    def run_once(plan: Any, kernels_: Any, shape: tuple[int, ...], seed: int) -> tuple[bool, str]:
        nonlocal broken
        label = spec.shape_label(shape)
        if broken:
            return False, f"{label}: not run: {broken}"
        banned = forbidden_problem(spec, plan, definitions) if definitions is not None else None
        # The source reading gives the friendly message; the compiled kernel is what is judged.
        if not banned and spec.forbidden_calls:
            banned = ir_rules.plan_problem(plan, kernels_.ttgir, kernels_.errors, spec.forbidden_calls)
        if banned:
            return False, f"{label}: {banned}"
        foreign = allowed and provenance.foreign_launch(plan, allowed)
        if foreign:
            return False, f"{label}: {foreign}"
        inputs = spec.make_inputs(shape, seed, "cuda")
        try:
            out_shape = tuple(output_shape(shape))
            with WATCH.running(spec.id, f"its replay at {label}", replay_limit(job, spec, shape)):
                prepared = replay.prepare(plan, inputs, kernels_, spec.output_dtype, out_shape,
                                          plan_checks.budget(inputs, out_shape))
                out = replay.launch(prepared)
                torch.cuda.synchronize()
        except (replay.Unreplayable, ValueError, KeyError, TypeError) as problem:
            return False, f"{label}: not replayable: {problem}"
        except Exception as failure:  # a CUDA error in the student's kernel
            broken = f"a CUDA error in the replay ({type(failure).__name__}: {str(failure)[:200]})"
            return False, f"{label}: {broken}"
        result_out = out.clone()
        del prepared, out
        # The reference is computed only now, from the seed: no answer sat in GPU memory while the kernel ran.
        fresh = spec.make_inputs(shape, seed, "cuda")
        changed = plan_module.changed_inputs(fresh, inputs)
        del inputs
        if changed:
            return False, f"{label}: the call changed its input {changed[0]}: inputs are read-only"
        reference = spec.reference(fresh)
        result = compare(spec, shape, result_out, reference, "cuda")
        return result.passed, result.message

    def time_candidates(plans: list[Any], kernels_: Any, shape: tuple[int, ...], seed: int,
                        limit: float | None) -> list[float | None]:
        return [None] * len(plans) if broken else _time_candidates(spec, shape, plans, kernels_, seed, limit)

    for call in spec_job["calls"]:
        verdict = sets.setdefault(call["set"], {"passed": True, "messages": [], "provisional": False})
        shape = tuple(call["shape"])
        recorded = calls.get(call["key"]) if isinstance(calls, dict) else None
        if error or not isinstance(recorded, dict):
            passed, message = False, f"{spec.shape_label(shape)}: {error or 'no launch plan was recorded'}"
        else:
            seed = derive_seed(job["run_seed"], job["student"], spec.id, call["key"])
            passed, message = run_once(recorded.get("plan"), kernels, shape, seed)
        verdict["passed"] &= passed
        verdict["messages"].append(("PASS " if passed else "FAIL ") + bounded(message))

    rows = []
    reference_calls, _ = _calls_of(reference_export, spec.id)
    for i, shape in enumerate(tuple(tuple(s) for s in spec_job["bench_shapes"])):
        key = f"bench-{i}"
        row: dict[str, Any] = {"shape": list(shape), "work": spec.work(shape)}
        rows.append(row)
        recorded = calls.get(key) if isinstance(calls, dict) else None
        plan = recorded.get("plan") if isinstance(recorded, dict) else None
        seed = derive_seed(job["run_seed"], job["student"], spec.id, key)
        limit = replay_limit(job, spec, shape)
        if plan is not None and not broken:  # an autotuned kernel: the judge, not the run, picks its configuration
            began = time.perf_counter()
            plan, choice = config_choice.choose(
                recorded, lambda p, at=shape, seed=seed: run_once(p, kernels, at, seed)[0],
                lambda plans, at=shape, seed=seed, limit=limit: time_candidates(plans, kernels, at, seed, limit))
            if choice:
                row["configs"] = {**choice, "seconds": round(time.perf_counter() - began, 3)}
        passed, message = (run_once(plan, kernels, shape, seed) if plan is not None
                           else (False, f"{spec.shape_label(shape)}: {error or 'no launch plan was recorded'}"))
        if broken:
            row["error"] = message
            continue
        reference_recorded = reference_calls.get(key) if isinstance(reference_calls, dict) else None
        reference_plan = reference_recorded.get("plan") if isinstance(reference_recorded, dict) else None
        if reference_kernels is None:
            reference_plan = None
        elif reference_plan is not None:
            began = time.perf_counter()
            reference_plan, choice = config_choice.choose(
                reference_recorded, lambda _: True,
                lambda plans, at=shape, seed=seed, limit=limit: time_candidates(plans, reference_kernels, at, seed + 3,
                                                                                limit))
            if choice:
                row["reference_configs"] = {**choice, "seconds": round(time.perf_counter() - began, 3)}
        timing_began = time.perf_counter()
        timed, rounds = _time_row(spec, shape, plan if passed else None, kernels, reference_plan, reference_kernels,
                                  seed, limit)
        # Rounds end once every spread is small (after 1 s) or at 6 s: a noisy GPU or host shows as long timings.
        row["timing"] = {"seconds": round(time.perf_counter() - timing_began, 3), "rounds": rounds}
        row["student_ms"], row["error"] = timed["student"] if passed else (None, f"not timed: {message}")
        row["baseline_ms"] = timed["library"][0]
        if reference_plan is not None:
            row["reference_ms"], reference_error = timed["reference"]
            if reference_error:
                row["reference_error"] = reference_error
    return {"sets": sets, "bench": {"measured": True, "rows": rows, "broken": broken}}


def _time_row(spec: Any, shape: tuple[int, ...], plan: Any, kernels: Any, reference_plan: Any, reference_kernels: Any,
              seed: int, limit: float | None) -> tuple[dict[str, tuple[float | None, str | None]], int]:
    """Median ms (or why not) of the student's plan, the reference solution's plan and the library at ``shape``,
    timed in the same rounds (``course.bench.time_interleaved``), and how many rounds there were: a drift of the
    GPU's clocks within the hold moves all three alike, so their ratios hold. A plan of None is not timed. Every
    call gets fresh inputs, and each plan's outputs are spot-checked.

    ``limit``: the seconds each plan's call (with its check) may take before the watchdog stops the judge.
    """
    from course import bench
    from grader.replay import gpu_replay as replay

    entries: dict[str, bench.Timed] = {}
    failures: dict[str, list[str]] = {}
    if plan is not None:
        entries["student"] = _plan_entry(spec, plan, kernels, shape, seed, limit, failures.setdefault("student", []))
    if reference_plan is not None:
        entries["reference"] = _plan_entry(spec, reference_plan, reference_kernels, shape, seed + 3, limit,
                                           failures.setdefault("reference", []))

    def library_inputs(j: int) -> tuple:
        WATCH.step(spec.id, f"the library at {spec.shape_label(shape)}", None)
        return spec.make_inputs(shape, seed + 7 + j, "cuda")

    entries["library"] = bench.Timed(lambda *inputs: spec.library(inputs), library_inputs)
    try:
        timings = bench.time_interleaved(list(entries.values()), drop_on=(replay.Unreplayable, ValueError),
                                         warmup=1, min_seconds=1.0, max_seconds=6.0)
    finally:
        WATCH.step(spec.id, "timed", None)
    timed: dict[str, tuple[float | None, str | None]] = {}
    for name, timing in zip(entries, timings, strict=True):
        if name == "library" and isinstance(timing, Exception):
            raise timing  # the library's own call failing is the grader's fault, not the student's
        if isinstance(timing, Exception):
            timed[name] = None, f"not timed: {timing}"
        elif failures.get(name):
            timed[name] = None, failures[name][0]
        else:
            timed[name] = timing.median_ms, None
    return timed, timings[-1].repeats


def _time_candidates(spec: Any, shape: tuple[int, ...], plans: list[Any], kernels: Any, seed: int,
                     limit: float | None) -> list[float | None]:
    """Median ms of each of an autotuned kernel's candidate plans, timed in the same rounds with the GPU alone; None
    for one that could not be replayed or returned a wrong result."""
    from course import bench
    from grader.replay import gpu_replay as replay

    failures: list[list[str]] = [[] for _ in plans]
    entries = [_plan_entry(spec, plan, kernels, shape, seed, limit, failed)
               for plan, failed in zip(plans, failures, strict=True)]
    try:
        timings = bench.time_interleaved(entries, drop_on=(replay.Unreplayable, ValueError), warmup=1,
                                         min_seconds=config_choice.TIMING_SECONDS[0],
                                         max_seconds=config_choice.TIMING_SECONDS[1])
    finally:
        WATCH.step(spec.id, "timed", None)
    return [None if isinstance(timing, Exception) or failed else timing.median_ms
            for timing, failed in zip(timings, failures, strict=True)]


def _plan_entry(spec: Any, plan: Any, kernels: Any, shape: tuple[int, ...], seed: int, limit: float | None,
                failures: list[str]) -> Any:
    """A replayed plan as one entry of an interleaved timing; a wrong timed output is added to ``failures``."""
    from course import bench
    from course.check import relative_error
    from grader.replay import gpu_replay as replay

    out_shape = tuple(spec.output_shape(shape))

    def make_args(i: int) -> tuple:
        WATCH.step(spec.id, f"timing at {spec.shape_label(shape)}", limit)
        inputs = spec.make_inputs(shape, seed + 11 + i, "cuda")
        limit_bytes = plan_checks.budget(inputs, out_shape)
        return (replay.prepare(plan, inputs, kernels, spec.output_dtype, out_shape, limit_bytes),)

    def after(args: tuple, out: Any, i: int) -> None:
        # The check regenerates the inputs from the seed: a kernel that overwrote its inputs cannot pass it.
        inputs = spec.make_inputs(shape, seed + 11 + i, "cuda")
        if spec.spot_error is not None:
            error = spec.spot_error(inputs, out)
        else:  # no cheap test: the whole output against the reference
            error = relative_error(out, spec.reference(inputs))
        if not error <= spec.tolerance:
            failures.append(f"timed call {i} returned a wrong result (relative error {error:.2e})")

    return bench.Timed(replay.launch, make_args, after=after)
