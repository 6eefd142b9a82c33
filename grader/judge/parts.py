"""A verdict's parts: each part's name and seed, its checkpoint (saved as it ends, so a judge started again goes
on), the verdict of a part stopped or failed, and its messages bounded.
"""

from __future__ import annotations

import hashlib
import traceback
from pathlib import Path
from typing import Any

from grader.score import results

# The most characters of one verdict message: room for a shape, an error and a value, not for a file.
MESSAGE_CHARS = 400


TESTS = "tests"


def kernel_part(spec_id: str) -> str:
    return f"kernel-{spec_id}"


class Checkpoints:
    """The finished parts of one notebook's verdict, one JSON file each (nothing kept without a folder)."""

    def __init__(self, folder: str | None):
        self.folder = Path(folder) if folder else None

    def load(self, part: str) -> Any:
        if self.folder is None:
            return None
        try:
            return results.read_json(self.folder / f"{part}.json")
        except (OSError, ValueError):
            return None

    def save(self, part: str, data: Any) -> None:
        if self.folder is not None:
            results.write_json_atomic(self.folder / f"{part}.json", data)

    def so_far(self, job: dict[str, Any]) -> dict[str, Any]:
        """A verdict of the parts finished so far (for a judge that ended early)."""
        verdict: dict[str, Any] = {"kernels": {}}
        if (tests := self.load(TESTS)) is not None:
            verdict["tests"] = tests
        for spec_job in job["kernels"]:
            if (kernel := self.load(kernel_part(spec_job["spec"]))) is not None:
                verdict["kernels"][spec_job["spec"]] = kernel
        return verdict


def stopped_verdict(spec_job: dict[str, Any], message: str) -> dict[str, Any]:
    """The verdict of a graded function the watchdog stopped: every item of it fails, saying why."""
    sets = {call["set"]: {"passed": False, "provisional": False, "messages": [f"FAIL {message}"]}
            for call in spec_job["calls"]}
    return {"sets": sets, "bench": {"measured": False, "reason": message, "rows": []}, "stopped": message}


def _record_fault(verdict: dict[str, Any], what: str, error: Exception) -> None:
    """The judge's own failure (never the student's): the verdict's error, which makes a grader_error."""
    verdict.setdefault("error", f"the judge failed while {what}: {type(error).__name__}: {error}"[:500])
    verdict.setdefault("traceback", traceback.format_exc()[-2000:])


def derive_seed(run_seed: int, *parts: object) -> int:
    """A 63-bit seed for one purpose of one grading run (secret while run_seed is)."""
    text = ":".join(str(p) for p in (run_seed, *parts))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def bounded(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying so: a message can carry what a student's code put in a value or
    an exception, and the feedback must not become a channel for it."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters cut)"
