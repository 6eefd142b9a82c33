"""NumPy-backed stand-ins for the CPU tensors that Triton's interpreter takes, so the CPU replay needs no torch.

Importing torch takes about 3 s of a core, which is most of the time a replay takes (``grader.replay.replay_cpu``).
The interpreter uses only a little of a tensor: its data pointer, its dtype's name and item size, and
its storage, which it copies to the host and back (``GridExecutor._init_args_hst``). A ``HostTensor`` is
a strided view, in elements, of one ``HostStorage`` of raw bytes. Its storage is on the host already, so
the interpreter's copies are the same buffer: writes by a kernel land in it. bf16 has no NumPy type, so it
is stored as its 16-bit patterns, as the interpreter does.

The judge writes the inputs of each call (``grader.replay.replay_inputs``) as their whole storage and view; the
replay reads them back (``read``) with the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class HostDType:
    """A dtype by torch's name ("float32"); ``str()`` gives torch's spelling, which Triton's type mangling reads."""

    name: str
    numpy: np.dtype  # how its elements are stored (bf16: as uint16 bits)
    is_floating_point: bool

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    def __str__(self) -> str:
        return f"torch.{self.name}"


DTYPES = {name: HostDType(name, np.dtype(stored), floating) for name, stored, floating in (
    ("float16", np.float16, True), ("bfloat16", np.uint16, True), ("float32", np.float32, True),
    ("float64", np.float64, True), ("int8", np.int8, False), ("int16", np.int16, False),
    ("int32", np.int32, False), ("int64", np.int64, False), ("uint8", np.uint8, False), ("bool", np.bool_, False))}
BF16_NAN_BITS = 0x7FC0


class HostStorage:
    """Raw bytes on the host; the interpreter's ``storage.cpu()`` and ``copy_`` see the same buffer."""

    def __init__(self, raw: np.ndarray):
        self.raw = raw  # 1-D uint8

    def data_ptr(self) -> int:
        return int(self.raw.ctypes.data)

    def nbytes(self) -> int:
        return int(self.raw.nbytes)

    def cpu(self) -> HostStorage:
        return self

    def copy_(self, other: HostStorage) -> HostStorage:
        if other is not self:
            np.copyto(self.raw, other.raw)
        return self


class HostTensor:
    """A strided view of a ``HostStorage``: offset, shape and strides in elements of ``dtype``."""

    def __init__(self, storage: HostStorage, dtype: HostDType, offset: int, shape: tuple[int, ...],
                 stride: tuple[int, ...]):
        self._storage, self.dtype = storage, dtype
        self._offset, self.shape, self._stride = offset, tuple(shape), tuple(stride)

    @classmethod
    def empty(cls, count: int, dtype: HostDType) -> HostTensor:
        return cls(HostStorage(np.zeros(count * dtype.itemsize, dtype=np.uint8)), dtype, 0, (count,), (1,))

    def data_ptr(self) -> int:
        return self._storage.data_ptr() + self._offset * self.dtype.itemsize

    def untyped_storage(self) -> HostStorage:
        return self._storage

    def storage_offset(self) -> int:
        return self._offset

    def size(self) -> tuple[int, ...]:
        return self.shape

    def stride(self) -> tuple[int, ...]:
        return self._stride

    def element_size(self) -> int:
        return self.dtype.itemsize

    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def new_empty(self, size: int, device: str = "cpu") -> HostTensor:
        return HostTensor.empty(size, self.dtype)

    def set_(self, storage: HostStorage, offset: int, shape: tuple[int, ...], stride: tuple[int, ...]) -> HostTensor:
        self._storage, self._offset, self.shape, self._stride = storage, int(offset), tuple(shape), tuple(stride)
        return self

    def typed(self) -> np.ndarray:
        """The whole storage as elements of this dtype (bf16 as bits), from this view's byte alignment."""
        raw = self._storage.raw
        count = raw.nbytes // self.dtype.itemsize
        return raw[:count * self.dtype.itemsize].view(self.dtype.numpy)

    def values(self) -> np.ndarray:
        """This view's elements as a NumPy array sharing the storage (bf16 as bits)."""
        itemsize = self.dtype.itemsize
        return np.lib.stride_tricks.as_strided(self.typed()[self._offset:], self.shape,
                                               [s * itemsize for s in self._stride], writeable=True)


def same_values(before: HostTensor, after: HostTensor) -> bool:
    """Equal shapes, dtypes and elements, NaN equal to NaN at the same place (as ``course.recorder.plan``)."""
    if before.shape != after.shape or before.dtype != after.dtype:
        return False
    old, new = before.values(), after.values()
    if before.dtype.name == "bfloat16":
        old, new = bf16_to_float32(old), bf16_to_float32(new)
    if before.dtype.is_floating_point:
        return bool(np.all((old == new) | (np.isnan(old) & np.isnan(new))))
    return bool(np.array_equal(old, new))


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round to nearest even, as torch converts; NaN stays a quiet NaN."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(BF16_NAN_BITS), rounded)


def read(folder: Path, entry: dict[str, Any]) -> HostTensor:
    """A tensor ``grader.replay.replay_inputs`` saved, its storage read again from its file in ``folder``."""
    raw = np.load(folder / Path(str(entry["file"])).name, allow_pickle=False)
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise ValueError(f"{entry['file']} is not a storage of raw bytes")
    return HostTensor(HostStorage(raw), DTYPES[str(entry["dtype"])], int(entry["offset"]),
                      tuple(int(n) for n in entry["shape"]), tuple(int(s) for s in entry["stride"]))
