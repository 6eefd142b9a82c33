"""The options the command line's verbs share (limits, scheduling, Slurm, term, selection), their parsers,
and the options a Slurm task is handed again.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from grader.flow.schedule import JUDGES_PER_GPU
from grader.gpu.gpu_watch import BUSY_SECONDS as GPU_BUSY_SECONDS

DEFAULT_OUT = Path("build/grades")


TERM_FILE = "term.toml"


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _execution_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help="auto (a GPU if visible), gpu or cpu (default: %(default)s)")
    parser.add_argument("--runs", "--jobs", dest="runs", type=_at_least_one, default=None,
                        help="sandboxed notebook runs at once, over all GPUs; runs share their GPU and are paused "
                             "while a judge times on it (default: 6 per GPU, at most half the CPUs; 2 on a "
                             "CPU; make: RUNS)")
    parser.add_argument("--bench-shapes", default=None,
                        help='JSON list of benchmark shapes, e.g. "[[2048,2048,2048]]", used by the specs whose shapes '
                             'have that many sizes (default: each spec\'s own)')
    parser.add_argument("--cell-timeout", type=float, default=600.0,
                        help="seconds one cell may run, not counting time the run spends stopped while a judge "
                             "holds its GPU (default: %(default)g; make: CELL_TIMEOUT)")
    parser.add_argument("--notebook-timeout", type=float, default=1800.0,
                        help="seconds one notebook may run, all cells, counted the same way (default: %(default)g; "
                             "make: NOTEBOOK_TIMEOUT)")
    parser.add_argument("--judge-timeout", type=float, default=900.0,
                        help="seconds the judge may spend on one notebook: replay, checks and timing "
                             "(default: %(default)g; make: JUDGE_TIMEOUT)")
    parser.add_argument("--replay-timeout", type=float, default=20.0,
                        help="seconds one replay of a student's kernel may take before the judge stops it and fails "
                             "only that kernel's items; longer where 50 x the reference solution's time is "
                             "(default: %(default)g; make: REPLAY_TIMEOUT)")
    parser.add_argument("--memory-gb", type=float, default=8.0,
                        help="host memory one notebook run may use, GiB (default: %(default)g; make: MEMORY_GB)")
    parser.add_argument("--gpu-memory-gb", type=float, default=None,
                        help="GPU memory one notebook run may hold, GiB; past it the run is stopped (status "
                             "gpu_memory). Default: the GPU's memory over its runs plus two (make: GPU_MEMORY_GB)")
    parser.add_argument("--gpu-busy-seconds", type=float, default=GPU_BUSY_SECONDS,
                        help="a run whose kernels keep its GPU busy this long straight gets a drain, which stops a "
                             "kernel that never ends (status gpu_hang) (default: %(default)g; make: GPU_BUSY_SECONDS)")
    parser.add_argument("--scratch-gb", type=float, default=2.0,
                        help="files one notebook run may write besides what it prints (compiler caches such as "
                             "torch.compile's, temporary files), GiB; past it the status is scratch_limit. Printed "
                             "output (cell outputs, the run's log, exported answers) has its own 64 MiB limit, "
                             "status output_limit (default: %(default)g; make: SCRATCH_GB)")
    parser.add_argument("--cpus-per-run", type=_at_least_one, default=None,
                        help="CPUs each sandboxed run gets, a set of its own while there are enough; runs also get a "
                             "lower scheduling priority than the grader and judge (default: the grader's CPUs "
                             "divided by the runs and builds at once; make: CPUS_PER_RUN)")
    parser.add_argument("--seed", type=int, default=None,
                        help="the grading run's secret seed (default: drawn afresh; stored in every result)")
    parser.add_argument("--no-sandbox", dest="sandbox", action="store_false",
                        help="run student code WITHOUT the bubblewrap sandbox (only for trusted notebooks; "
                             "every report says so; default: sandboxed; make: NO_SANDBOX=1)")


def _gpu_list(text: str) -> str:
    if not all(part.strip().isdigit() for part in text.split(",")):
        raise argparse.ArgumentTypeError(f"a comma-separated list of CUDA indices such as 0,1 is needed, not {text!r}")
    return text


def _forwarded(args: argparse.Namespace) -> list[str]:
    """The execution and schedule options of this command line that differ from their defaults, as a Slurm task's
    ``grade`` takes them."""
    probe = argparse.ArgumentParser(add_help=False)
    _selection_options(probe)
    _execution_options(probe)
    _schedule_options(probe)
    forwarded: list[str] = []
    for action in probe._actions:
        value = getattr(args, action.dest)
        if value != action.default:
            forwarded += [action.option_strings[0]] if action.nargs == 0 else [action.option_strings[0], str(value)]
    return forwarded


def _term_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--term", default=None, metavar="FILE",
                        help=f"due dates, late policy and extensions (default: the one OUT was published with, kept as "
                             f"OUT/{TERM_FILE}; else {TERM_FILE} in the course folder, when there is one; "
                             "term.example.toml shows the form; make: TERM_FILE)")


def _selection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--assignment", default=None, metavar="NAMES",
                        help="grade only these assignments (comma-separated, such as week1), for every student; "
                             "other assignments' grades in --out are kept (make: WEEK or ASSIGNMENT)")


def _assignments(text: str | None) -> tuple[str, ...]:
    """--assignment's names, each a course assignment (ValueError naming the known ones otherwise)."""
    from grader.intake.layout import course_notebooks

    names = tuple(dict.fromkeys(part.strip() for part in (text or "").split(",") if part.strip()))
    known = sorted({nb.assignment for nb in course_notebooks()})
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"--assignment {', '.join(unknown)}: no such assignment (there are {', '.join(known)})")
    return names


def _slurm_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executor", choices=("local", "slurm"), default="local",
                        help="local: grade on this machine; slurm: one Slurm array task per chunk of students "
                             "(--notebooks-per-task), each a grade of its own on its node, gathered here into one "
                             "gradebook; a task that does not finish is submitted once more, then its notebooks are "
                             "grader_error (default: %(default)s; make: EXECUTOR)")
    parser.add_argument("--slurm-partition", default=None, help="sbatch --partition (make: SLURM_PARTITION)")
    parser.add_argument("--slurm-account", default=None, help="sbatch --account (make: SLURM_ACCOUNT)")
    parser.add_argument("--slurm-time", default="04:00:00",
                        help="each task's time limit, sbatch --time (default: %(default)s; make: SLURM_TIME)")
    parser.add_argument("--slurm-gres", default=None,
                        help='sbatch --gres, e.g. "gpu:1" (default: none; make: SLURM_GRES)')
    parser.add_argument("--slurm-cpus", type=_at_least_one, default=None, help="sbatch --cpus-per-task")
    parser.add_argument("--notebooks-per-task", type=_at_least_one, default=40,
                        help="about this many notebooks per Slurm task (default: %(default)s)")


def _schedule_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schedule", choices=("pipeline", "serial"), default="pipeline",
                        help="pipeline: runs, builds and judges of many notebooks at once, each judge's replays and "
                             "timings on a GPU held alone (the other notebooks on it paused); serial: one notebook "
                             "at a time, stage after stage, the baseline the pipeline is measured against "
                             "(default: %(default)s; make: SCHEDULE)")
    parser.add_argument("--gpus", type=_gpu_list, default=None,
                        help="the GPUs to grade on, as CUDA indices, e.g. 0,1: one judge holds each GPU alone at a "
                             "time, runs share them (default: every visible GPU; make: GPUS)")
    parser.add_argument("--builds", type=_at_least_one, default=None,
                        help="kernel builds (CPU only, sandboxed) and CPU replays at once (default: a quarter of the "
                             "CPUs on a GPU machine, as many as --runs on a CPU; make: BUILDS)")
    parser.add_argument("--judges-per-gpu", type=_at_least_one, default=JUDGES_PER_GPU,
                        help="judge processes per GPU at once: one holds the GPU alone while the others run the "
                             "answer checks and load their kernels (default: %(default)s)")
