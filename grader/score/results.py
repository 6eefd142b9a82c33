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
TIMEOUT = "timeout"  # a cell, or the whole notebook, ran past its time limit (see stopped_at)
KERNEL_DIED = "kernel_died"  # the Jupyter kernel died: a crash (segfault, os._exit) or out of memory
CUDA_ERROR = "cuda_error"
CORRUPT = "corrupt"  # the file is not a readable notebook (or is a link, or too large)
MISSING = "missing"  # nothing was submitted for this notebook; ``found`` says what the folder holds
AMBIGUOUS = "ambiguous"  # several notebooks could be this one and none is named as expected: none was graded
GRADER_ERROR = "grader_error"
MEMORY = "memory"
OUTPUT_LIMIT = "output_limit"  # printed too much: cell outputs, the run's log, exported answers
SCRATCH_LIMIT = "scratch_limit"  # wrote too many other files (compiler caches, temporary files)
GPU_HANG = "gpu_hang"  # a kernel of the run never ended on the shared GPU: the run was stopped there
GPU_MEMORY = "gpu_memory"  # held more than its share of the shared GPU's memory: stopped
BUILD_LIMIT = "build_limit"  # the notebook's kernels took more than the build's time or memory to compile
# A notebook with one of these was found but not graded normally (its points are 0 or incomplete).
NOT_GRADED_NORMALLY = (TIMEOUT, KERNEL_DIED, CUDA_ERROR, CORRUPT, AMBIGUOUS, GRADER_ERROR, MEMORY, OUTPUT_LIMIT,
                       SCRATCH_LIMIT, GPU_HANG, GPU_MEMORY, BUILD_LIMIT)

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
    student: str  # the student's folder name exactly as given: what every report shows
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
    # The student's safe id: the gradebook's student id and the folder under OUT (results/, runs/,
    # feedback/). The same as ``student`` unless the folder name has spaces, accents or a leading "-".
    student_id: str = ""
    submitted_file: str = ""  # the file graded, relative to the student's folder ("" when none was)
    # How the file was found when it was not <assignment>/<notebook>.ipynb ("graded week1/day7.ipynb: ..."),
    # or, for a missing or ambiguous notebook, what the student's folder holds instead. "" otherwise.
    found: str = ""
    # For a run that did not finish (timeout, dead kernel, memory, output, CUDA error): the cell it
    # stopped in, by grade id or by number and first line; and the end of that cell's traceback or
    # output (or of the run's log), cleaned of terminal colour codes and at most 40 lines.
    stopped_at: str = ""
    failure_tail: str = ""
    # When it was submitted, as grading found it (grader/lms/term.py): ISO UTC, "" when absent, "unreadable: ..."
    timestamp_txt: str = ""  # from timestamp.txt in the student's assignment folder
    file_mtime: str = ""  # the notebook file's modification time
    # Set from the term file each time reports are written (never stored as a grade): see grader/lms/term.py.
    late_status: str = ""
    late_penalty: float = 0.0  # points taken off the raw score
    late_note: str = ""

    def __post_init__(self) -> None:
        if not self.student_id:
            self.student_id = self.student

    @property
    def graded_normally(self) -> bool:
        """False when a notebook was found but could not be graded normally (missing is not counted)."""
        return self.status not in NOT_GRADED_NORMALLY

    @property
    def summary(self) -> str:
        """One line for CSVs and consoles: the status's message, where the run stopped, and how the file was found."""
        parts = [self.message.strip()] if self.message.strip() else []
        if self.stopped_at and self.stopped_at not in self.message:
            parts.append(f"stopped in {self.stopped_at}")
        if self.found and self.found not in self.message:
            parts.append(self.found)
        return "; ".join(parts)

    @property
    def score(self) -> float:
        return sum(i.score or 0.0 for i in self.items)

    @property
    def final_score(self) -> float:
        """The raw score less the late penalty."""
        return max(0.0, self.score - self.late_penalty)

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
