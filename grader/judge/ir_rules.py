"""An exercise's ban on library calls, checked on the compiled kernel (TTGIR) the judge runs.

``ExerciseSpec.forbidden_calls`` names Triton functions an exercise asks students to do without
(Day 6's ``tl.dot``). The judge reads the kernels' source for a friendly message, but source can
be spelled in ways a reader does not foresee; the TTGIR cannot. Each banned call maps to the ops
Triton 3.6 lowers it to, in every dialect the TTGIR of a supported GPU can hold: ``tt.dot`` (and
``tt.dot_scaled``), Hopper's ``ttng.warp_group_dot``, Blackwell's ``ttng.tc_gen5_mma`` (and its
scaled form), AMD's ``amdgpu.wmma``; and inline assembly that issues a matrix instruction
(``mma``/``wgmma``) does the same work. The compiler also makes ``tt.dot`` from ``tl.sum`` of a
broadcast product, and that counts too: the exercise is about doing the products without tensor cores.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from grader.kernel_build import built_index
from grader.kernel_build.build_kernels import launch_key

OPS: dict[str, tuple[str, ...]] = {
    "tl.dot": ("tt.dot", "tt.dot_scaled", "ttng.warp_group_dot", "ttng.tc_gen5_mma", "ttng.tc_gen5_mma_scaled",
               "amdgpu.wmma"),
    "tl.dot_scaled": ("tt.dot_scaled", "ttng.tc_gen5_mma_scaled"),
}
INLINE_ASM = {"tl.dot": re.compile(r"\b(w?gmma|mma)\b")}
# Other source forms the compiler turns into those ops: said in the message, for a student who never wrote the call.
ALSO_FROM = {"tl.dot": " (the compiler also makes it from tl.sum of a broadcast product x[:, :, None] * y[None, :, :])"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_LOC_LINE = re.compile(r"^#loc.*$", re.MULTILINE)
_INLINE_ASM_OP = re.compile(r'tt\.elementwise_inline_asm\s+("(?:[^"\\]|\\.)*")')


def _normalized(call: str) -> str:
    return "tl." + call.removeprefix("triton.language.").removeprefix("tl.")


def problem(ttgir: str, forbidden: Iterable[str], kernel: str = "kernel") -> str | None:
    """Why a compiled kernel breaks a ban on ``forbidden`` calls (the op it holds), or None."""
    code = _STRING.sub('""', _LOC_LINE.sub("", ttgir))  # strings (assert messages, file names) are not ops
    for call in map(_normalized, forbidden):
        for op in OPS.get(call, ()):
            if re.search(rf"(?<![\w.]){re.escape(op)}(?![\w.])", code):
                return f"the compiled {kernel} contains {op}, what {call} compiles to{ALSO_FROM.get(call, '')}: " \
                       f"this exercise asks you to do without {call}"
        pattern = INLINE_ASM.get(call)
        if pattern and any(pattern.search(asm) for asm in _INLINE_ASM_OP.findall(ttgir)):
            return f"the compiled {kernel} issues a matrix instruction in inline assembly, the work of {call}: " \
                   f"this exercise asks you to do without {call}"
    return None


def plan_problem(plan: Any, ttgir: Mapping[str, str], errors: Mapping[str, str],
                 forbidden: Iterable[str]) -> str | None:
    """Why a recorded plan's Triton launches break a ban, judged on their builds (launch key -> TTGIR text, or
    the build's error): a launch whose kernel was not built cannot be shown to keep the ban, and is refused."""
    forbidden = tuple(forbidden)
    if not forbidden or not isinstance(plan, dict):
        return None
    for launch in plan.get("launches") or []:
        if not isinstance(launch, dict) or "cuda" in launch:
            continue
        key, name = launch_key(launch), str(launch.get("kernel"))[:80]
        if key not in ttgir:
            why = errors.get(key, "it was not built")
            return f"kernel {name} could not be checked for {', '.join(forbidden)} on its compiled form: {why}"
        found = problem(ttgir[key], forbidden, f"kernel {name}")
        if found:
            return found
    return None


def read_built(built: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The builder's Triton kernels in ``built`` as (launch key -> TTGIR text, launch key -> why there is none), each
    file checked against its index entry's digest (``grader.kernel_build.built_index.built_ttgir``): for a judge that
    does not
    compile them (the CPU's)."""
    texts: dict[str, str] = {}
    errors: dict[str, str] = {}
    index_file = built / "index.json"
    if index_file.is_symlink() or not index_file.is_file() or index_file.stat().st_size > 2**24:
        return texts, errors
    index = json.loads(index_file.read_text(encoding="utf-8"))
    for key, entry in (index if isinstance(index, dict) else {}).items():
        if not isinstance(entry, dict) or entry.get("cuda"):
            continue
        if "error" in entry:
            errors[str(key)] = str(entry["error"])[:600]
            continue
        try:
            texts[str(key)] = built_index.built_ttgir(built, entry)
        except ValueError as error:
            errors[str(key)] = str(error)
    return texts, errors
