"""Compile a Triton kernel for an H100 (sm_90) on any machine, and list the matrix instructions in its PTX.

Triton's wheel ships its compiler and NVIDIA's PTX assembler, and compiling for a named target needs
no GPU. The compile runs in a child process with the interpreter switched off: in a process where
Triton runs its CPU interpreter, Triton's own library functions (``tl.zeros`` is one) are interpreted
functions, which the compiler cannot call. The child gets the kernel's source, never a pickle.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MATRIX_PATTERN = r"\b(?:wgmma\.mma_async|mma\.sync)[\w.]*"
FMA_PATTERN = r"\bfma\.rn\.f32\b"


@dataclass(frozen=True)
class Case:
    """One specialisation to compile: the pointers' element type, the constexprs and the launch options.

    ``constants`` values are ints, floats, strings, or Triton dtypes such as ``tl.float32``.
    """

    label: str
    pointer_dtype: str  # Triton's name: "fp16", "bf16", "fp32", ...
    constants: Mapping[str, Any]
    options: Mapping[str, int] = field(default_factory=lambda: {"num_warps": 4, "num_stages": 3})


@dataclass(frozen=True)
class Listing:
    """What one compile found: the distinct matrix instructions, the count of fp32 FMAs, or why it failed."""

    matrix: tuple[str, ...] = ()
    fma: int = 0
    error: str | None = None

    def describe(self) -> str:
        if self.error:
            return f"not compiled ({self.error})"
        return f"{', '.join(self.matrix) or 'no matrix instruction'}; {self.fma} fma.rn.f32 in the code"


_CHILD = r"""
import importlib.util, json, pathlib, re, sys, tempfile
job = json.load(sys.stdin)
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

path = pathlib.Path(tempfile.mkdtemp()) / "listed_kernel.py"
path.write_text("import triton\nimport triton.language as tl\n\n" + job["source"])
loader = importlib.util.spec_from_file_location("listed_kernel", path)
module = importlib.util.module_from_spec(loader)
loader.loader.exec_module(module)
kernel = getattr(module, job["name"])
found = {}
for case in job["cases"]:
    constants = {k: tl.dtype(v["dtype"]) if isinstance(v, dict) else v for k, v in case["constants"].items()}
    signature = {n: "*" + case["pointer_dtype"] if n in job["pointers"] else "constexpr" if n in constants
                 else "i32" for n in kernel.arg_names}
    try:
        compiled = triton.compile(ASTSource(kernel, signature, constants), target=GPUTarget("cuda", 90, 32),
                                  options=case["options"])
        ptx = compiled.asm["ptx"]
        found[case["label"]] = {"matrix": sorted(set(re.findall(job["matrix"], ptx))),
                                "fma": len(re.findall(job["fma"], ptx))}
    except Exception as error:
        lines = str(error).strip().splitlines() or [""]
        found[case["label"]] = {"error": f"{type(error).__name__}: {lines[-1][:200]}"}
print(json.dumps(found))
"""


def _encode(value: Any) -> Any:
    import triton.language as tl

    return {"dtype": str(value)} if isinstance(value, tl.dtype) else value


def matrix_instructions(kernel: Any, cases: Sequence[Case], pointers: Sequence[str],
                        timeout: float = 300.0) -> dict[str, Listing]:
    """Compile ``kernel`` (a ``@triton.jit`` function, interpreted or not) for sm_90 once per case.

    ``pointers`` names the arguments that are pointers (of the case's element type); every other
    argument not in a case's constants is a 32-bit integer.
    """
    function = getattr(kernel, "fn", kernel)
    job = {"source": textwrap.dedent(inspect.getsource(function)), "name": function.__name__,
           "pointers": list(pointers), "matrix": MATRIX_PATTERN, "fma": FMA_PATTERN,
           "cases": [{"label": c.label, "pointer_dtype": c.pointer_dtype, "options": dict(c.options),
                      "constants": {k: _encode(v) for k, v in c.constants.items()}} for c in cases]}
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(job), capture_output=True,
                              text=True, env=env, cwd=scratch, timeout=timeout, check=False)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return {c.label: Listing(error=f"the compiler process failed: {reason}") for c in cases}
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {label: Listing(tuple(entry.get("matrix", ())), int(entry.get("fma", 0)), entry.get("error"))
            for label, entry in found.items()}
