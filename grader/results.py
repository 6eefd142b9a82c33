"""What grading produces for one notebook, stored as JSON with atomic writes."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Notebook statuses. Only OK means the notebook ran to its end; the others are reported, never raised.
OK = "ok"
TIMEOUT = "timeout"
KERNEL_DIED = "kernel_died"
CUDA_ERROR = "cuda_error"
CORRUPT = "corrupt"
MISSING = "missing"
GRADER_ERROR = "grader_error"
MEMORY = "memory"
OUTPUT_LIMIT = "output_limit"

# Item statuses.
PASSED, FAILED, PARTIAL, PENDING, NOT_RUN = "passed", "failed", "partial", "pending", "not_run"

CORRECTNESS, PERFORMANCE = "correctness", "performance"


@dataclass
class ItemResult:
    item: str  # the nbgrader grade-cell id
    kind: str  # CORRECTNESS or PERFORMANCE
    score: float | None  # None while pending
    max_score: float
    status: str
    message: str = ""
    measured: str = ""  # e.g. "41200 GFLOP/s" or "0.81 of cuBLAS"
    threshold: str = ""
    provisional: bool = False  # decided on a CPU from the sandbox's outputs; the GPU judge is authoritative


@dataclass
class NotebookResult:
    student: str
    assignment: str
    notebook: str
    status: str
    message: str = ""
    items: list[ItemResult] = field(default_factory=list)
    submission_sha256: str = ""
    grader_version: str = ""
    device: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    integrity: list[str] = field(default_factory=list)
    perf_rows: list[dict[str, Any]] = field(default_factory=list)
    executed_path: str = ""
    code: list[dict[str, str]] = field(default_factory=list)  # the student's answer cells
    sandbox: str = ""  # how the student's code was isolated ("bubblewrap", or why it was not)
    run_seed: int | None = None  # the grading run's secret seed: with it, a TA can reproduce the grade

    @property
    def score(self) -> float:
        return sum(i.score or 0.0 for i in self.items)

    @property
    def max_score(self) -> float:
        return sum(i.max_score for i in self.items)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NotebookResult:
        items = [ItemResult(**i) for i in data.pop("items", [])]
        return cls(items=items, **data)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
        temporary = Path(f.name)
    os.replace(temporary, path)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
