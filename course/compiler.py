"""The one way the course and the grader compile Triton code for a GPU, with no GPU needed.

``compile_triton(source, target, options)`` is ``triton.compile``: ``source`` is a kernel's AST with its
specialisation (``triton.compiler.ASTSource``) or the path of an IR file (TTGIR); ``target`` a
``triton.backends.compiler.GPUTarget``. With ``until="ttgir"`` the pipeline ends after TTGIR and its text comes back
instead of a compiled kernel. The grader's builder compiles a notebook's kernels to TTGIR with it, the compile stage
and the judge turn that TTGIR into the binary with it, Days 4 and 6 read a kernel's PTX through it
(``course.days.sm90``), and the tests compile with it.
"""

from __future__ import annotations

from typing import Any


class _ReachedTTGIR(Exception):
    def __init__(self, ttgir: str) -> None:
        super().__init__("the TTGIR stage is done")
        self.ttgir = ttgir


def _reached_ttgir(module: Any, metadata: dict[str, Any]) -> Any:
    raise _ReachedTTGIR(str(module))  # str(module) is exactly what Triton stores as the kernel's .ttgir


def _stop_after_ttgir(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
    names = list(stages)
    for name in names[names.index("ttgir") + 1:]:
        del stages[name]
    stages["reached_ttgir"] = _reached_ttgir


def compile_triton(source: Any, target: Any, options: dict[str, Any] | None = None, until: str | None = None) -> Any:
    """``triton.compile(source, target=target, options=options)``; with ``until="ttgir"``, the TTGIR text alone.

    Stopping after TTGIR uses Triton's stage hook (``knobs.runtime.add_stages_inspection_hook``): the pipeline ends
    with a stage that hands the text back by raising, so ``compile`` never stores a cache group without a binary
    that a later full compile of the same kernel would take for a hit.
    """
    import triton
    from triton import knobs

    if until is None:
        return triton.compile(source, target=target, options=options)
    if until != "ttgir":
        raise ValueError(f"a compile stops after 'ttgir' or at the binary, not after {until!r}")
    with knobs.runtime.scope():
        knobs.runtime.add_stages_inspection_hook = _stop_after_ttgir
        try:
            compiled = triton.compile(source, target=target, options=options)
        except _ReachedTTGIR as reached:
            return reached.ttgir
    return compiled.asm["ttgir"]  # a cache hit: an earlier full compile of the same kernel
