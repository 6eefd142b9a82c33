"""Build a notebook's Triton kernels from their source, for the judge (run inside the sandbox).

``python -m grader.build_kernels REQUEST.json`` reads the sanitized notebook and the launches its
run recorded. It keeps only the top-level ``@triton.jit`` functions of the notebook's code cells
(and module-level constants made of literals), checks before running anything that each
decorator, default value and annotation is plain (no Python runs at definition time), defines
those functions and nothing else, and compiles each recorded specialisation for the judge's GPU
with Triton's own compiler (a host-side tensor descriptor is specialised by its recorded signature
entry, ``tensordesc<fp16[64, 64]>``: element type and block). It writes each kernel's TTGIR and an
index. CUDA C launches (``course.cuda``) are built by ``grader.build_cuda`` from the notebook's
top-level string constants, into the same index. The judge replays only these builds, so a kernel
the notebook does not define, or a binary a student supplied, is never run, and a recorded launch
whose kernel differs from the build is refused.
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader import build_cuda

LIBRARY_ROOTS = ("triton", "tl")
MAX_KERNELS = 64


def launch_key(launch: dict[str, Any]) -> str:
    """One compiled kernel: its name, specialisation and options (what Triton's cache keys on)."""
    parts = {k: launch.get(k) for k in ("kernel", "signature", "constexprs", "attrs", "options", "target")}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _is_literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def _library_path(node: ast.AST) -> bool:
    name = _dotted(node)
    return name is not None and name.split(".")[0] in LIBRARY_ROOTS


def _jit_options(decorators: list[ast.expr]) -> tuple[dict[str, Any] | None, str]:
    """The literal keyword arguments of the one ``triton.jit`` decorator, or None and why not."""
    options, found = {}, False
    for decorator in decorators:
        call = decorator if isinstance(decorator, ast.Call) else None
        name = _dotted(call.func if call else decorator)
        if name in ("triton.autotune", "triton.heuristics", "autotune", "heuristics"):
            continue  # the recorded launch already says which configuration ran; its arguments are not run
        if name not in ("triton.jit", "jit"):
            return None, f"decorator {ast.unparse(decorator)!r} is not triton.jit"
        if call is not None:
            if call.args or not all(kw.arg and _is_literal(kw.value) for kw in call.keywords):
                return None, f"decorator {ast.unparse(decorator)!r} has arguments that are not plain literals"
            options = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
        found = True
    return (options, "") if found else (None, "not decorated with triton.jit")


def _plain_signature(fn: ast.FunctionDef) -> str:
    """Why the function's definition would run code (defaults, annotations), or "" when it would not."""
    arguments = fn.args
    for default in [*arguments.defaults, *arguments.kw_defaults]:
        if default is not None and not _is_literal(default):
            return f"default value {ast.unparse(default)!r} is not a plain literal"
    annotations = [a.annotation for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]]
    for annotation in [*annotations, fn.returns]:
        if annotation is None or isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            continue
        if not _library_path(annotation):
            return f"annotation {ast.unparse(annotation)!r} is not a Triton type"
    return ""


def _constant_assignment(node: ast.stmt) -> bool:
    """``NAME = literal``, ``NAME = tl.constexpr(literal)`` or ``NAME = tl.float32``: safe to define."""
    if not isinstance(node, ast.Assign) or not all(isinstance(t, ast.Name) for t in node.targets):
        return False
    value = node.value
    if _is_literal(value) or _library_path(value):
        return True
    return (isinstance(value, ast.Call) and _library_path(value.func) and _dotted(value.func).endswith("constexpr")
            and len(value.args) == 1 and not value.keywords and _is_literal(value.args[0]))


@dataclass
class Definitions:
    """What the notebook's code cells define that the builder may run: read from their syntax alone."""

    lines: list[list[str]]  # per cell: the lines to define (others blank), so line numbers stay right
    jit_options: dict[str, dict[str, Any]]  # kernel name -> literal options of its triton.jit
    refused: dict[str, str]  # kernel name -> why it cannot be built
    # kernel name -> (its source from the def line, the line that starts it in its cell): for course.divergence
    sources: dict[str, tuple[str, int]] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)  # constant -> the library path it names (d = tl.dot)


def read_definitions(cells: list[str]) -> Definitions:
    """Top-level ``@triton.jit`` functions and constant assignments, checked without running anything."""
    found = Definitions([], {}, {})
    for source in cells:
        lines = source.splitlines()
        kept = [""] * len(lines)
        found.lines.append(kept)
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.decorator_list:
                options, why = _jit_options(node.decorator_list)
                if options is None:
                    if "not decorated" not in why:
                        found.refused[node.name] = why
                    continue
                why = _plain_signature(node)
                if why:
                    found.refused[node.name] = why
                    continue
                found.refused.pop(node.name, None)
                found.jit_options[node.name] = options
                first = node.lineno  # the def line itself: decorators are applied below, not run
                kept[first - 1:node.end_lineno] = lines[first - 1:node.end_lineno]
                found.sources[node.name] = ("\n".join(lines[first - 1:node.end_lineno]), first)
            elif _constant_assignment(node):
                kept[node.lineno - 1:node.end_lineno] = lines[node.lineno - 1:node.end_lineno]
                for target in node.targets:
                    if _library_path(node.value):
                        found.aliases[target.id] = _dotted(node.value)
                    else:
                        found.aliases.pop(target.id, None)
    return found


def kernel_problem(definitions: Definitions, name: str) -> str | None:
    """Why the judge will not run a launched kernel of this name, or None."""
    if name in definitions.refused:
        return f"kernel {name} cannot be built: {definitions.refused[name]}"
    if name not in definitions.jit_options:
        return f"kernel {name} is not a top-level @triton.jit function of the notebook"
    return None


def kernel_definitions(cells: list[str], folder: Path,
                       interpret: bool = False) -> tuple[dict[str, Any], dict[str, str]]:
    """Define the notebook's kernels in a fresh namespace; returns (name -> kernel, name -> why refused).

    Each kernel is a JITFunction, or with ``interpret`` an InterpretedFunction (the CPU replay, ``grader.replay_cpu``).
    """
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    definitions = read_definitions(cells)
    namespace: dict[str, Any] = {"__name__": "notebook_kernels"}
    exec("import triton\nimport triton.language as tl\nimport math", namespace)
    folder.mkdir(parents=True, exist_ok=True)
    for index, kept in enumerate(definitions.lines):
        if not any(kept):
            continue
        path = folder / f"cell{index}.py"
        path.write_text("\n".join(kept) + "\n", encoding="utf-8")
        exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    kernels = {}
    for name, options in definitions.jit_options.items():
        if name in definitions.refused or not callable(namespace.get(name)):
            continue
        # Chosen here, never by TRITON_INTERPRET: the builder serves the GPU judge whatever the environment says.
        kernels[name] = (InterpretedFunction if interpret else JITFunction)(namespace[name], **options)
        namespace[name] = kernels[name]
    return kernels, definitions.refused


def build(request: dict[str, Any]) -> dict[str, Any]:
    """Compile every recorded launch's kernel; the index maps launch_key -> TTGIR file or error."""
    import nbformat
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from course import descriptors
    from course.plan import decode_value, ttgir_digest

    out = Path(request["out"])
    out.mkdir(parents=True, exist_ok=True)
    notebook = nbformat.read(request["notebook"], as_version=4)
    cells = [c.source for c in notebook.cells if c.cell_type == "code"]
    kernels, refused = kernel_definitions(cells, out / "src")
    constants = build_cuda.string_constants(cells)
    target = GPUTarget(**request["target"])
    exported = json.loads(Path(request["export"]).read_text(encoding="utf-8"))
    index: dict[str, Any] = {}
    for entry in exported.get("kernels", {}).values():
        for call in entry.get("calls", {}).values():
            for launch in (call.get("plan") or {}).get("launches", []):
                if "cuda" in launch:
                    key = build_cuda.launch_key(launch)
                    if key not in index and len(index) < MAX_KERNELS:
                        index[key] = build_cuda.build_launch(launch, constants, int(target.arch), out)
                    continue
                key = launch_key(launch)
                if key in index or len(index) >= MAX_KERNELS:
                    continue
                name = launch.get("kernel")
                if name in refused:
                    index[key] = {"error": f"kernel {name} cannot be built: {refused[name]}"}
                    continue
                if name not in kernels:
                    index[key] = {"error": f"kernel {name} is not a top-level @triton.jit function of the notebook"}
                    continue
                unknown = [kind for kind in dict(launch["signature"]).values()
                           if str(kind).startswith("tensordesc") and descriptors.parse_signature(kind) is None]
                if unknown:
                    index[key] = {"error": f"kernel {name} takes a tensor descriptor {str(unknown[0])[:60]!r} that "
                                           "the judge cannot replay"}
                    continue
                try:
                    constexprs = {tuple(path): decode_value(value) for path, value in launch["constexprs"]}
                    attrs = {tuple(path): value for path, value in launch["attrs"]}
                    source = ASTSource(kernels[name], dict(launch["signature"]), constexprs, attrs)
                    compiled = triton.compile(source, target=target, options=dict(launch["options"]))
                except Exception as error:  # a kernel that does not compile is the student's to fix
                    index[key] = {"error": f"kernel {name} did not compile: {type(error).__name__}: {error}"[:600]}
                    continue
                file = out / f"{key}.ttgir"
                file.write_text(compiled.asm["ttgir"], encoding="utf-8")
                index[key] = {"kernel": name, "file": file.name, "digest": ttgir_digest(compiled.asm["ttgir"])}
    (out / "index.json").write_text(json.dumps(index, indent=1), encoding="utf-8")
    return index


def main(argv: list[str]) -> int:
    build(json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    raise SystemExit(main(sys.argv[1:]))
