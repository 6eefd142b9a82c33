"""Two copies of one autotuning notebook, graded in the same busy class: do they read the same ratios?

    python -m bench autotune-twins OUT [--student fast_correct --twin fast_correct_twin]
        [--notebook week2/day7_optimized_gemm] [--json FILE]

Reads OUT's results (a class graded on a GPU, e.g. ``bench/demo_class_gpu.sh solutions``, where the twin is a second
copy of fast_correct's Week 2 Day 7) and prints, per timed shape, each copy's rate against the reference and the
library, the configuration the judge graded for each (``grader.judge.config_choice``) and the one its run picked,
and the largest relative difference between the two copies' ratios. Nothing here needs a GPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.graded_results import Record, read_results

TOLERANCE = 0.02  # the two copies must agree this closely


def _rows(records: list[Record], student: str, notebook: str) -> list[dict[str, Any]]:
    found = [r for r in records if r.student == student and r.notebook == notebook]
    if not found:
        raise SystemExit(f"no graded {notebook} of {student}")
    return found[0].perf_rows


def compare(records: list[Record], student: str, twin: str, notebook: str) -> dict[str, Any]:
    """Per shape, both copies' ratios (to the reference and to the library) and their relative difference."""
    shapes = []
    for first, second in zip(_rows(records, student, notebook), _rows(records, twin, notebook), strict=True):
        entry: dict[str, Any] = {"spec": first["spec"], "shape": first["shape"]}
        for name, row in ((student, first), (twin, second)):
            me = row.get("student_rate")
            entry[name] = {"vs_reference": me / row["reference_rate"] if me and row.get("reference_rate") else None,
                           "vs_library": me / row["baseline_rate"] if me and row.get("baseline_rate") else None,
                           "graded": (row.get("configs") or {}).get("picked"),
                           "run_picked": (row.get("configs") or {}).get("run_picked")}
        for ratio in ("vs_reference", "vs_library"):
            a, b = entry[student][ratio], entry[twin][ratio]
            entry[f"{ratio}_difference"] = abs(a - b) / max(a, b) if a and b else None
        shapes.append(entry)
    differences = [e[k] for e in shapes for k in ("vs_reference_difference", "vs_library_difference")]
    largest = max((d for d in differences if d is not None), default=None)
    return {"notebook": notebook, "student": student, "twin": twin, "shapes": shapes, "largest_difference": largest,
            "within_tolerance": largest is not None and None not in differences and largest <= TOLERANCE}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--student", default="fast_correct")
    p.add_argument("--twin", default="fast_correct_twin")
    p.add_argument("--notebook", default="week2/day7_optimized_gemm")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    report = compare(read_results(args.out, [args.notebook]), args.student, args.twin, args.notebook)
    for e in report["shapes"]:
        shape = "x".join(map(str, e["shape"]))
        cells = [f"{n}: {e[n]['vs_reference']:.3f} of ref, {e[n]['vs_library']:.3f} of library (graded "
                 f"{e[n]['graded']}; run picked {e[n]['run_picked']})" if e[n]["vs_reference"] else f"{n}: not timed"
                 for n in (args.student, args.twin)]
        print(f"{e['spec']} {shape}: " + "; ".join(cells))
    largest = report["largest_difference"]
    print(f"largest difference between the copies' ratios: {largest:.1%} (within {TOLERANCE:.0%}: "
          f"{'yes' if report['within_tolerance'] else 'NO'})" if largest is not None else "nothing to compare")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
