"""What every replay of a recorded launch plan checks first, GPU or CPU, without torch.

A plan (``course.recorder.plan``) is untrusted JSON. Before anything is allocated or launched, a replay
checks its version, the inputs it was recorded for, its allocation budget, each launch's grid, and each
recorded argument against the kind its kernel's signature says (``grader.replay.gpu_replay`` on a GPU,
``grader.replay.replay_cpu`` in Triton's interpreter). A buffer here is anything with a storage: a torch tensor
or ``grader.replay.host_tensor.HostTensor``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from course.recorder.plan_format import PLAN_VERSIONS, decode_value, describe_inputs
from grader.replay import tma_replay

MAX_LAUNCHES = 64
MAX_PROGRAMS = 2**24
GRID_LIMITS = (2**31 - 1, 65535, 65535)


class Unreplayable(ValueError):
    """The plan cannot be replayed as recorded; the message says why, for the student."""


def budget(inputs: tuple[Any, ...], output_shape: tuple[int, ...]) -> int:
    """Bytes a plan may allocate: four times its inputs and an fp64 output, plus 64 MiB of scratch."""
    tensors = [t for t in inputs if hasattr(t, "untyped_storage")]
    return 4 * (sum(t.untyped_storage().nbytes() for t in tensors) + 8 * math.prod(output_shape)) + 64 * 2**20


def check_plan(plan: Any, inputs: tuple[Any, ...], max_bytes: int) -> list[dict[str, Any]]:
    """What every replay checks before it allocates anything (GPU or CPU); returns the plan's launches."""
    if not isinstance(plan, dict):
        raise Unreplayable("no launch plan was recorded for this call")
    if plan.get("problems"):
        raise Unreplayable(str(plan["problems"][0]))
    if plan.get("version", 1) not in PLAN_VERSIONS:
        raise Unreplayable(f"the plan has version {str(plan.get('version'))[:20]}, which this judge does not know")
    if plan.get("inputs") != describe_inputs(inputs):
        raise Unreplayable("the plan was recorded for other inputs than this shape's")
    allocations = plan.get("allocations") or []
    if not isinstance(allocations, list) or any(
            not isinstance(a, dict) or a.get("name") != f"alloc{i}" or type(a.get("nbytes")) is not int
            or a["nbytes"] < 0 for i, a in enumerate(allocations)):
        raise Unreplayable("the plan's allocations are malformed")
    if sum(a["nbytes"] for a in allocations) > max_bytes:
        raise Unreplayable(f"the call allocates more than {max_bytes / 2**20:.0f} MiB")
    launches = plan.get("launches") or []
    if not launches:
        raise Unreplayable("no Triton or CUDA kernel was launched by the graded function")
    if not isinstance(launches, list) or not all(isinstance(launch, dict) for launch in launches):
        raise Unreplayable("the plan's launches are malformed")
    if len(launches) > MAX_LAUNCHES:
        raise Unreplayable(f"the call launches more than {MAX_LAUNCHES} kernels")
    return launches


def check_grid(name: Any, grid: Any) -> tuple[int, int, int]:
    if (not isinstance(grid, list) or len(grid) != 3 or any(type(g) is not int or g < 1 for g in grid)
            or any(g > limit for g, limit in zip(grid, GRID_LIMITS, strict=True))
            or grid[0] * grid[1] * grid[2] > MAX_PROGRAMS):
        raise Unreplayable(f"kernel {name} has a grid of {str(grid)[:60]} programs, outside the judge's bounds")
    return grid[0], grid[1], grid[2]


def locate(buffers: dict[str, Any], where: Any) -> tuple[Any, int]:
    """The buffer a recorded pointer names and its byte offset into that buffer's storage, checked."""
    if not isinstance(where, dict) or str(where.get("buffer")) not in buffers:
        raise Unreplayable(f"a pointer names an unknown buffer: {str(where)[:80]}")
    buffer, offset = buffers[where["buffer"]], where.get("offset")
    nbytes = buffer.untyped_storage().nbytes()
    if type(offset) is not int or not 0 <= offset < max(nbytes, 1):
        raise Unreplayable(f"a pointer offset {offset!r} lies outside its buffer of {nbytes} bytes")
    return buffer, offset


def resolve_arguments(launch: dict[str, Any], pointer: Callable[[str, Any], list[Any]],
                      descriptor: Callable[[str, Any], list[Any]]) -> list[Any]:
    """Each recorded argument, checked against its kind in the signature, as ``pointer(kind, where)``,
    ``descriptor(kind, entry)`` (each a list of launch arguments: a descriptor may take several) or a scalar."""
    signature = launch.get("signature")
    recorded = launch.get("arguments") or []
    if not isinstance(signature, dict) or not isinstance(recorded, list):
        raise Unreplayable(f"kernel {launch.get('kernel')} has a malformed signature or argument list")
    kinds = [str(kind) for kind in signature.values() if kind != "constexpr"]
    if len(kinds) != len(recorded):
        raise Unreplayable(f"the arguments of kernel {launch.get('kernel')} do not match its signature")
    resolved: list[Any] = []
    for kind, argument in zip(kinds, recorded, strict=True):
        if not isinstance(argument, dict):
            raise Unreplayable("an argument is malformed")
        if kind.startswith("tensordesc") and "descriptor" in argument:
            try:
                resolved.extend(descriptor(kind, argument["descriptor"]))
            except tma_replay.DescriptorError as error:
                raise Unreplayable(f"argument {str(argument.get('name'))[:40]}: {error}") from None
        elif kind.startswith("*") and "pointer" in argument:
            resolved.extend(pointer(kind, argument["pointer"]))
        elif not kind.startswith(("*", "tensordesc")) and "scalar" in argument:
            resolved.append(decode_value(argument.get("scalar") or {}))
        else:
            raise Unreplayable(f"argument {str(argument.get('name'))[:40]} is not the {kind[:40]} its kernel takes")
    return resolved


def output_placement(buffers: dict[str, Any], description: Any, dtype: Any, shape: tuple[int, ...]
                     ) -> tuple[Any, int, list[int]]:
    """Where the plan's output lies: (its buffer, offset and strides in elements of ``dtype``), each checked. The
    output must be a buffer the call allocated, of the graded dtype and shape, and lie inside it. ``dtype``: a torch
    dtype or a ``grader.replay.host_tensor.HostDType`` (a name and an item size either way)."""
    if not isinstance(description, dict):
        raise Unreplayable("the plan names no output")
    if str(description.get("buffer", "")).startswith("in") or description.get("buffer") not in buffers:
        raise Unreplayable("the output is not a buffer the call allocated")
    if description.get("dtype") != str(dtype).removeprefix("torch.") or tuple(description.get("shape", ())) != shape:
        raise Unreplayable(f"the output is {description.get('dtype')} {description.get('shape')}, "
                           f"expected {dtype} {list(shape)}")
    buffer, itemsize = buffers[description["buffer"]], dtype.itemsize
    nbytes = buffer.untyped_storage().nbytes()
    offset, stride = description.get("offset"), description.get("stride")
    if (type(offset) is not int or offset % itemsize or nbytes % itemsize or not isinstance(stride, list)
            or len(stride) != len(shape) or any(type(s) is not int or s < 0 for s in stride)):
        raise Unreplayable("the output view is malformed")
    reach = offset // itemsize + sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) if all(shape) else 0
    if reach >= nbytes // itemsize:
        raise Unreplayable("the output view reaches past its buffer")
    return buffer, offset // itemsize, stride
