"""bench/side_by_side.py on synthetic grades and reports: what it keeps of a grades.csv, and what it says differs."""

from __future__ import annotations

import csv
import json

from bench import side_by_side as script

FIELDS = ["student", "assignment", "notebook", "item", "status", "score", "max_score", "notebook_status",
          "notebook_final"]


def _grades(path, rows):
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        for student, notebook, item, status, score, book_status, final in rows:
            writer.writerow({"student": student, "assignment": "week2", "notebook": notebook, "item": item,
                             "status": status, "score": score, "max_score": "2", "notebook_status": book_status,
                             "notebook_final": final})
    return path


def _report(gpu, ratio):
    row = {"exercise": "w2d7.matmul_fp16", "shape": [8192, 8192, 8192], "precision": "fp16", "unit": "GFLOP/s",
           "reference": 760.0 * ratio, "library": 760.0, "library_name": "cuBLAS fp16", "ceiling": 989.4,
           "ceiling_name": "datasheet", "error": None}
    return {"gpu": gpu, "rows": [row]}


def test_verdicts_keep_handed_in_notebooks_and_the_comparison_names_each_difference(tmp_path, capsys):
    left = script.verdicts([_grades(tmp_path / "a.csv", [
        ("fast", "day7", "perf", "passed", "2", "ok", "17"),
        ("fast", "day7", "test", "passed", "2", "ok", "17"),
        ("slow", "day7", "perf", "failed", "0", "ok", "4"),
        ("gone", "day7", "perf", "not_run", "0", "missing", "0"),
        ("late", "day6", "perf", "passed", "2", "ok", "15")])])
    right = script.verdicts([_grades(tmp_path / "b.csv", [
        ("fast", "day7", "perf", "passed", "2", "ok", "17"),
        ("fast", "day7", "test", "passed", "2", "ok", "17"),
        ("slow", "day7", "perf", "passed", "1", "ok", "5")])])
    assert "week2/day7/gone" not in left["notebooks"]
    assert left["notebooks"]["week2/day7/slow"] == {"status": "ok", "points": "4", "items": {"perf": ["failed", "0",
                                                                                                   "2"]}}
    files = []
    for name, data in (("la.json", _report("H100", 1.00)), ("lv.json", left), ("ra.json", _report("H200", 1.05)),
                       ("rv.json", right)):
        (tmp_path / name).write_text(json.dumps(data))
        files.append(str(tmp_path / name))
    assert script.main(files) == 0
    printed = capsys.readouterr().out
    assert "| w2d7.matmul_fp16 | 8192x8192x8192 | 1.000 | 1.050 | +5.0% |" in printed
    assert "2 items have the same status and score on both GPUs; 3 rows below differ" in printed
    assert "| week2/day7/slow | (notebook) | ok 4 | ok 5 |" in printed
    assert "| week2/day7/slow | perf | failed 0/2 | passed 1/2 |" in printed
    assert "| week2/day6/late | (graded on one GPU only) | ok 15 | - |" in printed
