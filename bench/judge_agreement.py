"""Does the judge time the reference solution as the notebook's own harness does? (GPU only)

    PYTHONPATH=. python -m bench judge-agreement [OUT.json]

Defines the Week 1 Day 7 reference kernel from the solution notebook, then, in alternating rounds,
times it with ``course.bench.measure`` (the notebook's benchmark, the harness before the judge) and
with the judge (its launch plan recorded, the kernel built from source, replayed from TTGIR with
fresh inputs per call), on the spec's benchmark shapes. Prints the judge/harness ratio per shape.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.pop("COURSE_GRADING", None)

import nbformat  # noqa: E402

from course import bench, device, spec  # noqa: E402
from course.recorder import plan
from grader.intake.layout import SOLUTIONS  # noqa: E402
from grader.judge import verdict as judge
from grader.kernel_build import build_kernels  # noqa: E402
from grader.replay import gpu_replay as replay

SETUP = "import torch\nimport triton\nimport triton.language as tl\nfrom course import device\nDEVICE = device.info()\n"


def reference_module(folder: Path) -> tuple[object, Path]:
    nb = nbformat.read(str(SOLUTIONS / "week1" / "day7_fast_matmul.ipynb"), as_version=4)
    source = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "matmul_kernel")
    path = folder / "reference_cell.py"
    path.write_text(SETUP + source)
    module_spec = importlib.util.spec_from_file_location("reference_cell", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source)]
    nb_path = folder / "reference.ipynb"
    nbformat.write(notebook, str(nb_path))
    return module, nb_path


def main(out: str | None) -> int:
    device.configure("gpu")
    exercise = spec.get("w1d7.matmul_fp32")
    shapes = [tuple(s) for s in exercise.bench_shapes.gpu]
    folder = Path(tempfile.mkdtemp())
    module, nb_path = reference_module(folder)
    calls = {}
    for i, shape in enumerate(shapes):
        _, recorded = plan.record_call(module.matmul, exercise.make_inputs(shape, i, "cuda"))
        calls[f"bench-{i}"] = {"plan": recorded}
    (folder / "export.json").write_text(json.dumps({"kernels": {exercise.id: {"calls": calls}}}))
    target = calls["bench-0"]["plan"]["launches"][0]["target"]
    build_kernels.build({"notebook": str(nb_path), "export": str(folder / "export.json"), "target": target,
                         "out": str(folder / "built")})
    kernels = replay.load_kernels(folder / "built")
    harness: dict[int, list[float]] = {i: [] for i in range(len(shapes))}
    judged: dict[int, list[float]] = {i: [] for i in range(len(shapes))}
    for _ in range(3):
        report = bench.measure(exercise, module.matmul, shapes)
        for i, row in enumerate(report.rows):
            harness[i].append(row.student.median_ms)
        for i, shape in enumerate(shapes):
            ms, error = judge._time_plan(exercise, calls[f"bench-{i}"]["plan"], kernels, shape, 1000 + i)
            assert error is None, error
            judged[i].append(ms)
    rows = []
    print(f"{'shape':<22}{'harness ms':>12}{'judge ms':>10}{'judge/harness':>15}")
    for i, shape in enumerate(shapes):
        h, j = statistics.median(harness[i]), statistics.median(judged[i])
        rows.append({"shape": list(shape), "harness_ms": harness[i], "judge_ms": judged[i], "ratio": j / h})
        print(f"{'x'.join(map(str, shape)):<22}{h:>12.4f}{j:>10.4f}{j / h:>15.3f}")
    geo = spec.geometric_mean([r["ratio"] for r in rows])
    print(f"geometric mean of judge/harness: {geo:.3f} on {device.info().name}")
    if out:
        Path(out).write_text(json.dumps({"device": device.info().name, "rows": rows, "geomean": geo}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else None))
