"""`make bench`: every reference solution timed as the judge times it, beside its library, against its ceiling.

    python -m bench references [--notebooks KEYS] [--work build/bench] [--json FILE]
    python -m bench references --from OUT [--device-name NAME] [--copy-gbps X] [--json FILE]
    python -m bench references --markdown FILE.json

The reference solutions are graded by the grader itself (``grader grade --device gpu --gpus 0`` on the demo
class's ``fast_correct`` notebooks, which makes it judge each notebook's reference first): every number is the
judge's, the reference's plan and the library timed in the same rounds with the GPU held alone. For each timed
exercise and benchmark shape the table gives the reference's rate, the library's, their ratio, the ceiling that
applies and the reference's fraction of it. The ceiling of a GB/s exercise is the copy bandwidth this script
measures first (``torch`` copy of 1 GiB, read + write); of a GFLOP/s exercise, the datasheet peak of its precision
(``course.peaks``, dense), named as such. ``--from`` tabulates the references of an OUT graded earlier on a GPU,
on any machine (the GPU's name from the stamp the grader wrote beside each reference; without a GPU, the copy
bandwidth only from ``--copy-gbps``); ``--markdown`` prints a JSON report as the Markdown table of bench/RESULTS.md
and the README. Anything else, on a machine without a GPU, says so and exits 0: nothing is measured.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from course import peaks
from course import spec as specs

REPO = Path(__file__).resolve().parent.parent

COPY_BYTES = 2**30
# What each precision's GFLOP/s ceiling is on the datasheet (fp32-ieee: the FP32 units; the rest tensor cores).
PEAK_OF = {"fp32-ieee": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16"}


@dataclass(frozen=True)
class Row:
    exercise: str
    shape: list[int]
    precision: str
    unit: str
    reference: float | None  # the reference solution's rate (unit)
    library: float | None
    library_name: str
    ceiling: float | None
    ceiling_name: str
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        return self.reference / self.library if self.reference and self.library else None

    @property
    def fraction(self) -> float | None:
        return self.reference / self.ceiling if self.reference and self.ceiling else None


def ceiling(spec: Any, device_name: str, copy_gbps: float | None) -> tuple[float | None, str]:
    """The ceiling of ``spec``'s rate on ``device_name`` and what it is."""
    if spec.rate_unit == "GB/s":
        return (copy_gbps, "measured copy") if copy_gbps else (None, "copy bandwidth not measured")
    found = peaks.datasheet_peaks(device_name)
    precision = PEAK_OF.get(spec.precision)
    tflops = found.tflops(precision) if found is not None and precision else None
    if tflops is None:
        return None, f"no datasheet {precision or spec.precision} peak for {device_name}"
    return tflops * 1e3, f"datasheet {precision} ({found.gpu})"


def rows_of(spec: Any, bench: dict[str, Any], device_name: str, copy_gbps: float | None) -> list[Row]:
    """One row per benchmark shape of a reference verdict's ``bench`` (its ``student_ms`` is the reference's)."""
    top, top_name = ceiling(spec, device_name, copy_gbps)
    rows = []
    for row in bench.get("rows") or []:
        shape = [int(n) for n in row["shape"]]
        work = spec.work(tuple(shape))

        def rate(ms: Any, work: float = work) -> float | None:
            return work / (float(ms) * 1e-3) / 1e9 if ms else None

        rows.append(Row(spec.id, shape, spec.precision, spec.rate_unit, rate(row.get("student_ms")),
                        rate(row.get("baseline_ms")), spec.library_name, top, top_name, row.get("error")))
    return rows


def read_out(out: Path, device_name: str, copy_gbps: float | None) -> list[Row]:
    """The table of every reference verdict graded into ``out`` (OUT/reference/<week>/<notebook>/verdict.json)."""
    rows = []
    for verdict_path in sorted((out / "reference").glob("*/*/verdict.json")):
        verdict = json.loads(verdict_path.read_text(encoding="utf-8"))
        for spec_id, judged in sorted((verdict.get("kernels") or {}).items()):
            bench = judged.get("bench") or {}
            if bench.get("measured"):
                rows.extend(rows_of(specs.get(spec_id), bench, device_name, copy_gbps))
    return rows


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table(rows: list[Row]) -> str:
    """The Markdown table: one line per exercise and benchmark shape."""
    lines = ["| exercise | shape | precision | reference | library | ratio | ceiling | of ceiling |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        library = f"{_fmt(r.library)} ({r.library_name})"
        top = f"{_fmt(r.ceiling)} ({r.ceiling_name})"
        ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
        share = "-" if r.fraction is None else f"{r.fraction:.1%}"
        reference = _fmt(r.reference) + f" {r.unit}" if r.reference else f"- ({r.error or 'not timed'})"
        lines.append(f"| {r.exercise} | {'x'.join(map(str, r.shape))} | {r.precision} | {reference} | {library} "
                     f"| {ratio} | {top} | {share} |")
    return "\n".join(lines)


def graded_at(out: Path) -> datetime:
    """When ``out``'s references were judged (their newest verdict file)."""
    stamps = [p.stat().st_mtime for p in (out / "reference").glob("*/*/verdict.json")]
    return datetime.fromtimestamp(max(stamps), UTC) if stamps else datetime.now(UTC)


def checkout_commit() -> str | None:
    """This checkout's commit, with "+changes" when its tracked files differ from it (the numbers then come from a
    tree no commit holds); None outside a git checkout."""
    def git(*args: str) -> str | None:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return None
    return commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def report(rows: list[Row], device_name: str, copy_gbps: float | None, command: list[str],
           when: datetime, tabulated_from: Path | None = None) -> dict[str, Any]:
    """``tabulated_from``: the OUT graded earlier (``--from``), whose grading commit this checkout cannot know."""
    return {"date": when.strftime("%Y-%m-%d %H:%M UTC"), "gpu": device_name, "copy_gbps": copy_gbps,
            "commit": checkout_commit(), "command": command,
            "from": str(tabulated_from) if tabulated_from is not None else None, "rows": [asdict(r) for r in rows]}


def markdown(data: dict[str, Any]) -> str:
    """A JSON report as RESULTS.md shows it: where and when, then the table."""
    rows = [Row(**r) for r in data["rows"]]
    commit = data.get("commit") or "unknown"
    where = (f"graded {data['date']}, tabulated from {data['from']} at commit {commit}" if data.get("from") else
             f"{data['date']}, commit {commit}")
    return f"{data['gpu']}, {where}: `{' '.join(data['command'])}`\n\n{table(rows)}"


def copy_bandwidth() -> float:
    """GB/s of a device-to-device torch copy of 1 GiB (bytes read plus bytes written), as course.bench times."""
    import torch

    from course import bench

    src = torch.empty(COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    timing = bench.time_calls(dst.copy_, args=(src,), min_repeats=20)
    return bench.gbps(2 * COPY_BYTES, timing.median_ms)


def grade_references(work: Path, notebooks: set[str] | None) -> Path:
    """Grade the demo class's ``fast_correct`` notebooks on GPU 0 into a fresh WORK/out: their references first."""
    from grader.authoring import demo

    for stale in ("class", "out"):
        shutil.rmtree(work / stale, ignore_errors=True)
    demo.build(work / "demo", keys=notebooks)
    shutil.copytree(work / "demo" / "fast_correct", work / "class" / "fast_correct")
    shutil.rmtree(work / "demo")
    subprocess.run([sys.executable, "-m", "grader", "grade", str(work / "class"), "--out", str(work / "out"),
                    "--device", "gpu", "--gpus", "0", "--allow-ungraded"], cwd=REPO, check=True)
    return work / "out"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--notebooks", default=None, help="comma-separated notebook keys (default: every notebook)")
    p.add_argument("--work", type=Path, default=REPO / "build" / "bench", help="(default: %(default)s)")
    p.add_argument("--from", dest="from_out", type=Path, default=None, help="tabulate this OUT's references")
    p.add_argument("--device-name", default=None,
                   help="with --from: the GPU it was graded on (default: the one its references name)")
    p.add_argument("--copy-gbps", type=float, default=None, help="with --from: the copy bandwidth (default: measured)")
    p.add_argument("--json", type=Path, default=None, help="also write the report here (default: WORK/bench.json)")
    p.add_argument("--markdown", type=Path, default=None, help="print this JSON report as Markdown, measure nothing")
    return p


def graded_on(out: Path) -> str | None:
    """The GPU OUT's references were graded on, from the stamp the grader writes beside each (its first line), or
    None where they name none or several."""
    stamps = (out / "reference").glob("*/*/device.txt")
    names = {stamp.read_text(encoding="utf-8").split("\n", 1)[0] for stamp in stamps}
    return names.pop() if len(names) == 1 else None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.markdown is not None:
        if not args.markdown.is_file():
            print(f"no report at {args.markdown}: `make bench` writes one on a GPU", file=sys.stderr)
            return 2
        print(markdown(json.loads(args.markdown.read_text(encoding="utf-8"))))
        return 0
    import torch

    has_gpu = torch.cuda.is_available()
    if not has_gpu and args.from_out is None:
        print("make bench measures the reference solutions on a GPU; this machine has none: nothing measured")
        return 0
    device_name = args.device_name or (graded_on(args.from_out) if args.from_out is not None else None) \
        or (torch.cuda.get_device_name(0) if has_gpu else None)
    if device_name is None:
        print(f"{args.from_out}'s references name no one GPU they were graded on: give it with --device-name",
              file=sys.stderr)
        return 2
    copy_gbps = args.copy_gbps if args.copy_gbps is not None or not has_gpu else copy_bandwidth()
    notebooks = set(args.notebooks.split(",")) if args.notebooks else None
    out = args.from_out if args.from_out is not None else grade_references(args.work, notebooks)
    rows = read_out(out, device_name, copy_gbps)
    data = report(rows, device_name, copy_gbps, ["python", "-m", "bench", "references", *(argv or sys.argv[1:])],
                  graded_at(out), args.from_out)
    target = args.json or args.work / "bench.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=1), encoding="utf-8")
    print(markdown(data))
    print(f"\n(report: {target})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
