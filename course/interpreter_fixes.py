"""A fix to Triton's CPU interpreter that the course's bf16 kernels need (installed by ``course.device`` on a CPU).

Triton 3.6's interpreter keeps bfloat16 values as their uint16 bit patterns, and its ``tl.dot``
multiplies those patterns as integers, so a bf16 matmul returns values near 1e10
(triton-lang/triton#11584, where the maintainers answered that the interpreter does not support bf16
yet). ``install`` widens bf16 operands of ``tl.dot`` to fp32 first. The widening is exact (a bf16 is
the top half of an fp32), and a GPU's tensor cores multiply bf16 values exactly too, so the
interpreter then computes what a bf16 ``tl.dot`` with an fp32 accumulator means. Other bf16
arithmetic in the interpreter (``a * b`` on bf16 blocks) is still wrong; the course's kernels load
bf16 tiles, multiply them with ``tl.dot`` and convert the fp32 result, which is right.
"""

from __future__ import annotations

from typing import Any

_installed = False


def widen_bf16(handle: Any) -> Any:
    """A bf16 interpreter tensor as an fp32 one with the same values; anything else unchanged."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    if handle.dtype.scalar != tl.bfloat16 or handle.data.dtype != np.uint16:
        return handle
    return TensorHandle((handle.data.astype(np.uint32) << 16).view(np.float32), tl.float32)


def install() -> None:
    """Patch the interpreter's ``tl.dot`` once; a no-op when called again."""
    global _installed
    if _installed:
        return
    from triton.runtime.interpreter import InterpreterBuilder

    create_dot = InterpreterBuilder.create_dot

    def create_dot_widened(self: Any, a: Any, b: Any, d: Any, input_precision: Any,
                           max_num_imprecise_acc: Any) -> Any:
        return create_dot(self, widen_bf16(a), widen_bf16(b), d, input_precision, max_num_imprecise_acc)

    InterpreterBuilder.create_dot = create_dot_widened
    _installed = True
