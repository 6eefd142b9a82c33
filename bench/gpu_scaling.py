"""Grade one batch of demo-student copies through the pipeline on one GPU and then on several, and compare.

    python -m bench gpu-scaling --copies 3 [--notebooks week1/day7_fast_matmul,week2/day7_optimized_gemm]
        [--gpu-sets 0 0,1] [--work build/scaling] [--json out.json] [--references-first [--keep-references]]
        [--reuse]

Each GPU set is graded with ``--schedule pipeline --gpus SET`` and the grader's default limits for that many GPUs,
the same seed for every run, into WORK/gpus-<set> (commas as underscores), while ``nvidia-smi`` samples every
GPU's utilisation into WORK/gpus-<set>.smi.csv and /proc/stat the host's CPU load into WORK/gpus-<set>.cpu.txt
(does a set wait for CPUs rather than GPUs?). The first set is the baseline: for each later set the script
prints the wall time (the grader's own, from schedule.json), notebooks per hour, the speed-up, each GPU's mean
utilisation over the run and the share of samples it was busy, how long each GPU was held alone and why it idled
between holds (from schedule.json's timeline) with its pace per notebook and the course's class (300 x 14
notebooks) extrapolated at that pace onto 1, 8 and 32 GPUs, the GPU-exclusive seconds per notebook, and every
verdict and timing ratio that differs from the baseline's. ``--references-first`` grades the reference solutions
once before the sets (WORK/references) and copies them into every set's OUT, as a class's later batches find them;
``--keep-references`` reuses an earlier call's, so that the sets can be graded in calls of their own.
The two-GPU targets close the output: identical verdicts, ratios within 3%, and the second set at least 1.8 times
faster than the first.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import grading_throughput as gt
from bench import throughput as tp

REPO = Path(__file__).resolve().parent.parent


W2D7 = "week2/day7_optimized_gemm"
SPEED_UP_TARGET = 1.8
RATIO_TARGET = 0.03


def run_name(gpus: str) -> str:
    return "gpus-" + gpus.replace(",", "_")


@dataclass(frozen=True)
class Utilisation:
    gpu: str
    samples: int
    mean_percent: float
    busy_share: float  # samples above 0%


def read_utilisation(path: Path) -> list[Utilisation]:
    """Per-GPU utilisation from ``nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader,nounits``
    output; lines that are not two numbers (a sampler killed mid-line, "[N/A]") are left out."""
    by_gpu: dict[str, list[float]] = {}
    if not path.is_file():
        return []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 2:
            continue
        try:
            by_gpu.setdefault(str(int(fields[0])), []).append(float(fields[1]))
        except ValueError:
            continue
    return [Utilisation(gpu, len(v), sum(v) / len(v), sum(x > 0 for x in v) / len(v))
            for gpu, v in sorted(by_gpu.items(), key=lambda item: int(item[0]))]


@dataclass(frozen=True)
class CpuLoad:
    samples: int
    mean_busy: float  # share of the host's CPU time spent outside idle and iowait
    saturated_share: float  # samples with the host at least SATURATED busy


SATURATED = 0.9


def cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of the whole host from /proc/stat; None where there is none."""
    try:
        fields = [int(f) for f in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def sample_cpu(path: Path, period: float, stop: threading.Event) -> None:
    """Write the host's busy share over each ``period`` to ``path``, one number a line, until ``stop``."""
    with open(path, "w", encoding="utf-8") as log:
        before = cpu_times()
        while before is not None and not stop.wait(period):
            after = cpu_times()
            if after is None:
                return
            total = after[1] - before[1]
            if total > 0:
                log.write(f"{(after[0] - before[0]) / total:.4f}\n")
                log.flush()
            before = after


def read_cpu_load(path: Path) -> CpuLoad | None:
    values = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                values.append(float(line))
            except ValueError:
                continue
    if not values:
        return None
    return CpuLoad(len(values), sum(values) / len(values), sum(v >= SATURATED for v in values) / len(values))


def grade(work: Path, batch: Path, gpus: str, args: argparse.Namespace, references: Path | None = None) -> None:
    name = run_name(gpus)
    stop_cpu = threading.Event()
    cpu_sampler = threading.Thread(target=sample_cpu, args=(work / f"{name}.cpu.txt", args.sample_ms / 1000, stop_cpu),
                                   daemon=True)
    cpu_sampler.start()
    sampler = None
    smi = shutil.which("nvidia-smi")
    if smi:
        log = open(work / f"{name}.smi.csv", "w", encoding="utf-8")  # noqa: SIM115 (closed after the run)
        sampler = subprocess.Popen([smi, "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits",
                                    f"-lms={args.sample_ms}"], stdout=log, stderr=subprocess.DEVNULL)
    else:
        print(f"{name}: no nvidia-smi on PATH: utilisation not sampled", flush=True)
    try:
        gt.run_grader(work, batch, name, ["--schedule", "pipeline", "--gpus", gpus], args, references)
    finally:
        stop_cpu.set()
        cpu_sampler.join()
        if sampler is not None:
            sampler.terminate()
            sampler.wait()
            log.close()


def grade_references(work: Path, batch: Path, args: argparse.Namespace) -> Path:
    """Grade, with the first GPU set, the first student of the batch with each notebook, for the reference
    solutions: every set's OUT starts with them, so no set's wall time holds the references' run, build and
    judge (a class pays them once). With ``--keep-references``, an earlier call's WORK/references is used as it is."""
    if args.keep_references and (work / "references" / "reference").is_dir():
        print(f"references: kept from an earlier call ({work / 'references'})", flush=True)
        return work / "references"
    few = work / "references-batch"
    shutil.rmtree(few, ignore_errors=True)
    covered: set[str] = set()
    for student in sorted(p for p in batch.iterdir() if p.is_dir()):
        notebooks = {p.relative_to(student).as_posix() for p in student.rglob("*.ipynb")}
        if notebooks - covered:
            shutil.copytree(student, few / student.name)
            covered |= notebooks
    gt.run_grader(work, few, "references", ["--schedule", "pipeline", "--gpus", args.gpu_sets[0]], args)
    return work / "references"


def compare(first: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    verdicts = tp.verdict_differences(first["records"], later["records"])
    ratios = tp.ratio_differences(first["records"], later["records"])
    speed_up = first["wall_seconds"] / later["wall_seconds"] if later["wall_seconds"] else None
    return {"verdict_differences": [str(d) for d in verdicts], "items_compared": tp.item_count(first["records"]),
            "ratios_compared": len(ratios), "largest_ratio_difference": ratios[0].relative if ratios else None,
            "largest_ratio_at": str(ratios[0]) if ratios else None,
            "ratios_past_target": sum(d.relative > RATIO_TARGET for d in ratios),
            "largest_ratios": [f"{d.relative:.1%}: {d}" for d in ratios[:5]], "speed_up": speed_up}


def report_lines(sets: list[str], runs: dict[str, dict[str, Any]], compared: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for gpus in sets:
        data = runs[gpus]
        exclusive = tp.exclusive_seconds(data["records"])
        lines.append(f"--gpus {gpus}: {len(data['records'])} notebooks, wall {data['wall_seconds']:.1f} s "
                     f"({data['wall_from']}), "
                     + (f"{data['per_hour']:.0f} notebooks/h" if data["per_hour"] else "no rate")
                     + f", grader exit {data['run']['returncode']}, limits "
                     + json.dumps((data["schedule"] or {}).get("limits")))
        if exclusive:
            lines.append(f"  GPU held alone per notebook: mean {exclusive.mean:.1f} s, max {exclusive.max:.1f} s")
        in_hold = [(r.timings["in_hold"], r.timings["gpu_exclusive"], r.timings.get("drain", 0.0))
                   for r in data["records"] if "in_hold" in r.timings and "gpu_exclusive" in r.timings]
        if in_hold:
            own, held, drained = (statistics.fmean(column) for column in zip(*in_hold, strict=True))
            lines.append(f"  judges' holds: mean {held:.1f} s, of which draining {drained:.1f} s and the judge's own "
                         f"work {own:.1f} s")
        for u in data["utilisation"]:
            lines.append(f"  GPU {u.gpu}: mean utilisation {u.mean_percent:.0f}%, busy in {u.busy_share:.0%} of "
                         f"{u.samples} samples")
        if not data["utilisation"]:
            lines.append("  utilisation: not sampled")
        cpu = data.get("cpu")
        lines.append(f"  host CPUs: mean {cpu.mean_busy:.0%} busy, at least {SATURATED:.0%} busy in "
                     f"{cpu.saturated_share:.0%} of {cpu.samples} samples" if cpu else "  host CPUs: not sampled")
        grader_cpu = (data["schedule"] or {}).get("grader_cpu_seconds")
        if grader_cpu is not None and data["wall_seconds"]:
            lines.append(f"  the grader's own process: {grader_cpu:.0f} CPU s over {data['wall_seconds']:.0f} s "
                         f"({grader_cpu / data['wall_seconds']:.2f} cores)")
        lines.extend(tp.timeline_lines(tp.gpu_timelines(data["schedule"]), tp.gpu_periods(data["schedule"])))
    for gpus, c in compared.items():
        lines.append(f"--gpus {gpus} against --gpus {sets[0]}:")
        lines.append(f"  speed-up: {c['speed_up']:.2f}x" if c["speed_up"] else "  speed-up: no wall time")
        lines.append(f"  verdicts: {len(c['verdict_differences'])} DIFFER: " + "; ".join(c["verdict_differences"][:10])
                     if c["verdict_differences"] else f"  verdicts: identical ({c['items_compared']} items)")
        if c["ratios_compared"]:
            lines.append(f"  timing ratios: largest difference {c['largest_ratio_difference']:.1%} of "
                         f"{c['ratios_compared']}; more than {RATIO_TARGET:.0%} apart: {c['ratios_past_target']}; "
                         "the largest:")
            lines.extend(f"    {d}" for d in c["largest_ratios"])
        else:
            lines.append("  timing ratios: none timed")
        lines.append("two-GPU targets:")
        if not c["items_compared"]:
            lines.append("  not measured: identical verdicts (no item was graded)")
        else:
            lines.append(f"  {'met' if not c['verdict_differences'] else 'NOT MET':<9}identical verdicts")
        within = c["largest_ratio_difference"] is not None and c["largest_ratio_difference"] <= RATIO_TARGET
        lines.append(f"  {'met' if within else 'NOT MET':<9}every ratio within {RATIO_TARGET:.0%}")
        fast = c["speed_up"] is not None and c["speed_up"] >= SPEED_UP_TARGET
        lines.append(f"  {'met' if fast else 'NOT MET':<9}at least {SPEED_UP_TARGET}x faster")
    return lines


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--copies", type=int, default=3, help="copies of each demo student (default: %(default)s)")
    p.add_argument("--notebooks", default=f"{tp.W1D7},{W2D7}", help="comma-separated notebook keys "
                   "(default: %(default)s)")
    p.add_argument("--students", default=None, help="comma-separated demo students (default: all of them)")
    p.add_argument("--gpu-sets", nargs="+", default=["0", "0,1"],
                   help="the --gpus of each run; the first is the baseline (default: %(default)s)")
    p.add_argument("--seed", type=int, default=20261126, help="the secret seed of every run (default: %(default)s)")
    p.add_argument("--common-args", default="", help="more grader options for every run")
    p.add_argument("--sample-ms", type=int, default=500, help="nvidia-smi's sampling period (default: %(default)s)")
    p.add_argument("--work", type=Path, default=REPO / "build" / "scaling", help="(default: %(default)s)")
    p.add_argument("--grader-timeout", type=float, default=None,
                   help="seconds each grader run may take; then its stacks are printed into its log (SIGUSR1) and "
                        "it is stopped (default: no limit)")
    p.add_argument("--references-first", action="store_true",
                   help="grade the reference solutions once before the sets (with one student, the first set's "
                        "GPUs) and start every set's OUT with them, so the wall times compare the students' grading")
    p.add_argument("--keep-references", action="store_true",
                   help="with --references-first: use WORK/references from an earlier call where it holds them, so "
                        "the sets can be graded in separate calls")
    p.add_argument("--reuse", action="store_true", help="analyse WORK's earlier runs; grade nothing")
    p.add_argument("--json", type=Path, default=None, help="also write everything as JSON here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.device = "gpu"
    work: Path = args.work.resolve()
    notebooks = args.notebooks.split(",")
    if not args.reuse:
        work.mkdir(parents=True, exist_ok=True)
        batch = gt.build_batch(work, notebooks, args.students.split(",") if args.students else None, args.copies)
        references = grade_references(work, batch, args) if args.references_first else None
        for gpus in args.gpu_sets:
            grade(work, batch, gpus, args, references)
    runs = {}
    for gpus in args.gpu_sets:
        if not (work / f"{run_name(gpus)}.json").is_file():
            raise SystemExit(f"{work} has no run for --gpus {gpus}: grade it first")
        runs[gpus] = {**gt.read_mode(work, run_name(gpus), notebooks),
                      "utilisation": read_utilisation(work / f"{run_name(gpus)}.smi.csv"),
                      "cpu": read_cpu_load(work / f"{run_name(gpus)}.cpu.txt")}
    compared = {gpus: compare(runs[args.gpu_sets[0]], runs[gpus]) for gpus in args.gpu_sets[1:]}
    print("\n".join(report_lines(args.gpu_sets, runs, compared)))
    if args.json:
        args.json.write_text(json.dumps({
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "runs": {g: {"wall_seconds": d["wall_seconds"], "per_hour": d["per_hour"], "notebooks": len(d["records"]),
                         "run": d["run"], "schedule": d["schedule"],
                         "utilisation": [asdict(u) for u in d["utilisation"]],
                         "cpu": asdict(d["cpu"]) if d["cpu"] else None,
                         "gpu_timelines": [asdict(t) for t in tp.gpu_timelines(d["schedule"])],
                         "class_projection_seconds": tp.period_projection(tp.gpu_periods(d["schedule"])),
                         "stages": [asdict(s) for s in tp.stage_stats(d["records"])]} for g, d in runs.items()},
            "compared": compared}, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
