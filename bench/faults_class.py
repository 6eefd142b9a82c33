"""What one bad notebook costs the rest of a class on a shared GPU: a class of honest Week 1 Day 7 notebooks graded
alone ("clean"), and the same class with bad notebooks mixed in ("mixed"), one command each, same seed.

    python -m bench faults-class clean --honest 20 --out build/faults   # then, on the same machine:
    python -m bench faults-class mixed --honest 20 --out build/faults   # grades, then compares with clean
    (or --clean FILE: an earlier clean class's JSON, such as bench/results/h100/)

The honest notebooks are copies of the public fixture ``honest_fast``; the bad ones are the public fixtures named
in BAD (tests/adversarial/fixtures). ``mixed`` prints, for every notebook, its status and points in each class and,
for the honest ones, the largest change of a timing ratio (student over cuBLAS and over the reference), and the two
wall times with their difference per bad notebook. Full results go to OUT/<class>.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from grader.flow.settings import Settings, resolve_device
from grader.pipeline import grade
from grader.score.stored import load_results
from tests.adversarial.build import build

REPO = Path(__file__).resolve().parent.parent

BAD = ("kernel_never_ends", "gpu_memory_hog", "illegal_address", "build_bomb", "kernel_spins_forever",
       "day3_bank_conflicts-cuda_kernel_never_ends")


def _class(root: Path, honest: int, bad: bool) -> None:
    shutil.rmtree(root, ignore_errors=True)
    made = build(root, ["honest_fast", *(BAD if bad else ())])
    first = made["honest_fast"].parents[1]
    for number in range(honest):
        shutil.copytree(first, root / f"honest-{number:02d}")
    shutil.rmtree(first)


def _ratios(result) -> dict[str, float]:  # noqa: ANN001
    ratios = {}
    for row in result.perf_rows:
        shape = "x".join(map(str, row["shape"]))
        for versus in ("baseline", "reference"):
            if row.get("student_rate") and row.get(f"{versus}_rate"):
                ratios[f"{row['spec']} {shape} vs {versus}"] = row["student_rate"] / row[f"{versus}_rate"]
    return ratios


def _summary(out: Path) -> dict[str, dict]:
    found = {}
    for result in load_results(out):
        if result.status == "missing":
            continue
        found[f"{result.student} {result.assignment}/{result.notebook}"] = {
            "status": result.status, "points": {i.item: i.score for i in result.items},
            "ratios": _ratios(result), "message": result.message[:300]}
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=("clean", "mixed"))
    parser.add_argument("--honest", type=int, default=20)
    parser.add_argument("--out", type=Path, default=REPO / "build" / "faults")
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument("--cell-timeout", type=float, default=120.0)
    parser.add_argument("--clean", type=Path, default=None,
                        help="the clean class's JSON to compare with (default: OUT/clean.json)")
    args = parser.parse_args()
    device, name = resolve_device("auto")
    root, out = args.out / f"{args.which}-class", args.out / f"{args.which}-grades"
    _class(root, args.honest, args.which == "mixed")
    shutil.rmtree(out, ignore_errors=True)
    started = time.monotonic()
    grade(root, out, Settings(device, name, seed=args.seed, cell_timeout=args.cell_timeout), log=lambda _: None)
    wall = time.monotonic() - started
    found = {"device": name, "wall_s": round(wall, 1), "notebooks": _summary(out)}
    (args.out / f"{args.which}.json").write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    print(f"{args.which}: {len(found['notebooks'])} notebooks graded in {wall:.0f} s on {name}")
    clean = args.clean or args.out / "clean.json"
    if args.which == "mixed" and clean.exists():
        return _compare(json.loads(clean.read_text()), found)
    return 0


def _compare(clean: dict, mixed: dict) -> int:
    problems = []
    print(f"{'notebook':<58}{'clean':>14}{'mixed':>14}{'max ratio change':>18}")
    for key, seen in sorted(mixed["notebooks"].items()):
        before = clean["notebooks"].get(key)
        change = ""
        if before is not None:
            moved = [abs(seen["ratios"][k] / v - 1) for k, v in before["ratios"].items() if seen["ratios"].get(k)]
            change = f"{max(moved) * 100:.1f}%" if moved else "-"
            if (seen["status"], seen["points"]) != (before["status"], before["points"]):
                problems.append(f"{key}: {before['status']} {before['points']} -> {seen['status']} {seen['points']}")
            if len(moved) != len(before["ratios"]) or (moved and max(moved) > 0.03):
                problems.append(f"{key}: a timing ratio moved {change} or went missing")
        if seen["status"] == "grader_error":
            problems.append(f"{key}: grader_error: {seen['message']}")
        total = sum(v or 0 for v in seen["points"].values())
        old = f"{before['status']} {sum(v or 0 for v in before['points'].values()):g}" if before else "-"
        print(f"{key:<58}{old:>14}{seen['status'] + ' ' + format(total, 'g'):>14}{change:>18}")
    bad = len(BAD)
    extra = mixed["wall_s"] - clean["wall_s"]
    print(f"wall time: clean {clean['wall_s']:.0f} s, mixed {mixed['wall_s']:.0f} s: {extra:+.0f} s for {bad} bad "
          f"notebooks ({extra / bad:+.0f} s each; the bound is +60 s each)")
    if extra > 60 * bad:
        problems.append(f"the mixed class took {extra:.0f} s longer, over {60 * bad} s")
    for problem in problems:
        print("PROBLEM:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
