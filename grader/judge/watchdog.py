"""Run the judge in a process of its own under a watchdog, so a kernel that runs away costs only its own items.

The judge announces each step on a pipe (``grader.judge.verdict.Watch``): which graded function, what, and the
seconds it may take. A CUDA kernel that never ends cannot be interrupted inside its process, so when a
step runs past its limit the watchdog kills the judge, records that function as stopped (all its items
fail, saying why), and starts the judge again: what it had finished is kept in its checkpoints (the
answers' verdicts first of all, which the judge makes before any replay), and it goes on with the other
functions. The judge's per-notebook limit stays the last resort; a judge that ends without a verdict
outside a student's step is the grader's fault, reported as the verdict's ``error``.

Until it says it is about to use its GPU at all, the judge uses the CPU only and runs beside the other judges'
timings; from then on it is paused with the GPU's other users. Before its GPU work the judge asks for the GPU
alone on the same pipe; the watchdog takes it from the gate (``grader.gpu.gpu_gate``: the other users of that GPU are
paused, other judges waiting for it included) and answers on a second pipe. The GPU is given back when the judge
says so or ends, however it ends. The seconds waited for the GPU do not count against the
judge's limit; the seconds it was held are the verdict's ``gpu_exclusive``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.gpu.gpu_gate import GpuGate, Hold, Pausable
from grader.judge import parts, watch
from grader.score import results


@dataclass
class Step:
    spec: str | None
    what: str
    seconds: float | None  # None: the judge's own work, bounded only by the judge's limit
    began: float

    def overran(self, now: float) -> bool:
        return self.seconds is not None and now >= self.began + self.seconds


@dataclass
class Ending:
    how: str  # "exited", "stopped" (a step ran past its limit) or "limit" (the judge's limit)
    step: Step | None
    returncode: int | None = None


def _parse(line: bytes, now: float) -> Step | str | None:
    """A step, a request ("device", "gpu" or "release"), or None for a line that is neither."""
    try:
        data = json.loads(line)
        if data.get("request") in ("device", "gpu", "release"):
            return str(data["request"])
        seconds = data.get("seconds")
        return Step(data.get("spec"), str(data.get("step", "")), None if seconds is None else float(seconds), now)
    except (ValueError, TypeError, AttributeError):
        return None


@dataclass
class Alone:
    """The judge's use of its GPU alone, across its starts: where to ask, and what the holds took."""

    gate: GpuGate | None
    gpu: str
    waited: float = 0.0
    drained: float = 0.0
    held: float = 0.0
    notes: list[str] | None = None
    busy: str = ""  # why a hold's GPU never went idle: nothing the judge timed then is the notebook's own

    def seconds(self) -> dict[str, float]:
        return {"gpu_exclusive": self.held, "drain": self.drained, "gpu_wait": self.waited}

    def add(self, hold: Hold) -> None:
        self.waited += hold.waited
        self.drained += hold.drained
        self.held += hold.held
        if hold.drain_note:
            self.notes = [*(self.notes or []), hold.drain_note]
        if hold.busy:
            self.busy = hold.drain_note


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):  # its own session: the judge and anything it started
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _watch_once(command: list[str], env: dict[str, str], cwd: Path, log: Any, deadline: float,
                alone: Alone) -> Ending:
    """One start of the judge, watched until it exits, a step overruns, or the judge's deadline passes."""
    read_end, write_end = os.pipe()
    grant_read, grant_write = os.pipe()
    try:
        process = subprocess.Popen(command, cwd=cwd, env={**env, watch.WATCH_FD: str(write_end),
                                                          watch.GRANT_FD: str(grant_read)},
                                   stdout=log, stderr=subprocess.STDOUT, pass_fds=(write_end, grant_read),
                                   start_new_session=True)
    finally:
        os.close(write_end)
        os.close(grant_read)
    step, pending = None, b""
    holding: contextlib.AbstractContextManager[Hold] | None = None
    hold = Hold()
    # From its "device" request until it holds its GPU, the judge is one more user of it, paused while another
    # judge times there; before that it uses the CPU only and runs on.
    sharing: contextlib.AbstractContextManager[Pausable] | None = None
    user: Pausable | None = None

    def start_sharing() -> None:
        nonlocal sharing, user
        if sharing is None and holding is None and alone.gate is not None:
            sharing = alone.gate.shared(alone.gpu)
            user = sharing.__enter__()
            user.attach(process.pid)  # frozen at once while another judge holds the GPU

    def stop_sharing() -> None:
        nonlocal sharing, deadline
        if sharing is not None:
            sharing.__exit__(None, None, None)
            deadline += user.paused_seconds()  # paused time is not the judge's time
            sharing = None

    def give_back() -> None:
        nonlocal holding
        if holding is not None:
            holding.__exit__(None, None, None)
            holding = None
            alone.add(hold)  # after the exit, which measures the hold

    try:
        while True:
            now = time.monotonic() - (user.paused_seconds() if sharing is not None else 0.0)
            if now >= deadline:
                return Ending("limit", step)
            if step is not None and step.overran(now):
                return Ending("stopped", step)
            wait = deadline - now if step is None or step.seconds is None else \
                min(deadline - now, step.began + step.seconds - now)
            # At most a second between looks: a judge that died leaving a child with the pipe open still ends.
            ready, _, _ = select.select([read_end], [], [], min(max(wait, 0.0), 1.0))
            if not ready:
                if process.poll() is not None:
                    break
                continue
            chunk = os.read(read_end, 65536)
            if not chunk:  # the judge closed its end: it is ending
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                parsed = _parse(line, time.monotonic())
                if parsed == "device":
                    start_sharing()
                    with contextlib.suppress(OSError):
                        os.write(grant_write, b"1")
                elif parsed == "gpu" and holding is None:
                    stop_sharing()
                    asked = time.monotonic()
                    holding = _exclusive(alone)
                    hold = holding.__enter__()
                    deadline += time.monotonic() - asked  # waiting for the GPU is not the judge's time
                    with contextlib.suppress(OSError):  # a judge that died meanwhile is seen below
                        os.write(grant_write, b"1")
                elif parsed == "release":
                    give_back()
                elif isinstance(parsed, Step):
                    step = parsed
        try:
            return Ending("exited", step, process.wait(timeout=max(deadline - time.monotonic(), 0.0)))
        except subprocess.TimeoutExpired:
            return Ending("limit", step)
    finally:
        os.close(read_end)
        os.close(grant_write)
        _kill(process)
        stop_sharing()
        give_back()


@contextlib.contextmanager
def _exclusive(alone: Alone) -> Any:
    if alone.gate is None:  # no gate (one judge at a time, or tests): the GPU is given at once
        yield Hold()
        return
    with alone.gate.exclusive(alone.gpu) as hold:
        yield hold


def run(command: list[str], job: dict[str, Any], env: dict[str, str], cwd: Path, log_path: Path,
        limit: float, gate: GpuGate | None = None, gpu: str = "0") -> dict[str, Any]:
    """The judge's verdict for ``job`` (``command`` runs it), every overrunning graded function stopped; its GPU
    work done with ``gpu`` held alone at ``gate`` (None: no other user to pause)."""
    alone = Alone(gate, gpu)
    verdict = _run(command, job, env, cwd, log_path, limit, alone)
    if alone.gate is not None:
        seconds = verdict.get("seconds") if isinstance(verdict.get("seconds"), dict) else {}
        verdict["seconds"] = {**seconds, **alone.seconds()}
    if alone.notes:
        verdict["gpu_notes"] = alone.notes
    if alone.busy and not verdict.get("error"):
        verdict["error"] = f"the judge could not have its GPU alone, so its timings are not this notebook's: " \
                           f"{alone.busy}"
    return verdict


def _run(command: list[str], job: dict[str, Any], env: dict[str, str], cwd: Path, log_path: Path,
         limit: float, alone: Alone) -> dict[str, Any]:
    saved = parts.Checkpoints(job["checkpoints"])
    deadline = time.monotonic() + limit
    stopped: list[str] = []
    with open(log_path, "ab") as log:
        for _ in range(2 * len(job["kernels"]) + 1):  # each new start has one more graded function finished
            ending = _watch_once(command, env, cwd, log, deadline + alone.waited, alone)
            step = ending.step
            if ending.how == "exited" and ending.returncode == watch.START_AGAIN:
                log.write(b"\n[watchdog] a CUDA error broke the judge's context: starting it again\n")
                continue
            if ending.how == "limit":
                return {**saved.so_far(job), "stopped": stopped,
                        "error": f"the judge ran past its {limit:.0f} s limit for one notebook"}
            blame = step is not None and step.spec is not None and step.seconds is not None
            if ending.how == "exited":
                try:
                    return {**results.read_json(Path(job["verdict"])), "stopped": stopped}
                except (OSError, ValueError):
                    if not blame:
                        return {**saved.so_far(job), "stopped": stopped,
                                "error": f"the judge ended without a verdict (exit code {ending.returncode}; "
                                         "see judge.log)"}
                message = (f"stopped: the judge's process ended (exit code {ending.returncode}) while your "
                           f"kernel ran ({step.what})")
            else:
                message = (f"stopped: the kernel ran past {step.seconds:.0f} s ({step.what}); its other checks "
                           "were not run")
            spec_job = next((s for s in job["kernels"] if s["spec"] == step.spec), None)
            if spec_job is None or step.spec in stopped:  # nothing to blame that a new start would skip
                return {**saved.so_far(job), "stopped": stopped,
                        "error": f"the judge stopped in an unexpected step ({step.spec}: {step.what})"}
            saved.save(parts.kernel_part(step.spec), parts.stopped_verdict(spec_job, message))
            stopped.append(step.spec)
            log.write(f"\n[watchdog] {step.spec}: {message}; starting the judge again\n".encode())
            log.flush()
    return {**saved.so_far(job), "stopped": stopped, "error": "the judge was started too many times"}
