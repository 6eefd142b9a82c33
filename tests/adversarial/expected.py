"""The verdict the new design (sandbox + judge) must give each fixture of the corpus: the ``Expected`` type, and
every notebook's verdicts gathered from ``fixtures/<week>/<notebook>/expected.py`` (the Week 1 Day 7 fixtures
named by their stem, the others ``<notebook>-<stem>``).

Rules the verdicts follow (tests/adversarial/README.md, "Expected verdicts"; docs/ARCHITECTURE.md, "The sandbox
wall"):

- Nothing written or patched inside the notebook's process counts: metrics files, patched course.*
  functions, IPython hooks and exception handlers, what the test cells print.
- Kernel items (test_matmul_visible, test_matmul_hidden and the three performance items) come only
  from the judge. On a GPU: replay of the recorded launch plan on secret inputs; a graded function
  that calls a torch op other than allocation or views, a library, does host work, uses a second
  stream or returns memory no recorded kernel writes gets 0 with a reason, and so does a kernel that
  is not a top-level ``@triton.jit`` function of a cell (or ``triton.jit(f)`` of one), whose decorator
  or defaults are not plain, or whose body reaches anything but Triton's language (grader.kernel_build.kernel_vet).
  On a CPU: the same replay on secret inputs, through Triton's interpreter in a fresh sandbox that
  holds only the notebook's vetted kernels (same rules), provisional, and performance pending (``None`` here).
- Quiz items: the master test cells run in the judge on answers exported as JSON, before any replay;
  a value whose type is a subclass of int, float or bool is "unsupported" and fails, and so does an
  answer that cannot be exported or loaded: that item only. A replay past the watchdog's limit fails
  that kernel's items only.
- Tampered notebooks are graded from the master copy's cells, with a note (``tamper_note``); an
  honest answer whose metadata was stripped is still graded.
- The sandbox: no network, no view of solutions/, other submissions or OUT, nothing outlives the run;
  resource abuse gives the notebook a status, and no other notebook is affected.

``status`` lists the notebook statuses (grader.score.results) that are acceptable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Points = dict[str, "float | None"]


@dataclass(frozen=True)
class Expected:
    mechanism: str
    cpu: Points
    gpu: Points
    status: tuple[str, ...] = ("ok",)
    tamper_note: bool = False
    why: str = ""
    old: str = ""  # what the old, in-process design gave it (observed, see README.md)
    gpu_only: bool = field(default=False)
    # A second verdict accepted on a GPU, (status, points), where the grader's own scheduling decides between two
    # outcomes that are both no better than honest (see kernel_spins_forever).
    gpu_also: tuple[str, Points] | None = None

    def mismatch(self, device: str, status: str, scores: dict[str, float]) -> str:
        """Why a result is not this verdict on ``device`` ("cpu" or "gpu"); empty when it is."""
        verdicts = [(self.status, self.gpu if device == "gpu" else self.cpu)]
        if device == "gpu" and self.gpu_also is not None:
            verdicts.append(((self.gpu_also[0],), self.gpu_also[1]))
        reasons = []
        for statuses, points in verdicts:
            wrong = {k: (scores.get(k), v) for k, v in points.items() if scores.get(k) != v}
            if status in statuses and not wrong:
                return ""
            reasons.append(f"status {status} (want {' or '.join(statuses)}), (got, want) {wrong}")
        return "; or ".join(reasons)

    @staticmethod
    def total(points: Points) -> float:
        return sum(v for v in points.values() if v is not None)



def _gathered() -> tuple[dict[str, Expected], Any]:
    """Every notebook's verdicts by fixture name (Week 1 Day 7's first, by their stem), and Day 7's module."""
    import importlib.util
    import sys

    repo = str(FIXTURES.parents[2])
    if repo not in sys.path:  # run as a script: the per-notebook files import this module as tests.adversarial...
        sys.path.insert(0, repo)
    modules = {}
    for path in sorted(FIXTURES.glob("*/*/expected.py")):
        loaded = importlib.util.spec_from_file_location(f"expected_{path.parent.name}", path)
        module = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(module)
        modules[path.parent.relative_to(FIXTURES).as_posix()] = module
    day7 = modules.pop(DAY7_KEY)
    found: dict[str, Expected] = dict(day7.EXPECTED)
    for key, module in modules.items():
        found.update({f"{key.split('/')[-1]}-{stem}": e for stem, e in module.EXPECTED.items()})
    return found, day7


FIXTURES = Path(__file__).resolve().parent / "fixtures"
DAY7_KEY = "week1/day7_fast_matmul"  # the corpus's first notebook: its fixtures keep their bare names
EXPECTED, DAY7 = _gathered()
OTHER_NOTEBOOKS = {name: e for name, e in EXPECTED.items() if name not in DAY7.EXPECTED}


def _cell(points: Points) -> str:
    def show(item: str) -> str:
        value = points[item]
        return "p" if value is None else f"{value:g}"

    groups = (DAY7.KERNEL_ITEMS, DAY7.PERF_ITEMS, DAY7.QUIZ_ITEMS)
    text = " \\| ".join(" ".join(show(item) for item in group) for group in groups)
    return f"{text} = {Expected.total(points):g}"


def markdown_table() -> str:
    """The README's table, one row per Week 1 Day 7 fixture."""
    lines = ["| fixture | mechanism | gpu-only | status | CPU: V H \\| floor cuBLAS ref \\| Q1-Q4 = total "
             "| GPU: V H \\| floor cuBLAS ref \\| Q1-Q4 = total | note | old design (observed) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, e in DAY7.EXPECTED.items():
        note = "tamper note" if e.tamper_note else ""
        also = f" or {e.gpu_also[0]}: {_cell(e.gpu_also[1])}" if e.gpu_also else ""
        lines.append(f"| `{name}` | {e.mechanism} | {'yes' if e.gpu_only else ''} | {' or '.join(e.status)} "
                     f"| {_cell(e.cpu)} | {_cell(e.gpu)}{also} | {note} | {e.old} |")
    return "\n".join(lines)


def problems() -> list[str]:
    """Disagreements between the verdicts and the fixture files (every fixture listed, gpu-only marks equal)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from build import fixtures

    found = fixtures()
    items = DAY7.ITEMS
    issues = [f"{n}: fixture without an expected verdict" for n in found if n not in EXPECTED]
    issues += [f"{n}: expected verdict without a fixture" for n in EXPECTED if n not in found]
    for name in set(found) & set(EXPECTED):
        if found[name].gpu_only != EXPECTED[name].gpu_only:
            issues.append(f"{name}: gpu-only differs between the fixture and expected.py")
        if name in OTHER_NOTEBOOKS:  # their items are checked against the master notebook by test_adversarial
            continue
        also = [EXPECTED[name].gpu_also[1]] if EXPECTED[name].gpu_also else []
        for points in (EXPECTED[name].cpu, EXPECTED[name].gpu, *also):
            if set(points) != set(items) or any(v is not None and not 0 <= v <= items[k] for k, v in points.items()):
                issues.append(f"{name}: points outside the items' ranges")
    return sorted(issues)


if __name__ == "__main__":
    print(markdown_table())
    for issue in problems():
        print("PROBLEM:", issue)
