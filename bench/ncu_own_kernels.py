"""Nsight Compute on the kernels Week 2 has students profile, stored as one recorded reading (JSON).

    python -m bench w2-ncu-own-kernels OUT.json [--notebook DAY7.ipynb] [--size 4096] [--gemm-size 8192]
    python -m bench w2-ncu-own-kernels --child PLAN.json (what ncu runs: one launch of each plan entry)

The reading holds, for each kernel: duration, SM clock, DRAM bytes read and written, achieved FLOP/s, arithmetic
intensity against DRAM, registers per thread, achieved occupancy and every stall reason (warp-cycles per issued
instruction). Its kernels:

- ``w1d7_student``: a student's own Week 1 Day 7 fp32 matmul at SIZE^3 (Week 2 Day 1's walkthrough). Without
  ``--notebook`` the demo class is made (``python -m grader demo``) and its ``fast_correct`` student's
  ``week1/day7_fast_matmul.ipynb`` is used: the notebook's parameters, setup and the cells that define its kernel and
  its ``matmul`` run, nothing else;
- ``w2d4_stages_S``: Week 2 Day 4's kernel (the solution notebook's ``matmul_kernel``) with 128x128x64 tiles, 8
  warps, S = 2..5 stages, row-major tile order, fp16 at GEMM_SIZE^3 (Day 4's stall reasons and DRAM bytes against
  the number of stages);
- ``w2d7_grouped_s4``: the same body in grouped tile order (GROUP_M 8), 4 stages (Day 7's DRAM bytes, grouped
  against the row-major ``w2d4_stages_4``).

One process launches them in turn: two warm-up calls, then one call between cudaProfilerStart and cudaProfilerStop,
under ``ncu --profile-from-start off --clock-control none``; rows are matched to the plan in launch order. The JSON
records the date, GPU, driver, ncu version, commit and the command.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import harness
from bench.ncu_csv import export, largest, launch_fields, pick, read, stalls
from course.days.own_kernel import notebook_code

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "WarpStateStats")
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "sm__cycles_elapsed.avg.per_second",
           "sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "lts__t_sector_hit_rate.pct",
           "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
           "sm__warps_active.avg.pct_of_peak_sustained_active", "smsp__issue_active.avg.pct_of_peak_sustained_active")


def notebook_matmul_source(path: Path) -> str:
    """The code of a Week 1 Day 7 notebook that defines its kernel and ``matmul``, parameters set for a GPU run."""
    return notebook_code(path)


def plan(notebook: Path, size: int, gemm_size: int) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = [{"name": "w1d7_student", "kind": "notebook", "notebook": str(notebook),
                                      "shape": [size] * 3, "dtype": "float32"}]
    for stages in (2, 3, 4, 5):
        entries.append({"name": f"w2d4_stages_{stages}", "kind": "w2d4_row_major", "stages": stages,
                        "tile": [128, 128, 64], "warps": 8, "shape": [gemm_size] * 3, "dtype": "float16"})
    entries.append({"name": "w2d7_grouped_s4", "kind": "w2d4_grouped", "stages": 4, "tile": [128, 128, 64],
                    "warps": 8, "group_m": 8, "shape": [gemm_size] * 3, "dtype": "float16"})
    return entries


def _launcher(entry: dict[str, Any]) -> Any:
    if entry["kind"] == "notebook":
        source = notebook_matmul_source(Path(entry["notebook"]))
        # Triton reads a kernel's source from its file: write the cells to one and import it.
        module_path = Path(tempfile.gettempdir()) / "ncu_own_w1d7_student.py"
        module_path.write_text(source, encoding="utf-8")
        import importlib.util

        spec = importlib.util.spec_from_file_location("ncu_own_w1d7_student", module_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.matmul
    from bench.w2d456_limit_kernels import Launch, grouped_launcher, plain_launcher

    cfg = Launch(*entry["tile"], entry["warps"], entry["stages"], entry.get("group_m", 8))
    return grouped_launcher(cfg) if entry["kind"] == "w2d4_grouped" else plain_launcher("w2d4", cfg)


def child(plan_path: Path) -> int:
    import torch

    entries = json.loads(plan_path.read_text(encoding="utf-8"))
    for entry in entries:
        fn = _launcher(entry)
        m, n, k = entry["shape"]
        dtype = getattr(torch, entry["dtype"])
        torch.backends.cuda.matmul.allow_tf32 = False
        generator = torch.Generator(device="cuda").manual_seed(1)
        a = torch.randn(m, k, device="cuda", generator=generator).to(dtype)
        b = torch.randn(k, n, device="cuda", generator=generator).to(dtype)
        out = harness.profiled_launch(fn, a, b)
        expected = a.float() @ b.float()
        error = float(torch.linalg.vector_norm(out.double() - expected) / torch.linalg.vector_norm(expected))
        print(f"{entry['name']}: profiled one launch at {m}x{n}x{k} {entry['dtype']}, relative error {error:.1e}",
              flush=True)
    return 0


def summarise(row: dict[str, str], entry: dict[str, Any]) -> dict[str, Any]:
    """The reading of one kernel: what Week 2's walkthroughs read from it."""
    m, n, k = entry["shape"]
    flops = 2.0 * m * n * k
    seconds = (pick(row, "gpu__time_duration.sum") or float("nan")) * 1e-9
    read_bytes = pick(row, "dram__bytes_read.sum") or float("nan")
    written = pick(row, "dram__bytes_write.sum") or float("nan")
    element = 4 if entry["dtype"] == "float32" else 2
    found = stalls(row)
    return {
        "kernel": row.get("Kernel Name", "")[:160], "shape": entry["shape"], "dtype": entry["dtype"],
        "launch": {key: entry[key] for key in ("tile", "warps", "stages", "group_m") if key in entry},
        "grid": row.get("Grid Size"), "block": row.get("Block Size"),
        "time_ms": seconds * 1e3,
        "sm_clock_ghz": (pick(row, "sm__cycles_elapsed.avg.per_second") or float("nan")) / 1e9,
        "flops": flops, "tflops": flops / seconds / 1e12,
        "dram_read_gb": read_bytes / 1e9, "dram_write_gb": written / 1e9,
        "least_dram_gb": element * (m * k + k * n + m * n) / 1e9,
        "flop_per_dram_byte": flops / (read_bytes + written),
        "dram_gbps": (read_bytes + written) / seconds / 1e9,
        "dram_throughput_pct": pick(row, "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        "sm_throughput_pct": pick(row, "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        "l2_hit_rate_pct": pick(row, "lts__t_sector_hit_rate.pct"),
        "tensor_pipe_active_pct": pick(row, "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
        "issue_active_pct": pick(row, "smsp__issue_active.avg.pct_of_peak_sustained_active"),
        "ffma_thread_instructions": pick(row, "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"),
        **launch_fields(row),
        "top_stalls_cycles_per_issue": largest(found, 4),
        "all_stalls_cycles_per_issue": found,
    }


def _text(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def demo_notebook(folder: Path) -> Path:
    subprocess.run([sys.executable, "-m", "grader", "demo", str(folder)], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL)
    return folder / "fast_correct" / "week1" / "day7_fast_matmul.ipynb"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, nargs="?")
    p.add_argument("--notebook", type=Path, default=None, help="a Week 1 Day 7 notebook (default: the demo's)")
    p.add_argument("--size", type=int, default=4096, help="the Week 1 Day 7 fp32 matmul's M = N = K")
    p.add_argument("--gemm-size", type=int, default=8192, help="the Week 2 fp16 kernels' M = N = K")
    p.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=int, default=300, help="seconds ncu may take")
    p.add_argument("--commit", default="", help="the commit measured (where the tree has no .git)")
    args = p.parse_args(argv)
    if args.child is not None:
        return child(args.child)
    if args.out is None:
        p.error("OUT.json is required")
    work = Path(tempfile.mkdtemp(prefix="ncu_own_"))
    notebook = args.notebook or demo_notebook(work / "demo")
    entries = plan(notebook.resolve(), args.size, args.gemm_size)
    plan_path = work / "plan.json"
    plan_path.write_text(json.dumps(entries), encoding="utf-8")
    report = work / "own_kernels"
    command = ["ncu", "--profile-from-start", "off", "--clock-control", "none", "-f", "-o", str(report)]
    for section in SECTIONS:
        command += ["--section", section]
    command += ["--metrics", ",".join(METRICS), sys.executable, "-m", "bench.ncu_own_kernels", "--child",
                str(plan_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, cwd=REPO)
    print("\n".join((run.stdout + run.stderr).splitlines()[-(len(entries) + 8):]))
    raw_csv = args.out.with_suffix(".raw.csv")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    export(report, raw_csv, args.out.with_suffix(".details.txt"))
    rows = read(raw_csv)
    if len(rows) != len(entries):
        print(f"ncu gave {len(rows)} rows for {len(entries)} plan entries (rc {run.returncode}): nothing recorded")
        return 1
    reading = {
        "what": "Nsight Compute on the kernels Week 2 has students profile (bench/ncu_own_kernels.py)",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "gpu": _text(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).splitlines()[0:1],
        "driver": _text(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "ncu": _text(["ncu", "--version"]).splitlines()[-1:],
        "commit": args.commit or _text(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]) or "unknown",
        "command": " ".join(["python", "-m", "bench", "w2-ncu-own-kernels",
                             *(argv if argv is not None else sys.argv[1:])]),
        "ncu_command": " ".join(command[:-5] + ["python", "-m", "bench.ncu_own_kernels", "--child", "PLAN.json"]),
        "notebook": str(notebook if args.notebook else "demo class: fast_correct/week1/day7_fast_matmul.ipynb"),
        "kernels": {entry["name"]: summarise(row, entry) for entry, row in zip(entries, rows, strict=True)},
    }
    reading["gpu"] = reading["gpu"][0] if reading["gpu"] else "unknown"
    reading["ncu"] = reading["ncu"][0] if reading["ncu"] else "unknown"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(reading, indent=1) + "\n", encoding="utf-8")
    for name, row in reading["kernels"].items():
        top = ", ".join(f"{key} {value:.2f}" for key, value in row["top_stalls_cycles_per_issue"].items())
        print(f"{name:<16} {row['time_ms']:8.3f} ms {row['tflops']:7.1f} TFLOP/s DRAM {row['dram_read_gb']:6.2f} GB "
              f"read ({row['flop_per_dram_byte']:.0f} FLOP/B) regs {row['registers_per_thread']} "
              f"occ {row['achieved_occupancy_pct']}%  stalls: {top}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
