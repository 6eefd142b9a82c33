"""Grade a class on a Slurm cluster: one task of a job array per chunk of students, gathered into one gradebook.

Each task runs ``python -m grader grade`` on its own copy of its students' folders into its own OUT, with the
class and the head's OUT hidden from its sandboxes (none sees another student's files) and the grading run's one
secret seed, so its grades are what a local run gives. Unless the tasks grade on a CPU, a references job grades the
class's reference solutions once, before the array starts, and each task takes them (``grade --references-from``).
The head waits with a progress bar (``squeue``), submits every task that did not finish (failed, preempted, timed
out, cancelled) once more, and then records every result into OUT's gradebook itself, the only writer. A task that
failed twice becomes a grader_error for each of its notebooks, never a notebook left out. Slurm's own options:
partition, account, time limit, GRES and CPUs per task.

The head holds OUT's lock (``grader.flow.out_lock``); each task holds its own folder's (``OUT/slurm/task-N/out``), so
neither waits for the other. A task stopped by Slurm (preemption, time limit: SIGTERM to every process of the
task; its script waits for its grader) stops as a local grading does, keeping its finished notebooks, and its second
run (no ``--force``) grades only the rest; a later grading carries each student's earlier results into the student's
new task folder, where those still up to date are kept. The head stopped (``grader.flow.stopping``) cancels its job and
waits for Slurm to end the tasks before it exits.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from tqdm import tqdm

from grader.flow import out_lock, stopping
from grader.flow.settings import Settings
from grader.intake.layout import REPO, course_notebooks, find_submissions, safe_id
from grader.score import gradebook, results
from grader.score.assemble import ungraded_result
from grader.score.results import GRADER_ERROR, NotebookResult
from grader.score.stored import record_result, result_path

FINISHED = "exit-code"  # written by the task's script after its grade ended, whatever it decided
REFERENCES = "references"  # in the Slurm work folder: the references job's OUT
CANCEL_SECONDS = 120.0  # a stopped head waits this long for Slurm to end its tasks (Slurm's KillWait: 30 s by default)


@dataclass(frozen=True)
class SlurmOptions:
    partition: str | None = None
    account: str | None = None
    time: str = "04:00:00"  # each task's limit, as sbatch --time takes it
    gres: str | None = None  # e.g. "gpu:1": one GPU per task
    cpus_per_task: int | None = None
    notebooks_per_task: int = 40
    poll_seconds: float = 5.0


def chunks(root: Path, per_task: int) -> list[list[Path]]:
    """The student folders of ``root`` in groups of about ``per_task`` notebooks (a student is never split)."""
    students = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    groups: list[list[Path]] = []
    size = 0
    for student in students:
        count = max(1, sum(1 for _ in student.rglob("*.ipynb")))
        if not groups or size + count > per_task:
            groups.append([])
            size = 0
        groups[-1].append(student)
        size += count
    return groups


def task_dirs(work: Path, count: int) -> list[Path]:
    return [work / f"task-{i}" for i in range(count)]


def stage(work: Path, groups: list[list[Path]]) -> list[Path]:
    """Each group's student folders copied into a task folder of its own, with the results and runs an earlier
    grading left for those students (its grade keeps those still up to date). SlurmError while a task or the
    references job of an earlier grading still holds its folder."""
    # Earlier stagings, each in a numbered folder: more than one where a staging was stopped half-way.
    earlier = work.with_name(f"{work.name}.earlier")
    if work.is_dir():
        outs = {task: task / "out" for task in sorted(work.glob("task-*"))} | {work / REFERENCES: work / REFERENCES}
        for old, out in outs.items():
            holder = out_lock.busy(out)
            if holder is not None:
                raise SlurmError(f"a Slurm job of an earlier grading still grades {old}: {holder.describe()}; "
                                 "cancel it (scancel) or let it end, then grade again")
        earlier.mkdir(exist_ok=True)
        work.rename(earlier / str(len(list(earlier.iterdir()))))
    dirs = task_dirs(work, len(groups))
    for folder, group in zip(dirs, groups, strict=True):
        for student in group:
            shutil.copytree(student, folder / "submissions" / student.name, symlinks=True)
            _carry(earlier, folder, student.name)
    (work / "logs").mkdir(parents=True)
    shutil.rmtree(earlier, ignore_errors=True)
    return dirs


def _carry(earlier: Path, folder: Path, student: str) -> None:
    """Move ``student``'s results and runs from the earlier task folders that graded them into ``folder``."""
    for old in sorted(earlier.glob("*/task-*")):
        if not (old / "submissions" / student).is_dir():
            continue
        for kind in ("results", "runs"):
            source, target = old / "out" / kind / safe_id(student), folder / "out" / kind / safe_id(student)
            if source.is_dir() and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                source.rename(target)


def _directives(options: SlurmOptions, name: str, log: Path) -> list[str]:
    directives = [f"--job-name={name}", f"--output={log}", f"--time={options.time}"]
    directives += [f"--partition={options.partition}"] if options.partition else []
    directives += [f"--account={options.account}"] if options.account else []
    directives += [f"--gres={options.gres}"] if options.gres else []
    directives += [f"--cpus-per-task={options.cpus_per_task}"] if options.cpus_per_task else []
    return [f"#SBATCH {d}" for d in directives]


def references_script(work: Path, notebooks: list[str], grade_args: list[str], options: SlurmOptions) -> str:
    """The sbatch script of the references job: the reference solutions of ``notebooks`` graded once, into
    ``work/references``, for every task to take (``grade --references-from``). On a CPU it grades nothing."""
    command = [sys.executable, "-m", "grader", "references", "--out", str(work / REFERENCES),
               *(part for key in notebooks for part in ("--notebook", key)), *_without_selection(grade_args)]
    log = work / "logs" / "references-%j.log"
    return "\n".join(["#!/bin/bash", *_directives(options, "gpu-course-references", log),
                      f"cd {shlex.quote(str(REPO))}", f"exec {shlex.join(command)}", ""])


def _without_selection(grade_args: list[str]) -> list[str]:
    """``grade_args`` without --assignment and its value (the references job is told its notebooks)."""
    kept, skip = [], False
    for arg in grade_args:
        if skip or arg == "--assignment":
            skip = not skip
            continue
        kept.append(arg)
    return kept


def script(work: Path, grade_args: list[str], options: SlurmOptions, force: bool = False,
           shared_references: bool = False) -> str:
    """The sbatch script of the array (``--array`` is given on the command line: all tasks, then the retried).
    Without ``force`` a task's grade keeps the results already in its folder that are up to date. With
    ``shared_references`` each task takes the references job's reference solutions (where graded on its device)."""
    shared = ["--references-from", str(work / REFERENCES)] if shared_references else []
    grade = " ".join([shlex.join([sys.executable, "-m", "grader", "grade"]), '"$here/submissions" --out "$here/out"',
                      shlex.join([*(["--force"] if force else []), *shared, *grade_args])])
    return "\n".join([
        "#!/bin/bash",
        *_directives(options, "gpu-course-grade", work / "logs" / "task-%a-%A.log"),
        f"here={shlex.quote(str(work))}/task-$SLURM_ARRAY_TASK_ID",
        f"rm -f \"$here/{FINISHED}\"",
        f"cd {shlex.quote(str(REPO))}",
        f"{grade} &",
        "grader=$!",
        # Slurm's SIGTERM (preemption, time limit, scancel) reaches every process of the task. Bash would die of it
        # at once and Slurm then kill what is left, the grader mid-stop: so the script waits for the grader's end.
        'trap \'kill -TERM "$grader" 2>/dev/null\' TERM INT HUP',
        'while true; do wait "$grader"; status=$?; [ "$status" -gt 128 ] && kill -0 "$grader" 2>/dev/null || break; '
        "done",
        f"echo \"$status\" > \"$here/{FINISHED}\"",
        ""])


def submit(script_path: Path, indices: list[int] | None = None, after: str | None = None) -> str:
    """Submit ``script_path`` (an array of ``indices``, or one job), to start after job ``after`` has ended."""
    array = [f"--array={','.join(map(str, indices))}"] if indices is not None else []
    dependency = [f"--dependency=afterany:{after}"] if after else []
    done = subprocess.run(["sbatch", "--parsable", *array, *dependency, str(script_path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SlurmError(f"sbatch failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip().split(";")[0]


class SlurmError(Exception):
    """Slurm refused the job (sbatch failed): the message says why."""


def queued(job: str) -> int | None:
    """How many of the job's tasks Slurm still lists (pending, running, completing); None when squeue failed."""
    done = subprocess.run(["squeue", "-h", "-r", "-j", job, "-o", "%i"], capture_output=True, text=True)
    return len(done.stdout.split()) if done.returncode == 0 else None


def finished(folder: Path, assignments: Collection[str] = ()) -> bool:
    """The task's grade ran to its end and left a result for every notebook of its students (of ``assignments``,
    when the run grades only those)."""
    marker = folder / FINISHED
    if not marker.is_file() or marker.read_text().strip() not in ("0", "1"):
        return False
    submissions, _ = find_submissions(folder / "submissions", assignments)
    return all(result_path(folder / "out", s).is_file() for s in submissions)


def wait(job: str, folders: list[Path], poll: float, description: str, squeue_failures: int = 60,
         assignments: Collection[str] = ()) -> None:
    """Until Slurm lists none of the job's tasks. A failing squeue is asked again (a task that may still run is
    never submitted twice at once); ``squeue_failures`` failures in a row end the wait with SlurmError."""
    failures = 0
    with tqdm(total=len(folders), desc=description, unit="task") as bar:
        while True:
            count = sum(finished(f, assignments) for f in folders)
            bar.update(count - bar.n)
            listed = queued(job)
            if listed == 0:
                return
            failures = failures + 1 if listed is None else 0
            if failures >= squeue_failures:
                raise SlurmError(f"squeue failed {failures} times in a row while job {job} may still run")
            time.sleep(poll)


def cancel(job: str, log: Callable[[str], None], seconds: float = CANCEL_SECONDS) -> str:
    """``scancel`` the job, then wait until Slurm lists none of its tasks (at most ``seconds``); what happened (""
    where Slurm listed none of them already)."""
    try:
        if queued(job) == 0:
            return ""
        subprocess.run(["scancel", job], capture_output=True, text=True)
        log(f"cancelled Slurm job {job}: waiting for its tasks to end")
        deadline, failures = time.monotonic() + seconds, 0
        while (listed := queued(job)) != 0 and time.monotonic() < deadline and failures < 10:
            failures = failures + 1 if listed is None else 0
            time.sleep(1.0)
    except OSError as error:
        return f"; Slurm job {job} could not be cancelled ({error}): cancel it with scancel"
    if listed == 0:
        return f"; Slurm job {job} cancelled, its tasks ended"
    if listed is None:
        return f"; Slurm job {job} cancelled, but squeue failed: see with squeue that its tasks have ended"
    return f"; Slurm job {job} cancelled, but Slurm still listed {listed} of its tasks after {seconds:.0f} s"


def gather(out: Path, folders: list[Path], failed: dict[int, str], settings: Settings) -> list[NotebookResult]:
    """Every task's results into OUT (its gradebook and results/); a failed task's notebooks as grader_error."""
    gradebook.register(gradebook.db_url(out), course_notebooks())
    with Gradebook(gradebook.db_url(out)) as book:
        for index, folder in enumerate(folders):
            submissions, _ = find_submissions(folder / "submissions", settings.assignments, settings.not_due)
            for submission in submissions:
                source = result_path(folder / "out", submission)
                notebook = None
                if index in failed or not source.is_file():
                    result = ungraded_result(submission, GRADER_ERROR, failed.get(index, "no result"), settings)
                else:
                    result = NotebookResult.from_json(results.read_json(source))
                    sanitized = folder / "out" / "runs" / submission.student_id / submission.assignment / \
                        submission.notebook / "sanitized.ipynb"
                    if sanitized.is_file():
                        notebook = nbformat.read(str(sanitized), as_version=4)
                with stopping.deferred():
                    record_result(out, submission, result, notebook, book)
    return [NotebookResult.from_json(results.read_json(p)) for p in sorted((out / "results").glob("*/*/*.json"))]


def grade(root: Path, out: Path, grade_args: list[str], options: SlurmOptions, settings: Settings,
          log: Callable[[str], None] = print) -> list[NotebookResult]:
    """Grade ``root`` on Slurm into ``out``; ``grade_args``: the options every task's ``grade`` takes. Holds OUT's
    lock; stopped (``stopping.Stopped``), it cancels its job first."""
    submitted: list[str] = []
    with out_lock.held(out, log=log):
        try:
            return _grade(root, out, grade_args, options, settings, log, submitted)
        except KeyboardInterrupt as interrupt:
            folders = sorted((out / "slurm").glob("task-*"))
            cancelled = "".join(cancel(job, log) for job in reversed(submitted))
            done = sum(finished(folder, settings.assignments) for folder in folders)
            raise stopping.Stopped.of(interrupt, f"{done} of {len(folders)} Slurm tasks finished{cancelled}") \
                from interrupt


def _grade(root: Path, out: Path, grade_args: list[str], options: SlurmOptions, settings: Settings,
           log: Callable[[str], None], submitted: list[str]) -> list[NotebookResult]:
    work = out / "slurm"
    folders = stage(work, chunks(root, options.notebooks_per_task))
    if not folders:
        return []
    script_path = work / "grade.sbatch"
    # A task's sandboxes see neither the class nor the head's OUT, where the other tasks' students are.
    hidden = ["--hide", str(root.resolve()), "--hide", str(out.resolve())]
    references = _references_job(root, work, [*grade_args, *hidden], options, settings, len(folders), log,
                                 submitted)
    script_path.write_text(script(work, [*grade_args, *hidden], options, settings.force, references is not None),
                           encoding="utf-8")
    stopped = ""
    for attempt in (1, 2):
        pending = [i for i, folder in enumerate(folders) if not finished(folder, settings.assignments)]
        if not pending:
            break
        try:
            job = submit(script_path, pending, after=references if attempt == 1 else None)
            submitted.append(job)
            log(f"Slurm job {job}: {len(pending)} task(s)" + (" submitted again (they did not finish the first "
                                                               "time)" if attempt == 2 else ""))
            wait(job, [folders[i] for i in pending], options.poll_seconds, f"Slurm job {job}",
                 assignments=settings.assignments)
        except SlurmError as error:
            if attempt == 1 and len(pending) == len(folders):
                raise  # nothing ran: the TA's error, said once
            stopped = f"; then {error}"  # what finished is kept; the rest is said below
            break
    failed = {i: _why(folder, work) + stopped for i, folder in enumerate(folders)
              if not finished(folder, settings.assignments)}
    for index, why in failed.items():
        log(f"GRADER ERROR: Slurm task {index} did not finish twice: {why}")
    return gather(out, folders, failed, settings)


def _references_job(root: Path, work: Path, grade_args: list[str], options: SlurmOptions, settings: Settings,
                    tasks: int, log: Callable[[str], None], submitted: list[str]) -> str | None:
    """Submit the job that grades the class's reference solutions once for all tasks (each task would otherwise
    grade them again); its id, or None where there is nothing to share: one task, or ``--device cpu`` (a CPU
    grades no reference). A references job that fails costs nothing but time: each task then grades its own."""
    on_cpu = any(a == "--device" and b == "cpu" for a, b in zip(grade_args, grade_args[1:], strict=False))
    submissions, _ = find_submissions(root, settings.assignments, settings.not_due)
    notebooks = sorted({f"{s.assignment}/{s.notebook}" for s in submissions if s.path})
    if tasks < 2 or on_cpu or not notebooks:
        return None
    path = work / "references.sbatch"
    path.write_text(references_script(work, notebooks, grade_args, options), encoding="utf-8")
    job = submit(path)
    submitted.append(job)
    log(f"Slurm job {job}: the {len(notebooks)} reference solution(s), graded once for the {tasks} tasks")
    return job


def _why(folder: Path, work: Path) -> str:
    marker = folder / FINISHED
    logs = sorted((work / "logs").glob(f"task-{folder.name.split('-')[1]}-*.log"))
    tail = logs[-1].read_text(errors="replace").strip().splitlines()[-1:] if logs else []
    ended = f"its grade exited {marker.read_text().strip()}" if marker.is_file() else \
        "it ended without finishing (failed, preempted, timed out or cancelled)"
    return f"the Slurm task grading this notebook did not finish, twice: {ended}" + \
        (f"; its log ends: {tail[0][:300]}" if tail else "")
