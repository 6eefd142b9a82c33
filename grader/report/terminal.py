"""The report stage on the TA's terminal: grading progress (a bar and one line per notebook), the summary
table, the closing lines naming every notebook not graded normally, and every output rendered at once.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from grader.lms import term
from grader.lms.term import Term
from grader.score.results import GRADER_ERROR, MISSING, NotebookResult


class _Progress:
    """Grading progress through tqdm: a bar of the notebooks done, the time taken and an estimate of the time
    left (the average time per notebook so far, every parallel worker included), and one line per finished
    notebook above it, with the same estimate (so a log file, where the bar is off, has it too).

    Also the pipeline's ``log``: its messages go through tqdm, so they never break the bar.
    """

    def __init__(self, stream=None) -> None:  # noqa: ANN001  (a text stream; stderr by default)
        from tqdm import tqdm

        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.bar = tqdm(total=None, unit="notebook", desc="grading", file=self.stream, smoothing=0.0,
                        dynamic_ncols=True, disable=not _is_terminal(self.stream),
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} notebooks "
                                   "[{elapsed} elapsed, {remaining} left]{postfix}")

    def log(self, message: str) -> None:
        self.bar.write(str(message), file=sys.stdout)

    def eta(self, done: int, total: int) -> str:
        """The time left, from the average so far (tqdm's estimate with smoothing off), as tqdm writes it."""
        from tqdm import tqdm

        if done <= 0:
            return "?"
        elapsed = time.monotonic() - self.started
        return tqdm.format_interval(elapsed / done * max(total - done, 0))

    def __call__(self, done: int, total: int, result: NotebookResult) -> None:
        if self.bar.total != total:
            self.bar.total = total
        self.bar.update(done - self.bar.n)
        seconds = sum(result.timings.get(phase, 0.0) for phase in ("notebook", "build", "replay", "judge"))
        self.bar.write(f"{done}/{total} {result.student}/{result.assignment}/{result.notebook}: {result.status} "
                       f"({seconds:.0f} s; about {self.eta(done, total)} left)", file=self.stream)
        self.stream.flush()

    def close(self) -> None:
        self.bar.close()


def _is_terminal(stream) -> bool:  # noqa: ANN001
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def summary_table(all_results: list[NotebookResult]) -> str:
    """One line per notebook: earned points of the graded maximum, the points still pending, and the late penalty
    with the final score (when the term takes points off)."""
    from grader.report.tables import items_of

    ordered = sorted(all_results, key=lambda r: (r.student.casefold(), r.student_id, r.assignment, r.notebook))
    student_width = max([len("student"), *(len(r.student) for r in ordered)]) + 2
    notebook_width = max([len("notebook"), *(len(r.assignment) + 1 + len(r.notebook) for r in ordered)]) + 2
    lines = [f"{'student':<{student_width}}{'notebook':<{notebook_width}}{'status':<13}{'earned / graded':>16}"
             f"{'pending':>9}  late"]
    for r in ordered:
        items = items_of(r)
        earned = sum(i.score or 0.0 for i in items)
        graded = sum(i.max_score for i in items if i.score is not None)
        pending = sum(i.max_score for i in items if i.score is None)
        late = f"-{r.late_penalty:g} -> {r.final_score:g}" if r.late_penalty else (
            "late" if r.late_status == term.LATE else "no time" if r.late_status == term.NO_TIME else "")
        lines.append(f"{r.student:<{student_width}}{r.assignment + '/' + r.notebook:<{notebook_width}}{r.status:<13}"
                     f"{earned:>8g} / {graded:<5g}{pending:>9g}  {late}".rstrip())
    return "\n".join(lines)


def _line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def not_graded_summary(all_results: list[NotebookResult]) -> list[str]:
    """The closing lines of ``grade``: every notebook not graded normally, and every missing one, by name."""
    failed = [r for r in all_results if not r.graded_normally]
    missing = [r for r in all_results if r.status == MISSING]
    lines = []
    if failed:
        counts: dict[str, int] = {}
        for r in failed:
            counts[r.status] = counts.get(r.status, 0) + 1
        kinds = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        lines.append(f"NOT GRADED NORMALLY: {len(failed)} of {len(all_results)} notebooks ({kinds}); their points "
                     "are 0 or incomplete. Each one (also in students.csv, column messages):")
        lines += [f"  {r.student}/{r.assignment}/{r.notebook}: {r.status}: {_line(r.summary)}" for r in failed]
    faults = [r for r in failed if r.status == GRADER_ERROR]
    if faults:
        lines.append(f"GRADER ERRORS: the grader failed on {len(faults)} notebook(s), not the students: do not "
                     "publish their points; fix the cause and grade again (they are graded again on the next run)")
    if missing:
        lines.append(f"MISSING: {len(missing)} of {len(all_results)} notebooks were not submitted (scored 0):")
        lines += [f"  {r.student}/{r.assignment}/{r.notebook}: {_line(r.summary)}" for r in missing]
    if not lines:
        lines.append(f"all {len(all_results)} notebooks were graded normally")
    return lines


def _report(out: Path, rules: Term, args: argparse.Namespace, all_results: list[NotebookResult] | None = None,
            submissions: Path | None = None) -> list[NotebookResult]:
    """Every output from the results, the term and the overrides, together (``grader.report.publish.render``); the term
    file and the submissions folder are remembered in OUT."""
    from grader.report import publish

    rendered = publish.render(out, rules, all_results, submissions)
    publish.remember(out, getattr(args, "term_path", None), submissions)
    print(summary_table(rendered.results))
    for warning in rendered.warnings:
        print(f"warning: {warning}")
    print("\n" + "\n".join(rendered.lines))
    return rendered.results
