"""The same course on two GPUs: each reference's ratio and each demo student's verdict, side by side.

    python -m bench side-by-side --verdicts FILE.json GRADES.csv [GRADES.csv ...]
    python -m bench side-by-side LEFT_BENCH.json LEFT_VERDICTS.json RIGHT_BENCH.json RIGHT_VERDICTS.json

The first form keeps what a graded OUT's ``grades.csv`` says of every notebook that was handed in (status, points
and each item's status and score), from one or more grading runs of the same GPU, as a small JSON file that can be
committed. The second prints two Markdown tables: the references' ratios to their library on each GPU (from
``bench/references.py`` reports) with the change, and every item whose verdict differs between the GPUs, after a
count of those that agree. Notebooks graded on one side only are listed, not compared.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

from bench.references import Row


def verdicts(grades: list[Path]) -> dict[str, Any]:
    """``{"notebooks": {"<week>/<notebook>/<student>": {status, points, items: {item: [status, score, max]}}}}``."""
    found: dict[str, Any] = {}
    for path in grades:
        with path.open(encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                if row["notebook_status"] == "missing":
                    continue
                key = f"{row['assignment']}/{row['notebook']}/{row['student']}"
                entry = found.setdefault(key, {"status": row["notebook_status"], "points": row["notebook_final"],
                                               "items": {}})
                entry["items"][row["item"]] = [row["status"], row["score"], row["max_score"]]
    return {"notebooks": dict(sorted(found.items()))}


def ratio_rows(left: dict[str, Any], right: dict[str, Any]) -> list[str]:
    lines = [f"| exercise | shape | {left['gpu']} | {right['gpu']} | change |", "| --- | --- | --- | --- | --- |"]
    right_rows = {(r["exercise"], tuple(r["shape"])): Row(**r) for r in right["rows"]}
    for data in left["rows"]:
        a = Row(**data)
        b = right_rows.get((a.exercise, tuple(a.shape)))
        shape = "x".join(map(str, a.shape))
        change = f"{b.ratio / a.ratio - 1:+.1%}" if b and a.ratio and b.ratio else "-"
        lines.append(f"| {a.exercise} | {shape} | {_ratio(a)} | {_ratio(b)} | {change} |")
    return lines


def _ratio(row: Row | None) -> str:
    return f"{row.ratio:.3f}" if row and row.ratio else "-"


def verdict_rows(left: dict[str, Any], right: dict[str, Any], names: tuple[str, str]) -> tuple[int, list[str]]:
    """How many items agree, and a table of those that do not (status or score), notebook by notebook."""
    agree, lines = 0, [f"| notebook / student | item | {names[0]} | {names[1]} |", "| --- | --- | --- | --- |"]
    a_books, b_books = left["notebooks"], right["notebooks"]
    for key in sorted(set(a_books) | set(b_books)):
        a, b = a_books.get(key), b_books.get(key)
        if a is None or b is None:
            lines.append(f"| {key} | (graded on one GPU only) | {_book(a)} | {_book(b)} |")
            continue
        if (a["status"], a["points"]) != (b["status"], b["points"]):
            lines.append(f"| {key} | (notebook) | {_book(a)} | {_book(b)} |")
        for item in sorted(set(a["items"]) | set(b["items"])):
            x, y = a["items"].get(item), b["items"].get(item)
            if x == y:
                agree += 1
            else:
                lines.append(f"| {key} | {item} | {_item(x)} | {_item(y)} |")
    return agree, lines


def _book(entry: dict[str, Any] | None) -> str:
    return f"{entry['status']} {entry['points']}" if entry else "-"


def _item(entry: list[str] | None) -> str:
    return f"{entry[0]} {entry[1]}/{entry[2]}" if entry else "-"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--verdicts", type=Path, default=None, help="write the verdicts of these grades.csv files here")
    p.add_argument("files", type=Path, nargs="+")
    args = p.parse_args(argv)
    if args.verdicts is not None:
        args.verdicts.write_text(json.dumps(verdicts(args.files), indent=1) + "\n", encoding="utf-8")
        return 0
    if len(args.files) != 4:
        p.error("comparing needs LEFT_BENCH LEFT_VERDICTS RIGHT_BENCH RIGHT_VERDICTS")
    left_bench, left_verdicts, right_bench, right_verdicts = (json.loads(f.read_text(encoding="utf-8"))
                                                              for f in args.files)
    print("\n".join(ratio_rows(left_bench, right_bench)))
    agree, lines = verdict_rows(left_verdicts, right_verdicts, (left_bench["gpu"], right_bench["gpu"]))
    print(f"\n{agree} items have the same status and score on both GPUs; "
          f"{len(lines) - 2} rows below differ or were graded on one GPU only.\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
