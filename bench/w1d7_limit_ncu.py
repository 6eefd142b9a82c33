"""Nsight Compute on Week 1 Day 7's fp32 matmul at 4096^3, and the limit study's table from it.

    python -m bench w1d7-fp32-dot-ncu OUTDIR [ref cublas best gluon gluon_async gluon_async_16x8]
    python -m bench w1d7-fp32-dot-ncu OUTDIR --csv NAME=FILE.csv ...     (the table from existing raw exports)

Profiles one launch each (bench/w1d7_limit_profile.py between cudaProfilerStart/Stop, `--profile-from-start off`) of
the course's reference launch, the sweep's best launch, the Gluon 8x8-a-thread variant and cuBLAS SGEMM with TF32
off, with `ncu --set full` plus the counters read here; clocks are left alone (`--clock-control none`). Reports go
to /tmp; OUTDIR gets w1d7_limit_ncu.json (this table and every raw metric) and w1d7_limit_ncu_details.txt (ncu's
details page of each). For each profiled kernel: time, achieved FLOP/s and its share of the FP32 peak at the
measured clock (128 FFMA a clock an SM), issue-slot and FMA-pipe utilisation, warp instructions per FFMA,
shared-memory loads per FFMA, wavefronts per shared load and bank conflicts, registers, achieved occupancy and the
three largest stall reasons (cycles a warp spends stalled per issued instruction).
Every raw metric goes to the JSON as well.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.ncu_csv import export, largest, pick, print_table, read, stalls

HERE = Path(__file__).resolve().parent


FFMA_PER_SM_CLOCK = 128
EXTRA_METRICS = ",".join([
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "smsp__inst_executed.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum", "smsp__sass_inst_executed_op_shared_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__cycles_elapsed.avg.per_second"])


def profile(kernel: str, out: Path) -> Path | None:
    """ncu on one launch of ``kernel``; its raw-page CSV, or None (the log's tail printed)."""
    report = Path(f"/tmp/w1d7_limit_ncu_{kernel}")
    command = [sys.executable, "-m", "bench.w1d7_limit_profile", kernel]
    base = ["ncu", "--set", "full", "--profile-from-start", "off", "--clock-control", "none", "-f", "-o", str(report)]
    began = time.perf_counter()
    for attempt in (base[:3] + ["--metrics", EXTRA_METRICS] + base[3:], base):  # then without the extra metrics
        try:
            run = subprocess.run(attempt + command, capture_output=True, text=True, timeout=150, cwd=HERE.parent)
        except subprocess.TimeoutExpired:
            print(f"ncu {kernel}: over 150 s, left out")
            return None
        if run.returncode == 0:
            break
        print(f"ncu {kernel} failed (rc {run.returncode}):\n" + "\n".join((run.stdout + run.stderr).splitlines()[-8:]))
    else:
        return None
    print(f"ncu {kernel}: {run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ''} "
          f"({time.perf_counter() - began:.0f} s)")
    csv_path = Path(f"{report}.csv")
    export(report, csv_path, out / "w1d7_limit_ncu_details.txt", heading=kernel)
    return csv_path


def summarise(row: dict[str, str]) -> dict[str, object]:
    seconds = (pick(row, "gpu__time_duration.sum") or float("nan")) * 1e-9
    clock = pick(row, "sm__cycles_elapsed.avg.per_second") or float("nan")
    sms = pick(row, "device__attribute_multiprocessor_count") or 132
    ffma = pick(row, "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum") or float("nan")
    warp_ffma = ffma / 32
    instructions = pick(row, "smsp__inst_executed.sum") or float("nan")
    lds = pick(row, "smsp__sass_inst_executed_op_shared_ld.sum") or float("nan")
    wavefronts = pick(row, "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum") or float("nan")
    conflicts = pick(row, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum")
    found = stalls(row)
    return {
        "kernel": row.get("Kernel Name", "")[:160],
        "grid": row.get("Grid Size"), "block": row.get("Block Size"),
        "time_ms": seconds * 1e3,
        "sm_clock_ghz": clock / 1e9,
        "tflops": 2 * ffma / seconds / 1e12,
        "pct_fp32_peak_at_clock": 100 * ffma / (seconds * FFMA_PER_SM_CLOCK * sms * clock),
        "issue_active_pct": pick(row, "smsp__issue_active.avg.pct_of_peak_sustained_active"),
        "fma_pipe_active_pct": pick(row, "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
        "instructions_per_ffma": instructions / warp_ffma,
        "ffma_share_of_instructions": warp_ffma / instructions,
        "lds_per_ffma": lds / warp_ffma,
        "shared_ld_wavefronts_per_lds": wavefronts / lds,
        "shared_ld_wavefronts_per_ffma": wavefronts / warp_ffma,
        "shared_ld_bank_conflicts": conflicts,
        "registers_per_thread": pick(row, "launch__registers_per_thread"),
        "shared_bytes_per_block": (pick(row, "launch__shared_mem_per_block_dynamic") or 0)
        + (pick(row, "launch__shared_mem_per_block_static") or 0),
        "achieved_occupancy_pct": pick(row, "sm__warps_active.avg.pct_of_peak_sustained_active"),
        "theoretical_occupancy_pct": pick(row, "sm__maximum_warps_per_active_cycle_pct"),
        "top_stalls_cycles_per_issue": largest(found),
        "all_stalls_cycles_per_issue": found,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("kernels", nargs="*", default=["ref", "cublas", "best", "gluon"])
    p.add_argument("--csv", nargs="+", default=None, help="NAME=FILE.csv: tabulate these exports, profile nothing")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    table, raw = {}, {}

    def add(name: str, path: str) -> None:
        rows = read(Path(path))
        if not rows:
            print(f"{name}: no rows in {path}")
            return
        row = max(rows, key=lambda r: pick(r, "gpu__time_duration.sum") or 0)  # cuBLAS: its GEMM, not a helper
        table[name] = summarise(row)
        raw[name] = rows
        (args.out / "w1d7_limit_ncu.json").write_text(json.dumps({"table": table, "raw": raw}, indent=1),
                                                      encoding="utf-8")

    if args.csv is not None:
        for item in args.csv:
            name, _, path = item.partition("=")
            add(name, path)
    else:
        for kernel in args.kernels:
            path = profile(kernel, args.out)
            if path is not None:
                add(kernel, str(path))
    columns = [("time_ms", "ms", ".3f"), ("tflops", "TFLOP/s", ".1f"), ("pct_fp32_peak_at_clock", "%peak", ".1f"),
               ("issue_active_pct", "issue%", ".1f"), ("fma_pipe_active_pct", "fma%", ".1f"),
               ("instructions_per_ffma", "inst/FFMA", ".3f"), ("lds_per_ffma", "LDS/FFMA", ".3f"),
               ("shared_ld_wavefronts_per_lds", "wf/LDS", ".2f"), ("registers_per_thread", "regs", ".0f"),
               ("achieved_occupancy_pct", "occ%", ".1f")]
    print_table(table, columns, name_width=8, cell_width=11)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
