"""Print where the grading time of each notebook went, from a grade run's results folder.

    python bench/grading_times.py build/grades
"""

from __future__ import annotations

import sys
from pathlib import Path

from grader.score.stored import load_results

PHASES = ("kernel_start", "compile", "checks", "benchmarks")


def main(out: str) -> int:
    columns = (*PHASES, "rest", "total")
    print(f"{'student':<16}{'status':<12}{'score':>7}" + "".join(f"{c:>13}" for c in columns))
    for result in load_results(Path(out)):
        spent = [result.timings.get(p, 0.0) for p in PHASES]
        total = result.timings.get("total", 0.0)
        # "rest": imports, notebook cells outside the checks and benchmarks, and the grader's own work
        times = "".join(f"{t:>12.1f}s" for t in (*spent, total - sum(spent), total))
        print(f"{result.student:<16}{result.status:<12}{result.score:>7g}{times}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "build/grades"))
