"""Grade N copies of the demo students one notebook at a time and through the pipeline, and compare.

    python -m bench grading-throughput --copies 10 --seed 16 [--notebooks week1/day7_fast_matmul]
        [--students fast_correct,slow_correct] [--grade-args "--gpus 0 --runs 8"] [--json out.json]
        [--from OUT_OF_A_GRADED_BATCH ...]

Writes WORK (default build/throughput): demo/ (the demo class), batch/ (the copies, ``<student>-c<k>``),
batch.json (what the batch holds), serial/ and pipeline/ (the two grade runs' OUT folders, wiped first),
serial.log, pipeline.log and serial.json, pipeline.json (each run's command, exit status and wall time measured
around it). ``--references OUT`` starts both runs with OUT's graded reference solutions. Both runs use the same
seed; ``--grade-args`` goes to the pipeline run only, ``--common-args`` to both.
``--reuse`` analyses WORK's earlier runs without grading; ``--project`` prints only the projection.

A run's wall time is its schedule.json's (the grader's own, around its scheduler: on a GPU the reference
solutions' runs included) where the grader wrote one, else the time measured around the grader.

Prints one table of per-stage seconds per run (with, for a pipeline run, each GPU's holds, why it idled between them
and its pace per notebook, from schedule.json's timeline), one comparison block (verdicts, timing ratios, GPU-
exclusive seconds, the throughput targets) and one projection block: the wall time of a class (300 students x every
course notebook but the bonus by default) on 1 GPU, one 8-GPU node and a Slurm cluster of 4 such nodes. The model is
in bench/throughput.py's docstring (the simulation: bench/pipeline_simulation.py) and is printed with its
parameters; every number in it is measured or one of them. Notebooks not measured are extrapolated from the measured
ones, and the output names them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil

from bench import judge_spans as spans
from bench import pipeline_simulation as pipesim
from bench import throughput as tp
from bench.graded_results import read_results, read_schedule
from grader.authoring import demo
from grader.flow.schedule import JUDGES_PER_GPU
from grader.flow.settings import RUNS_PER_GPU
from grader.intake.layout import course_notebooks
from grader.slurm import SlurmOptions

REPO = Path(__file__).resolve().parent.parent

MODES = ("serial", "pipeline")
MODEL = ("a discrete-event simulation of the grader's pipeline (bench/pipeline_simulation.py simulate), driven by each "
         "notebook's measured stage times: its run ('notebook' s running, frozen left out) in one of the runs slots, "
         "frozen while its GPU is held alone, its last gpu_alone s holding the GPU itself; then its build (build + "
         "compile + replay s) in one of the builds slots; then, once its reference is judged, its judge in one of "
         "{judges} slot(s) per GPU: a start-up (the timeline's judge span before the judge's own timing, less the "
         "other judges' holds it waited through: a lower bound, {start:.1f} s mean), its GPU work before its hold "
         "(judge - gpu_exclusive - gpu_wait s, and the hand-over from the hold before; frozen while another holds), "
         "then its hold (gpu_exclusive s), one holder per GPU at a time. The references are graded first, as the "
         "grader does (a measured batch's own, from its timeline; the class's at their notebooks' mean costs). "
         "Limits as the grader resolves them: runs min({runs_per_gpu:g} x GPUs, cores // 2), builds cores // 4, "
         "unless --runs-per-gpu/--builds-per-gpu are given. CPU cores are not simulated (the stage times carry the "
         "contention they were measured under): the wall is the larger of the simulation and the CPU bound "
         "sum(C)/cores, C = run + build + compile + replay + judge - gpu_wait s at {cores:g} core(s) per stage. "
         "Slurm: a one-GPU job grading the references, then one-GPU tasks of whole students, {per_task} notebooks at "
         "most each (grader.slurm), each taking those references, in waves over the cluster's GPUs; its queueing, "
         "start-up and gathering are not modelled. The "
         "lower bounds beside (GPU sum(E)/G, CPU, runs sum(R)/runs, builds sum(B)/builds) are for reference.")


def build_batch(work: Path, notebooks: list[str], students: list[str] | None, copies: int) -> Path:
    """WORK/batch: ``copies`` copies of each demo student's folder (only ``notebooks``), as ``<student>-c<k>``."""
    for stale in ("demo", "batch"):
        shutil.rmtree(work / stale, ignore_errors=True)
    demo.build(work / "demo", keys=set(notebooks))
    found = sorted(p.name for p in (work / "demo").iterdir())
    chosen = found if students is None else [s for s in found if s in students]
    unknown = sorted(set(students or ()) - set(found))
    if unknown or not chosen:
        raise SystemExit(f"no demo student {', '.join(unknown) or '(none chosen)'} for {', '.join(notebooks)}; "
                         f"the demo class has {', '.join(found)}")
    for student in chosen:
        for copy in range(1, copies + 1):
            shutil.copytree(work / "demo" / student, work / "batch" / f"{student}-c{copy}")
    return work / "batch"


def run_grader(work: Path, batch: Path, mode: str, grader_args: list[str], args: argparse.Namespace,
               references: Path | None = None) -> dict[str, Any]:
    """Grade ``batch`` into WORK/<mode> with ``grader_args``; the wall time is measured around it. ``references``:
    an OUT whose graded reference solutions are copied in first (the grader then keeps them, ungraded again)."""
    out = work / mode
    shutil.rmtree(out, ignore_errors=True)
    if references is not None:
        shutil.copytree(references / "reference", out / "reference")
    command = [sys.executable, "-m", "grader", "grade", str(batch), "--out", str(out), "--device", args.device,
               "--seed", str(args.seed), "--allow-ungraded", *shlex.split(args.common_args), *grader_args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    print(f"{mode}: {shlex.join(command)}", flush=True)
    started = time.monotonic()
    timed_out = False
    with open(work / f"{mode}.log", "w", encoding="utf-8") as log:
        grader = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            returncode = grader.wait(timeout=args.grader_timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            returncode = stop_with_stacks(grader)
    run = {"command": command, "returncode": returncode, "wall_seconds": time.monotonic() - started,
           "timed_out": timed_out}
    (work / f"{mode}.json").write_text(json.dumps(run, indent=1), encoding="utf-8")
    if returncode != 0:
        tail = (work / f"{mode}.log").read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        print(f"{mode}: the grader exited {returncode} (log: {work / f'{mode}.log'}):\n  " + "\n  ".join(tail))
    return run


def stop_with_stacks(grader: subprocess.Popen) -> int:
    """Stop a grader that ran past --grader-timeout, first asking it and its judges for their stacks (SIGUSR1:
    into the grader's log and each judge.log), so a stall says where it waited."""
    with contextlib.suppress(psutil.Error):
        for process in [psutil.Process(grader.pid), *psutil.Process(grader.pid).children(recursive=True)]:
            if process.pid == grader.pid or "grader.judge" in " ".join(process.cmdline()):
                process.send_signal(signal.SIGUSR1)
    time.sleep(3.0)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(grader.pid, signal.SIGTERM)
    try:
        return grader.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(grader.pid, signal.SIGKILL)
        return grader.wait()


def read_mode(work: Path, mode: str, notebooks: list[str]) -> dict[str, Any]:
    run = json.loads((work / f"{mode}.json").read_text(encoding="utf-8"))
    schedule = read_schedule(work / mode)
    records = read_results(work / mode, notebooks)
    wall = schedule["wall_seconds"] if schedule and schedule.get("wall_seconds") else run["wall_seconds"]
    return {"records": records, "run": run, "schedule": schedule, "wall_seconds": wall,
            "wall_from": "the grader's schedule.json" if schedule and schedule.get("wall_seconds")
            else "measured around the grader", "per_hour": tp.per_hour(len(records), wall) if records else None}


def schedule_gpus(schedule: dict[str, Any] | None) -> list[Any] | None:
    """The GPUs a run graded on, as its schedule.json lists them (None where it does not)."""
    gpus = (schedule or {}).get("gpus", ((schedule or {}).get("limits") or {}).get("gpus"))
    return gpus if isinstance(gpus, list) else None


def mode_block(mode: str, data: dict[str, Any]) -> list[str]:
    records, schedule = data["records"], data["schedule"]
    counts: dict[str, int] = {}
    for r in records:
        counts[r.notebook] = counts.get(r.notebook, 0) + 1
    what = ", ".join(f"{n} x {k}" for k, n in sorted(counts.items())) or "nothing graded"
    rate = f"{data['per_hour']:.0f} notebooks/h" if data["per_hour"] else "no rate"
    around = "" if schedule is None else f"; {data['run']['wall_seconds']:.1f} s measured around it"
    lines = [f"{mode}: {what}; wall {data['wall_seconds']:.1f} s ({data['wall_from']}{around}; grader exit "
             f"{data['run']['returncode']}); {rate}" + (f"; limits {json.dumps(schedule.get('limits'))}" if schedule
                                                        else "; no schedule.json")]
    lines.append(f"  {'stage':<15}{'n':>4}{'absent':>8}{'mean':>9}{'median':>9}{'max':>9}")
    for s in tp.stage_stats(records):
        lines.append(f"  {s.stage:<15}{s.count:>4}{s.absent:>8}{s.mean:>9.2f}{s.median:>9.2f}{s.max:>9.2f}")
    never = tp.stages_never_recorded(records)
    if never:
        lines.append(f"  not recorded by any result (absent, not zero): {', '.join(never)}")
    lines.extend(tp.timeline_lines(tp.gpu_timelines(schedule), tp.gpu_periods(schedule)))
    return lines


def comparison(serial: dict[str, Any], pipeline: dict[str, Any],
               notebooks: list[str]) -> tuple[list[str], dict[str, Any]]:
    first, second = serial["records"], pipeline["records"]
    verdicts = tp.verdict_differences(first, second)
    ratio_diffs = tp.ratio_differences(first, second)
    seeds = tp.seeds([*first, *second])
    lines = ["comparison (pipeline against serial, " + (f"seed {seeds[0]} in both)" if len(seeds) == 1
                                                        else f"SEEDS DIFFER: {seeds})")]
    if verdicts:
        lines.append(f"  verdicts: {len(verdicts)} DIFFER:")
        lines += [f"    {d}" for d in verdicts[:20]] + ([f"    ... {len(verdicts) - 20} more in --json"]
                                                         if len(verdicts) > 20 else [])
    else:
        lines.append(f"  verdicts: identical ({tp.item_count(first)} items in {len(first)} notebooks)")
    if ratio_diffs:
        lines.append(f"  timing ratios: largest difference {ratio_diffs[0].relative:.1%} of {len(ratio_diffs)} "
                     f"ratios, at {ratio_diffs[0]}")
    else:
        lines.append("  timing ratios: none timed in either run")
    exclusive = {"all": tp.exclusive_seconds(second)}
    if len(notebooks) > 1:
        exclusive[tp.W1D7] = tp.exclusive_seconds(second, tp.W1D7)
    shown = [f"{k}: mean {v.mean:.1f} s, max {v.max:.1f} s over {v.count}" if v else f"{k}: not recorded"
             for k, v in exclusive.items()]
    lines.append("  GPU-exclusive seconds per notebook (pipeline): " + "; ".join(shown))
    listed = schedule_gpus(pipeline["schedule"])
    gpus = len(listed) if listed is not None else None
    w1d7_rate = pipeline["per_hour"] if notebooks == [tp.W1D7] else None
    goals = tp.targets(second, w1d7_rate, gpus, verdicts, ratio_diffs)
    lines.append("throughput targets:")
    lines += [f"  {t.mark:<14}{t.name}: {t.measured}" for t in goals]
    data = {"seeds": seeds, "verdict_differences": [asdict(d) for d in verdicts],
            "items_compared": tp.item_count(first),
            "ratio_differences": [{**asdict(d), "relative": d.relative} for d in ratio_diffs],
            "gpu_exclusive": {k: asdict(v) if v else None for k, v in exclusive.items()},
            "targets": [{**asdict(t), "mark": t.mark} for t in goals]}
    return lines, data


def alone_block(modes: dict[str, dict[str, Any]], notebooks: list[str]) -> tuple[list[str], dict[str, Any]]:
    """What one run alone shows: its GPU-exclusive seconds and rate against the throughput targets."""
    (mode, data), = modes.items()
    lines = [f"{mode} alone: nothing to compare its verdicts and ratios with (grade both modes for that)"]
    if mode != "pipeline":
        return lines, {}
    listed = schedule_gpus(data["schedule"])
    rate = data["per_hour"] if notebooks == [tp.W1D7] else None
    goals = tp.targets(data["records"], rate, len(listed) if listed is not None else None, [], [])[:2]
    lines.append("throughput targets this run can show:")
    lines += [f"  {t.mark:<14}{t.name}: {t.measured}" for t in goals]
    return lines, {"targets": [{**asdict(t), "mark": t.mark} for t in goals]}


def model_check(name: str, data: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The model applied to one measured pipeline batch (its references, its results, its own limits), beside its
    measured wall time."""
    schedule = data["schedule"] or {}
    limits = schedule.get("limits") or {}
    count = max(1, len(schedule_gpus(schedule) or [0]))
    runs = int(limits.get("runs") or pipesim.grader_limits(count, args.host_cpus, RUNS_PER_GPU, 1)[0])
    builds = int(limits.get("builds") or pipesim.grader_limits(count, args.host_cpus, RUNS_PER_GPU, 1)[1])
    judges = int(limits.get("judges_per_gpu") or args.judges_per_gpu)
    jobs, measured = pipesim.batch_jobs(data["records"], schedule)
    sim = pipesim.simulate(jobs, count, runs, builds, judges)
    machine = tp.Machine(name, count, args.host_cpus / count, runs / count, builds / count)
    bounds = tp.batch_model(data["records"], machine, args.cores_per_stage).bounds
    wall = max(sim.wall, bounds["CPU"])
    serial = pipesim.held_plus_runs(sum(j.hold + j.alone for j in jobs), sum(j.run - j.alone for j in jobs), count,
                               runs)
    held = sum(h["end"] - h["start"] for h in (schedule.get("timeline") or {}).get("holds") or [])
    runs_ended = [s["end"] for s in (schedule.get("timeline") or {}).get("stages") or [] if s["stage"] == "run"]
    return {"batch": name, "gpus": count, "notebooks": len(data["records"]), "references": measured["references"],
            "limits": {"runs": runs, "builds": builds, "judges_per_gpu": judges},
            "model_seconds": wall, "simulated_seconds": sim.wall, "bound": "simulated" if wall == sim.wall else "CPU",
            "bounds_seconds": bounds, "held_plus_runs_seconds": serial, "measured_seconds": data["wall_seconds"],
            "error": wall / data["wall_seconds"] - 1 if data["wall_seconds"] else None,
            "held_seconds": {"simulated": sum(sim.held), "measured": held if held else None},
            "drain_seconds": {"simulated": sim.drain,
                              "measured": data["wall_seconds"] - max(runs_ended) if runs_ended else None},
            "judge_start_mean": measured["judge_start_mean"], "judge_waited_mean": measured["judge_waited_mean"],
            "judge_splits": measured["judge_splits"], "machine": asdict(machine)}


def projection(args: argparse.Namespace, measured: list[dict[str, tp.NotebookCost]],
               batches: dict[str, dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    class_notebooks = args.class_notebooks.split(",") if args.class_notebooks else \
        [nb.key for nb in course_notebooks() if not nb.name.startswith("bonus")]
    costs = tp.class_costs(class_notebooks, *measured)
    node_share = args.node_cpus / args.node_gpus

    def limits(gpus: int, cores: float) -> tuple[int, int, int]:
        return pipesim.grader_limits(gpus, cores, RUNS_PER_GPU, args.judges_per_gpu,
                                round(args.runs_per_gpu * gpus) if args.runs_per_gpu else None,
                                round(args.builds_per_gpu * gpus) if args.builds_per_gpu else None)

    per_task = SlurmOptions.notebooks_per_task
    slots = args.cluster_nodes * args.node_gpus
    one, node, task = limits(1, args.host_cpus), limits(args.node_gpus, args.node_cpus), limits(1, node_share)
    simulated = [pipesim.simulate_class(f"1 GPU, {args.host_cpus:g} cores", costs, args.class_students, 1, *one),
                 pipesim.simulate_class(f"1 node, {args.node_gpus} GPUs, {args.node_cpus:g} cores", costs,
                                   args.class_students, args.node_gpus, *node),
                 pipesim.simulate_slurm(f"Slurm, {args.cluster_nodes} such nodes", costs, args.class_students, slots,
                                   per_task, *task)]
    machines = [tp.Machine(simulated[0].name, 1, args.host_cpus, one[0], one[1]),
                tp.Machine(simulated[1].name, args.node_gpus, node_share, node[0] / args.node_gpus,
                           node[1] / args.node_gpus),
                tp.Machine(simulated[2].name, slots, node_share, task[0], task[1])]
    bounds = [tp.project(costs, args.class_students, m, args.cores_per_stage) for m in machines]
    starts = [c.judge_start for c in costs.values() if c.judge_start is not None]
    model = MODEL.format(cores=args.cores_per_stage, runs_per_gpu=RUNS_PER_GPU, judges=args.judges_per_gpu,
                         per_task=per_task, start=statistics.fmean(starts) if starts else 0.0)
    lines = [f"projection: {args.class_students} students x {len(costs)} notebooks = "
             f"{args.class_students * len(costs)} notebooks",
             "  model: " + model]
    by_source: dict[str, list[tp.NotebookCost]] = {}
    for cost in costs.values():
        by_source.setdefault(cost.source, []).append(cost)
    for source, group in sorted(by_source.items(), key=lambda sourced: sourced[1][0].samples == 0):
        stage = "/".join(sorted({c.exclusive_stage for c in group}))
        stage += ": the judge's wall time, an upper bound" if "judge" in stage else ""
        if group[0].samples:
            shown = ", ".join(f"{c.notebook} E {c.exclusive:.1f} R {c.run:.1f} B {c.build:.1f} C {c.cpu:.1f} "
                              f"({c.samples})" for c in group)
        else:  # extrapolated: every one has the same cost
            shown = (f"E {group[0].exclusive:.1f} R {group[0].run:.1f} B {group[0].build:.1f} C {group[0].cpu:.1f} "
                     "for " + ", ".join(c.notebook for c in group))
        lines.append(f"  {source} (E from {stage}; s per notebook, results): {shown}")
    rows = []
    for sim, bound in zip(simulated, bounds, strict=True):
        wall = max(sim.wall, bound.bounds["CPU"])
        serial = pipesim.held_plus_runs(args.class_students * sum(c.exclusive for c in costs.values()),
                                   args.class_students * sum(c.running - c.alone for c in costs.values()), sim.gpus,
                                   sim.runs * (sim.gpus if sim.tasks > 1 else 1))
        rows.append({**asdict(bound.machine), "wall_seconds": wall, "simulated_seconds": sim.wall,
                     "bound": "simulated" if wall == sim.wall else "CPU",
                     "limits": {"runs": sim.runs, "builds": sim.builds, "judges_per_gpu": sim.judges_per_gpu},
                     "held_share": sim.held_share, "drain_seconds": sim.drain, "tasks": sim.tasks,
                     "waves": sim.waves, "students_per_task": sim.per_task, "references_seconds": sim.references,
                     "bounds_seconds": bound.bounds,
                     "held_plus_runs_seconds": serial,
                     "notebooks_per_gpu_hour": tp.per_hour(args.class_students * len(costs), wall)
                     / bound.machine.gpus})
    lines.append(f"  {'hours on':<26}{'wall':>6}{'from':>10}{'runs/bld/judges':>16}{'held':>6}{'GPU+runs':>9}"
                 + "".join(f"{k:>7}" for k in bounds[0].bounds) + f"{'per GPU/h':>10}")
    for row in rows:
        per = " a task" if row["tasks"] > 1 else ""
        lines.append(f"  {row['name']:<26}{row['wall_seconds'] / 3600:>6.2f}{row['bound']:>10}"
                     f"{'{runs}/{builds}/{judges_per_gpu}'.format(**row['limits']) + per:>16}"
                     f"{row['held_share']:>6.0%}{row['held_plus_runs_seconds'] / 3600:>9.2f}"
                     + "".join(f"{v / 3600:>7.2f}" for v in row["bounds_seconds"].values())
                     + f"{row['notebooks_per_gpu_hour']:>10.0f}")
    slurm = rows[2]
    lines.append(f"  Slurm: the {len(costs)} references graded first by one job ({slurm['references_seconds']:.0f} "
                 f"s), then {slurm['tasks']} one-GPU tasks of {slurm['students_per_task']} students on {slots} GPUs: "
                 f"{slurm['waves']} waves; the bounds columns are lower bounds without references")
    devices = sorted({c.device for c in costs.values() if c.samples})
    if args.class_students == 300 and len(costs) == 14 and args.node_gpus == 8:
        met = "not measured (graded on a CPU)" if any(d.startswith("CPU") for d in devices) \
            else "met" if rows[1]["wall_seconds"] <= 7200 else "NOT MET"
        lines.append(f"  throughput target: the 300 x 14 class under 2 h on one 8-GPU node: {met} "
                     f"(projected {rows[1]['wall_seconds'] / 3600:.2f} h)")
    checks = [model_check(name, data, args) for name, data in batches.items() if data["records"]]
    for check in checks:
        held, drain = check["held_seconds"], check["drain_seconds"]
        measured_held = f"{held['measured']:.0f}" if held["measured"] is not None else "not recorded"
        measured_drain = f"{drain['measured']:.0f}" if drain["measured"] is not None else "not recorded"
        lines.append(f"  the model on {check['batch']} ({check['notebooks']} notebooks and {check['references']} "
                     f"references, {check['gpus']} GPU(s), runs/builds/judges {check['limits']['runs']}/"
                     f"{check['limits']['builds']}/{check['limits']['judges_per_gpu']}, {args.host_cpus:g} cores): "
                     f"{check['model_seconds']:.0f} s ({check['bound']}); measured {check['measured_seconds']:.0f} s; "
                     f"error {check['error']:+.1%}; GPU held {held['simulated']:.0f} s (measured {measured_held}); "
                     f"after the last run {drain['simulated']:.0f} s (measured {measured_drain}); lower bound "
                     f"GPU+runs {check['held_plus_runs_seconds']:.0f} s; judge start-up "
                     f"{check['judge_start_mean']:.1f} s mean, {check['judge_waited_mean']:.1f} s waited through "
                     "others' holds")
    lines.append(f"  measured on: {', '.join(devices)}" + ("; a CPU's numbers, not a GPU's" if any(
        d.startswith("CPU") for d in devices) else ""))
    data = {"model": model,
            "parameters": {k: getattr(args, k) for k in ("class_students", "host_cpus", "node_cpus", "node_gpus",
                                                          "cluster_nodes", "cores_per_stage", "runs_per_gpu",
                                                          "builds_per_gpu", "judges_per_gpu")},
            "class_notebooks": class_notebooks, "costs": {k: asdict(v) for k, v in costs.items()},
            "machines": rows, "batch_checks": checks}
    return lines, data


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--copies", type=int, default=1, help="copies of each demo student (default: %(default)s)")
    p.add_argument("--notebooks", default=None,
                   help=f"comma-separated notebook keys (default: {tp.W1D7}; with --reuse, those WORK's batch had)")
    p.add_argument("--students", default=None, help="comma-separated demo students (default: all of them)")
    p.add_argument("--seed", type=int, default=20261126, help="the secret seed of both runs (default: %(default)s)")
    p.add_argument("--device", default="auto", help="the grader's --device (default: %(default)s)")
    p.add_argument("--grade-args", default="", help='more grader options for the pipeline run ("--gpus 0 --runs 8")')
    p.add_argument("--common-args", default="", help="more grader options for both runs")
    p.add_argument("--work", type=Path, default=REPO / "build" / "throughput", help="(default: %(default)s)")
    p.add_argument("--grader-timeout", type=float, default=None,
                   help="seconds each grader run may take; then its stacks are printed into its log and it is "
                        "stopped (default: no limit)")
    p.add_argument("--modes", default=",".join(MODES),
                   help="which runs to grade (default: %(default)s); one alone is reported without the comparison, "
                        "e.g. a pipeline batch too large to also grade one at a time")
    p.add_argument("--references", type=Path, default=None,
                   help="an OUT whose graded reference solutions (OUT/reference, this GPU kind's) both runs start "
                        "with, so neither wall time holds the references' grading (default: each run grades them)")
    p.add_argument("--reuse", action="store_true", help="analyse WORK's earlier runs; grade nothing")
    p.add_argument("--project", action="store_true",
                   help="print only the projection, from --from OUT (and WORK's pipeline run with --reuse); "
                        "grade nothing")
    p.add_argument("--from", dest="from_out", type=Path, action="append", default=[],
                   help="a graded OUT (a batch, or the whole demo class) whose per-notebook stage times the "
                        "projection uses for notebooks the batch does not hold, and on whose wall time (where it has a "
                        "schedule.json) the model is checked; repeat it for several")
    p.add_argument("--json", type=Path, default=None, help="also write everything as JSON here")
    p.add_argument("--class-students", type=int, default=300, help="(default: %(default)s)")
    p.add_argument("--class-notebooks", default=None,
                   help="comma-separated notebook keys of the projected class (default: the course's, bonus ones "
                        "left out: 14)")
    p.add_argument("--host-cpus", type=float, default=16, help="cores of a 1-GPU machine (default: %(default)s)")
    p.add_argument("--node-cpus", type=float, default=128, help="cores of an 8-GPU node (default: %(default)s)")
    p.add_argument("--node-gpus", type=int, default=8, help="GPUs per node (default: %(default)s)")
    p.add_argument("--cluster-nodes", type=int, default=4, help="nodes of the Slurm cluster (default: %(default)s)")
    p.add_argument("--cores-per-stage", type=float, default=1.0,
                   help="cores a CPU stage holds while it runs (default: %(default)s)")
    p.add_argument("--runs-per-gpu", type=float, default=None,
                   help="runs at once per GPU in the projection (default: the grader's: "
                        f"min({RUNS_PER_GPU} per GPU, cores // 2))")
    p.add_argument("--builds-per-gpu", type=float, default=None,
                   help="builds at once per GPU in the projection (default: the grader's: cores // 4)")
    p.add_argument("--judges-per-gpu", type=int, default=JUDGES_PER_GPU,
                   help="judges per GPU in the projection (default: %(default)s, the grader's)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    work: Path = args.work.resolve()
    if args.notebooks:
        notebooks = args.notebooks.split(",")
    elif args.reuse and (work / "batch.json").is_file():
        notebooks = json.loads((work / "batch.json").read_text(encoding="utf-8"))["notebooks"]
    else:
        notebooks = [tp.W1D7]
    known = {nb.key for nb in course_notebooks()}
    if set(notebooks) - known:
        raise SystemExit(f"not a course notebook: {', '.join(sorted(set(notebooks) - known))}")
    chosen = [m for m in MODES if m in args.modes.split(",")]
    if not chosen:
        raise SystemExit(f"--modes takes {', '.join(MODES)}, not {args.modes!r}")
    grade = not (args.reuse or args.project)
    if grade:
        work.mkdir(parents=True, exist_ok=True)
        batch = build_batch(work, notebooks, args.students.split(",") if args.students else None, args.copies)
        (work / "batch.json").write_text(json.dumps({"notebooks": notebooks, "copies": args.copies,
                                                     "students": sorted(p.name for p in batch.iterdir())}))
        for mode in chosen:
            (work / f"{mode}.json").unlink(missing_ok=True)
            run_grader(work, batch, mode, ["--schedule", mode, *(shlex.split(args.grade_args) if mode == "pipeline"
                                                                   else [])], args, args.references)
    report: dict[str, Any] = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    lines: list[str] = []
    modes = {mode: read_mode(work, mode, notebooks) for mode in chosen if (work / f"{mode}.json").is_file()} \
        if grade or args.reuse else {}
    if not args.project:
        for mode, data in modes.items():
            lines += mode_block(mode, data) + [""]
        if not modes:
            raise SystemExit(f"{work} holds none of the runs {', '.join(chosen)}: grade them first")
        if set(modes) == set(MODES):
            compared, report["comparison"] = comparison(modes["serial"], modes["pipeline"], notebooks)
        else:
            compared, report["comparison"] = alone_block(modes, notebooks)
        lines += compared + [""]
        report["modes"] = {m: {**{k: v for k, v in d.items() if k != "records"}, "notebooks": len(d["records"]),
                               "stages": [asdict(s) for s in tp.stage_stats(d["records"])]} for m, d in modes.items()}
    measured, batches = [], {}
    pipeline = modes.get("pipeline")
    if pipeline and pipeline["records"]:
        measured.append(tp.notebook_costs(pipeline["records"], "measured in the pipeline batch",
                                          spans.judge_splits(pipeline["records"], pipeline["schedule"])))
        batches["the pipeline batch"] = pipeline
    for out in args.from_out:
        records = read_results(out)
        schedule = read_schedule(out)
        measured.append(tp.notebook_costs(records, f"measured in {out}", spans.judge_splits(records, schedule)))
        if schedule and schedule.get("wall_seconds"):
            batches[str(out)] = {"records": records, "schedule": schedule, "wall_seconds": schedule["wall_seconds"]}
    if not measured:
        raise SystemExit("nothing to project from: grade a batch, or give --from OUT")
    projected, report["projection"] = projection(args, measured, batches)
    lines += projected
    print("\n".join(textwrap.fill(line, 120, subsequent_indent="    ", break_on_hyphens=False)
                    if len(line) > 120 else line for line in lines))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
