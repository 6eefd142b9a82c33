"""Software pipelining (Week 2, Day 4): a timeline model of a pipelined K loop, its picture, and the
shared-memory side of ``num_stages`` (what the compiler allocates, and a clear message when it is too much).

The model is the textbook one, in whatever time unit its two durations are given in (Week 2 Day 4 uses
nanoseconds derived from an H100's datasheet): every iteration of the K loop loads one tile of
A and one of B (taking ``load_time`` from issue to arrival, with any number of loads in flight) and
then multiplies them (taking ``compute_time`` on the tensor cores, one iteration at a time). With
``stages`` shared-memory buffers, the load of iteration ``k`` goes into buffer ``k % stages`` and is
issued as soon as that buffer is free: when iteration ``k - stages`` has finished computing. So while
iteration ``k`` computes, the loads of iterations ``k + 1`` to ``k + stages - 1`` can be in flight.
One stage means no overlap at all. Nothing here is a measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # matplotlib is imported where a picture is drawn: a grading run draws none
    from matplotlib.figure import Figure


# NVIDIA's Hopper Tuning Guide (a vendor figure, not a measurement): an H100 SM has up to 228 KiB of
# shared memory, and one thread block (one Triton program) may use up to 227 KiB of it, since CUDA
# reserves 1 KiB per block (1 KiB = 1024 bytes).
H100_SMEM_PER_SM = 228 * 1024
H100_SMEM_PER_PROGRAM = 227 * 1024
H100_RESERVED_PER_PROGRAM = 1024
SMEM_SOURCE = "NVIDIA Hopper Tuning Guide"


@dataclass(frozen=True)
class Schedule:
    """When each iteration's load was issued and arrived, and when its compute ran (model time units)."""

    stages: int
    load_time: float
    compute_time: float
    loads: tuple[tuple[float, float], ...]  # (issued, arrived) per iteration
    computes: tuple[tuple[float, float], ...]  # (start, end) per iteration

    @property
    def total(self) -> float:
        return self.computes[-1][1] if self.computes else 0.0

    @property
    def steady_iteration(self) -> float:
        """Time per iteration once the pipeline is full: max(compute, (load + compute) / stages)."""
        return max(self.compute_time, (self.load_time + self.compute_time) / self.stages)

    @property
    def busy_fraction(self) -> float:
        """Share of the total time the tensor cores spend computing."""
        return len(self.computes) * self.compute_time / self.total if self.total else 0.0


def simulate(iterations: int, load_time: float, compute_time: float, stages: int) -> Schedule:
    """The K loop of one program under the module's model, with ``stages`` shared-memory buffers."""
    if iterations < 1 or stages < 1 or load_time < 0 or compute_time <= 0:
        raise ValueError("need at least one iteration and one stage, load_time >= 0 and compute_time > 0")
    loads: list[tuple[float, float]] = []
    computes: list[tuple[float, float]] = []
    for k in range(iterations):
        # Iteration k's buffer is free once iteration k - stages has computed, which is also when iteration
        # k - stages + 1 begins and issues this load (the first loads go out together before the loop).
        issued = computes[k - stages][1] if k >= stages else 0.0
        arrived = issued + load_time
        start = max(arrived, computes[-1][1] if computes else 0.0)
        loads.append((issued, arrived))
        computes.append((start, start + compute_time))
    return Schedule(stages, load_time, compute_time, tuple(loads), tuple(computes))


def timeline(schedules: Sequence[Schedule], title: str = "", unit: str = "units") -> Figure:
    """One panel per schedule: a row per shared-memory buffer (load in flight, tile waiting, tile in use)
    and a row for the tensor cores, whose gaps are time spent waiting for memory."""
    import matplotlib.pyplot as plt

    if not schedules:
        raise ValueError("no schedules to draw")
    end = max(s.total for s in schedules)
    fig, axes = plt.subplots(len(schedules), 1, squeeze=False,
                             figsize=(10, sum(0.9 + 0.38 * (s.stages + 1) for s in schedules)),
                             gridspec_kw={"height_ratios": [s.stages + 1.6 for s in schedules]})
    colours = plt.get_cmap("tab10")
    for ax, schedule in zip(axes[:, 0], schedules, strict=True):
        core_row = schedule.stages
        for k, ((issued, arrived), (start, stop)) in enumerate(zip(schedule.loads, schedule.computes, strict=True)):
            row, colour = k % schedule.stages, colours(k % 10)
            ax.broken_barh([(issued, arrived - issued)], (row - 0.35, 0.7), facecolors=colour, alpha=0.35,
                           edgecolor=colour, hatch="///")
            if start > arrived:  # the tile sits in its buffer until the tensor cores are free
                ax.broken_barh([(arrived, start - arrived)], (row - 0.12, 0.24), facecolors=colour, alpha=0.35)
            ax.broken_barh([(start, stop - start)], (row - 0.35, 0.7), facecolors=colour)
            ax.broken_barh([(start, stop - start)], (core_row - 0.35, 0.7), facecolors=colour)
            if schedule.compute_time / max(end, 1e-9) > 0.012:
                ax.text(start + (stop - start) / 2, core_row, str(k), ha="center", va="center", fontsize=7,
                        color="white")
        labels = [f"buffer {b}" for b in range(schedule.stages)] + ["tensor cores"]
        ax.set_yticks(range(schedule.stages + 1), labels, fontsize=8)
        ax.set_ylim(schedule.stages + 0.6, -0.6)
        ax.set_xlim(0, end * 1.01)
        stage_word = "stage" if schedule.stages == 1 else "stages"
        ax.set_title(f"num_stages = {schedule.stages} {stage_word}: {len(schedule.computes)} iterations in "
                     f"{schedule.total:g} {unit}, tensor cores busy {schedule.busy_fraction:.0%} of the time",
                     fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel(f"time ({unit}; hatched: a load in flight, solid: the tile being multiplied)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _stage_bytes(block_m: int, block_n: int, block_k: int, dtype_bytes: int = 2) -> int:
    """Shared memory of one stage: one A tile (block_m x block_k) and one B tile (block_k x block_n)."""
    return (block_m * block_k + block_k * block_n) * dtype_bytes


def out_of_resources_message(required: int, limit: int, block_m: int, block_n: int, block_k: int,
                             stages: int, dtype_bytes: int = 2) -> str:
    """What Triton's "out of resource: shared memory" error means for a pipelined matmul, and what to do."""
    per_stage = _stage_bytes(block_m, block_n, block_k, dtype_bytes)
    fits = limit // per_stage
    advice = (f"at most num_stages={fits} fits this tile" if fits >= 1
              else "not even one stage of this tile fits: use a smaller tile")
    return (f"num_stages={stages} with {block_m} x {block_n} x {block_k} tiles of {dtype_bytes}-byte values needs "
            f"{required} bytes ({required / 1024:.0f} KiB) of shared memory per program, but one program may "
            f"use at most {limit} bytes ({limit / 1024:.0f} KiB). Each stage holds one A and one B tile, "
            f"{per_stage} bytes: {advice}, or shrink BLOCK_K, BLOCK_M or BLOCK_N.")


def explain(error: BaseException, block_m: int, block_n: int, block_k: int, stages: int,
            dtype_bytes: int = 2) -> str:
    """A clear message for Triton's OutOfResources (shared memory); any other error as it is."""
    required, limit = getattr(error, "required", None), getattr(error, "limit", None)
    if getattr(error, "name", None) == "shared memory" and isinstance(required, int) and isinstance(limit, int):
        return out_of_resources_message(required, limit, block_m, block_n, block_k, stages, dtype_bytes)
    return f"{type(error).__name__}: {str(error)[:300]}"


COURSE_ARGUMENTS = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
                    "stride_cm", "stride_cn", "BLOCK_M", "BLOCK_N", "BLOCK_K"]


@dataclass(frozen=True)
class Compiled:
    """What Triton's compiler made of one configuration: shared memory per program, and PTX instruction counts."""

    shared: int
    cp_async: int  # asynchronous copies from device memory into shared memory
    wgmma: int  # Hopper warpgroup matrix multiplies
    ld_global: int  # ordinary loads from device memory into registers


def compile_matmul(kernel: Any, block_m: int, block_n: int, block_k: int, num_warps: int, stages: Sequence[int],
                   arch: int = 90, timeout: float = 180.0) -> dict[int, Compiled | str]:
    """Compile the course's fp16 matmul kernel for an NVIDIA GPU of compute capability ``arch`` (90: H100) at each
    stage count, no GPU needed (``course.days.sm90.compile_in_child``); a stage count that does not compile maps to
    the reason.

    ``kernel`` is the notebook's ``@triton.jit`` function (compiled or interpreted); the problem is a 4096-sized
    one with contiguous fp16 inputs: stride_ak, stride_bn and stride_cn are 1, which Triton compiles as
    constants, and every other integer is divisible by 16, which Triton records as an attribute. Raises
    ValueError when the kernel does not have the course's arguments, RuntimeError when the compiler process fails.
    """
    import inspect
    import re

    from course.days import sm90

    names = list(inspect.signature(getattr(kernel, "fn", kernel)).parameters)
    if names != COURSE_ARGUMENTS:
        raise ValueError(f"the kernel's arguments are {names}, not the course's {COURSE_ARGUMENTS}")
    constants = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k,
                 "stride_ak": 1, "stride_bn": 1, "stride_cn": 1}
    signature = {n: "constexpr" if n in constants else "*fp16" if n.endswith("_ptr") else "i32" for n in names}
    cases = [sm90.Specialisation(str(s), signature, constants, {"num_warps": num_warps, "num_stages": s},
                                 [n for n in names if n not in constants]) for s in stages]
    made = sm90.compile_in_child(kernel, cases, arch, timeout)

    def summary(m: sm90.Made) -> Compiled | str:
        if m.error:
            return m.error
        return Compiled(m.shared, len(re.findall(r"\bcp\.async\.c[ag]\.", m.ptx)),
                        len(re.findall(r"\bwgmma\.mma_async\.", m.ptx)), len(re.findall(r"\bld\.global\.", m.ptx)))

    return {int(label): summary(m) for label, m in made.items()}


def shared_memory_table(smem_bytes: Callable[..., int], block_m: int, block_n: int, block_k: int,
                        stages: Sequence[int], dtype_bytes: int = 2,
                        compiled: Mapping[int, Compiled | str] | None = None) -> str:
    """A row per stage count: the bytes ``smem_bytes`` gives, what the compiler made where ``compiled`` says
    (its shared memory, and whether the loop loads with cp.async), whether one program fits an H100, and how
    many programs fit on one of its SMs by shared memory alone."""
    extra = f" {'compiled (sm_90)':>17} {'loads':>9}" if compiled is not None else ""
    lines = [f"{block_m} x {block_n} x {block_k} tiles, {dtype_bytes} bytes per value; H100 limits from the "
             f"{SMEM_SOURCE}: {H100_SMEM_PER_PROGRAM // 1024} KiB per program, {H100_SMEM_PER_SM // 1024} KiB per SM",
             f"{'stages':>7} {'bytes':>9}{extra} {'fits one program':>17} {'programs per SM':>16}"]
    for s in stages:
        need = smem_bytes(block_m, block_n, block_k, s, dtype_bytes)
        got = ""
        if compiled is not None:
            made = compiled.get(s, "-")
            if isinstance(made, Compiled):
                got = f" {made.shared:>17} {'cp.async' if made.cp_async else 'ld.global':>9}"
            else:
                got = f" {'not compiled':>17} {'-':>9}"
        fits = need <= H100_SMEM_PER_PROGRAM
        per_sm = H100_SMEM_PER_SM // (need + H100_RESERVED_PER_PROGRAM) if fits else 0
        lines.append(f"{s:>7} {need:>9}{got} {'yes' if fits else 'no':>17} {per_sm:>16}")
    return "\n".join(lines)
