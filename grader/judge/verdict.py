"""The judge: every verdict of a notebook, computed where none of the student's Python runs.

Inputs are what the sandboxed run exported (launch plans, answers as JSON) and what the course
built (GPU) or replayed (CPU) from the notebook's kernel source. On a GPU the judge replays each graded
function's plan on inputs drawn from a secret seed, checks every output against the reference
computed afterwards (from the seed, not from buffers the kernel could have touched), and times
the student's plan, cuBLAS and the reference solution's plan one after another for each
benchmark shape, in this one process. On a CPU the plans were replayed on inputs from the secret
seeds through Triton's interpreter, in a sandbox holding only the notebook's kernels
(``grader.replay.replay_cpu``); their outputs are compared here with the reference, and those verdicts
are provisional: precision and speed are not measured. The master copies of the other test cells
run here against the exported answers, first, before any replay; an answer the grader cannot take
fails only the items that read it ("unsupported answer: ...").

``python -m grader.judge.verdict JOB.json`` runs one job (a GPU judge runs in its own process, since a
student's kernel can break its CUDA context, under ``grader.judge.watchdog``: it announces each replay
with its time limit, and saves each finished part so that it can be started again after a kill);
``judge(job)`` runs one in-process (CPU). A failure of the judge itself is the verdict's ``error``.
"""

from __future__ import annotations

import ast
import contextlib
import faulthandler
import hashlib
import json
import math
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from grader.build import build_kernels
from grader.judge import ir_rules, provenance
from grader.replay import plan_checks
from grader.score import results

MAX_ANSWER_BYTES = 16 * 2**20
# The most characters of one verdict message: room for a shape, an error and a value, not for a file.
MESSAGE_CHARS = 400


# The watched judge (grader.judge.watchdog) reads its steps from this file descriptor, named in this variable.
WATCH_FD = "GRADER_JUDGE_WATCH_FD"
# ... and answers its request for the GPU alone (``Watch.alone``) with one byte on this one.
GRANT_FD = "GRADER_JUDGE_GRANT_FD"
TESTS = "tests"
# The watched judge's exit status asking to be started again (its finished parts kept): a student's CUDA error
# broke this process's CUDA context, and the next graded function deserves a fresh one.
START_AGAIN = 75


class StartAgain(BaseException):  # noqa: N818  (a request to leave, like SystemExit: no handler may swallow it)
    """Raised by a watched judge whose CUDA context a student's kernel broke, with graded functions left."""


class Watch:
    """The judge's side of the watchdog: each step it starts, which graded function, and the seconds it may take.

    A step with a limit is student work (a replay or a timed call); ``None`` means the judge's own work, which
    only the judge's per-notebook limit bounds. Without a watchdog (the in-process CPU judge) it says nothing.
    """

    def __init__(self) -> None:
        self.stream: TextIO | None = None
        self.grant: int | None = None

    def connect(self, fd: str | None, grant: str | None = None) -> None:
        self.stream = os.fdopen(int(fd), "w", buffering=1) if fd else None
        self.grant = int(grant) if grant else None

    def _ask(self, request: str) -> None:
        self.stream.write(json.dumps({"request": request}) + "\n")
        if os.read(self.grant, 1) != b"1":
            raise RuntimeError(f"the watchdog did not answer the judge's {request!r} request")

    def device(self) -> None:
        """Say the judge is about to use its GPU at all (until now it has used the CPU only): from here on it is
        one more user of the GPU, paused while another judge holds it alone."""
        if self.stream is not None and self.grant is not None:
            self._ask("device")

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Hold the GPU alone (the watchdog's gate pauses every other user of it) for the GPU work inside."""
        if self.stream is None or self.grant is None:
            yield
            return
        self._ask("gpu")
        try:
            yield
        finally:
            self.stream.write(json.dumps({"request": "release"}) + "\n")

    def step(self, spec: str | None, what: str, seconds: float | None) -> None:
        if self.stream is not None:
            self.stream.write(json.dumps({"spec": spec, "step": what, "seconds": seconds}) + "\n")

    @contextlib.contextmanager
    def running(self, spec: str, what: str, seconds: float | None) -> Iterator[None]:
        self.step(spec, what, seconds)
        try:
            yield
        finally:
            self.step(spec, "checks", None)


WATCH = Watch()


def replay_limit(job: dict[str, Any], spec: Any, shape: tuple[int, ...]) -> float | None:
    """Seconds one replay of the student's plan at ``shape`` may take: the floor, or more where the reference
    solution's slowest benchmark replay, scaled to this shape's work, times the factor is longer."""
    watchdog = job.get("watchdog")
    if not isinstance(watchdog, dict):
        return None
    per_work = float((watchdog.get("reference") or {}).get(spec.id) or 0.0)
    scaled = float(watchdog["factor"]) * per_work * spec.work(shape) if per_work > 0 else 0.0
    return max(float(watchdog["floor"]), scaled)


def kernel_part(spec_id: str) -> str:
    return f"kernel-{spec_id}"


class Checkpoints:
    """The finished parts of one notebook's verdict, one JSON file each (nothing kept without a folder)."""

    def __init__(self, folder: str | None):
        self.folder = Path(folder) if folder else None

    def load(self, part: str) -> Any:
        if self.folder is None:
            return None
        try:
            return results.read_json(self.folder / f"{part}.json")
        except (OSError, ValueError):
            return None

    def save(self, part: str, data: Any) -> None:
        if self.folder is not None:
            results.write_json_atomic(self.folder / f"{part}.json", data)

    def so_far(self, job: dict[str, Any]) -> dict[str, Any]:
        """A verdict of the parts finished so far (for a judge that ended early)."""
        verdict: dict[str, Any] = {"kernels": {}}
        if (tests := self.load(TESTS)) is not None:
            verdict["tests"] = tests
        for spec_job in job["kernels"]:
            if (kernel := self.load(kernel_part(spec_job["spec"]))) is not None:
                verdict["kernels"][spec_job["spec"]] = kernel
        return verdict


def stopped_verdict(spec_job: dict[str, Any], message: str) -> dict[str, Any]:
    """The verdict of a graded function the watchdog stopped: every item of it fails, saying why."""
    sets = {call["set"]: {"passed": False, "provisional": False, "messages": [f"FAIL {message}"]}
            for call in spec_job["calls"]}
    return {"sets": sets, "bench": {"measured": False, "reason": message, "rows": []}, "stopped": message}


def _record_fault(verdict: dict[str, Any], what: str, error: Exception) -> None:
    """The judge's own failure (never the student's): the verdict's error, which makes a grader_error."""
    verdict.setdefault("error", f"the judge failed while {what}: {type(error).__name__}: {error}"[:500])
    verdict.setdefault("traceback", traceback.format_exc()[-2000:])


class Unsupported:
    """An answer the grader does not take (a subclass of int, an array it cannot load...): equal to nothing."""

    def __init__(self, why: str):
        self.why = why

    def __repr__(self) -> str:
        return f"<unsupported: {self.why}>"

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__


def derive_seed(run_seed: int, *parts: object) -> int:
    """A 63-bit seed for one purpose of one grading run (secret while run_seed is)."""
    text = ":".join(str(p) for p in (run_seed, *parts))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def _load_array(path: Path) -> Any:
    try:
        array = np.load(path, allow_pickle=False)
    except Exception as error:  # a pickled object array, a truncated or foreign file: this answer only
        return Unsupported(f"its array file cannot be read ({type(error).__name__}: {str(error)[:200]})")
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
        return Unsupported("its array file holds no array of numbers or booleans")
    return array


def decode_answer(data: Any, arrays: Path) -> Any:
    """One exported answer as a value; an ``Unsupported`` (never an exception) for anything else."""
    if not isinstance(data, dict):
        return Unsupported("malformed")
    if "value" in data and type(data["value"]) in (bool, int, float, str, type(None), Unsupported):
        return data["value"]
    if "float" in data and data["float"] in ("nan", "inf", "-inf"):
        return float(data["float"])
    if data.get("ellipsis") is True:
        return ...
    if isinstance(data.get("list"), list):
        return [decode_answer(v, arrays) for v in data["list"]]
    if isinstance(data.get("tuple"), list):
        return tuple(decode_answer(v, arrays) for v in data["tuple"])
    if isinstance(data.get("dict"), dict):
        return {str(k): decode_answer(v, arrays) for k, v in data["dict"].items()}
    if isinstance(data.get("array"), str):
        path = arrays / Path(data["array"]).name
        if not path.is_file() or path.stat().st_size > MAX_ANSWER_BYTES:
            return Unsupported("missing or oversized array")
        array = _load_array(path)
        if data.get("torch") and isinstance(array, np.ndarray):
            import torch

            return torch.from_numpy(array)
        return array
    return Unsupported(str(data.get("unsupported", "unknown")))


def _unsupported_in(value: Any) -> Unsupported | None:
    """The first unsupported part of a decoded answer, or None."""
    if isinstance(value, Unsupported):
        return value
    parts = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ()
    return next((found for part in parts if (found := _unsupported_in(part))), None)


def _names_read(source: str) -> set[str]:
    try:
        return {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}
    except (SyntaxError, ValueError):
        return set()


def bounded(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying so: a message can carry what a student's code put in a value or
    an exception, and the feedback must not become a channel for it."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters cut)"


def run_tests(tests: list[dict[str, str]], answers: dict[str, Any], arrays: Path) -> dict[str, dict[str, Any]]:
    """Run each master test cell against the exported answers; a verdict per grade id.

    A test that reads an answer the grader cannot take fails with "unsupported answer" and why; the
    other tests are not affected.
    """
    import torch

    import course

    base: dict[str, Any] = {"course": course, "math": math, "np": np, "torch": torch}
    for name, data in answers.items():
        if not (isinstance(data, dict) and data.get("missing")):
            try:
                base[name] = decode_answer(data, arrays)
            except RecursionError:
                base[name] = Unsupported("nested too deeply")
    unsupported = {name: found for name in answers if (found := _unsupported_in(base.get(name)))}
    verdicts = {}
    for test in tests:
        read = sorted(_names_read(test["source"]) & set(unsupported))
        if read:
            verdicts[test["grade_id"]] = {"passed": False,
                                          "message": f"unsupported answer: {read[0]}: {unsupported[read[0]].why}"}
            continue
        try:
            exec(compile(test["source"], f"<test {test['grade_id']}>", "exec"), dict(base))
            verdicts[test["grade_id"]] = {"passed": True, "message": ""}
        except AssertionError as error:
            verdicts[test["grade_id"]] = {"passed": False, "message": bounded(str(error)) or "an assertion failed"}
        except NameError as error:
            missing = bounded(getattr(error, "name", None) or str(error), 80)
            verdicts[test["grade_id"]] = {"passed": False, "message": f"{missing} is not defined in your notebook "
                                          "(its cell may have failed, been deleted or never run)"}
        except Exception as error:  # a wrong kind of answer makes a master test raise: a failed item
            verdicts[test["grade_id"]] = {"passed": False, "message": bounded(f"{type(error).__name__}: {error}")}
    return verdicts


def _parse_int(digits: str) -> int | Unsupported:
    """An int of the export, or Unsupported where Python would refuse it (too many digits): that answer only."""
    try:
        return int(digits)
    except ValueError:
        return Unsupported(f"an int of {len(digits.lstrip('-'))} digits")


def read_export(folder: Path) -> dict[str, Any]:
    path = folder / "export.json"
    if not path.is_file():
        return {}
    if path.stat().st_size > 64 * 2**20:
        return {"error": "the export is larger than 64 MiB"}
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_int=_parse_int)
    except (ValueError, RecursionError) as error:
        return {"error": f"the export is not readable: {type(error).__name__}"}
    return data if isinstance(data, dict) else {}


def _calls_of(export: dict[str, Any], spec_id: str) -> tuple[dict[str, Any], str | None]:
    entry = (export.get("kernels") or {}).get(spec_id)
    if not isinstance(entry, dict):
        return {}, "the notebook run did not reach the grader's recording cell (see the notebook's status)"
    return (entry.get("calls") if isinstance(entry.get("calls"), dict) else {}), entry.get("error")


def _notebook_cells(notebook_path: str) -> list[Any]:
    import nbformat

    return nbformat.read(notebook_path, as_version=4).cells  # the sanitized notebook: its syntax, never run


def _read_definitions(notebook_path: str) -> build_kernels.Definitions:
    return build_kernels.read_definitions([c.source for c in _notebook_cells(notebook_path) if c.cell_type == "code"])


def _kernel_sources(definitions: build_kernels.Definitions) -> dict[str, Any]:
    from course import divergence

    names = dict(definitions.kernel_names)  # k = triton.jit(f): the name k calls the kernel f
    return {name: divergence.KernelSource(name, source, first, definitions.aliases, names)
            for name, (source, first) in definitions.sources.items()}


def _launched(plan: Any) -> list[str]:
    launches = plan.get("launches") if isinstance(plan, dict) else None
    return [str(launch.get("kernel")) for launch in launches or [] if isinstance(launch, dict)]


def forbidden_problem(spec: Any, plan: Any, definitions: build_kernels.Definitions) -> str | None:
    """Why the plan's kernels break the spec's ban on some library calls (read from their source), or None."""
    if not spec.forbidden_calls or not isinstance(plan, dict):
        return None
    from course import divergence

    try:
        return divergence.forbidden_problem(_kernel_sources(definitions), _launched(plan), spec.forbidden_calls)
    except Exception as error:  # e.g. RecursionError on a pathological expression: refuse, as for any unknown call
        return f"the grader could not read the kernels' source ({type(error).__name__}), and this exercise bans " \
               f"{', '.join(spec.forbidden_calls)}"


def divergence_notes(spec: Any, calls: dict[str, Any], definitions: build_kernels.Definitions) -> list[str]:
    """For a CPU verdict: the known interpreter/GPU divergences in the kernels the recorded calls launched."""
    from course import divergence
    from course.spec import TOLERANCES

    plans = [call.get("plan") for call in calls.values() if isinstance(call, dict)]
    launched = sorted({name for plan in plans for name in _launched(plan)})
    try:
        found = divergence.scan(_kernel_sources(definitions), launched, spec.tolerance < TOLERANCES["tf32"])
    except Exception:  # notes only: a source the reader cannot handle leaves the verdict as it is
        return []
    return [f"NOTE the GPU may disagree: [{d.code}] {d.kernel}, line {d.line}: {d.detail or d.rule.title}; "
            f"on a GPU {d.rule.gpu}" for d in found]


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


def _allowed(spec: Any, cells: list[Any]) -> provenance.Allowed | None:
    """The kernels ``spec`` may launch (those its kernel_cells define), or None when any kernel may count."""
    return provenance.allowed_kernels(cells, spec.kernel_cells) if spec.kernel_cells else None


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
    # A kernel compiled here, not loaded from the cache grader.build.compile_ttgir filled, cost GPU time: made visible.
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
        passed, message = (run_once(plan, kernels, shape, seed) if plan is not None
                           else (False, f"{spec.shape_label(shape)}: {error or 'no launch plan was recorded'}"))
        if broken:
            row["error"] = message
            continue
        reference_plan = (reference_calls.get(key) or {}).get("plan") if isinstance(reference_calls, dict) else None
        if reference_kernels is None:
            reference_plan = None
        timing_began = time.perf_counter()
        timed, rounds = _time_row(spec, shape, plan if passed else None, kernels, reference_plan, reference_kernels,
                                  seed, replay_limit(job, spec, shape))
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

    entries["library"] = bench.Timed(lambda *inputs: spec.baseline(inputs), library_inputs)
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


def judge(job: dict[str, Any]) -> dict[str, Any]:
    """Every verdict for one notebook: the master test cells on the answers first, then each graded function.

    With ``job["checkpoints"]`` (a folder: the watched judge process), each finished part is saved there as
    it ends and parts already there are kept, so a judge started again after a kill goes on where it stopped.
    A failure of the judge itself is the verdict's ``error`` (a grader_error), with every part it finished.
    """
    saved = Checkpoints(job.get("checkpoints"))
    export = read_export(Path(job["export"]))
    tests = saved.load(TESTS)
    if tests is None:
        WATCH.step(None, "the master test cells", None)
        answers = export.get("answers") if isinstance(export.get("answers"), dict) else {}
        tests = run_tests(job["tests"], answers, Path(job["export"]) / "arrays")
        saved.save(TESTS, tests)
    verdict: dict[str, Any] = {"tests": tests, "kernels": {}, "export_error": export.get("error"),
                               "recorded": bool(export)}
    pending = []
    for spec_job in job["kernels"]:
        done = saved.load(kernel_part(spec_job["spec"]))
        if done is None:
            pending.append(spec_job)
        else:
            verdict["kernels"][spec_job["spec"]] = done
    if not pending:
        return verdict

    def finished(spec_id: str, kernel: dict[str, Any]) -> None:
        saved.save(kernel_part(spec_id), kernel)

    if job["device"] == "gpu":
        judged = judge_gpu({**job, "kernels": pending}, finished)
    else:
        WATCH.step(None, "the kernels' verdicts", None)
        try:
            judged = judge_cpu({**job, "kernels": pending})
        except Exception as error:  # the judge's own fault, never the student's: a grader_error
            judged = {"kernels": {}}
            _record_fault(judged, "judging the kernels", error)
        for spec_id, kernel in judged["kernels"].items():
            finished(spec_id, kernel)
    verdict["kernels"].update(judged.pop("kernels"))
    verdict.update(judged)
    return verdict


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    with contextlib.suppress(AttributeError, ValueError, OSError):  # `kill -USR1`: the stacks into judge.log
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    WATCH.connect(os.environ.get(WATCH_FD), os.environ.get(GRANT_FD))
    try:
        verdict = judge(job)
    except StartAgain:
        return START_AGAIN
    except Exception as error:  # the judge's own failure: a grader_error for this notebook, with what it finished
        verdict = Checkpoints(job.get("checkpoints")).so_far(job)
        _record_fault(verdict, "judging", error)
    results.write_json_atomic(Path(job["verdict"]), verdict)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
