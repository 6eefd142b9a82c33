"""Grade a class: sanitize, execute, score and record every submission, resumably.

Per notebook: sanitize (here) -> execute (a worker, in a scratch directory outside OUT) ->
score (here) -> gradebook and ``results/<student>/<assignment>/<notebook>.json`` (atomic).
A result whose submission, grader version and device are unchanged is kept on a re-run, so a
killed run resumes where it stopped; ``force`` grades everything again. On a GPU, the reference
solution of each notebook is executed first through the same path, and its benchmark rows are
the "reference" of the vs_reference thresholds for this run.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from grader import GRADER_VERSION, gradebook, results, score
from grader.dispatch import local_slots, run_local
from grader.execute import Job, Outcome
from grader.layout import CourseNotebook, Submission, course_notebooks, find_course_notebook, find_submissions
from grader.results import NotebookResult
from grader.sanitize import sanitize


@dataclass
class Settings:
    device: str  # "gpu" or "cpu", resolved
    device_name: str
    jobs: int | None = None
    force: bool = False
    bench_shapes: list[list[int]] | None = None
    cell_timeout: float = 600.0
    notebook_timeout: float = 1800.0
    notes: list[str] = field(default_factory=list)


def resolve_device(requested: str) -> tuple[str, str]:
    import torch

    if requested not in ("auto", "gpu", "cpu"):
        raise ValueError(f"device must be auto, gpu or cpu, not {requested!r}")
    if requested == "gpu" and not torch.cuda.is_available():
        raise RuntimeError("--device gpu was asked for, but no CUDA GPU is visible")
    if requested != "cpu" and torch.cuda.is_available():
        return "gpu", torch.cuda.get_device_name(0)
    return "cpu", "CPU (Triton interpreter)"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def result_path(out: Path, submission: Submission) -> Path:
    return out / "results" / submission.student / submission.assignment / f"{submission.notebook}.json"


def run_dir(out: Path, submission: Submission) -> Path:
    return out / "runs" / submission.student / submission.assignment / submission.notebook


def _up_to_date(out: Path, submission: Submission, settings: Settings) -> bool:
    path = result_path(out, submission)
    if settings.force or not path.exists() or submission.path is None:
        return False
    try:
        old = results.read_json(path)
    except (OSError, ValueError):
        return False
    return (old.get("grader_version") == GRADER_VERSION and old.get("device") == settings.device_name
            and old.get("submission_sha256") == sha256(submission.path))


def _job(notebook_path: Path, settings: Settings) -> Job:
    scratch = tempfile.mkdtemp(prefix="gpu-course-run-")
    shutil.copy(notebook_path, Path(scratch) / "submission.ipynb")
    return Job(notebook=str(Path(scratch) / "submission.ipynb"), workdir=scratch,
               device=settings.device, bench_shapes=settings.bench_shapes,
               cell_timeout=settings.cell_timeout, notebook_timeout=settings.notebook_timeout)


def _keep_run(job: Job, destination: Path) -> None:
    """Move what the run produced out of its scratch directory, then delete the scratch."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in ("executed.ipynb", "metrics.jsonl", "execute.log", "outcome.json"):
        source = Path(job.workdir) / name
        if source.exists():
            shutil.copy(source, destination / name)
        else:
            (destination / name).unlink(missing_ok=True)
    shutil.rmtree(job.workdir, ignore_errors=True)


def _answer_cells(nb: nbformat.NotebookNode) -> list[dict[str, str]]:
    return [{"id": c.metadata.nbgrader["grade_id"], "source": c.source}
            for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")]


def reference_rates(out: Path, notebooks: list[CourseNotebook], settings: Settings,
                    log: Callable[[str], None]) -> score.ReferenceRates:
    """Benchmark rows of each reference solution on this GPU (measured once per OUT and device)."""
    rates: score.ReferenceRates = {}
    for notebook in notebooks:
        where = out / "reference" / notebook.assignment / notebook.name
        marker = where / "device.txt"
        fresh = marker.exists() and marker.read_text() == f"{settings.device_name}\n{GRADER_VERSION}\n"
        if settings.force or not fresh:
            log(f"measuring the reference solution {notebook.key} on {settings.device_name}")
            job = _job(notebook.solution_path, settings)
            outcome = next(iter(run_local([(notebook, job)], local_slots(settings.device, 1))))[1]
            _keep_run(job, where)
            if outcome.status != results.OK:
                settings.notes.append(f"reference solution {notebook.key}: {outcome.status}: {outcome.message}")
                continue
            marker.write_text(f"{settings.device_name}\n{GRADER_VERSION}\n")
        events = score.read_metrics(where / "metrics.jsonl")
        for spec_id in {e.get("spec") for e in events if e.get("kind") == "bench"}:
            rows = score.bench_rows(events, str(spec_id))
            rates.setdefault(str(spec_id), {}).update({r.shape: r.student_gflops for r in rows if not r.error})
    return rates


def _score(submission: Submission, outcome: Outcome, run: Path, settings: Settings,
           reference: score.ReferenceRates, notes: list[str]) -> tuple[NotebookResult, nbformat.NotebookNode | None]:
    result = NotebookResult(submission.student, submission.assignment, submission.notebook, outcome.status,
                            outcome.message, submission_sha256=sha256(submission.path),
                            grader_version=GRADER_VERSION, device=settings.device_name,
                            timings=dict(outcome.timings), integrity=notes)
    executed_file = run / "executed.ipynb"
    if not executed_file.exists():
        return result, None
    executed = nbformat.read(str(executed_file), as_version=4)
    events = score.read_metrics(run / "metrics.jsonl")
    result.items = score.correctness_items(executed, outcome.status) + score.performance_items(
        executed, events, settings.device == "gpu", reference)
    for event in events:
        if event.get("kind") == "phase" and isinstance(event.get("seconds"), int | float):
            name = str(event.get("name"))
            result.timings[name] = result.timings.get(name, 0.0) + float(event["seconds"])
    for spec_id in sorted({str(e.get("spec")) for e in events if e.get("kind") == "bench"}):
        for row in score.bench_rows(events, spec_id):
            result.perf_rows.append({"spec": spec_id, "shape": list(row.shape), "error": row.error,
                                     "student_gflops": row.student_gflops, "baseline_gflops": row.baseline_gflops,
                                     "reference_gflops": reference.get(spec_id, {}).get(row.shape, 0.0)})
    result.executed_path = str(executed_file)
    result.code = _answer_cells(executed)
    return result, executed


def _missing_or_unreadable(submission: Submission, status: str, message: str, settings: Settings) -> NotebookResult:
    return NotebookResult(submission.student, submission.assignment, submission.notebook, status, message,
                          submission_sha256=sha256(submission.path) if submission.path else "",
                          grader_version=GRADER_VERSION, device=settings.device_name)


def grade(submissions_root: Path, out: Path, settings: Settings,
          log: Callable[[str], None] = print, progress: Callable[[int, int, NotebookResult], None] | None = None,
          ) -> list[NotebookResult]:
    """Grade every submission under ``submissions_root`` into ``out``; returns all results."""
    out.mkdir(parents=True, exist_ok=True)
    notebooks = course_notebooks()
    url = gradebook.db_url(out)
    gradebook.register(url, notebooks)
    submissions, problems = find_submissions(submissions_root)
    for problem in problems:
        log(f"note: {problem}")
    todo = [s for s in submissions if not _up_to_date(out, s, settings)]
    kept = len(submissions) - len(todo)
    if kept:
        log(f"{kept} notebook(s) already graded by grader {GRADER_VERSION} on {settings.device_name}: kept "
            "(use --force to grade them again)")
    needed = sorted({(s.assignment, s.notebook) for s in todo if s.path})
    reference: score.ReferenceRates = {}
    if settings.device == "gpu" and needed:
        reference = reference_rates(out, [find_course_notebook(a, n) for a, n in needed], settings, log)

    def finish(submission: Submission, result: NotebookResult, executed: nbformat.NotebookNode | None) -> None:
        gradebook.record(url, result, executed)
        results.write_json_atomic(result_path(out, submission), result.to_json())

    done = 0
    tasks = []
    sanitize_notes: dict[str, list[str]] = {}
    for submission in todo:
        if submission.path is None:
            result = _missing_or_unreadable(submission, results.MISSING, "no notebook was submitted", settings)
        else:
            cleaned = sanitize(submission.path, submission.assignment, submission.notebook, submission.student, url)
            if cleaned.notebook is not None:
                run = run_dir(out, submission)
                run.mkdir(parents=True, exist_ok=True)
                nbformat.write(cleaned.notebook, str(run / "sanitized.ipynb"))
                sanitize_notes[submission.key] = cleaned.notes
                tasks.append((submission, _job(run / "sanitized.ipynb", settings)))
                continue
            result = _missing_or_unreadable(submission, cleaned.status, cleaned.message, settings)
        finish(submission, result, None)
        done += 1
        if progress:
            progress(done, len(todo), result)

    jobs_by_key = {s.key: job for s, job in tasks}
    for submission, outcome in run_local(tasks, local_slots(settings.device, settings.jobs)):
        run = run_dir(out, submission)
        _keep_run(jobs_by_key[submission.key], run)
        try:
            result, executed = _score(submission, outcome, run, settings, reference,
                                      sanitize_notes[submission.key])
        except Exception as error:  # a notebook the scorer cannot read must not stop the batch
            result, executed = _missing_or_unreadable(
                submission, results.GRADER_ERROR, f"scoring failed: {type(error).__name__}: {error}", settings
            ), None
        finish(submission, result, executed)
        done += 1
        if progress:
            progress(done, len(todo), result)
    return load_results(out)


def load_results(out: Path) -> list[NotebookResult]:
    found = []
    for path in sorted((out / "results").glob("*/*/*.json")):
        found.append(NotebookResult.from_json(results.read_json(path)))
    return found
