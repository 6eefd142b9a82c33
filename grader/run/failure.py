"""A failed run described for the student and the TA, from the executed notebook the sandbox wrote (untrusted:
sizes capped, every field checked): which cell, and the tail of its output.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from grader.run.execute import _CUDA_FAILURES
from grader.run.recording import RECORDING_CELL
from grader.score import results

# Reading the executed notebook the sandbox returned: untrusted data, so sizes are capped and every
# field is checked before use; only ever shown, never scored.
_MAX_EXECUTED_BYTES = 128 * 2**20


def _executed_cells(path: Path) -> list[dict[str, Any]]:
    """The cells of a notebook the sandbox wrote, each a dict ([] where it is a link, too large or unreadable)."""
    try:
        if path.is_symlink() or path.stat().st_size > _MAX_EXECUTED_BYTES:
            return []
        nb = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return []
    cells = nb.get("cells") if isinstance(nb, dict) else None
    return [c if isinstance(c, dict) else {} for c in cells] if isinstance(cells, list) else []


_TAIL_LINES, _TAIL_CHARS, _LINE_CHARS = 40, 4000, 300


_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


_LOG_NOISE = ("Kernel is running over TCP without encryption",)  # Jupyter's warning in every run's log


_RUN_STATUSES = {results.TIMEOUT, results.KERNEL_DIED, results.CUDA_ERROR, results.MEMORY, results.OUTPUT_LIMIT,
                 results.SCRATCH_LIMIT, results.GRADER_ERROR, results.GPU_HANG, results.GPU_MEMORY}


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value[-_TAIL_CHARS * 16:]
    if isinstance(value, list):
        return "".join(v for v in value[-2000:] if isinstance(v, str))[-_TAIL_CHARS * 16:]
    return ""


def _tail(text: str) -> str:
    """The last lines of ``text``, without terminal codes or control characters, each line capped."""
    text = _CONTROL.sub("", _ANSI.sub("", text[-_TAIL_CHARS * 16:].replace("\r\n", "\n").replace("\r", "\n")))
    lines = [line if len(line) <= _LINE_CHARS else f"{line[:_LINE_CHARS]}... [{len(line)} characters]"
             for line in text.rstrip().splitlines() if not any(noise in line for noise in _LOG_NOISE)]
    lines = lines[-_TAIL_LINES:]
    return "\n".join(lines)[-_TAIL_CHARS:]


def _outputs_text(cell: dict[str, Any]) -> str:
    outputs = cell.get("outputs")
    parts = []
    for output in outputs[-50:] if isinstance(outputs, list) else []:
        if not isinstance(output, dict):
            continue
        kind = output.get("output_type")
        if kind == "stream":
            parts.append(_text(output.get("text")))
        elif kind == "error":
            traceback = output.get("traceback")
            if isinstance(traceback, list) and traceback:
                parts.append("\n".join(_text(line) for line in traceback[-200:]))
            else:
                parts.append(f"{_text(output.get('ename'))}: {_text(output.get('evalue'))}")
        elif kind in ("execute_result", "display_data") and isinstance(output.get("data"), dict):
            parts.append(_text(output["data"].get("text/plain")))
    return "\n".join(p.rstrip("\n") for p in parts if p)


def _cell_label(cell: dict[str, Any], index: int, total: int) -> str:
    metadata = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
    nbgrader = metadata.get("nbgrader") if isinstance(metadata.get("nbgrader"), dict) else {}
    grade_id = nbgrader.get("grade_id")
    tags = metadata.get("tags") if isinstance(metadata.get("tags"), list) else []
    where = f"cell {index + 1} of {total} as the grader ran it"
    if RECORDING_CELL in tags:
        return f"the grader's last cell, which calls your graded functions on the judged shapes ({where})"
    if "injected-parameters" in tags:
        return f"the grader's parameters cell ({where})"
    if isinstance(grade_id, str) and grade_id:
        return f"cell '{_tail(grade_id)[:64]}' ({where})"
    if cell.get("cell_type") != "code":
        return f"{where} (a text cell)"
    source = cell.get("source")
    source = "".join(s for s in source[:200] if isinstance(s, str)) if isinstance(source, list) else source
    lines = [line.strip() for line in source[:4000].splitlines() if line.strip()] if isinstance(source, str) else []
    first = _tail(lines[0])[:80] if lines else ""
    return f"{where}, a cell you added" + (f", which starts `{first}`" if first else " (empty)")


def describe_failed_run(run: Path, status: str) -> tuple[str, str]:
    """(stopped_at, failure_tail) of a run that did not finish, from the executed notebook in ``run``.

    The cell is the first with a CUDA error for ``cuda_error``, else the last one the run started
    (papermill stamps each cell's start, and saves the notebook after every cell). The tail is that
    cell's traceback or output; failing that, the end of the sandbox's log. ("", "") for a run that finished.
    """
    if status not in _RUN_STATUSES:
        return "", ""
    stopped_at, tail = "", ""
    cells = _executed_cells(run / "executed.ipynb")
    chosen = None
    if status == results.CUDA_ERROR:
        chosen = next((i for i, c in enumerate(cells)
                       if any(marker in _outputs_text(c) for marker in _CUDA_FAILURES)), None)
    if chosen is None:
        started = [i for i, c in enumerate(cells) if isinstance(c.get("metadata"), dict)
                   and isinstance(c["metadata"].get("papermill"), dict)
                   and isinstance(c["metadata"]["papermill"].get("start_time"), str)]
        chosen = started[-1] if started else None
    if chosen is not None:
        stopped_at = _cell_label(cells[chosen], chosen, len(cells))
        tail = _tail(_outputs_text(cells[chosen]))
    elif cells:
        stopped_at = "before its first cell (the notebook's kernel did not start)"
    if not tail:
        try:
            with open(run / "sandbox.log", "rb") as log:
                log.seek(max(0, os.fstat(log.fileno()).st_size - _TAIL_CHARS * 4))
                logged = _tail(log.read().decode("utf-8", errors="replace"))
        except OSError:
            logged = ""
        tail = f"(no output in that cell; the end of the run's log:)\n{logged}" if logged else ""
    return stopped_at, tail
