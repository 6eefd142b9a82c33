"""Compile a Triton kernel for a named NVIDIA GPU (an H100: sm_90) on any machine, and list the matrix
instructions in its PTX.

Triton's wheel ships its compiler and NVIDIA's PTX assembler, and compiling for a named target needs
no GPU. The compile runs in a child process with the interpreter switched off: in a process where
Triton runs its CPU interpreter, Triton's own library functions (``tl.zeros`` is one) are interpreted
functions, which the compiler cannot call. The child gets the kernel's source, never a pickle. The notebooks'
helpers compile through ``compile_in_child`` (``course.days.pipelining`` too).
"""

from __future__ import annotations

import inspect
import json
import os
import re
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


@dataclass(frozen=True)
class Specialisation:
    """One compile of a kernel: each argument's Triton type ("*fp16", "i32", "constexpr"), the constexprs' values
    (ints, floats, strings, or Triton dtypes such as ``tl.float32``), the launch options, and the integer and
    pointer arguments Triton may take as divisible by 16."""

    label: str
    signature: Mapping[str, str]
    constants: Mapping[str, Any]
    options: Mapping[str, int]
    divisible_by_16: Sequence[str] = ()


@dataclass(frozen=True)
class Made:
    """What one compile made: its PTX and shared memory per program, or why it failed."""

    ptx: str = ""
    shared: int = 0
    error: str | None = None


# The child that compiles a kernel's source for a named NVIDIA target through course.compiler, the compile path
# of the grader's builder too. Its own process: where Triton runs its CPU interpreter, Triton's library functions
# are interpreted ones, which the compiler cannot call.
_CHILD = r"""
import json, os, sys, tempfile
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from course.compiler import compile_triton

job = json.load(sys.stdin)
namespace = {"triton": triton, "tl": tl}
with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "kernel.py")  # Triton reads a kernel's source from its file
    with open(path, "w", encoding="utf-8") as file:
        file.write(job["source"])
    exec(compile(job["source"], path, "exec"), namespace)
    kernel = triton.jit(namespace[job["name"]])
made = {}
for case in job["cases"]:
    index = {name: (i,) for i, name in enumerate(kernel.arg_names)}
    constants = {index[k]: tl.dtype(v["dtype"]) if isinstance(v, dict) else v for k, v in case["constants"].items()}
    attrs = {index[name]: [["tt.divisibility", 16]] for name in case["divisible_by_16"]}
    try:
        compiled = compile_triton(ASTSource(kernel, case["signature"], constants, attrs),
                                  GPUTarget("cuda", job["arch"], 32), case["options"])
        made[case["label"]] = {"ptx": compiled.asm["ptx"], "shared": int(compiled.metadata.shared)}
    except Exception as error:
        lines = str(error).strip().splitlines() or [""]
        made[case["label"]] = {"error": f"{type(error).__name__}: {lines[-1][:200]}"}
print(json.dumps(made))
"""


def kernel_source(kernel: Any) -> tuple[str, str]:
    """The source of a ``@triton.jit`` function (interpreted or not) without its decorators, and its name."""
    function = getattr(kernel, "fn", kernel)
    source = textwrap.dedent(inspect.getsource(function))
    return source[re.search(r"^def\s", source, re.MULTILINE).start():], function.__name__


def compile_in_child(kernel: Any, cases: Sequence[Specialisation], arch: int = 90,
                     timeout: float = 300.0) -> dict[str, Made]:
    """Compile ``kernel`` for an NVIDIA GPU of compute capability ``arch`` (90: H100) once per case, in a process
    with the interpreter off; no GPU needed. Raises RuntimeError when that process fails."""
    source, name = kernel_source(kernel)
    job = {"source": source, "name": name, "arch": arch,
           "cases": [{"label": c.label, "signature": dict(c.signature), "options": dict(c.options),
                      "constants": {k: _encode(v) for k, v in c.constants.items()},
                      "divisible_by_16": list(c.divisible_by_16)} for c in cases]}
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(job), capture_output=True,
                              text=True, env=env, cwd=scratch, timeout=timeout, check=False)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise RuntimeError(f"the compiler process failed: {reason}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {label: Made(entry.get("ptx", ""), int(entry.get("shared", 0)), entry.get("error"))
            for label, entry in found.items()}


def _encode(value: Any) -> Any:
    import triton.language as tl

    return {"dtype": str(value)} if isinstance(value, tl.dtype) else value


def matrix_instructions(kernel: Any, cases: Sequence[Case], pointers: Sequence[str],
                        timeout: float = 300.0) -> dict[str, Listing]:
    """Compile ``kernel`` (a ``@triton.jit`` function, interpreted or not) for sm_90 once per case.

    ``pointers`` names the arguments that are pointers (of the case's element type); every other
    argument not in a case's constants is a 32-bit integer.
    """
    names = list(inspect.signature(getattr(kernel, "fn", kernel)).parameters)
    specialisations = [Specialisation(c.label, {n: "*" + c.pointer_dtype if n in pointers else "constexpr"
                                                if n in c.constants else "i32" for n in names},
                                      c.constants, c.options) for c in cases]
    try:
        made = compile_in_child(kernel, specialisations, 90, timeout)
    except RuntimeError as error:
        return {c.label: Listing(error=str(error)) for c in cases}
    return {label: Listing(error=m.error) if m.error else
            Listing(tuple(sorted(set(re.findall(MATRIX_PATTERN, m.ptx)))), len(re.findall(FMA_PATTERN, m.ptx)))
            for label, m in made.items()}
