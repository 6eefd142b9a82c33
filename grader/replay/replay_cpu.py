"""Replay recorded launch plans on a CPU, through Triton's interpreter, in a sandbox of their own.

A CPU judge compiles nothing, so it cannot replay a plan itself as the GPU judge does
(``grader.replay.gpu_replay``). ``python -P -m grader.replay.replay_cpu REQUEST.json`` runs in a fresh sandbox
(``grader.run.execute.replay_cpu``) that holds only the sanitized notebook, the plans its run exported
and the inputs the judge made from its secret seeds (``grader.replay.replay_inputs``): it defines nothing of
the notebook but its top-level ``@triton.jit`` kernels, as the builder does (``grader.kernel_build.build_kernels``),
checks each plan as the GPU replay does (``grader.replay.gpu_replay``: version, inputs, allocation budget,
grid, every argument against its kind, the output view), launches its kernels in the interpreter
and saves each output as ``.npy`` (bf16 as its bits). The judge (``grader.judge.verdict.judge_cpu``)
compares them with the reference outside; nothing the notebook's own process did decides a verdict.

An interpreted launch (``course.recorder.plan``) has no compiled kernel to compare with the build, and
needs none: the kernel replayed is the one the notebook's source defines under that name. A
pointer becomes a 1-D view of the judge's buffer at the recorded byte offset, of the dtype the
signature says; a host-side tensor descriptor a ``TensorDescriptor`` over such a view, once its
whole view is checked to lie inside the buffer (``grader.replay.tma_replay``). It imports no torch (3 s of
a core, most of a replay): its buffers are NumPy's (``grader.replay.host_tensor``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from course.recorder.plan_format import BF16_BITS, decode_value
from grader.replay.host_tensor import DTYPES, HostDType, HostTensor, float32_to_bf16, read, same_values
from grader.replay.plan_checks import (
    Unreplayable,
    budget,
    check_grid,
    check_plan,
    locate,
    output_placement,
    resolve_arguments,
)

# A kernel call: (interpreted kernel, grid, keyword arguments).
Launch = tuple[Any, tuple[int, int, int], dict[str, Any]]


def _element_dtypes() -> dict[str, HostDType]:
    from triton._utils import canonicalize_dtype

    return {canonicalize_dtype(name): dtype for name, dtype in DTYPES.items()}


def _view(buffers: dict[str, HostTensor], where: Any, element: str) -> HostTensor:
    """The judge's buffer seen from a recorded pointer, as the ``element`` type (Triton's name) its kernel takes."""
    dtype = _element_dtypes().get(element)
    if dtype is None:
        raise Unreplayable(f"a pointer to {element[:20]!r} elements is not supported")
    buffer, offset = locate(buffers, where)
    count = (buffer.untyped_storage().nbytes() - offset) // dtype.itemsize
    if offset % dtype.itemsize or count < 1:
        raise Unreplayable(f"a pointer at byte {offset} of {where.get('buffer')} is not at a whole {element} element")
    return HostTensor(buffer.untyped_storage(), dtype, offset // dtype.itemsize, (count,), (1,))


def _descriptor(buffers: dict[str, HostTensor], kind: str, entry: Any) -> list[Any]:
    from triton.tools.tensor_descriptor import TensorDescriptor

    from course.recorder import descriptors
    from grader.replay import tma_replay

    tma_replay.descriptor_arguments(buffers, entry, kind, None)  # its checks (the pointer form it returns is a GPU's)
    element, block = descriptors.parse_signature(kind)
    base = _view(buffers, entry["pointer"], element)
    return [TensorDescriptor(base, entry["shape"], entry["strides"], block, entry["padding"])]


def _allocate(entry: dict[str, Any]) -> HostTensor:
    """One allocation of a checked plan, initialised as the GPU replay's (``grader.replay.gpu_replay``): zeros, a value,
    or else NaN (-1 for integers)."""
    dtype = DTYPES.get(str(entry.get("dtype")))
    if dtype is None:
        raise Unreplayable(f"an allocation of dtype {entry.get('dtype')!r} is not supported")
    buffer = HostTensor.empty(-(-int(entry["nbytes"]) // dtype.itemsize), dtype)
    values, init = buffer.values(), entry.get("init")
    if init == "zeros":
        return buffer
    value = entry.get("value") if init == "full" and isinstance(entry.get("value"), int | float) else None
    if value is None:
        value = float("nan") if dtype.is_floating_point else -1
    if dtype.name == "bfloat16":
        values[:] = float32_to_bf16(np.array([value], dtype=np.float32))[0]
    else:
        values[:] = np.array(value).astype(dtype.numpy)
    return buffer


def _constexprs(launch: dict[str, Any], names: list[str], signature: dict[str, Any]) -> dict[str, Any]:
    """The recorded value of each parameter the signature calls constexpr (each exactly once), by name."""
    recorded = launch.get("constexprs")
    wanted = {i for i, name in enumerate(names) if signature[name] == "constexpr"}
    found: dict[int, Any] = {}
    for entry in recorded if isinstance(recorded, list) else [None]:
        path = entry[0] if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], dict) else None
        if not (isinstance(path, list) and len(path) == 1 and type(path[0]) is int and path[0] in wanted
                and path[0] not in found):
            raise Unreplayable(f"the constexprs of kernel {launch.get('kernel')} do not match its signature")
        found[path[0]] = decode_value(entry[1])
    if len(found) != len(wanted):
        raise Unreplayable(f"the constexprs of kernel {launch.get('kernel')} do not match its signature")
    return {names[i]: value for i, value in found.items()}


def prepare(plan: Any, inputs: tuple[Any, ...], kernels: dict[str, Any], refused: dict[str, str],
            output_dtype: HostDType, output_shape: tuple[int, ...]) -> tuple[list[Launch], HostTensor]:
    """Check ``plan`` and set up one replay of it on ``inputs``; raises Unreplayable with the reason."""
    launches = check_plan(plan, inputs, budget(inputs, output_shape))
    buffers: dict[str, HostTensor] = {f"in{i}": t for i, t in enumerate(inputs) if isinstance(t, HostTensor)}
    for entry in plan.get("allocations") or []:
        buffers[entry["name"]] = _allocate(entry)
    prepared = []
    for launch in launches:
        name = launch.get("kernel")
        if not launch.get("interpreted"):
            raise Unreplayable(f"kernel {str(name)[:60]} was not launched through Triton's interpreter (a CUDA C "
                               "kernel runs only on a GPU)")
        if name in refused:
            raise Unreplayable(f"kernel {name} cannot be built: {refused[name]}")
        if name not in kernels:
            raise Unreplayable(f"kernel {str(name)[:60]} is not a top-level @triton.jit function of the notebook")
        kernel = kernels[name]
        signature = launch.get("signature")
        if not isinstance(signature, dict) or list(signature) != kernel.arg_names:
            raise Unreplayable(f"the recorded parameters of kernel {name} are not those of its definition")
        grid = check_grid(name, launch.get("grid"))
        arguments = resolve_arguments(launch, lambda kind, where: [_view(buffers, where, kind[1:])],
                                      lambda kind, entry: _descriptor(buffers, kind, entry))
        names = [p for p, kind in signature.items() if kind != "constexpr"]
        values = dict(zip(names, arguments, strict=True)) | _constexprs(launch, kernel.arg_names, signature)
        prepared.append((kernel, grid, values))
    buffer, offset, stride = output_placement(buffers, plan.get("output"), output_dtype, output_shape)
    return prepared, HostTensor(buffer.untyped_storage(), output_dtype, offset, output_shape, tuple(stride))


def replay(prepared: list[Launch]) -> None:
    for kernel, grid, values in prepared:
        kernel[grid](**values)


def _text(source: str | list[str]) -> str:
    return "".join(source) if isinstance(source, list) else source


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Replay every call of the request; writes each output into ``out/outputs``, returns what became of each."""
    from grader.kernel_build import build_kernels

    out = Path(request["out"])
    (out / "outputs").mkdir(parents=True, exist_ok=True)
    # The sanitized notebook (nbformat v4, written by the grader) read as JSON: nbformat takes 2 s to import.
    notebook = json.loads(Path(request["notebook"]).read_text(encoding="utf-8"))
    cells = [_text(c.get("source", "")) for c in notebook["cells"] if c.get("cell_type") == "code"]
    kernels, refused = build_kernels.kernel_definitions(cells, out / "src", interpret=True)
    exported = json.loads(Path(request["export"]).read_text(encoding="utf-8"))
    replayed: dict[str, Any] = {}
    for job in request["kernels"]:
        spec_id = str(job["spec"])
        kernels_of = exported.get("kernels") if isinstance(exported, dict) else None
        entry = kernels_of.get(spec_id) if isinstance(kernels_of, dict) else None
        calls = entry.get("calls") if isinstance(entry, dict) and isinstance(entry.get("calls"), dict) else {}
        results = replayed.setdefault(spec_id, {})
        for call in job["calls"]:
            recorded = calls.get(call["key"])
            if isinstance(recorded, dict):  # else the judge says why (nothing was recorded)
                results[call["key"]] = _replay_call(spec_id, call, recorded.get("plan"), kernels, refused,
                                                    Path(request["inputs"]), out / "outputs")
                # Written after every call: a kernel that crashes the interpreter later loses only the calls after it.
                (out / "replayed.tmp").write_text(json.dumps(replayed), encoding="utf-8")
                (out / "replayed.tmp").replace(out / "replayed.json")
    return replayed


def _inputs(call: dict[str, Any], folder: Path) -> tuple[Any, ...]:
    """The call's inputs as the judge made them from its secret seed (``grader.replay.replay_inputs``), read afresh."""
    return tuple(read(folder, entry) if "file" in entry else decode_value(entry["scalar"]) for entry in call["inputs"])


def _replay_call(spec_id: str, call: dict[str, Any], plan: Any, kernels: dict[str, Any], refused: dict[str, str],
                 inputs_folder: Path, outputs: Path) -> dict[str, Any]:
    """One call replayed on the inputs of its (secret) seed: its output saved, or the reason there is none."""
    inputs, pristine = _inputs(call, inputs_folder), _inputs(call, inputs_folder)  # both read before any kernel runs
    output_dtype, output_shape = DTYPES[call["output"]["dtype"]], tuple(call["output"]["shape"])
    try:
        prepared, output = prepare(plan, inputs, kernels, refused, output_dtype, output_shape)
    except Unreplayable as problem:
        return {"error": f"not replayable: {problem}"[:600]}
    except Exception as problem:  # untrusted plan data of an unforeseen shape: refused, never a crash of the replay
        return {"error": f"not replayable: the plan is malformed ({type(problem).__name__}: {str(problem)[:200]})"}
    try:
        replay(prepared)
    except Exception as failure:  # the student's kernel failing in the interpreter
        return {"error": f"the kernel failed in the interpreter: {type(failure).__name__}: {str(failure)[:300]}"}
    changed = [i for i, (before, after) in enumerate(zip(pristine, inputs, strict=True))
               if isinstance(after, HostTensor) and not same_values(before, after)]
    if changed:
        return {"error": f"the call changed its input {changed[0]}: inputs are read-only"}
    return save_output(output, outputs / f"{spec_id}-{call['key']}.npy")


def save_output(output: HostTensor, path: Path) -> dict[str, Any]:
    """A kernel's output as a NumPy file for the judge: its values, or a bf16 output's bits (exact either way)."""
    values = np.ascontiguousarray(output.values())
    bf16 = output.dtype.name == "bfloat16"
    np.save(path, values.view(np.int16) if bf16 else values, allow_pickle=False)
    return {"output": path.name, **({"output_dtype": BF16_BITS} if bf16 else {})}


def main(argv: list[str]) -> int:
    import os

    # Nothing here needs torch, and Triton's argument mangling imports it when it can (3 s of a core): refused.
    sys.modules["torch"] = None  # type: ignore[assignment]
    os.environ["TRITON_INTERPRET"] = "1"
    from course import interpreter_fixes

    interpreter_fixes.install()  # bf16 tl.dot in the interpreter, as course.device.configure("cpu") does
    run(json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    return 0


if __name__ == "__main__":
    from grader.wall.exit_now import exit_now

    exit_now(main(sys.argv[1:]))
