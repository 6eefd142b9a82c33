"""Week 2, Day 1 (profiling): a kernel's measurement as one record, and Nsight Compute's output read into it.

``Measurement`` holds what the roofline needs: the work a kernel did (FLOPs), the DRAM traffic it
caused (bytes), how long it took, and the device's two peaks. ``parse_ncu_csv`` reads the CSV that
``ncu --csv`` prints; ``measurement_from_ncu`` turns one kernel's metrics into a ``Measurement``.

Run as a program, it is the Nsight Compute target and summary of Day 1 (see ``bench/ncu_day1.sh`` in the course's online
repository)::

    python -m course.days.profiling metrics                       # the metric list to pass to ncu --metrics
    python -m course.days.profiling target --steps 64            # the kernel ncu profiles (needs a GPU)
    python -m course.days.profiling summary ncu.csv --peaks "NVIDIA H100 80GB HBM3"

Nothing here imports Triton until the target runs, so the grader can import the record alone.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys

from course.exercises.kernel_measurement import Measurement

# The metrics Day 1 reads, and what each one is (Nsight Compute's names).
NCU_METRICS: dict[str, str] = {
    "gpu__time_duration.sum": "kernel duration",
    "dram__bytes_read.sum": "bytes read from DRAM",
    "dram__bytes_write.sum": "bytes written to DRAM",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput, % of its peak",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput (the busiest SM unit), % of its peak",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": "fp32 fused multiply-adds executed (2 FLOPs each)",
    "sm__sass_thread_inst_executed_op_fadd_pred_on.sum": "fp32 adds executed",
    "sm__sass_thread_inst_executed_op_fmul_pred_on.sum": "fp32 multiplies executed",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy, % of the warps an SM can hold",
}

_PREFIXES = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_SCALED_UNIT = re.compile(r"^([numKkMGT]?)(byte|second|sector)((?:/second)?)$")
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


def _number(text: str) -> float:
    text = text.strip()
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    return float(text)


def to_base_units(value: float, unit: str) -> float:
    """A value in ncu's auto-scaled units (e.g. "Mbyte", "usecond") in bytes or seconds; others unchanged."""
    match = _SCALED_UNIT.match(unit.strip())
    return value * _PREFIXES[match.group(1)] if match else value


def parse_ncu_csv(text: str) -> list[tuple[str, dict[str, float]]]:
    """Each profiled launch in ``ncu --csv`` output (its details page): (kernel name, metric -> value).

    Values are in base units (bytes, seconds) whatever scaling ncu printed them with; lines that are
    not part of the table (the profiled program's own output, ncu's ``==PROF==`` lines) are skipped.
    """
    rows = list(csv.reader(line for line in text.splitlines() if line.startswith('"')))
    header_at = next((i for i, row in enumerate(rows) if "Metric Name" in row), None)
    if header_at is None:
        raise ValueError("no ncu metrics table found (was ncu run with --csv, and did it profile a kernel?)")
    header = rows[header_at]
    launch, kernel, name, unit, value = (header.index(column) for column in
                                         ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
    launches: dict[str, tuple[str, dict[str, float]]] = {}
    for row in rows[header_at + 1:]:
        if len(row) != len(header) or row == header:
            continue
        try:
            number = _number(row[value])
        except ValueError:  # a metric ncu reports as text ("n/a")
            continue
        entry = launches.setdefault(row[launch], (row[kernel], {}))
        entry[1][row[name]] = to_base_units(number, row[unit])
    return list(launches.values())


def measurement_from_ncu(metrics: dict[str, float], peak_tflops: float, peak_tbps: float) -> Measurement:
    """The record of one kernel from its ncu metrics: fp32 FLOPs (an FMA is two), DRAM bytes, duration."""
    flops = (2 * metrics["sm__sass_thread_inst_executed_op_ffma_pred_on.sum"]
             + metrics["sm__sass_thread_inst_executed_op_fadd_pred_on.sum"]
             + metrics["sm__sass_thread_inst_executed_op_fmul_pred_on.sum"])
    dram = metrics["dram__bytes_read.sum"] + metrics["dram__bytes_write.sum"]
    return Measurement(flops, dram, metrics["gpu__time_duration.sum"] * 1e3, peak_tflops, peak_tbps)


def summary(text: str, device_name: str) -> str:
    """What ``python -m course.days.profiling summary`` prints: each launch's key metrics and derived rates."""
    from course.peaks import datasheet_peaks

    peaks = datasheet_peaks(device_name)
    lines = []
    for kernel, metrics in parse_ncu_csv(text):
        lines.append(f"kernel {kernel}")
        for name, meaning in NCU_METRICS.items():
            shown = f"{metrics[name]:.6g}" if name in metrics else "not reported"
            lines.append(f"  {name:<52} {shown:>14}  {meaning}")
        if any(name not in metrics for name in NCU_METRICS):
            continue
        m = measurement_from_ncu(metrics, peaks.fp32_tflops if peaks else 0.0,
                                 peaks.memory_gbps / 1e3 if peaks else 0.0)
        seconds = m.time_ms / 1e3
        lines.append(f"  derived: {m.dram_bytes / seconds / 1e9:.1f} GB/s from DRAM, "
                     f"{m.flops / seconds / 1e9:.1f} GFLOP/s (fp32), "
                     f"{m.flops / m.dram_bytes if m.dram_bytes else float('inf'):.3g} FLOP per DRAM byte")
        if peaks:
            lines.append(f"  {peaks.gpu} datasheet: {peaks.fp32_tflops:g} TFLOP/s fp32, {peaks.memory_gbps:g} GB/s; "
                         f"ridge point {peaks.fp32_tflops * 1e3 / peaks.memory_gbps:.3g} FLOP/byte")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.days.profiling", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("metrics", help="print the comma-separated metric list for ncu --metrics")
    target = commands.add_parser("target", help="launch the Horner kernel (what ncu profiles)")
    target.add_argument("--steps", type=int, default=8)
    target.add_argument("--n", type=int, default=1 << 26)
    target.add_argument("--launches", type=int, default=3)
    read = commands.add_parser("summary", help="read ncu --csv output and print the key metrics")
    read.add_argument("csv_file")
    read.add_argument("--peaks", default="", help="the device's name, for its datasheet peaks")
    args = parser.parse_args(argv)
    if args.command == "metrics":
        print(",".join(NCU_METRICS))
    elif args.command == "target":
        from course.days import profiling_target  # imports Triton, after `course` chose the device

        profiling_target.run(args.steps, args.n, args.launches)
    else:
        with open(args.csv_file, encoding="utf-8", errors="replace") as file:
            print(summary(file.read(), args.peaks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
