"""The built folder as the judge and the compile stage read it: each index entry's TTGIR, checked against its
digest, and the compile stage's record of the kernels the compiler refused.

The sandboxed builder (``grader.kernel_build.build_kernels``) writes ``index.json`` and one TTGIR file per launch key;
the
compile stage (``grader.kernel_build.compile_ttgir``) writes ``COMPILED`` beside them; the judge
(``grader.replay.gpu_replay``,
``grader.judge.ir_rules``) reads both. Both sides read the folder through this module, so neither imports the other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from course.recorder.plan_format import ttgir_digest

MAX_TTGIR_BYTES = 64 * 2**20
COMPILED = "compiled.json"  # in the built folder: {"target": ..., "errors": {launch key: message}}


def compile_error(kernel: Any, error: object) -> str:
    """The message of a kernel the judge's compiler refused, for the student (as the judge has always said it)."""
    return f"the judge could not compile kernel {kernel}: {error}"[:500]


def compiled_errors(built: Path) -> dict[str, str]:
    """The compile errors ``compile_built`` recorded for ``built`` (launch key -> message); {} where none were."""
    file = built / COMPILED
    if file.is_symlink() or not file.is_file():
        return {}
    try:
        errors = json.loads(file.read_text(encoding="utf-8")).get("errors")
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): str(v)[:500] for k, v in errors.items()} if isinstance(errors, dict) else {}


def built_ttgir(built: Path, entry: dict[str, Any]) -> str:
    """The TTGIR text of one index entry, read from the file the index names (a plain file in ``built``) and
    checked against the entry's digest: a build that rewrote its own files is refused. Raises ValueError."""
    name = entry.get("kernel")
    file = built / Path(str(entry.get("file"))).name
    if file.is_symlink() or not file.is_file() or file.stat().st_size > MAX_TTGIR_BYTES:
        raise ValueError(f"the build of kernel {name} is missing or malformed")
    text = file.read_text(encoding="utf-8", errors="replace")
    if ttgir_digest(text) != entry.get("digest"):
        raise ValueError(f"the build of kernel {name} was changed after it was compiled")
    return text
