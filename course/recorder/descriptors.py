"""Host-side Triton tensor descriptors (TMA, Hopper) in a launch plan: described as data, checked against memory.

A kernel argument made with ``triton.tools.tensor_descriptor.TensorDescriptor`` names a base
address, a shape and strides (in elements) and the block (box) one load or store moves. On a GPU
with TMA the copy engine clips every box at the descriptor's shape, so it touches exactly the
elements ``base + sum(i_d * stride_d)`` with ``0 <= i_d < shape_d``: a descriptor is safe to replay
when that view lies inside one buffer. The recorder (``course.recorder.plan``) and the judge's replay
(``grader.replay.gpu_replay``) apply the same test, ``view_problem``; the judge trusts none of what the
recorder says and checks again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

MAX_RANK = 5  # TMA's limit
ALIGN = 16  # bytes: the base address and every stride but the last (TMA's rule)
MAX_DIM = 2**31 - 1  # shapes reach the kernel as i32
MAX_STRIDE_BYTES = 2**40  # TMA's limit on a stride
PADDINGS = ("zero", "nan")
# Element sizes of the dtypes a descriptor may carry (Triton's names, as in the signature).
ELEMENT_BYTES = {"fp8e4nv": 1, "fp8e5": 1, "i8": 1, "u8": 1, "fp16": 2, "bf16": 2, "i16": 2, "u16": 2,
                 "fp32": 4, "i32": 4, "u32": 4, "fp64": 8, "i64": 8, "u64": 8}
_SIGNATURE = re.compile(r"^tensordesc<(\w+)\[(\d+(?:, \d+)*)\]>$")


def is_descriptor(value: Any) -> bool:
    from triton.tools.tensor_descriptor import TensorDescriptor

    return isinstance(value, TensorDescriptor)


def parse_signature(kind: str) -> tuple[str, list[int]] | None:
    """``"tensordesc<fp16[64, 32]>"`` -> ``("fp16", [64, 32])``; None for anything else."""
    match = _SIGNATURE.match(kind) if isinstance(kind, str) else None
    if match is None or match.group(1) not in ELEMENT_BYTES:
        return None
    return match.group(1), [int(n) for n in match.group(2).split(", ")]


def _plain_ints(values: Any) -> bool:
    return isinstance(values, list) and all(type(v) is int for v in values)


def view_problem(offset: Any, nbytes: int, shape: Any, strides: Any, element_bytes: int) -> str | None:
    """Why a descriptor at byte ``offset`` of an ``nbytes`` buffer does not fit it (None when it does).

    Every argument may come from untrusted JSON: types are checked before any arithmetic.
    """
    if type(offset) is not int or not _plain_ints(shape) or not _plain_ints(strides):
        return "is malformed (offset, shape and strides must be integers)"
    if not 1 <= len(shape) <= MAX_RANK or len(strides) != len(shape):
        return f"has rank {len(shape)} with {len(strides)} strides (TMA takes ranks 1 to {MAX_RANK})"
    if any(not 1 <= n <= MAX_DIM for n in shape):
        return f"has a shape {shape} with an empty or oversized dimension"
    if strides[-1] != 1:
        return f"has strides {strides}: the last dimension must be contiguous (stride 1)"
    if any(s < 1 or (s * element_bytes) % ALIGN or s * element_bytes >= MAX_STRIDE_BYTES for s in strides[:-1]):
        return (f"has strides {strides}: TMA needs every stride but the last to be a positive multiple of "
                f"{ALIGN} bytes ({ALIGN // element_bytes} elements of {element_bytes} bytes)")
    if offset < 0 or offset % ALIGN:
        return f"starts {offset} bytes into its buffer: TMA needs a {ALIGN}-byte aligned base"
    end = offset + element_bytes * (1 + sum((n - 1) * s for n, s in zip(shape, strides, strict=True)))
    if end > nbytes:
        return (f"with shape {shape} and strides {strides} reaches byte {end} of a buffer of {nbytes} bytes: "
                "its view must lie inside the memory it points into")
    return None


def describe(value: Any, locate: Callable[[int], tuple[dict[str, Any], int] | None]) -> tuple[dict[str, Any] | None,
                                                                                            str | None]:
    """A host-side descriptor as plan data, or why it cannot be replayed.

    ``locate(address)`` returns ``({"buffer": name, "offset": bytes}, buffer_nbytes)`` for an address
    inside an input or an allocation of the recorded call, or None.
    """
    base = value.base
    if not hasattr(base, "data_ptr") or not hasattr(base, "element_size"):
        return None, "is built on something that is not a torch tensor"
    found = locate(base.data_ptr())
    if found is None:
        return None, "points to memory that is neither an input nor allocated in the call"
    where, nbytes = found
    try:
        shape, strides = [int(n) for n in value.shape], [int(s) for s in value.strides]
        block = [int(b) for b in value.block_shape]
    except (TypeError, ValueError):
        return None, "has a shape, strides or block shape that are not integers"
    problem = view_problem(where["offset"], nbytes, shape, strides, base.element_size())
    if problem:
        return None, problem
    padding = value.padding if value.padding in PADDINGS else None
    if padding is None:
        return None, f"has padding {value.padding!r} (only {PADDINGS} exist)"
    return {"pointer": where, "shape": shape, "strides": strides, "block_shape": block, "padding": padding}, None
