"""Nsight Compute on Week 2 Days 4-6 at the largest benchmark shape (8192^3 fp16 for each day): the reference launch,
the best variant of bench/w2d456_limit_variants.py (read from its JSON), and cuBLAS fp16 as each spec calls it.

    python -m bench w2d456-limits-ncu OUTDIR --results VARIANTS.json      (profile, then tabulate)
    python -m bench w2d456-limits-ncu OUTDIR --csv FILE.csv --plan PLAN.json  (tabulate an existing raw export)
    python -m bench w2d456-limits-ncu --child PLAN.json                   (what ncu runs: one launch of each)
    python -m bench w2d456-limits-ncu OUTDIR --results V.json --shape 6000,3000,4096 --tag _6000 \
        --labels "cuBLAS fp16 (Days 5-6: fp32 reductions);Day 5 ref;Day 5 best"   (a subset at another shape)

One process launches every kernel of the plan in turn: two warm-up calls (compilation, cuBLAS's handle), then one
call between cudaProfilerStart and cudaProfilerStop, under ``ncu --profile-from-start off --clock-control none``
with the sections SpeedOfLight, LaunchStats, Occupancy, WarpStateStats, ComputeWorkloadAnalysis,
MemoryWorkloadAnalysis, SchedulerStats and InstructionStats, plus the extra counters below (those this ncu knows for
GH100). Rows are matched to the plan in launch order (a cuBLAS entry takes the longest of the kernels of its range).

For each kernel: time, TFLOP/s and its share of the H100 SXM datasheet's dense fp16 peak (989.4 TFLOP/s, a
datasheet figure at 1.83 GHz) and of the peak at the measured SM clock (132 SMs x 4096 FLOP a clock), tensor-pipe
activity, wgmma (GMMA) and mma.sync (HMMA) warp instructions, DRAM throughput and bytes, L2 hit rate,
shared-memory (LSU) wavefront throughput, achieved occupancy, registers, shared memory per block and the three
largest stall reasons (warp-cycles per issued instruction). OUTDIR gets w2d456_limit_ncu{TAG}.json (the table and each
kernel's raw metrics), w2d456_limit_ncu{TAG}_raw.csv and w2d456_limit_ncu{TAG}_details.txt (ncu's details page).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench import harness
from bench.ncu_csv import export, largest, launch_fields, number, pick, print_table, read, stalls

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


DATASHEET_FP16_DENSE_TFLOPS = 989.4  # H100 SXM, dense fp16/bf16 with fp32 accumulation (datasheet)
FLOP_PER_SM_CLOCK = 4096  # 989.4e12 / (132 SMs * 1.83e9 Hz)
SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "WarpStateStats", "ComputeWorkloadAnalysis",
            "MemoryWorkloadAnalysis", "SchedulerStats", "InstructionStats")
EXTRA = (
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_tensor_op_gmma.sum", "sm__inst_executed_pipe_tensor_op_hmma.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum", "dram__bytes_write.sum",
    "lts__t_sector_hit_rate.pct", "lts__t_bytes.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "sm__cycles_elapsed.avg.per_second", "smsp__inst_executed.sum",
)
# Plan entries: (label, day key, what). "ref"/"best" resolve to the day's reference or best variant by name.
PLAN = (
    ("cuBLAS fp16 (Day 4: torch defaults)", "w2d4", "library"),
    ("Day 4 ref", "w2d4", "ref"),
    ("Day 4 best", "w2d4", "best"),
    ("cuBLAS fp16 (Days 5-6: fp32 reductions)", "w2d5", "library"),
    ("Day 5 ref", "w2d5", "ref"),
    ("Day 5 best", "w2d5", "best"),
    ("Day 6 fp16 ref", "w2d6_fp16", "ref"),
    ("Day 6 fp16 best", "w2d6_fp16", "best"),
)


def child(plan_path: Path) -> int:
    """Under ncu: each plan entry once between cudaProfilerStart/Stop."""
    from course import device
    from course import spec as specs

    device.configure("auto")
    import torch

    from bench.w2d456_limit_kernels import days

    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    by_key = {d.key: d for d in days()}
    inputs_by_day: dict[str, tuple] = {}
    for item in plan["entries"]:
        day = by_key[item["day"]]
        spec = specs.get(day.spec_id)
        if day.key not in inputs_by_day:
            inputs_by_day.clear()
            inputs_by_day[day.key] = spec.make_inputs(tuple(plan["shape"]), 1, "cuda")
        inputs = inputs_by_day[day.key]
        if item["what"] == "library":
            def fn(a, b, s=spec):
                return s.library((a, b))
        else:
            fn = next(v for v in day.variants if v.name == item["variant"]).fn
        out = harness.profiled_launch(fn, *inputs)
        exact_x = inputs[0].double() @ (inputs[1].double() @ torch.ones(inputs[1].shape[1], 1, device="cuda",
                                                                          dtype=torch.float64))
        err = float(torch.linalg.vector_norm(out.double().sum(1, keepdim=True) - exact_x)
                    / torch.linalg.vector_norm(exact_x))
        print(f"profiled {item['label']}: {item.get('variant', 'library')} (row-sum check {err:.1e})", flush=True)
        del out
    return 0


def known_metrics() -> set[str] | None:
    try:
        run = subprocess.run(["ncu", "--query-metrics", "--chip", "gh100"], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = {line.split()[0] for line in run.stdout.splitlines() if line.strip() and "__" in line.split()[0]}
    return names or None


def match(rows: list[dict[str, str]], entries: list[dict]) -> dict[str, dict[str, str]]:
    """Rows in launch order to plan entries: a Triton entry takes the next row of its kernel's name; a library entry
    takes the longest row before the next Triton entry's row."""
    rows = sorted(rows, key=lambda r: number(r.get("ID", "0")) or 0)
    out: dict[str, dict[str, str]] = {}
    i = 0
    for j, entry in enumerate(entries):
        if entry["what"] != "library":
            while i < len(rows) and not rows[i].get("Kernel Name", "").startswith(entry["kernel"]):
                i += 1
            if i < len(rows):
                out[entry["label"]] = rows[i]
                i += 1
            continue
        following = next((e for e in entries[j + 1:] if e["what"] != "library"), None)
        group = []
        while i < len(rows) and not (following and rows[i].get("Kernel Name", "").startswith(following["kernel"])):
            group.append(rows[i])
            i += 1
        if group:
            out[entry["label"]] = max(group, key=lambda r: pick(r, "gpu__time_duration.sum") or 0)
    return out


TENSOR = "sm__pipe_tensor_op_{}_cycles_active.avg.pct_of_peak_sustained_active"
SHARED = "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed"


def summarise(row: dict[str, str], flops: float) -> dict[str, object]:
    seconds = (pick(row, "gpu__time_duration.sum") or float("nan")) * 1e-9
    clock = pick(row, "sm__cycles_elapsed.avg.per_second") or float("nan")
    sms = pick(row, "device__attribute_multiprocessor_count") or 132
    tflops = flops / seconds / 1e12
    found = stalls(row)
    dram_bytes = (pick(row, "dram__bytes_read.sum") or 0) + (pick(row, "dram__bytes_write.sum") or 0)
    return {
        "kernel": row.get("Kernel Name", "")[:200],
        "grid": row.get("Grid Size"), "block": row.get("Block Size"),
        "time_ms": seconds * 1e3,
        "sm_clock_ghz": clock / 1e9,
        "tflops": tflops,
        "pct_datasheet_fp16_dense": 100 * tflops / DATASHEET_FP16_DENSE_TFLOPS,
        "pct_peak_at_clock": 100 * flops / (seconds * FLOP_PER_SM_CLOCK * sms * clock),
        "tensor_hmma_pipe_active_pct": pick(row, TENSOR.format("hmma")),
        "tensor_gmma_pipe_active_pct": pick(row, TENSOR.format("gmma")),
        "tensor_pipe_active_pct": pick(row, "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
        "gmma_warp_instructions": pick(row, "sm__inst_executed_pipe_tensor_op_gmma.sum"),
        "hmma_warp_instructions": pick(row, "sm__inst_executed_pipe_tensor_op_hmma.sum"),
        "dram_throughput_pct": pick(row, "dram__throughput.avg.pct_of_peak_sustained_elapsed")
        or pick(row, "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
        "dram_gbytes": dram_bytes / 1e9,
        "l2_hit_rate_pct": pick(row, "lts__t_sector_hit_rate.pct"),
        "shared_lsu_wavefronts_pct": pick(row, SHARED),
        "shared_lsu_bank_conflicts": pick(row, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"),
        "tma_load_gbytes": (pick(row, "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum") or 0) / 1e9,
        "issue_active_pct": pick(row, "smsp__issue_active.avg.pct_of_peak_sustained_active"),
        "sm_throughput_pct": pick(row, "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        **launch_fields(row),
        "theoretical_occupancy_pct": pick(row, "sm__maximum_warps_per_active_cycle_pct"),
        "waves_per_sm": pick(row, "launch__waves_per_multiprocessor"),
        "top_stalls_cycles_per_issue": largest(found),
        "all_stalls_cycles_per_issue": found,
    }


def make_plan(results: dict, shape: tuple[int, int, int], labels: list[str] | None = None) -> dict:
    entries = []
    for label, day, what in PLAN:
        if labels and label not in labels:
            continue
        entry = {"label": label, "day": day, "what": what}
        if what != "library":
            variants = results["days"][day]["variants"]
            if what == "ref":
                name = next(n for n, v in variants.items() if v["reference"])
            else:
                name = results["days"][day].get("best", {}).get("name")
                if name is None:
                    continue
            entry["variant"] = name
            entry["kernel"] = "_grouped_kernel" if name.endswith("grouped") else (
                "matmul_tma_kernel" if day == "w2d5" else "matmul_kernel")
        entries.append(entry)
    return {"shape": list(shape), "entries": entries}


def profile(out: Path, plan_path: Path, tag: str = "") -> Path | None:
    report = Path(f"/tmp/w2d456_limit_ncu{tag}")
    known = known_metrics()
    extra = [m for m in EXTRA if known is None or m.split(".")[0] in known]
    dropped = [m for m in EXTRA if m not in extra]
    if dropped:
        print(f"metrics this ncu does not know for gh100, left out: {dropped}")
    base = ["ncu", "--profile-from-start", "off", "--clock-control", "none", "-f", "-o", str(report)]
    for section in SECTIONS:
        base += ["--section", section]
    command = [sys.executable, "-m", "bench.w2d456_limit_ncu", "--child", str(plan_path)]
    began = time.perf_counter()
    for attempt in (base + ["--metrics", ",".join(extra)], base):
        run = subprocess.run(attempt + command, capture_output=True, text=True, cwd=REPO)
        print("\n".join((run.stdout + run.stderr).splitlines()[-14:]))
        if run.returncode == 0:
            break
        retry = "; again without the extra metrics" if attempt is not base else ""
        print(f"ncu failed (rc {run.returncode}){retry}")
    else:
        return None
    print(f"ncu: {time.perf_counter() - began:.0f} s")
    csv_path = out / f"w2d456_limit_ncu{tag}_raw.csv"
    details = out / f"w2d456_limit_ncu{tag}_details.txt"
    details.unlink(missing_ok=True)
    export(report, csv_path, details)
    return csv_path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, nargs="?")
    p.add_argument("--results", type=Path, help="bench/w2d456_limit_variants.py's JSON: which variant is best")
    p.add_argument("--child", type=Path, help="run the plan's launches (under ncu)")
    p.add_argument("--csv", type=Path, help="tabulate this raw export instead of profiling (needs --plan)")
    p.add_argument("--plan", type=Path)
    p.add_argument("--shape", default="8192,8192,8192")
    p.add_argument("--labels", default=None, help="only these PLAN labels, separated by ';'")
    p.add_argument("--tag", default="", help="suffix of the output files' names")
    args = p.parse_args(argv)
    if args.child:
        return child(args.child)
    shape = tuple(int(s) for s in args.shape.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    if args.csv:
        plan = json.loads(args.plan.read_text(encoding="utf-8"))
        csv_path = args.csv
    else:
        labels = [x.strip() for x in args.labels.split(";")] if args.labels else None
        plan = make_plan(json.loads(args.results.read_text(encoding="utf-8")), shape, labels)
        plan_path = Path(f"/tmp/w2d456_limit_ncu{args.tag}_plan.json")
        plan_path.write_text(json.dumps(plan, indent=1), encoding="utf-8")
        csv_path = profile(args.out, plan_path, args.tag)
        if csv_path is None:
            return 1
    rows = read(csv_path)
    matched = match(rows, plan["entries"])
    flops = 2.0 * shape[0] * shape[1] * shape[2]
    table = {label: summarise(row, flops) for label, row in matched.items()}
    for entry in plan["entries"]:
        if entry["label"] in table:
            table[entry["label"]]["variant"] = entry.get("variant", "library")
    (args.out / f"w2d456_limit_ncu{args.tag}.json").write_text(
        json.dumps({"shape": list(shape), "plan": plan, "table": table, "raw": matched}, indent=1), encoding="utf-8")
    columns = [("time_ms", "ms", ".3f"), ("tflops", "TFLOP/s", ".1f"), ("pct_datasheet_fp16_dense", "%989", ".1f"),
               ("pct_peak_at_clock", "%clk", ".1f"), ("tensor_hmma_pipe_active_pct", "tens%", ".1f"),
               ("gmma_warp_instructions", "GMMA", ".3g"), ("hmma_warp_instructions", "HMMA", ".3g"),
               ("dram_throughput_pct", "dram%", ".1f"), ("l2_hit_rate_pct", "L2hit%", ".1f"),
               ("shared_lsu_wavefronts_pct", "shLSU%", ".1f"), ("achieved_occupancy_pct", "occ%", ".1f"),
               ("registers_per_thread", "regs", ".0f"), ("sm_clock_ghz", "GHz", ".2f")]
    print_table(table, columns, name_width=40, cell_width=9)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
