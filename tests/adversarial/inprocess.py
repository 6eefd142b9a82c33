"""Replay a fixture the way the OLD, in-process design graded it, to show that the attack is real.

The old design ran the sanitized notebook (hidden tests restored) in one Python process with the
student's code, scored a test cell as passed when it raised nothing, and took performance from the
benchmark rows the notebook appended to ``COURSE_METRICS_FILE``. This module does the same with
plain ``exec`` (no Jupyter, no nbgrader, no sandbox), one child process per fixture, so it runs on a
bare GPU machine too. It is a demonstration tool, not the grader: the IPython, notebook-tampering,
process, network and resource-abuse fixtures need the real old grader (or nothing at all), and are
refused here.

It needs a copy of the old design (the last commit before the sandbox and the judge, c20497f): its
course package, solutions/ and week1/ are what the children import and run::

    mkdir -p /tmp/oldgrader && git archive c20497f | tar -x -C /tmp/oldgrader
    python tests/adversarial/inprocess.py --old-root /tmp/oldgrader --device gpu honest_fast patch_bench_measure
    python tests/adversarial/inprocess.py --old-root /tmp/oldgrader --device cpu lazy_tensor_subclass

Never run it on fixtures it refuses: they spawn processes, open sockets or exhaust memory.
"""

from __future__ import annotations

import argparse
import json
import linecache
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OLD_COMMIT = "c20497f"  # the last commit of the in-process design
REPO = HERE.parent.parent  # replaced by --old-root in main()
sys.path.insert(0, str(HERE))

from build import NOTEBOOK_KEY, apply, fixtures  # noqa: E402

# Fixtures that must not run outside the sandbox, or whose attack needs Jupyter or the grader itself.
REFUSED = {
    "ipython_custom_exc", "ipython_post_run_cell_clear", "detached_rewriter", "outlive_sleep",
    "read_other_submissions", "network_exfiltrate", "huge_output", "scratch_flood", "infinite_loop", "os_exit",
    "host_memory_100g", "fork_bomb_capped",
}
POINTS = {"test_matmul_visible": 2, "test_matmul_hidden": 3, "perf_w1d7_matmul_fp32_floor": 1,
          "perf_w1d7_matmul_fp32_vs_cublas": 2, "perf_w1d7_matmul_fp32_vs_reference": 2,
          "test_flops_4096": 1, "test_a_reads": 1, "test_step_intensity": 1, "test_tf32": 1}


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def old_sanitized_notebook(fixture_name: str) -> dict[str, Any]:
    """What the old grader executed: the released notebook, the fixture's cells, hidden tests restored."""
    assignment, name = NOTEBOOK_KEY.split("/")
    released = _load(REPO / assignment / f"{name}.ipynb")
    solution = _load(REPO / "solutions" / assignment / f"{name}.ipynb")
    master_tests = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in solution["cells"]
                    if c.get("metadata", {}).get("nbgrader", {}).get("grade")}
    fixture = fixtures([fixture_name])[fixture_name]
    if fixture.transform is not None:
        raise ValueError(f"{fixture_name} edits the notebook's structure: grade it with the real old grader")
    nb = apply(fixture, released)
    for cell in nb["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in master_tests:
            cell["source"] = master_tests[grade_id]
    return nb


def _source(cell: dict[str, Any]) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def _fake_ipython_display() -> None:
    """The benchmark cell imports IPython.display; a bare GPU machine may have no IPython."""
    try:
        import IPython.display  # noqa: F401
    except ImportError:
        package = types.ModuleType("IPython")
        display = types.ModuleType("IPython.display")
        display.display = lambda *objects, **kwargs: None
        package.display = display
        sys.modules["IPython"], sys.modules["IPython.display"] = package, display


def run_child(notebook_path: Path, device: str, bench_shapes: list[list[int]] | None, result_path: Path) -> None:
    """Execute every code cell in one namespace; record which graded cells raised."""
    nb = _load(notebook_path)
    _fake_ipython_display()
    namespace: dict[str, Any] = {"__name__": "__main__"}
    cells: dict[str, Any] = {}
    started = time.monotonic()
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = _source(cell)
        meta = cell.get("metadata", {})
        grade_id = meta.get("nbgrader", {}).get("grade_id")
        filename = f"<cell-{index}-{grade_id or 'added'}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        began = time.monotonic()
        try:
            exec(compile(source, filename, "exec"), namespace)
            error = None
        except Exception as exc:  # a failing cell is a result, as in the notebook
            error = f"{type(exc).__name__}: {exc}".strip()[:600]
            traceback.print_exc()
        if "parameters" in meta.get("tags", []):  # what papermill injects after the parameters cell
            namespace.update(device=device, grading=True, bench_shapes=bench_shapes)
        if grade_id:
            cells[grade_id] = {"error": error, "seconds": round(time.monotonic() - began, 2)}
    result_path.write_text(json.dumps({"cells": cells, "seconds": time.monotonic() - started}), encoding="utf-8")


def _geomean(values: list[float]) -> float:
    if not values or any(v <= 0 or math.isnan(v) for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


def old_verdict(cells: dict[str, Any], events: list[dict[str, Any]], on_gpu: bool,
                reference: dict[tuple[int, ...], float]) -> dict[str, Any]:
    """Points per graded item by the old rules (correctness: the cell raised nothing; perf: metrics rows)."""
    from course.spec import get

    spec = get("w1d7.matmul_fp32")
    verdict: dict[str, Any] = {}
    for grade_id, points in POINTS.items():
        if not grade_id.startswith("perf_"):
            cell = cells.get(grade_id)
            verdict[grade_id] = points if cell is not None and cell["error"] is None else 0
    rows = [e for e in events if e.get("kind") == "bench" and e.get("measured")]
    failed = [e for e in events if e.get("kind") == "check" and not e.get("passed")]
    for threshold in spec.thresholds:
        grade_id = spec.grade_id(threshold)
        if not on_gpu:
            verdict[grade_id] = None
            continue
        if not rows or failed:
            verdict[grade_id] = 0
            continue
        try:
            if threshold.kind == "absolute":
                level = _geomean([float(r["student_gflops"]) for r in rows])
            elif threshold.kind == "vs_library":
                level = _geomean([float(r["student_gflops"]) / float(r["baseline_gflops"]) for r in rows])
            else:
                level = _geomean([float(r["student_gflops"]) / reference[tuple(r["shape"])] for r in rows])
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            level = 0.0
        verdict[grade_id] = threshold.score(level)
    return verdict


def grade(names: list[str], device: str, bench_shapes: list[list[int]] | None, timeout: float,
          work: Path) -> dict[str, Any]:
    report: dict[str, Any] = {}
    reference: dict[tuple[int, ...], float] = {}
    ordered = sorted(names, key=lambda n: n != "honest_fast")  # the reference rates come first
    for name in ordered:
        if name in REFUSED:
            report[name] = {"refused": "needs Jupyter, the real grader, or a sandbox"}
            continue
        folder = work / name
        folder.mkdir(parents=True, exist_ok=True)
        notebook = folder / "sanitized.json"
        try:
            notebook.write_text(json.dumps(old_sanitized_notebook(name)), encoding="utf-8")
        except ValueError as error:
            report[name] = {"refused": str(error)}
            continue
        metrics, result = folder / "metrics.jsonl", folder / "result.json"
        env = dict(os.environ, COURSE_METRICS_FILE=str(metrics), COURSE_DEVICE=device,
                   PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        command = [sys.executable, str(Path(__file__).resolve()), "--old-root", str(REPO), "--child", str(notebook),
                   "--device", device,
                   "--bench-shapes", json.dumps(bench_shapes), "--result", str(result)]
        began = time.monotonic()
        with open(folder / "log.txt", "wb") as log:
            try:
                code = subprocess.run(command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
        if not result.exists():
            report[name] = {"status": f"no result (exit {code})", "log": (folder / "log.txt").read_text()[-800:]}
            continue
        cells = _load(result)["cells"]
        events = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
        rows = [e for e in events if e.get("kind") == "bench" and e.get("measured")]
        if name == "honest_fast":
            reference = {tuple(r["shape"]): float(r["student_gflops"]) for r in rows if not r.get("error")}
        verdict = old_verdict(cells, events, device == "gpu", reference)
        report[name] = {
            "old_verdict": verdict,
            "old_total": sum(v for v in verdict.values() if v),
            "errors": {k: v["error"] for k, v in cells.items() if v["error"]},
            "bench": [{k: r.get(k) for k in ("shape", "student_gflops", "baseline_gflops", "error")} for r in rows],
            "seconds": round(time.monotonic() - began, 1),
        }
        print(json.dumps({name: report[name]}), flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="fixtures (default: every one not refused)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--bench-shapes", default="null",
                        help='JSON list of [M, N, K] to benchmark, or null for the spec\'s own')
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--old-root", default=os.environ.get("ADVERSARIAL_OLD_ROOT"),
                        help=f"a copy of the old design (git archive {OLD_COMMIT}); default $ADVERSARIAL_OLD_ROOT")
    parser.add_argument("--work", default=None, help="folder for the runs (default: a temporary one)")
    parser.add_argument("--out", default=None, help="write the JSON report here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    global REPO
    if not args.old_root or not (Path(args.old_root) / "course" / "record.py").exists():
        parser.error(f"--old-root must name a copy of the old design (git archive {OLD_COMMIT})")
    REPO = Path(args.old_root).resolve()
    sys.path.insert(0, str(REPO))
    bench_shapes = json.loads(args.bench_shapes) if args.bench_shapes != "none" else None
    if args.child:
        run_child(Path(args.child), args.device, bench_shapes, Path(args.result))
        return 0
    names = args.names or [n for n in fixtures() if n not in REFUSED]
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="adversarial-inprocess-"))
    report = grade(names, args.device, bench_shapes, args.timeout, work)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
