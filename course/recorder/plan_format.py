"""The launch plan's plain-data vocabulary, without torch: its versions, the compile options a launch may set,
the nominal target of a CPU run's builds, the tagged JSON of constexprs and scalars, the inputs a plan was
recorded for, and the TTGIR digest.

The builder (``grader.kernel_build.build_kernels``) and the CPU replay (``grader.replay.replay_cpu``) read plans
through this
module
alone, so neither pays for importing torch (about 3 s of a core, more than the rest of a build).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

# 2: launches may be CUDA C (a "cuda" entry, course.cuda); 3: Triton arguments may be tensor descriptors
PLAN_VERSION = 3
PLAN_VERSIONS = (1, 2, 3)  # what the judge replays
# Options a launch may set; the builder compiles the notebook's kernel with exactly these.
COMPILE_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "debug",
                   "launch_cooperative_grid", "launch_pdl")

# Where a CPU run's kernels are compiled for checks on the compiled form (grader.judge.ir_rules): a nominal Hopper GPU.
NOMINAL_TARGET = {"backend": "cuda", "arch": 90, "warp_size": 32}

_LOC_LINES = re.compile(r"^#loc.*$", re.MULTILINE)


def _strip_locations(text: str) -> str:
    """TTGIR without source locations (file names and line numbers differ between two builds)."""
    text = _LOC_LINES.sub("", text)
    out, i = [], 0
    while i < len(text):
        j = text.find("loc(", i)
        if j < 0 or (j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_.#")):
            if j < 0:
                out.append(text[i:])
                break
            out.append(text[i:j + 4])
            i = j + 4
            continue
        out.append(text[i:j].rstrip(" "))
        depth, k = 0, j + 3
        while k < len(text):
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            k += 1
            if depth == 0:
                break
        i = k
    return "\n".join(line.rstrip() for line in "".join(out).splitlines() if line.strip())

BF16_BITS = "bfloat16 as int16 bits"  # a bf16 output saved for the judge as its bits (NumPy has no bf16)


def ttgir_digest(text: str) -> str:
    """A digest of a kernel's TTGIR that two builds of the same source and specialisation share."""
    return hashlib.sha256(_strip_locations(text).encode()).hexdigest()


def encode_value(value: Any) -> dict[str, Any] | None:
    """A constexpr or scalar as tagged JSON, or None when it is of no supported type."""
    import triton.language as tl

    if value is None:
        return {"none": True}
    if type(value) is bool:
        return {"bool": value}
    if type(value) is int:
        return {"int": value}
    if type(value) is float:
        return {"float": repr(value)}
    if type(value) is str:
        return {"str": value}
    if isinstance(value, tl.dtype):
        return {"dtype": str(value)}
    return None


def describe_inputs(inputs: tuple[Any, ...]) -> list[dict[str, Any]]:
    """What a plan was recorded for: each tensor input's storage size, each other input's value (a torch tensor
    or the CPU replay's ``grader.replay.host_tensor.HostTensor``: anything with a storage)."""
    return [{"nbytes": value.untyped_storage().nbytes()} if hasattr(value, "untyped_storage")
            else {"scalar": encode_value(value)} for value in inputs]


def decode_value(data: dict[str, Any]) -> Any:
    import triton.language as tl

    if "none" in data:
        return None
    if "bool" in data:
        return bool(data["bool"])
    if "int" in data:
        return int(data["int"])
    if "float" in data:
        return float(data["float"])
    if "str" in data:
        return str(data["str"])
    if "dtype" in data:
        return tl.dtype(str(data["dtype"]))
    raise ValueError(f"unknown value encoding {sorted(data)}")
