"""The Slurm executor's shared reference solutions on a GPU, without Slurm: one small class graded twice with one
seed, first grading its own references, then taking those ``python -m grader references`` graded beforehand
(``grade --references-from``), as each Slurm task takes its references job's.

    python -m bench shared-references [--notebook week1/day4_first_triton_kernel ...] [--json FILE]

Prints, and writes to --json: each of the three commands' seconds and exit status, how many reference solutions
each grading graded itself (its log's "recording the reference solution" lines: the second must grade none), and
every notebook whose status or item scores differ between the two gradings (none expected; a speed item at a band's
edge can move between two timings of the same kernel, and is then named).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from grader.authoring import demo
from grader.score.stored import load_results

REPO = Path(__file__).resolve().parent.parent
SEED = "20261208"
RECORDING = "recording the reference solution"


def timed(command: list[str], log: Path) -> dict:
    began = time.monotonic()
    with log.open("w") as sink:
        done = subprocess.run(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
    text = log.read_text(errors="replace")
    return {"command": " ".join(command[1:]), "seconds": round(time.monotonic() - began, 1),
            "exit_status": done.returncode, "references_graded": text.count(RECORDING)}


def grades(out: Path) -> dict[str, tuple[str, dict[str, float | None]]]:
    return {f"{r.student}/{r.assignment}/{r.notebook}": (r.status, {i.item: i.score for i in r.items})
            for r in load_results(out) if r.status != "missing"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--notebook", action="append", default=None,
                   help="a notebook whose demo students are graded (repeatable; default: Week 1 Day 4)")
    p.add_argument("--work", type=Path, default=REPO / "build" / "shared-references")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    notebooks = args.notebook or ["week1/day4_first_triton_kernel"]
    work = args.work.resolve()
    if work.exists():
        subprocess.run(["rm", "-rf", str(work)], check=True)
    demo.build(work / "class", keys=set(notebooks))
    grade = [sys.executable, "-m", "grader", "grade", str(work / "class"), "--device", "gpu", "--seed", SEED,
             "--allow-ungraded"]
    runs = {"own": timed([*grade, "--out", str(work / "own")], work / "own.log"),
            "references": timed([sys.executable, "-m", "grader", "references", "--out", str(work / "references"),
                                 "--device", "gpu", "--seed", SEED, *(x for n in notebooks for x in ("--notebook", n))],
                                work / "references.log"),
            "shared": timed([*grade, "--out", str(work / "shared"), "--references-from", str(work / "references")],
                            work / "shared.log")}
    own, shared = grades(work / "own"), grades(work / "shared")
    differ = {key: {"own": own.get(key), "shared": shared.get(key)} for key in sorted(set(own) | set(shared))
              if own.get(key) != shared.get(key)}
    report = {"notebooks": notebooks, "graded": len(own), "runs": runs, "differ": differ}
    for name, run in runs.items():
        print(f"{name:<11} {run['seconds']:>7.1f} s  exit {run['exit_status']}  references graded "
              f"{run['references_graded']}")
    print(f"{len(own)} notebooks graded each time; {len(differ)} differ" +
          "".join(f"\n  {key}: {value}" for key, value in differ.items()))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    ok = not differ and runs["shared"]["references_graded"] == 0 and all(r["exit_status"] == 0 for r in runs.values())
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
