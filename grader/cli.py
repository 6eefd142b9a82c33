"""``python -m grader``: release, run, grade, export, feedback, check and demo.

Exit codes: 0 when every notebook found was graded normally; 1 when ``grade`` or ``check`` found a
notebook it could not grade normally (a timeout, a dead kernel, a corrupt or ambiguous file...: the
summary names each; ``grade --allow-ungraded`` exits 0 anyway, unless the grader itself failed on one:
a ``grader_error`` is never a student's zero); 2 for a usage or setup error, or another grader using --out;
128 + the signal's number when stopped by SIGTERM (143), SIGINT (130) or SIGHUP (129), having kept what it finished.
A missing notebook (nothing submitted) is listed in the summary but does not change the exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grader.commands.course_material import cmd_collect, cmd_demo, cmd_release
from grader.commands.grading import NoGpu, cmd_check, cmd_grade, cmd_references, cmd_run
from grader.commands.options import (
    DEFAULT_OUT,
    _execution_options,
    _schedule_options,
    _selection_options,
    _slurm_options,
    _term_option,
)
from grader.commands.outputs import cmd_export, cmd_feedback, cmd_override, cmd_publish
from grader.commands.pushes import cmd_pushed, cmd_serve_pushes
from grader.flow import out_lock, stopping


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)

    p = commands.add_parser("release", help="generate the student notebooks from solutions/")
    p.add_argument("--check", action="store_true", help="only report student notebooks that differ")
    p.set_defaults(run=cmd_release)

    p = commands.add_parser(
        "grade", help="grade a class: gradebook, CSVs and feedback pages in --out",
        description="Grade every student folder under SUBMISSIONS into --out. Every folder and expected notebook "
                    "becomes a row, graded or not. Exit status: 0 when every notebook found was graded normally, "
                    "1 when one was not (the closing summary names each; --allow-ungraded exits 0 unless the grader "
                    "itself failed on one), 2 for a "
                    "usage or setup error. Missing notebooks are listed but do not change the exit status. One "
                    "grader per --out: while one grades it, grade, check, export and feedback on it refuse, naming "
                    "it (exit status 2; --wait waits). SIGTERM, SIGINT (Ctrl-C) or SIGHUP stops the grading: every "
                    "process it started is killed, what it finished is kept, and it exits 128 + the signal's "
                    "number; the same command then grades only what is left.")
    p.add_argument("submissions", nargs="?",
                   help="<dir>/<student>/<assignment>/<notebook>.ipynb (default: the demo class, built in --out)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="where results, CSVs and pages go (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="grade again notebooks already graded (default: keep them)")
    p.add_argument("--student", action="append", default=[], metavar="NAME",
                   help="grade this student's notebooks again, with the class's seed (repeatable)")
    p.add_argument("--notebook", action="append", default=[], metavar="ASSIGNMENT/NOTEBOOK",
                   help="grade this notebook again (with --student: that student's), with the class's seed "
                        "(repeatable; e.g. week1/day4_first_triton_kernel)")
    p.add_argument("--wait", action="store_true",
                   help="where another grader is grading --out, wait for it to end (default: refuse, exit status 2)")
    p.add_argument("--allow-ungraded", action="store_true",
                   help="exit 0 even when some notebooks could not be graded normally (the summary still lists "
                        "them; `make grade` passes it for the demo class, whose `crashes` student fails by design), "
                        "unless the grader itself failed on one (grader_error)")
    p.add_argument("--hide", action="append", default=[], metavar="PATH",
                   help="one more path no sandboxed run may see (repeatable; the Slurm executor gives each task the "
                        "whole class and the head's OUT)")
    p.add_argument("--references-from", default=None, metavar="DIR",
                   help="take the reference solutions graded in DIR (an OUT of `references`) where they were graded "
                        "on this device, grader version and shapes, instead of grading them again (the Slurm "
                        "executor's tasks take its references job's)")
    _term_option(p)
    _selection_options(p)
    _execution_options(p)
    _schedule_options(p)
    _slurm_options(p)
    p.set_defaults(run=cmd_grade)

    p = commands.add_parser(
        "references", help="grade reference solutions alone, on a GPU (the Slurm executor's references job)",
        description="Grade the reference solutions of the notebooks named into --out, as a grading does before "
                    "their students (on a GPU; on a CPU there is nothing to grade), for `grade --references-from` "
                    "to take. Exit status: 0 when every one was graded, 1 when one was not, 2 for a usage error.")
    p.add_argument("--out", required=True)
    p.add_argument("--notebook", action="append", required=True, metavar="ASSIGNMENT/NOTEBOOK",
                   help="a course notebook whose reference solution is graded (repeatable)")
    p.add_argument("--hide", action="append", default=[], metavar="PATH", help="one more path no sandboxed run may see")
    _execution_options(p)
    _schedule_options(p)
    p.set_defaults(run=cmd_references, force=False)

    p = commands.add_parser(
        "check", help="grade your own notebook the way the TA will",
        description="Grade one notebook exactly as the TA would. Exit status: 0 when it ran to its end (whatever "
                    "its score), 1 when it could not be graded normally, 2 for a usage error.")
    p.add_argument("notebook")
    p.add_argument("--out", default="build/check", help="where the check's results go (default: %(default)s)")
    _execution_options(p)
    p.set_defaults(run=cmd_check)

    p = commands.add_parser(
        "pushed", help="grade the course notebooks among a list of paths of a student's checkout",
        description="Grade the course notebooks among the listed paths (weekN/<name>.ipynb, relative to "
                    "REPOSITORY; regular files only, never through a link) with this checkout's grader and master "
                    "copies, as STUDENT. Writes results and feedback pages (hidden tests' messages left out) in "
                    "--out and a Markdown score table to --summary. Pushes to students' repositories are graded by "
                    "serve-pushes instead (docs/AUTOGRADING.md). Exit status: 0 when every listed notebook was "
                    "graded normally (or none was listed), 1 when one was not, 2 for a usage or setup error "
                    "(--device gpu without a GPU: one line in --summary too).")
    p.add_argument("repository", help="the student's checkout")
    p.add_argument("--changed", required=True, help="a file of paths, one a line ('-': standard input)")
    p.add_argument("--student", default="student", help="the name graded (default: %(default)s)")
    p.add_argument("--out", default="build/pushed", help="(default: %(default)s)")
    p.add_argument("--summary", default=None,
                   help="append the Markdown score table to this file (default: print it)")
    _execution_options(p)
    p.set_defaults(run=cmd_pushed, force=True)

    p = commands.add_parser(
        "serve-pushes", help="the push autograder's grading service (run as the course account; "
                             "docs/AUTOGRADING.md)",
        description="Grade the requests autograding jobs leave in SPOOL/inbox, one at a time, and answer each in "
                    "SPOOL/outbox/<request>/ (summary.md, feedback pages, status). Run it as the course account "
                    "from the course checkout with `python -P -m grader serve-pushes`. Every notebook whose "
                    "content differs from the version last graded on its branch is graded, as the student the "
                    "--roster names for the repository. Exit status: 0 (with --once: after answering what is "
                    "queued), 2 for a setup error; without a GPU under --device gpu, every queued request is "
                    "answered with that line and the status is 2.")
    p.add_argument("spool", help="the spool folder (owned by this account, mode 2710, group: the runner's)")
    p.add_argument("--roster", required=True, help="CSV with the header repository,student: each student "
                                                   "repository's full name (owner/name) and the student's name")
    p.add_argument("--state", default=None,
                   help="where the last graded commit of each branch is kept (default: SPOOL/state)")
    p.add_argument("--once", action="store_true", help="answer the requests queued now, then exit")
    p.add_argument("--poll", type=float, default=5.0, help="seconds between looks at the inbox (default: %(default)g)")
    p.add_argument("--keep-days", type=float, default=7.0,
                   help="days answers and grading folders are kept (default: %(default)g)")
    _execution_options(p)
    p.set_defaults(run=cmd_serve_pushes, force=True, device="gpu")

    p = commands.add_parser("run", help="execute one notebook with papermill as the grader does")
    p.add_argument("notebook")
    p.add_argument("--out", default="build/run", help="(default: %(default)s)")
    _execution_options(p)
    p.set_defaults(run=cmd_run, force=False)

    p = commands.add_parser("export", help="the same as publish --out: every output from the results in --out")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="(default: %(default)s)")
    _term_option(p)
    p.set_defaults(run=cmd_export)

    p = commands.add_parser("feedback", help="the same as publish --out: every output from the results in --out")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="(default: %(default)s)")
    _term_option(p)
    p.set_defaults(run=cmd_feedback)

    p = commands.add_parser("publish", help="write every output again from the stored results, the term and the "
                                            "TA's overrides (CSVs, gradebook, pages, Canvas file, zips); no regrading")
    p.add_argument("out", help="the graded class's output folder")
    p.add_argument("--submissions", default=None,
                   help="where submission times are read again (default: the folder OUT was graded from)")
    _term_option(p)
    p.set_defaults(run=cmd_publish)

    p = commands.add_parser("override", help="set a TA's score for one graded item (nbgrader's manual_score), "
                                             "then publish")
    p.add_argument("out", help="the graded class's output folder")
    p.add_argument("student", help="the student's folder name")
    p.add_argument("notebook", help="ASSIGNMENT/NOTEBOOK, e.g. week1/day1_host_baseline")
    p.add_argument("item", help="the graded cell's id (grades.csv's item column)")
    p.add_argument("score", type=float)
    p.add_argument("--why", required=True, help="the reason, shown to the student with the score")
    p.set_defaults(run=cmd_override)

    p = commands.add_parser(
        "collect", help="turn a Canvas \"Download submissions\" zip into <out>/<student>/<assignment>/",
        description="Unpack Canvas's flat submissions zip (<name>[_late]_<user id>_<attachment id>_<file>) into "
                    "OUT/<student folder>/ASSIGNMENT/, each student found by their Canvas user id on the roster "
                    "(their folder: the roster's folder column, else SIS Login ID). Canvas's zip has no submission "
                    "times: pass --times (the submissions API's JSON, or a CSV of user_id,submitted_at) to record "
                    "them where the term reads them (OUT/submitted_at.json). A timestamp.txt a student uploaded is "
                    "set aside, never used. Exit status: 0, or 2 for an unusable zip, roster or times file.")
    p.add_argument("download", help="the zip Canvas's \"Download submissions\" gave")
    p.add_argument("--roster", required=True, help="Canvas's gradebook export (CSV): Student, ID, SIS User ID, "
                                                   "SIS Login ID, Section; an optional folder column")
    p.add_argument("--assignment", required=True, help="the course assignment the download is (week1, ...)")
    p.add_argument("--out", required=True, help="the submissions folder to write (the class layout)")
    p.add_argument("--times", default=None, metavar="FILE",
                   help="submission times: JSON as Canvas's submissions API returns it, or a CSV with the columns "
                        "user_id and submitted_at (ISO 8601 with an offset)")
    p.set_defaults(run=cmd_collect)

    p = commands.add_parser("demo", help="build the demo class's submissions")
    p.add_argument("destination", nargs="?", default="build/demo_submissions", help="(default: %(default)s)")
    p.set_defaults(run=cmd_demo)
    return root


def print_stacks(signum: int, frame: Any) -> None:
    """``kill -USR1 <pid>``: every thread's stack to stderr, where a grading run that stopped moving waits. In
    Python, with the GIL held, not through faulthandler, whose dump reads running threads' frames without it: on a
    GPU host it crashed a grader it was asked about (SIGSEGV on an H100, 2026-11-27)."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    for ident, top in sys._current_frames().items():
        stack = "".join(traceback.format_stack(top))
        print(f"Thread {names.get(ident, ident)} (most recent call last):\n{stack}", file=sys.__stderr__, flush=True)


# The commands that write --out: each holds its lock throughout and stops cleanly on a stop signal.
WRITES_OUT = ("grade", "check", "pushed", "export", "feedback", "publish", "override")


@contextlib.contextmanager
def _one_grader(args: argparse.Namespace) -> Iterator[None]:
    if args.command not in WRITES_OUT:
        yield
        return
    with stopping.on_signals(), out_lock.held(Path(args.out), wait=getattr(args, "wait", False)):
        yield


def main(argv: list[str] | None = None) -> int:
    from grader.flow.settings import SandboxUnavailable, UnknownGpu
    from grader.score.gradebook import GradebookMismatch

    args = parser().parse_args(argv)
    with contextlib.suppress(ValueError):  # not the main thread (a test calling main): no handler
        signal.signal(signal.SIGUSR1, print_stacks)
    try:
        with _one_grader(args):
            return args.run(args)
    except out_lock.OutBusy as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except stopping.Stopped as stopped:
        print(stopped.line(), file=sys.stderr, flush=True)
        return stopped.exit_status
    except (GradebookMismatch, SandboxUnavailable, UnknownGpu, NoGpu) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
