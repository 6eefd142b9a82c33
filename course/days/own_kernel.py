"""Profile your own kernel (Week 2, Days 1, 4 and 7; the SGEMM ladder): Nsight Compute on a student's kernel, or a
recorded reading where the counters cannot be read.

``profile_launches`` writes a small program (the student's kernel source and a driver that launches it), runs it
under ``ncu`` and returns one ``Reading`` per launch the driver made between ``torch.cuda.profiler.start()`` and
``stop()``. ``counters_unavailable`` says why a notebook cannot do that here (no GPU, no ``ncu``, the grader's run),
and ``show`` prints readings as one table, live or recorded alike. Nothing here imports torch or Triton.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from course.days.profiling import parse_ncu_csv

STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"
# Stall reasons Week 2 reads ("selected" is a warp issuing, not a stall); Nsight Compute's names.
STALLS = ("long_scoreboard", "barrier", "wait", "short_scoreboard", "math_pipe_throttle", "mio_throttle",
          "not_selected", "dispatch_stall", "lg_throttle", "no_instruction", "gmma")
METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
           "launch__registers_per_thread", "sm__warps_active.avg.pct_of_peak_sustained_active",
           "sm__cycles_elapsed.avg.per_second", "lts__t_sector_hit_rate.pct",
           *(STALL_PREFIX + name + STALL_SUFFIX for name in STALLS))
DRIVER_HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n"


@dataclass(frozen=True)
class Reading:
    """What Nsight Compute read of one kernel launch, in base units, and the FLOPs it did (from its shape)."""

    label: str
    flops: float
    time_s: float
    dram_read_bytes: float
    dram_write_bytes: float
    registers: float | None = None
    occupancy_pct: float | None = None
    stalls: dict[str, float] = field(default_factory=dict)

    @property
    def tflops(self) -> float:
        return self.flops / self.time_s / 1e12

    @property
    def flop_per_dram_byte(self) -> float:
        return self.flops / (self.dram_read_bytes + self.dram_write_bytes)

    def top_stalls(self, count: int = 3) -> dict[str, float]:
        return dict(sorted(self.stalls.items(), key=lambda item: -item[1])[:count])


def reading_from_metrics(label: str, flops: float, metrics: dict[str, float]) -> Reading:
    """A ``Reading`` from one launch's ncu metrics (base units: seconds, bytes)."""
    stalls = {name: metrics[STALL_PREFIX + name + STALL_SUFFIX] for name in STALLS
              if STALL_PREFIX + name + STALL_SUFFIX in metrics}
    return Reading(label, flops, metrics["gpu__time_duration.sum"], metrics.get("dram__bytes_read.sum", float("nan")),
                   metrics.get("dram__bytes_write.sum", float("nan")), metrics.get("launch__registers_per_thread"),
                   metrics.get("sm__warps_active.avg.pct_of_peak_sustained_active"), stalls)


def counters_unavailable(has_gpu: bool, grading: bool) -> str | None:
    """Why this notebook cannot read the counters itself (None: it can try)."""
    if grading:
        return "the grader's run reads no counters"
    if not has_gpu:
        return "no GPU here"
    if shutil.which("ncu") is None:
        return "ncu (Nsight Compute) is not on the PATH"
    return None


def ncu_command(script: Path) -> list[str]:
    return ["ncu", "--csv", "--print-units", "base", "--profile-from-start", "off", "--clock-control", "none",
            "--metrics", ",".join(METRICS), sys.executable, str(script)]


def profile_launches(source: str, labels: Sequence[str], flops: Sequence[float],
                     timeout: float = 600.0) -> tuple[list[Reading], str]:
    """Run ``source`` (a complete program) under ncu; one Reading per profiled launch, labelled in order.

    Returns the readings and, when ncu gave fewer rows than labels (counters not permitted, a crash), an
    explanation with the end of its output; the readings are then empty.
    """
    with tempfile.TemporaryDirectory(prefix="own_kernel_") as folder:
        script = Path(folder) / "own_kernel.py"
        script.write_text(source, encoding="utf-8")
        run = subprocess.run(ncu_command(script), capture_output=True, text=True, timeout=timeout, cwd=folder)
    try:
        launches = parse_ncu_csv(run.stdout)
    except ValueError as error:  # e.g. ERR_NVGPUCTRPERM: reading counters needs permission on this machine
        return [], f"ncu reported no metrics ({error}); its last output:\n{(run.stdout + run.stderr)[-1500:]}"
    if len(launches) != len(labels):
        return [], f"ncu profiled {len(launches)} launches, {len(labels)} expected; its last output:\n" + (
            run.stdout + run.stderr)[-1500:]
    return [reading_from_metrics(label, f, metrics) for label, f, (_, metrics) in
            zip(labels, flops, launches, strict=True)], ""


def notebook_code(path: Path, grade_ids: Sequence[str] = ("parameters", "setup"),
                  defining: Sequence[str] = ("@triton.jit", "def matmul(")) -> str:
    """The code cells of a notebook that set it up and define its kernel: the cells named ``grade_ids``, then every
    other code cell containing one of ``defining``; the parameters set for a GPU run outside grading."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = [(c["metadata"].get("nbgrader", {}).get("grade_id", ""), "".join(c["source"]))
             for c in nb["cells"] if c["cell_type"] == "code"]
    chosen = [source for grade_id, source in cells if grade_id in grade_ids]
    chosen += [source for grade_id, source in cells
               if grade_id not in grade_ids and any(text in source for text in defining)]
    if len(chosen) <= len(grade_ids):
        raise ValueError(f"{path}: no set-up cells or no cell defining {', '.join(defining)}")
    code = "\n\n".join(chosen) + "\n"
    return code.replace('device = "auto"', 'device = "gpu"').replace("grading = False", "grading = True")


def jit_source(*kernels: object) -> str:
    """The source of ``@triton.jit`` functions defined in a notebook, decorated again, for a driver program."""
    return "".join(f"@triton.jit\n{kernel.src}\n\n" for kernel in kernels)


def profiled_calls(calls: Sequence[str]) -> str:
    """Driver lines: each call twice unprofiled (compilation, warm-up), then once between profiler start and stop."""
    lines = []
    for call in calls:
        lines += [f"for _ in range(2):\n    {call}", "torch.cuda.synchronize()", "torch.cuda.profiler.start()",
                  call, "torch.cuda.synchronize()", "torch.cuda.profiler.stop()"]
    return "\n".join(lines) + "\n"


def show(readings: Sequence[Reading], recorded: str = "") -> None:
    """Print readings as one table; ``recorded`` names the GPU, date and source of a recorded reading."""
    if recorded:
        print(f"Recorded reading, not from this machine: {recorded}")
    print(f"{'kernel':<30}{'ms':>8}{'TFLOP/s':>9}{'DRAM read GB':>13}{'written GB':>11}{'FLOP/DRAM B':>12}"
          f"{'regs':>6}{'occ %':>7}  largest stalls (cycles per issued instruction)")
    for r in readings:
        stalls = ", ".join(f"{name} {value:.2f}" for name, value in r.top_stalls().items()) or "not read"
        regs = f"{r.registers:.0f}" if r.registers is not None else "-"
        occupancy = f"{r.occupancy_pct:.1f}" if r.occupancy_pct is not None else "-"
        dram = (f"{r.dram_read_bytes / 1e9:>13.3f}{r.dram_write_bytes / 1e9:>11.3f}{r.flop_per_dram_byte:>12.1f}"
                if r.dram_read_bytes == r.dram_read_bytes else f"{'not read':>13}{'-':>11}{'-':>12}")  # NaN: not read
        print(f"{r.label:<30}{r.time_s * 1e3:>8.3f}{r.tflops:>9.1f}{dram}{regs:>6}{occupancy:>7}  {stalls}")
