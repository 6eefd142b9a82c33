"""The kernel Nsight Compute profiles on Day 1 of Week 2: the notebook's Horner kernel, launched from a plain program.

``python -m course.days.profiling target --steps S`` calls ``run``. Each element ``x`` of the input
becomes ``y`` after ``S`` Horner steps ``y = y * x + 0.5`` (starting from ``y = x``): ``S`` fused
multiply-adds, 2 FLOPs each, per 8 bytes of DRAM traffic (one fp32 read, one write). Zero steps is
a plain copy.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from course import device

device.info()  # the device chosen (at its first use) before the kernel below is defined


@triton.jit
def horner_kernel(x_ptr, y_ptr, n, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = x
    for _ in tl.static_range(STEPS):
        y = y * x + 0.5
    tl.store(y_ptr + offsets, y, mask=mask)


def run(steps: int, n: int, launches: int) -> None:
    """Launch the kernel ``launches`` times on ``n`` elements in [-1, 1) (the first launch compiles)."""
    on = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.rand(n, device=on) * 2 - 1
    y = torch.empty_like(x)
    for _ in range(launches):
        horner_kernel[(triton.cdiv(n, 1024),)](x, y, n, STEPS=steps, BLOCK=1024, num_warps=4)
    if on == "cuda":
        torch.cuda.synchronize()
