"""CUDA C kernels in a notebook: compiled at run time by NVRTC (through CuPy), launched on torch's stream.

::

    SOURCE = r'''
    extern "C" __global__ void scale(const float* x, float* out, int n, float factor) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = factor * x[i];
    }
    '''
    module = course.cuda.compile(SOURCE)
    scale = module.get_function("scale")
    scale((course.cuda.cdiv(n, 256),), (256,), (x, out, np.int32(n), np.float32(3.0)))

Kernels are ``extern "C" __global__`` functions, looked up by name. Arguments are torch tensors on the
GPU (each passed as a pointer to its first element) and NumPy scalars of a fixed width (``np.int32``,
``np.float32``...): a Python int or float is refused, since C must know its width. The launch goes
to torch's current stream, so torch's timing and synchronisation see it.

NVRTC compiles a module in well under a second, where a ``torch.utils.cpp_extension`` build takes
half a minute. ``compile`` caches each (source, options) in this process.

While ``course.recorder.plan.record_call`` runs, each launch is recorded as data: a digest of the source and
the options, the kernel's name, grid, block, dynamic shared memory, and each argument as a pointer
into a known buffer or a typed scalar. The grader's builder compiles the source again from the
notebook's text (it must be a string constant at the top level of a cell, ``SOURCE = r'''...'''``)
and the judge replays the launches; a source built at run time cannot be rebuilt, and is refused.

Without a GPU (or without CuPy) everything here imports and ``compile`` still checks its options, but
a launch raises ``NoGPU``: CUDA C has no CPU interpreter, so its exercises wait for a GPU run.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PROGRAM_NAME = "notebook_kernel.cu"
BLOCK_LIMITS = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024
GRID_LIMITS = (2**31 - 1, 65535, 65535)
DEFAULT_SHARED_BYTES = 48 * 1024  # dynamic shared memory above this needs the kernel's opt-in (set here)
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_CUDA_DEV_ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97

# NVRTC options a notebook may pass (the architecture is the course's to choose). Anything else, such as
# an include path, is refused: the grader's builder must compile exactly what the notebook compiled.
_OPTION = re.compile(
    r"^(?:--?use_fast_math|--?std=c\+\+(?:11|14|17|20)|--?(?:fmad|ftz|prec-div|prec-sqrt)=(?:true|false)"
    r"|--?maxrregcount=\d{1,3}|-lineinfo|--generate-line-info|--?extra-device-vectorization|--?restrict"
    r"|(?:-D|--define-macro=)[A-Za-z_]\w{0,63}(?:=[\w.+-]{0,64})?)$")
MAX_OPTIONS = 32

SCALAR_TYPES: dict[str, type] = {
    "int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32, "int64": ctypes.c_int64,
    "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64,
    "float32": ctypes.c_float, "float64": ctypes.c_double,
}


class NoGPU(RuntimeError):
    """A CUDA C kernel was launched where there is no GPU (or no CuPy): it cannot run here."""


def cdiv(a: int, b: int) -> int:
    """Ceiling division: how many blocks of ``b`` cover ``a``."""
    return -(-int(a) // int(b))


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def module_key(source_sha256: str, options: Sequence[str]) -> str:
    """One compiled module: its source's digest and its options (what the builder and the judge key on)."""
    text = json.dumps([str(source_sha256), [str(o) for o in options]])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def check_options(options: Any) -> tuple[str, ...]:
    """The options as a tuple of strings; raises ValueError for one NVRTC may not be given here."""
    if isinstance(options, str) or not isinstance(options, Sequence) or len(options) > MAX_OPTIONS:
        raise ValueError(f"options must be a tuple of at most {MAX_OPTIONS} strings, e.g. ('--use_fast_math',)")
    for option in options:
        if type(option) is not str or not _OPTION.match(option):
            raise ValueError(f"NVRTC option {option!r} is not allowed here (allowed: --use_fast_math, --std=c++17, "
                             "--fmad=, --ftz=, --prec-div=, --prec-sqrt=, --maxrregcount=N, -lineinfo, "
                             "--extra-device-vectorization, --restrict, -DNAME=VALUE)")
    return tuple(options)


def encode_scalar(value: Any) -> dict[str, Any]:
    """A NumPy scalar as tagged JSON; raises TypeError for anything C cannot be sure of the width of."""
    if isinstance(value, np.generic) and value.dtype.name in SCALAR_TYPES:
        name = value.dtype.name
        return {"type": name, "value": repr(float(value)) if name.startswith("float") else int(value)}
    hint = ("np.int32(...) or np.float32(...)" if type(value) in (int, float, bool)
            else "a torch tensor on the GPU or a NumPy scalar such as np.int32(...)")
    raise TypeError(f"a CUDA kernel argument of type {type(value).__name__} is not accepted: pass {hint}")


def decode_scalar(data: Any) -> tuple[str, int | float]:
    """(type, value) of an encoded scalar, checked to fit its type; raises ValueError otherwise."""
    if not isinstance(data, dict) or data.get("type") not in SCALAR_TYPES:
        raise ValueError(f"a scalar argument is malformed: {str(data)[:80]}")
    name, value = data["type"], data.get("value")
    if name.startswith("float"):
        if not isinstance(value, str):
            raise ValueError("a float argument is malformed")
        return name, float(value)
    info = np.iinfo(name)
    if type(value) is not int or not info.min <= value <= info.max:
        raise ValueError(f"an {name} argument holds {str(value)[:40]}, which does not fit")
    return name, value


@dataclass
class Packed:
    """Kernel parameters laid out for cuLaunchKernel: an array of pointers to each value."""

    values: list[Any]
    pointers: Any

    @property
    def address(self) -> int:
        return ctypes.addressof(self.pointers) if self.values else 0


def pack(arguments: Sequence[tuple[str, int | float]]) -> Packed:
    """Pack ("pointer", address) and (scalar type, value) pairs."""
    values = [ctypes.c_uint64(int(v)) if kind == "pointer" else SCALAR_TYPES[kind](v) for kind, v in arguments]
    pointers = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
    return Packed(values, pointers)


def dims(value: Any, what: str) -> tuple[int, int, int]:
    """A grid or block as three positive ints; raises ValueError otherwise."""
    parts = (value,) if isinstance(value, int | np.integer) else value
    if not isinstance(parts, tuple | list) or not 1 <= len(parts) <= 3:
        raise ValueError(f"the {what} must be an int or a tuple of 1 to 3 ints, not {str(value)[:60]}")
    out = []
    for part in parts:
        if isinstance(part, bool) or not isinstance(part, int | np.integer) or int(part) < 1:
            raise ValueError(f"the {what} {tuple(parts)} must hold positive ints")
        out.append(int(part))
    return tuple((*out, 1, 1)[:3])  # type: ignore[return-value]


def launch_problem(grid: Any, block: Any, shared_mem: Any, max_shared: int) -> str | None:
    """Why a launch of this shape is outside CUDA's limits (or the judge's), or None."""
    try:
        grid, block = dims(grid, "grid"), dims(block, "block")
    except ValueError as error:
        return str(error)
    if any(g > limit for g, limit in zip(grid, GRID_LIMITS, strict=True)):
        return f"the grid {grid} exceeds CUDA's limits {GRID_LIMITS}"
    if any(b > limit for b, limit in zip(block, BLOCK_LIMITS, strict=True)) or \
            block[0] * block[1] * block[2] > MAX_THREADS_PER_BLOCK:
        return f"the block {block} has more than {MAX_THREADS_PER_BLOCK} threads or exceeds {BLOCK_LIMITS}"
    if isinstance(shared_mem, bool) or not isinstance(shared_mem, int | np.integer) or \
            not 0 <= int(shared_mem) <= max_shared:
        return f"dynamic shared memory of {shared_mem!r} bytes is outside 0 to {max_shared}"
    return None


# ----------------------------------------------------------------------------------------------------
# The GPU side (CuPy's NVRTC and driver bindings), imported only when used.

def _cupy() -> Any:
    try:
        import cupy
    except ImportError as error:
        raise NoGPU("CUDA C kernels need CuPy (cupy-cuda12x or cupy-cuda13x, as torch's CUDA) and a GPU") from error
    return cupy


def available() -> bool:
    """True where a CUDA C kernel can run: the course uses a GPU and CuPy imports."""
    from course import device

    if not device.info().has_gpu:
        return False
    try:
        _cupy()
    except NoGPU:
        return False
    return True


def nvrtc_compile(source: str, options: Sequence[str], arch: int) -> tuple[bytes, str]:
    """Compile with NVRTC for ``sm_<arch>``: (cubin, "cubin"), or (PTX, "ptx") where NVRTC cannot emit it.

    Raises ``CompileError`` with NVRTC's log for a source that does not compile.
    """
    nvrtc = _cupy().cuda.nvrtc
    try:
        native = arch in nvrtc.getSupportedArchs()
    except Exception:  # an NVRTC too old to say: PTX, which the driver compiles for any newer GPU
        native = False
    target = f"--gpu-architecture={'sm' if native else 'compute'}_{arch}"
    program = nvrtc.createProgram(source, PROGRAM_NAME, (), ())
    try:
        try:
            nvrtc.compileProgram(program, [*options, target])
        except nvrtc.NVRTCError as error:
            raise CompileError(f"{error}\n{nvrtc.getProgramLog(program).strip()}") from None
        image = nvrtc.getCUBIN(program) if native else nvrtc.getPTX(program)
    finally:
        nvrtc.destroyProgram(program)
    return image, "cubin" if native else "ptx"


class CompileError(RuntimeError):
    """NVRTC refused the source; the message holds its log."""


def load_image(image: bytes) -> Any:
    """A loaded module (cubin or PTX) in the current CUDA context (torch's), kept alive by the returned object."""
    module = _cupy().cuda.function.Module()
    module.load(bytes(image))
    return module


_max_shared: dict[int, int] = {}


def max_shared_bytes() -> int:
    """The most dynamic shared memory one block may ask for on this GPU (with the opt-in)."""
    runtime = _cupy().cuda.runtime
    device = runtime.getDevice()
    if device not in _max_shared:
        _max_shared[device] = int(runtime.deviceGetAttribute(_CUDA_DEV_ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device))
    return _max_shared[device]


@dataclass
class Function:
    """One kernel of a loaded module."""

    module: Any
    name: str
    pointer: int
    shared_opt_in: int = DEFAULT_SHARED_BYTES

    @classmethod
    def find(cls, module: Any, name: str) -> Function:
        try:
            function = module.get_function(name)
        except Exception as error:  # CUDA_ERROR_NOT_FOUND
            raise KeyError(f'the module has no kernel named {name!r} (is it declared extern "C" __global__?)') \
                from error
        return cls(module, name, int(function.ptr))

    def launch(self, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
               packed: Packed) -> None:
        """Launch on torch's current stream."""
        import torch

        driver = _cupy().cuda.driver
        if shared_mem > self.shared_opt_in:
            driver.funcSetAttribute(self.pointer, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_mem)
            self.shared_opt_in = shared_mem
        stream = torch.cuda.current_stream().cuda_stream
        driver.launchKernel(self.pointer, *grid, *block, shared_mem, stream, packed.address, 0)


@dataclass
class Replay:
    """What the judge launches for one recorded CUDA launch: ``replay[grid](packed)``."""

    function: Function
    block: tuple[int, int, int]
    shared_mem: int

    def __getitem__(self, grid: tuple[int, int, int]) -> Any:
        return lambda packed: self.function.launch(grid, self.block, self.shared_mem, packed)


_cache_lock = threading.Lock()
_images: dict[tuple[str, int], tuple[bytes, str, float]] = {}  # (module key, arch) -> image, kind, seconds
_loaded: dict[tuple[str, int], Any] = {}  # (module key, device) -> loaded module


@dataclass
class Module:
    """CUDA C source compiled by ``compile``; ``get_function(name)`` gives a kernel to launch."""

    source: str
    options: tuple[str, ...]
    source_sha256: str
    key: str
    compile_seconds: float = 0.0  # NVRTC's time for this module (0 when it came from the cache)
    kind: str = ""  # "cubin" or "ptx" once compiled; "" without a GPU
    _functions: dict[str, Function] = field(default_factory=dict, repr=False)

    def get_function(self, name: str) -> Kernel:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"kernel name {name!r} is not a C identifier")
        if available():
            self._function(name)  # a missing kernel fails here, where its name is written
        return Kernel(self, name)

    def _function(self, name: str) -> Function:
        if name not in self._functions:
            import torch

            loaded = _loaded.get((self.key, torch.cuda.current_device()))
            if loaded is None:
                raise NoGPU("the module was compiled without a GPU; run compile() again on a GPU")
            self._functions[name] = Function.find(loaded, name)
        return self._functions[name]


def compile(source: str, options: Sequence[str] = ()) -> Module:  # noqa: A001 (the course's verb for it)
    """Compile CUDA C with NVRTC for this GPU (cached per source and options); see the module docstring.

    Without a GPU the options are still checked and a Module is returned, whose kernels raise
    ``NoGPU`` when launched.
    """
    if not isinstance(source, str) or not source.strip():
        raise ValueError("the CUDA source must be a non-empty string")
    options = check_options(options)
    digest = source_digest(source)
    module = Module(source, options, digest, module_key(digest, options))
    if not available():
        return module
    import torch

    from course import record

    device = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(device)
    arch = major * 10 + minor
    with _cache_lock:
        cached = _images.get((module.key, arch))
        if cached is None:
            started = time.perf_counter()
            image, kind = nvrtc_compile(source, options, arch)
            seconds = time.perf_counter() - started
            cached = _images[(module.key, arch)] = (image, kind, seconds)
            module.compile_seconds = seconds
            record.add_compile_time(seconds)
        if (module.key, device) not in _loaded:
            _loaded[(module.key, device)] = load_image(cached[0])
    module.kind = cached[1]
    return module


@dataclass
class Kernel:
    """One ``extern "C" __global__`` function of a Module: ``kernel(grid, block, args, shared_mem=0)``."""

    module: Module
    name: str

    def __call__(self, grid: Any, block: Any, args: Sequence[Any], shared_mem: int = 0) -> None:
        grid3, block3 = dims(grid, "grid"), dims(block, "block")
        if not isinstance(args, tuple | list):
            raise TypeError("args must be a tuple of the kernel's arguments")
        if not available():
            raise NoGPU(f"CUDA C kernel {self.name} needs a GPU: without one it cannot run (no interpreter "
                        "exists for CUDA C); its checks and grade wait for a GPU run")
        problem = launch_problem(grid3, block3, shared_mem, max_shared_bytes())
        if problem:
            raise ValueError(f"kernel {self.name}: {problem}")
        arguments = [_argument(value, i, self.name) for i, value in enumerate(args)]
        function = self.module._function(self.name)
        from course import guard
        from course.recorder import plan
        recording = plan.active()
        if recording is not None and not recording.in_launch:
            _record(recording, self, grid3, block3, int(shared_mem), args, arguments)
        with guard._LaunchScope(self.name):  # counted as a kernel launch by a check's guard
            function.launch(grid3, block3, int(shared_mem), pack(arguments))


def _argument(value: Any, index: int, kernel: str) -> tuple[str, int | float]:
    import torch

    if isinstance(value, torch.Tensor):
        if not value.is_cuda:
            raise ValueError(f"argument {index} of kernel {kernel} is a tensor on {value.device}, not on the GPU")
        return "pointer", value.data_ptr()
    try:
        encoded = encode_scalar(value)
    except TypeError as error:
        raise TypeError(f"argument {index} of kernel {kernel}: {error}") from None
    return decode_scalar(encoded)


def _record(recording: Any, kernel: Kernel, grid: tuple[int, ...], block: tuple[int, ...], shared_mem: int,
            args: Sequence[Any], arguments: list[tuple[str, int | float]]) -> None:
    """Add one launch to the plan ``course.recorder.plan.record_call`` is recording."""
    import torch

    encoded = []
    for i, (value, (kind, number)) in enumerate(zip(args, arguments, strict=True)):
        if kind == "pointer":
            where = recording.locate(int(number))
            if where is None:
                recording.problem(f"argument {i} of kernel {kernel.name} points to memory that is neither an "
                                  "input nor allocated in the call")
                return
            encoded.append({"pointer": where})
        else:
            encoded.append({"scalar": encode_scalar(value)})
    if torch.cuda.current_stream().cuda_stream != recording.stream:
        recording.problem(f"kernel {kernel.name} was launched on another CUDA stream than the caller's")
    recording.launches.append({
        "kernel": kernel.name,
        "cuda": {"source_sha256": kernel.module.source_sha256, "options": list(kernel.module.options),
                 "module": kernel.module.key},
        "grid": list(grid), "block": list(block), "shared_mem": shared_mem, "arguments": encoded,
    })
