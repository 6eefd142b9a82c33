"""The judge's side of tensor descriptors (TMA) and of kernels that need global scratch memory.

On a GPU with TMA (compute capability 9.0 or newer) a host-side descriptor reaches a compiled
kernel as a 128-byte ``CUtensorMap`` followed by the descriptor's shape (i32) and strides (i64);
Triton's JIT launcher builds the map from a ``TensorDescriptor`` at every launch. A kernel the
judge compiles from TTGIR has no JIT launcher, so ``adapt`` reads each descriptor parameter's
layout (swizzle, element type, box) from the TTGIR itself and lets the launcher take a ready map,
and ``descriptor_arguments`` builds that map, once per prepared call, over the judge's own buffer
after checking that the whole view lies inside it (``course.recorder.descriptors.view_problem``). Nothing
about the layout is taken from the plan. On an older GPU Triton compiles descriptors into pointer
code, and the same descriptor reaches the kernel as its base pointer, shape, strides and padding
flag, then shape and strides again: ``descriptor_arguments`` passes that form when given no layout.

A kernel that makes descriptors on the device (``tl.make_tensor_descriptor``) writes them to
global scratch memory, which Triton asks an allocator for at launch; ``Scratch`` hands out one
buffer the judge sized and allocated in advance, and refuses anything larger.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from course.recorder import descriptors

if TYPE_CHECKING:
    import torch

MAX_SCRATCH_BYTES = 256 * 2**20
_IR_DESCRIPTOR = "!tt.tensordesc"
_HOST_PARAMETER = "nvTmaDesc"  # the launcher's name for a CUtensorMap passed by value


class DescriptorError(ValueError):
    """A descriptor argument the judge will not replay; the message says why."""


def adapt(compiled: Any, ttgir_path: str) -> list[dict[str, Any]]:
    """Layouts of the kernel's descriptor parameters, in order; makes its launcher take ready maps.

    Call before the kernel's first launch (Triton builds the launcher then, from ``src.signature``).
    """
    signature = compiled.src.signature
    positions = [i for i, kind in signature.items() if str(kind).startswith(_IR_DESCRIPTOR)]
    if not positions:
        return []
    from triton._C.libtriton import ir
    from triton.compiler.compiler import make_backend

    context = ir.context()
    ir.load_dialects(context)
    make_backend(compiled.metadata.target).load_dialects(context)
    layouts = ir.parse_mlir_module(ttgir_path, context).get_tensordesc_metadata()
    if len(layouts) != len(positions) or any(not isinstance(m, dict) for m in layouts):
        raise DescriptorError("its tensor descriptors were not lowered to TMA (a GPU of compute capability 9.0 "
                              "or newer runs them)")
    if any(m.get("fp4_padded") for m in layouts):
        raise DescriptorError("it takes a padded fp4 tensor descriptor, which the judge does not replay")
    for position in positions:
        signature[position] = _HOST_PARAMETER
    return layouts


def _fill_tma(address: int, layout: dict[str, Any], shape: list[int], strides: list[int], padding: str) -> Any:
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST
    from triton.runtime.driver import driver

    return driver.active.utils.fill_tma_descriptor(
        address, layout["swizzle"], layout["elem_size"], TMA_DTYPE_DEVICE_TO_HOST[layout["elem_type"]],
        layout["block_size"], shape, strides, 1 if padding == "nan" else 0)


def descriptor_arguments(buffers: dict[str, torch.Tensor], entry: Any, kind: str, layout: dict[str, Any] | None,
                         fill: Callable[..., Any] | None = None) -> list[Any]:
    """The launch arguments of one descriptor over the judge's buffer, in the form its build takes.

    ``entry`` is the plan's untrusted description; ``kind`` the recorded signature entry
    (``tensordesc<fp16[64, 64]>``), which the judge's build was compiled from; ``layout`` what that
    build's TTGIR says about the parameter (TMA: a map, then shape and strides), or None for a build
    without TMA (base address, shape, strides, the NaN-padding flag, then shape and strides again).
    """
    parsed = descriptors.parse_signature(kind)
    if parsed is None:
        raise DescriptorError(f"the signature entry {str(kind)[:60]!r} is not a tensor descriptor the judge knows")
    dtype, block = parsed
    element_bytes = descriptors.ELEMENT_BYTES[dtype]
    if layout is not None and layout.get("elem_size") != element_bytes:
        raise DescriptorError(f"a {dtype} tensor descriptor was built with {layout.get('elem_size')}-byte elements")
    if not isinstance(entry, dict) or not isinstance(entry.get("pointer"), dict):
        raise DescriptorError("a tensor descriptor is malformed")
    shape, strides, padding = entry.get("shape"), entry.get("strides"), entry.get("padding")
    if entry.get("block_shape") != block:
        raise DescriptorError(f"a tensor descriptor's block {str(entry.get('block_shape'))[:40]} is not the "
                              f"{block} its kernel was compiled for")
    if padding not in descriptors.PADDINGS:
        raise DescriptorError(f"a tensor descriptor has padding {str(padding)[:20]!r}")
    if not isinstance(shape, list) or len(shape) != len(block):
        raise DescriptorError(f"a tensor descriptor of rank {len(block)} has the shape {str(shape)[:60]}")
    name, offset = str(entry["pointer"].get("buffer")), entry["pointer"].get("offset")
    if name not in buffers:
        raise DescriptorError(f"a tensor descriptor names an unknown buffer {name[:40]!r}")
    storage = buffers[name].untyped_storage()
    problem = descriptors.view_problem(offset, storage.nbytes(), shape, strides, element_bytes)
    if problem:
        raise DescriptorError(f"a tensor descriptor over {name} {problem}")
    if layout is None:
        return [storage.data_ptr() + offset, *shape, *strides, padding == "nan", *shape, *strides]
    try:
        tensor_map = (fill or _fill_tma)(storage.data_ptr() + offset, layout, shape, strides, padding)
    except (RuntimeError, TypeError, ValueError, OverflowError) as error:  # the driver refused the layout
        raise DescriptorError(f"the driver refused a tensor descriptor: {str(error)[:200]}") from error
    return [tensor_map, *shape, *strides]


def scratch_bytes(compiled: Any, grid: tuple[int, int, int]) -> int:
    """Global scratch one launch of ``compiled`` on ``grid`` asks for (0 for most kernels)."""
    per_program = int(getattr(compiled.metadata, "global_scratch_size", 0) or 0)
    num_ctas = int(getattr(compiled.metadata, "num_ctas", 1) or 1)
    return per_program * num_ctas * grid[0] * grid[1] * grid[2]


class Scratch:
    """Triton's allocator for one launch: hands out the buffer the judge prepared, nothing bigger."""

    def __init__(self, buffer: torch.Tensor):
        self.buffer = buffer

    def __call__(self, size: int, alignment: int, stream: Any) -> torch.Tensor:
        if size > self.buffer.numel() or self.buffer.data_ptr() % max(int(alignment), 1):
            raise DescriptorError(f"the kernel asked for {size} bytes of scratch, more than the "
                                  f"{self.buffer.numel()} its launch was given")
        return self.buffer
