"""The judge: every verdict of a notebook, computed where none of the student's Python runs.

Inputs are what the sandboxed run exported (launch plans, answers as JSON) and what the course
built (GPU) or replayed (CPU) from the notebook's kernel source. On a GPU the judge replays each graded
function's plan on inputs drawn from a secret seed, checks every output against the reference
computed afterwards (from the seed, not from buffers the kernel could have touched), and times
the student's plan, cuBLAS and the reference solution's plan one after another for each
benchmark shape, in this one process. On a CPU the plans were replayed on inputs from the secret
seeds through Triton's interpreter, in a sandbox holding only the notebook's kernels
(``grader.replay.replay_cpu``); their outputs are compared here with the reference, and those verdicts
are provisional: precision and speed are not measured. The master copies of the other test cells
run here against the exported answers, first, before any replay; an answer the grader cannot take
fails only the items that read it ("unsupported answer: ...").

``python -m grader.judge.verdict JOB.json`` runs one job (a GPU judge runs in its own process, since a
student's kernel can break its CUDA context, under ``grader.judge.watchdog``: it announces each replay
with its time limit, and saves each finished part so that it can be started again after a kill);
``judge(job)`` runs one in-process (CPU). A failure of the judge itself is the verdict's ``error``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from grader.judge.exported import read_export, run_tests
from grader.judge.on_cpu import judge_cpu
from grader.judge.on_gpu import judge_gpu
from grader.judge.parts import TESTS, Checkpoints, _record_fault, kernel_part
from grader.judge.watch import GRANT_FD, START_AGAIN, WATCH, WATCH_FD, StartAgain
from grader.score import results


def judge(job: dict[str, Any]) -> dict[str, Any]:
    """Every verdict for one notebook: the master test cells on the answers first, then each graded function.

    With ``job["checkpoints"]`` (a folder: the watched judge process), each finished part is saved there as
    it ends and parts already there are kept, so a judge started again after a kill goes on where it stopped.
    A failure of the judge itself is the verdict's ``error`` (a grader_error), with every part it finished.
    """
    saved = Checkpoints(job.get("checkpoints"))
    export = read_export(Path(job["export"]))
    tests = saved.load(TESTS)
    if tests is None:
        WATCH.step(None, "the master test cells", None)
        answers = export.get("answers") if isinstance(export.get("answers"), dict) else {}
        tests = run_tests(job["tests"], answers, Path(job["export"]) / "arrays")
        saved.save(TESTS, tests)
    verdict: dict[str, Any] = {"tests": tests, "kernels": {}, "export_error": export.get("error"),
                               "recorded": bool(export)}
    pending = []
    for spec_job in job["kernels"]:
        done = saved.load(kernel_part(spec_job["spec"]))
        if done is None:
            pending.append(spec_job)
        else:
            verdict["kernels"][spec_job["spec"]] = done
    if not pending:
        return verdict

    def finished(spec_id: str, kernel: dict[str, Any]) -> None:
        saved.save(kernel_part(spec_id), kernel)

    if job["device"] == "gpu":
        judged = judge_gpu({**job, "kernels": pending}, finished)
    else:
        WATCH.step(None, "the kernels' verdicts", None)
        try:
            judged = judge_cpu({**job, "kernels": pending})
        except Exception as error:  # the judge's own fault, never the student's: a grader_error
            judged = {"kernels": {}}
            _record_fault(judged, "judging the kernels", error)
        for spec_id, kernel in judged["kernels"].items():
            finished(spec_id, kernel)
    verdict["kernels"].update(judged.pop("kernels"))
    verdict.update(judged)
    return verdict


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    with contextlib.suppress(AttributeError, ValueError, OSError):  # `kill -USR1`: the stacks into judge.log
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    WATCH.connect(os.environ.get(WATCH_FD), os.environ.get(GRANT_FD))
    try:
        verdict = judge(job)
    except StartAgain:
        return START_AGAIN
    except Exception as error:  # the judge's own failure: a grader_error for this notebook, with what it finished
        verdict = Checkpoints(job.get("checkpoints")).so_far(job)
        _record_fault(verdict, "judging", error)
    results.write_json_atomic(Path(job["verdict"]), verdict)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
