"""A grading stopped by a signal mid-class, then run again: what it leaves, and what the second run regrades.

    python -m bench stop-and-resume --out build/stop --device cpu            # 3 copies of the Day 1 solution
    python -m bench stop-and-resume --out build/stop --device gpu --demo week1/day1_host_baseline \\
        --demo week1/day4_first_triton_kernel --after 2                      # the demo students of those notebooks

Three ``python -m grader grade`` runs of one class, same seed, each its scratch folders under OUT/<run>/tmp: one
never stopped (the grades to match), one sent SIGNAL once AFTER notebooks have results and the next is under way,
and the same command again. Prints, as JSON (also to --json): how long the stopped grader took to exit, its exit
status and last line, which of its processes (sampled every 20 ms) were alive after it, which of them the GPU
driver still listed, the scratch folders left, whether OUT's lock was free; then which notebooks the second run
graded again, whether the complete ones' files were untouched (bytes and modification times), and whether the
final grades equal the run never stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from grader.authoring import demo
from grader.flow import out_lock
from grader.intake.layout import SOLUTIONS

REPO = Path(__file__).resolve().parent.parent


PROGRESS = re.compile(r"^\d+/\d+ (\S+): (\w+) ")


def build_class(root: Path, demo_keys: list[str], copies: int) -> None:
    if demo_keys:
        demo.build(root, keys=set(demo_keys))
        return
    for index in range(copies):
        folder = root / f"student{index}" / "week1"
        folder.mkdir(parents=True)
        shutil.copy(SOLUTIONS / "week1" / "day1_host_baseline.ipynb", folder)


def command(subs: Path, out: Path, args: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", "grader", "grade", str(subs), "--out", str(out), "--device", args.device,
            "--seed", "7", "--allow-ungraded", *(["--runs", str(args.runs)] if args.runs else [])]


def start(subs: Path, out: Path, args: argparse.Namespace) -> tuple[subprocess.Popen[str], Path]:
    tmp = out.parent / f"{out.name}-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(command(subs, out, args), cwd=REPO, env={**os.environ, "TMPDIR": str(tmp)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return process, tmp


def graded(out: Path) -> dict[str, Path]:
    """The results of notebooks that were graded (not missing), by student/assignment/notebook."""
    found = {}
    for path in sorted((out / "results").glob("*/*/*.json")):
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text())["status"] != "missing":
                found["/".join(path.relative_to(out / "results").with_suffix("").parts)] = path
    return found


def grades(out: Path) -> dict[str, tuple[str, list[tuple[str, float | None]]]]:
    found = {}
    for path in sorted((out / "results").glob("*/*/*.json")):
        result = json.loads(path.read_text())
        found[str(path.relative_to(out))] = (result["status"], [(i["item"], i["score"]) for i in result["items"]])
    return found


def gpu_pids() -> set[int] | None:
    """The processes the GPU driver lists now; None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    done = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], capture_output=True,
                          text=True)
    return {int(word) for word in done.stdout.split() if word.isdigit()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("build/stop-and-resume"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--demo", action="append", default=[], metavar="KEY",
                   help="grade the demo students of this notebook (repeatable; default: 3 copies of Day 1's solution)")
    p.add_argument("--copies", type=int, default=3)
    p.add_argument("--after", type=int, default=1, help="signal once this many notebooks have results")
    p.add_argument("--signal", default="SIGTERM", choices=("SIGTERM", "SIGINT", "SIGHUP"))
    p.add_argument("--runs", type=int, default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    work = args.out.resolve()
    shutil.rmtree(work, ignore_errors=True)
    subs = work / "subs"
    build_class(subs, args.demo, args.copies)
    report: dict[str, object] = {"device": args.device, "signal": args.signal}

    began = time.monotonic()
    never, _ = start(subs, work / "never-stopped", args)
    never.communicate()
    report["never_stopped"] = {"exit": never.returncode, "seconds": round(time.monotonic() - began, 1),
                               "graded": len(graded(work / "never-stopped"))}

    out = work / "stopped"
    began = time.monotonic()
    grader, tmp = start(subs, out, args)
    seen: dict[int, tuple[psutil.Process, str]] = {}

    def look() -> list[str]:
        names = []
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(grader.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    seen.setdefault(child.pid, (child, child.name()))
                    names.append(child.name())
        return names

    while grader.poll() is None and not (len(graded(out)) >= args.after and look()):
        look()
        time.sleep(0.02)
    time.sleep(0.3)
    running = look()
    sent = time.monotonic()
    grader.send_signal(getattr(signal, args.signal))
    stdout, stderr = grader.communicate()
    ended = time.monotonic()
    mine = set(seen)
    on_gpu = gpu_pids()
    complete = {key: (path.read_bytes(), path.stat().st_mtime_ns) for key, path in graded(out).items()}
    report["stopped"] = {
        "signal_at_seconds": round(sent - began, 1), "processes_then": sorted(running),
        "processes_seen": len(seen), "exit": grader.returncode, "gone_after_seconds": round(ended - sent, 2),
        "last_line": (stderr.strip().splitlines() or [""])[-1],
        "alive_after": [f"{pid} {name}" for pid, (process, name) in seen.items()
                        if process.is_running() and process.status() != psutil.STATUS_ZOMBIE],
        "on_gpu_after": sorted(on_gpu & mine) if on_gpu is not None else "no nvidia-smi",
        "scratch_left": sorted(path.name for path in tmp.iterdir()),
        "lock_free": out_lock.busy(out) is None, "lock_record": (out / out_lock.LOCK_NAME).read_text(),
        "partial_files": [str(path.relative_to(out)) for path in out.rglob("*.tmp")],
        "complete": sorted(complete)}

    began = time.monotonic()
    again, _ = start(subs, out, args)
    stdout, stderr = again.communicate()
    regraded = sorted(match.group(1) for line in stderr.splitlines()
                      if (match := PROGRESS.match(line)) and match.group(2) != "missing")
    report["again"] = {
        "exit": again.returncode, "seconds": round(time.monotonic() - began, 1), "regraded": regraded,
        "regraded_a_complete_one": sorted(set(regraded) & set(complete)),
        "complete_untouched": all(graded(out)[key].read_bytes() == data and graded(out)[key].stat().st_mtime_ns == mtime
                                  for key, (data, mtime) in complete.items()),
        "grades_as_never_stopped": grades(out) == grades(work / "never-stopped")}
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
