"""Build a notebook's CUDA C modules from its source text, for the judge (run inside the builder's sandbox).

The CUDA sources the builder will compile are the string constants assigned at the top level of the
notebook's code cells (``SOURCE = r'''...'''``), read from the syntax alone: nothing of the notebook
runs. A recorded launch names its module by the SHA-256 of its source and its NVRTC options
(``course.cuda``); the builder compiles the constant with that digest, with those options (checked
against the course's list) for the judge's GPU, and writes the cubin (or PTX) beside the Triton
builds in the same index. A launch whose source matches no constant (built at run time, read from a
file, edited after the constant) is refused with the reason, so nothing but the notebook's own
source text ever runs in the judge.
"""

from __future__ import annotations

import ast
import time
from pathlib import Path
from typing import Any

MAX_SOURCE_CHARS = 1_000_000


def string_constants(cells: list[str]) -> dict[str, str]:
    """SHA-256 -> text of every ``NAME = "..."`` (or ``NAME: str = "..."``) at the top level of a cell."""
    from course import cuda

    found = {}
    for source in cells:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            named = (isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets)
                     or isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name))
            value = node.value if named else None
            if isinstance(value, ast.Constant) and type(value.value) is str and len(value.value) <= MAX_SOURCE_CHARS:
                found[cuda.source_digest(value.value)] = value.value
    return found


def launch_key(launch: dict[str, Any]) -> str:
    """The module a CUDA launch names, by its source digest and options ("cuda-malformed" for a bad entry)."""
    from course import cuda

    entry = launch.get("cuda")
    try:
        if not isinstance(entry, dict) or not isinstance(entry.get("source_sha256"), str):
            raise ValueError("malformed")
        return cuda.module_key(entry["source_sha256"], cuda.check_options(entry.get("options") or ()))
    except ValueError:
        return "cuda-malformed"


def build_launch(launch: dict[str, Any], constants: dict[str, str], arch: int, out: Path) -> dict[str, Any]:
    """The index entry of the module ``launch`` names: its compiled file, or why it was not built."""
    from course import cuda

    name = str(launch.get("kernel"))[:80]
    key = launch_key(launch)
    if key == "cuda-malformed":
        return {"error": f"CUDA kernel {name}: the launch names its module with a malformed entry or options "
                         "the course does not allow"}
    entry = launch["cuda"]
    source = constants.get(entry["source_sha256"])
    if source is None:
        return {"error": f"CUDA kernel {name}: its source is not a string constant at the top level of a notebook "
                         "cell (write it as SOURCE = r\"\"\"...\"\"\" and compile that; a source built or edited at "
                         "run time cannot be rebuilt by the grader)"}
    options = tuple(entry.get("options") or ())
    try:
        started = time.perf_counter()
        image, kind = cuda.nvrtc_compile(source, options, arch)
        seconds = time.perf_counter() - started
    except Exception as error:  # a source that does not compile is the student's to fix
        return {"error": f"CUDA kernel {name}: did not compile: {type(error).__name__}: {error}"[:800]}
    file = out / f"{key}.{kind}"
    file.write_bytes(image)
    return {"cuda": True, "file": file.name, "source_sha256": entry["source_sha256"], "options": list(options),
            "format": kind, "seconds": seconds}
