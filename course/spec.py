"""The exercise-spec format and the registry that finds a spec by id.

One spec per graded exercise says what "correct" and "fast" mean: how inputs are made, the
higher-precision reference, the tolerance, the shapes checked and benchmarked, and the
performance thresholds. The notebook's test cells, the grader and the test suite all read it.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

Shape = tuple[int, ...]
Inputs = tuple[Any, ...]  # tensors, and scalars made from the shape alone

# Largest allowed ||out - ref|| / ||ref|| for each precision an exercise may compute in.
TOLERANCES = {
    "fp64": 1e-12,  # fp64 in and out (host code): rounding alone, K * 1e-16 for a length-K sum
    "fp32-ieee": 1e-5,
    # A sum of up to 2**28 fp32 values in an order the GPU picks (atomics, partial sums): each of the k sequential
    # adds into a running total rounds by up to half a unit in its last place, and those errors grow like sqrt(k).
    "fp32-sum": 1e-4,
    "tf32": 5e-3,
    "fp16": 1e-2,
    "bf16": 1e-2,
    "exact": 0.0,  # integer outputs (indices, coordinates, counts)
}

RATE_UNITS = ("GFLOP/s", "GB/s")
KINDS = ("kernel", "host")
LANGUAGES = ("triton", "cuda")  # what a "kernel" spec's kernels are written in

THRESHOLD_KINDS = ("absolute", "vs_library", "vs_reference")


_CREDIT_WORDS = {0.25: "a quarter", 0.5: "half", 0.75: "three quarters", 1.0: "all"}


@dataclass(frozen=True)
class ShapeTimes:
    """One benchmark shape's median times in one run, in milliseconds (None where not measured)."""

    shape: Shape
    work: float  # FLOPs or bytes, as the spec's rate says
    student_ms: float | None
    library_ms: float | None = None
    reference_ms: float | None = None


@dataclass(frozen=True)
class Threshold:
    """One performance item. ``bands`` maps a measured level to the fraction of ``points`` earned.

    The level is the spec's rate (GFLOP/s or GB/s) for "absolute"; for "vs_library" (cuBLAS or torch, same run) and
    "vs_reference" (the course's reference solution, same run) it is the geometric mean over the
    benchmark shapes of the per-shape speed ratio. Its description, in the grader's feedback and the notebook's
    own report, is made from these fields, so it cannot state other bands than the ones graded.
    """

    name: str
    kind: str
    points: float
    bands: tuple[tuple[float, float], ...]
    precision: str
    library: str = ""  # what a "vs_library" ratio is measured against, as its description names it
    unit: str = "GFLOP/s"  # the spec's rate_unit: GFLOP/s (speed) or GB/s (bandwidth)

    def __post_init__(self) -> None:
        if self.kind not in THRESHOLD_KINDS:
            raise ValueError(f"threshold kind must be one of {THRESHOLD_KINDS}, not {self.kind!r}")
        if self.unit not in RATE_UNITS:
            raise ValueError(f"threshold unit must be one of {RATE_UNITS}, not {self.unit!r}")
        if self.kind == "vs_library" and not self.library:
            raise ValueError(f"threshold {self.name} must say which library it is measured against")
        levels = [level for level, _ in self.bands]
        credits = [credit for _, credit in self.bands]
        if levels != sorted(levels) or credits != sorted(credits) or not 0 < credits[-1] <= 1:
            raise ValueError(f"bands of {self.name} must rise in level and credit, ending at most 1")

    @property
    def full_level(self) -> float:
        return self.bands[-1][0]

    @property
    def description(self) -> str:
        if self.kind == "absolute":
            level = f"{self.full_level:g} {self.unit} (geometric mean over the benchmark shapes)"
            return f"at least {level}" if len(self.bands) == 1 else f"full points at {level}"
        quantity = "speed" if self.unit == "GFLOP/s" else "bandwidth"
        against = self.library if self.kind == "vs_library" else "the reference solution"
        return f"{quantity} as a fraction of {against}, same run; full points at {self.full_level * 100:g}%"

    @property
    def bands_text(self) -> str:
        """Its precision and every band, as the grader's tables state them: "fp32; >=0.25: 25%, >=0.4: 50%"."""
        unit = f" {self.unit}" if self.kind == "absolute" else ""
        bands = ", ".join(f">={level:g}{unit}: {credit:.0%}" for level, credit in self.bands)
        return f"{self.precision}; {bands}"

    def steps_text(self, same_credits_as: Threshold | None = None) -> str:
        """Its bands as a notebook's grading table states them: "at least 500 GFLOP/s", or "25%, 40%, 55%, 70%
        earn a quarter, half, three quarters, all" ("earn the same steps" where ``same_credits_as`` has its credits)."""
        if self.kind == "absolute" and len(self.bands) == 1:
            return f"at least {self.full_level:g} {self.unit}"
        unit = f" {self.unit}" if self.kind == "absolute" else ""
        levels = ", ".join(f"{level:g}{unit}" if unit else f"{level * 100:g}%" for level, _ in self.bands)
        if len(self.bands) == 1:
            return f"full points at {levels}"
        if same_credits_as is not None and [c for _, c in same_credits_as.bands] == [c for _, c in self.bands]:
            return f"{levels} earn the same steps"
        return f"{levels} earn {', '.join(_CREDIT_WORDS.get(c, f'{c:.0%}') for _, c in self.bands)}"

    def level(self, shapes: Sequence[ShapeTimes]) -> float:
        """The level a run reached: the geometric mean over the benchmark shapes of the rate ("absolute") or of the
        per-shape speed ratio against the library or the reference solution. Raises LookupError where a ratio's
        other side was not measured."""
        if self.kind == "absolute":
            return geometric_mean([rate(s.work, s.student_ms) for s in shapes])
        library = self.kind == "vs_library"
        missing = [s.shape for s in shapes if not (s.library_ms if library else s.reference_ms)]
        if missing:
            raise LookupError(f"the {'library baseline' if library else 'reference solution'} "  # the pages' words
                              f"was not measured for shapes {missing}")
        return geometric_mean([(s.library_ms if library else s.reference_ms) / s.student_ms if s.student_ms else 0.0
                               for s in shapes])

    def shown(self, level: float, library_name: str) -> str:
        """A measured level in words: "812 GFLOP/s", "0.74 of cuBLAS", "0.91 of the reference solution"."""
        if self.kind == "absolute":
            return f"{level:.0f} {self.unit}"
        return f"{level:.2f} of {library_name if self.kind == 'vs_library' else 'the reference solution'}"

    def credit(self, level: float) -> float:
        """Fraction of the points earned at a measured level (0 below the lowest band)."""
        earned = 0.0
        for band_level, band_credit in self.bands:
            if level >= band_level:
                earned = band_credit
        return earned

    def score(self, level: float) -> float:
        return round(self.points * self.credit(level), 4)


def floor(level: float, precision: str, points: float = 1.0, unit: str = "GFLOP/s") -> Threshold:
    """Full points from ``level`` (the spec's rate, geometric mean over the benchmark shapes), none below."""
    return Threshold("floor", "absolute", points, ((level, 1.0),), precision, unit=unit)


def vs_library(name: str, library: str, points: float, bands: tuple[tuple[float, float], ...], precision: str,
               unit: str = "GFLOP/s") -> Threshold:
    """Points for the speed as a fraction of the library's (``library``, as the description names it), same run."""
    return Threshold(name, "vs_library", points, bands, precision, library, unit)


def vs_reference(points: float, bands: tuple[tuple[float, float], ...], precision: str,
                 unit: str = "GFLOP/s") -> Threshold:
    """Points for the speed as a fraction of the course's reference solution, same run."""
    return Threshold("vs_reference", "vs_reference", points, bands, precision, unit=unit)


@dataclass(frozen=True)
class ShapeSet:
    """Shapes for one purpose, with a smaller set for the CPU interpreter."""

    gpu: tuple[Shape, ...]
    cpu: tuple[Shape, ...]

    def for_device(self, has_gpu: bool) -> tuple[Shape, ...]:
        return self.gpu if has_gpu else self.cpu


@dataclass(frozen=True)
class ExerciseSpec:
    """Everything the notebook, the grader and the tests need to judge one graded function."""

    id: str
    title: str
    function: str  # the name the student's notebook defines, e.g. "matmul"
    dims: tuple[str, ...]  # names of the shape's entries, e.g. ("M", "N", "K")
    precision: str  # a key of TOLERANCES
    output_dtype: torch.dtype
    make_inputs: Callable[[Shape, int, str], Inputs]
    reference: Callable[[Inputs], torch.Tensor]  # fp64 (or fp32 without TF32) answer
    library: Callable[[Inputs], torch.Tensor]  # the library call (cuBLAS) timed beside the student
    output_shape: Callable[[Shape], Shape]
    flops: Callable[[Shape], float]
    bytes_moved: Callable[[Shape], float]
    visible_shapes: ShapeSet
    hidden_shapes: ShapeSet
    bench_shapes: ShapeSet
    thresholds: tuple[Threshold, ...]
    # Cheap check of a timed call's output (e.g. Freivalds' test); returns a relative error.
    spot_error: Callable[[Inputs, torch.Tensor], float] | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    # The notebook ("week1/day7_fast_matmul") and which of its test cells the judge decides:
    # grade id -> "visible" or "hidden" (the shapes that cell's points stand for).
    notebook: str = ""
    correctness_cells: dict[str, str] = field(default_factory=dict)
    # More hidden shapes, drawn afresh for each grading run: (rng, has_gpu) -> shapes.
    draw_hidden: Callable[[random.Random, bool], tuple[Shape, ...]] | None = None
    # "kernel": judged by replaying its launch plan. "host": plain Python whose returned value leaves
    # the sandbox as data and is compared here (never timed: its speed would be the student's own claim).
    kind: str = "kernel"
    # The rate performance is stated in: work(shape) is flops(shape) for GFLOP/s, bytes_moved(shape) for GB/s.
    rate_unit: str = "GFLOP/s"
    library_name: str = "cuBLAS"
    # Replaces the relative-error test when "correct" means something else (e.g. a time within a factor):
    # (output, reference, shape) -> (passed, message). A tensor output's shape, dtype and device are checked
    # first; any other output (a float, a list) goes to ``accept`` as it is, which checks its type.
    accept: Callable[[Any, Any, Shape], tuple[bool, str]] | None = None
    # "cuda": CUDA C through course.cuda, which has no CPU interpreter: without a GPU its checks and
    # grades are pending (never passed or failed), where Triton kernels are checked in the interpreter.
    language: str = "triton"
    # Library functions the graded function's kernels must not reach, themselves or through kernels they call
    # (e.g. ("tl.dot",) where the exercise is to do without it). The judge reads the kernels' source
    # (course.divergence); a launch that reaches one, or a call it cannot resolve, fails every shape.
    forbidden_calls: tuple[str, ...] = ()
    # Grade ids of the answer cells this exercise's kernels must be defined in (empty: anywhere in the
    # notebook). The judge refuses a launch of a kernel defined elsewhere, e.g. an earlier exercise's
    # kernel launched again under this exercise's name (the grader's judge checks it).
    kernel_cells: tuple[str, ...] = ()
    # The graded answer is a time the student's code measures during the notebook's run (a host exercise):
    # the recorder makes those calls with the GPU held alone (course.recorder.alone). Work of other runs sharing
    # the GPU would lengthen a GPU time, and a judge's hold elsewhere freezes this run mid-measurement (SIGSTOP),
    # which lengthens a host time as much.
    timed_in_run: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.id}: kind must be one of {KINDS}, not {self.kind!r}")
        if self.rate_unit not in RATE_UNITS:
            raise ValueError(f"{self.id}: rate_unit must be one of {RATE_UNITS}, not {self.rate_unit!r}")
        stray = [t.name for t in self.thresholds if t.unit != self.rate_unit]
        if stray:
            raise ValueError(f"{self.id}: thresholds {stray} are not stated in the spec's rate, {self.rate_unit}")
        if self.language not in LANGUAGES:
            raise ValueError(f"{self.id}: language must be one of {LANGUAGES}, not {self.language!r}")
        if self.precision not in TOLERANCES:
            raise ValueError(f"{self.id}: precision must be one of {sorted(TOLERANCES)}, not {self.precision!r}")

    @property
    def tolerance(self) -> float:
        return TOLERANCES[self.precision]

    def work(self, shape: Shape) -> float:
        """What one call does, in the unit of the spec's rate: FLOPs or bytes."""
        return self.flops(shape) if self.rate_unit == "GFLOP/s" else self.bytes_moved(shape)

    def shape_label(self, shape: Shape) -> str:
        return ", ".join(f"{d}={n}" for d, n in zip(self.dims, shape, strict=True))

    def threshold(self, name: str) -> Threshold:
        for threshold in self.thresholds:
            if threshold.name == name:
                return threshold
        raise KeyError(f"{self.id} has no threshold {name!r}")

    def grade_id(self, threshold: Threshold) -> str:
        """The nbgrader grade-cell id that carries a threshold's points in the notebook."""
        return f"perf_{self.id.replace('.', '_')}_{threshold.name}"


_REGISTRY: dict[str, ExerciseSpec] = {}
_HOME: dict[str, str] = {}  # spec id -> the module that registered it
# Every module of this package defines specs; imported on first lookup so that `import course` stays light.
SPEC_PACKAGE = "course.exercises"
# A spec id's prefix names its module: "w1d2.gpu_time_ms" lives in the exercises module named w1d2_<day>, a
# week's bonus ("w2x.sgemm_v1") in w2_<name>; these few live elsewhere.
_HOMES_BY_PREFIX = {"w1d7": "matmul_fp32"}


def _never_timed(inputs: Inputs) -> Any:
    raise RuntimeError("a host exercise is never timed against a library")


NO_SHAPES = ShapeSet(gpu=(), cpu=())


def host_exercise(*, visible: tuple[Shape, ...] | ShapeSet, hidden: tuple[Shape, ...] | ShapeSet,
                  **fields: Any) -> ExerciseSpec:
    """A "host" exercise: plain Python whose returned value leaves the sandbox as data and is compared by the judge,
    never timed (its speed would be the student's own claim), so it has no library, work, benchmark shapes or
    thresholds. Shapes given as a tuple are the same on a GPU and in the interpreter. Unless ``fields`` say
    otherwise, the answer is one fp64 value."""
    def same_everywhere(shapes: tuple[Shape, ...] | ShapeSet) -> ShapeSet:
        return shapes if isinstance(shapes, ShapeSet) else ShapeSet(gpu=shapes, cpu=shapes)

    defaults: dict[str, Any] = {
        "output_dtype": torch.float64, "output_shape": lambda shape: (), "library": _never_timed,
        "library_name": "none (never timed)", "flops": lambda shape: 0.0, "bytes_moved": lambda shape: 0.0,
        "bench_shapes": NO_SHAPES, "thresholds": (), "kind": "host"}
    return ExerciseSpec(visible_shapes=same_everywhere(visible), hidden_shapes=same_everywhere(hidden),
                        **{**defaults, **fields})


def register(spec: ExerciseSpec) -> ExerciseSpec:
    if spec.id in _REGISTRY and _REGISTRY[spec.id] is not spec:
        raise ValueError(f"two specs share the id {spec.id!r}")
    _REGISTRY[spec.id] = spec
    _HOME[spec.id] = sys._getframe(1).f_globals.get("__name__", "")
    return spec


def spec_modules() -> list[str]:
    package = importlib.import_module(SPEC_PACKAGE)
    return sorted(f"{SPEC_PACKAGE}.{m.name}" for m in pkgutil.iter_modules(package.__path__) if not m.ispkg)


def home(spec_id: str) -> str:
    """The module that registers ``spec_id`` (once it is loaded)."""
    return _HOME[spec_id]


def _homes(spec_id: str) -> list[str]:
    """The modules a spec id's name says it lives in."""
    prefix = spec_id.split(".", 1)[0]
    if prefix in _HOMES_BY_PREFIX:
        return [f"{SPEC_PACKAGE}.{_HOMES_BY_PREFIX[prefix]}"]
    stem = prefix[:-1] if prefix.endswith("x") else prefix
    return [m for m in spec_modules() if m.rsplit(".", 1)[1].startswith(f"{stem}_")]


def _load_all() -> None:
    for module in spec_modules():
        importlib.import_module(module)


def get(spec_id: str | ExerciseSpec) -> ExerciseSpec:
    """Find a spec by id (a spec passed in is returned unchanged), loading only the module its id names."""
    if isinstance(spec_id, ExerciseSpec):
        return spec_id
    if spec_id not in _REGISTRY:
        for module in _homes(spec_id):
            importlib.import_module(module)
    if spec_id not in _REGISTRY:
        _load_all()  # an id its name does not place: every module (and a KeyError naming the known ids)
    try:
        return _REGISTRY[spec_id]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise KeyError(f"no exercise spec {spec_id!r} (known: {known})") from None


def all_specs() -> list[ExerciseSpec]:
    _load_all()
    return [spec for _, spec in sorted(_REGISTRY.items())]


def for_notebook(key: str) -> list[ExerciseSpec]:
    """The specs graded in one notebook ("week1/day7_fast_matmul")."""
    return [spec for spec in all_specs() if spec.notebook == key]


def judged_shapes(spec: ExerciseSpec, which: str, has_gpu: bool, run_seed: int) -> tuple[Shape, ...]:
    """The shapes one correctness set is judged on in a grading run: the spec's, plus drawn ones for "hidden"."""
    shapes = (spec.visible_shapes if which == "visible" else spec.hidden_shapes).for_device(has_gpu)
    if which == "hidden" and spec.draw_hidden is not None:
        rng = random.Random(f"{run_seed}:{spec.id}")
        shapes = (*shapes, *spec.draw_hidden(rng, has_gpu))
    return tuple(tuple(int(n) for n in shape) for shape in shapes)


def rate(work: float, ms: float | None) -> float:
    """GFLOP/s or GB/s (the same arithmetic) of ``work`` FLOPs or bytes done in ``ms`` milliseconds; 0 if unmeasured."""
    return work / (ms * 1e-3) / 1e9 if ms else 0.0


def geometric_mean(values: Sequence[float]) -> float:
    """Geometric mean of positive values (0 if any value is not positive)."""
    if not values or any(v <= 0 or math.isnan(v) for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))
