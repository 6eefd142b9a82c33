"""Build a notebook's Triton kernels from their source, for the judge (run inside a sandbox with no GPU).

``python -m grader.kernel_build.build_kernels REQUEST.json`` reads the sanitized notebook and the launches its
run recorded. It keeps only the notebook's top-level kernels (``@triton.jit`` functions, possibly
under ``@triton.autotune``/``@triton.heuristics``, or a plain top-level ``def f`` made one by an
assignment ``k = triton.jit(f)``, ``k = triton.autotune(...)(triton.jit(f))``...; the recorded
launch names ``f``) and module-level constants made of literals or paths into Triton's language. It
checks from the syntax alone, before running anything, that each decorator, default value and
annotation is plain (no Python runs at definition time) and that each kernel body reaches nothing
but Triton's language (``grader.kernel_build.kernel_vet``: the code generator would call any Python function it
reaches). It defines those functions and nothing else, and compiles each recorded specialisation
(plain data, checked by ``specialisation``) for the requested target with Triton's own compiler, as far
as TTGIR (``course.compiler.compile_triton``, stopped after TTGIR; a host-side tensor descriptor is specialised
by its recorded signature entry, ``tensordesc<fp16[64, 64]>``: element type and block). It writes each
kernel's TTGIR and an index; the GPU binary is made from that text outside the sandbox
(``grader.kernel_build.compile_ttgir``). CUDA C launches (``course.cuda``) are built by
``grader.kernel_build.build_cuda`` from the
notebook's top-level string constants, into the same index. The judge replays only these builds
(recomputing each file's digest), so a kernel the notebook does not define, or a binary a student supplied,
is never run, and a recorded launch whose kernel differs from the build is refused.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.kernel_build import build_cuda, kernel_vet

JIT_NAMES = ("triton.jit", "jit")
WRAPPER_NAMES = ("triton.autotune", "triton.heuristics", "autotune", "heuristics")
JIT_OPTIONS = ("do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline")
MAX_KERNELS = 64
ALTERNATIVES = 16  # a recorded call's autotuned alternatives read at most (course.recorder.alone.JUDGED per tuner)
_SCALAR_TYPES = ("fp8e4nv|fp8e4b8|fp8e5|fp8e5b16|fp8e4b15|fp16|bf16|fp32|fp64|i1|i8|i16|i32|i64|u1|u8|u16|u32|u64")
_SIGNATURE_KIND = re.compile(rf"(\*k?)?({_SCALAR_TYPES})|constexpr")


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
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _literal_options(call: ast.Call, what: str) -> tuple[dict[str, Any] | None, str]:
    """The keyword arguments of ``triton.jit(...)``: plain literals of options Triton's JITFunction takes."""
    if any(not kw.arg or not _is_literal(kw.value) for kw in call.keywords):
        return None, f"{what} has arguments that are not plain literals"
    unknown = [kw.arg for kw in call.keywords if kw.arg not in JIT_OPTIONS]
    if unknown:
        return None, f"{what} has an option {unknown[0]!r} the grader's builder does not take"
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}, ""


def _jit_options(decorators: list[ast.expr]) -> tuple[dict[str, Any] | None, str]:
    """The literal keyword arguments of the one ``triton.jit`` decorator, or None and why not."""
    options, found = {}, False
    for decorator in decorators:
        call = decorator if isinstance(decorator, ast.Call) else None
        name = _dotted(call.func if call else decorator)
        if name in WRAPPER_NAMES:
            continue  # the recorded launch already says which configuration ran; its arguments are not run
        if name not in JIT_NAMES:
            return None, f"decorator {ast.unparse(decorator)!r} is not triton.jit"
        if call is not None:
            if call.args:
                return None, f"decorator {ast.unparse(decorator)!r} has arguments that are not plain literals"
            options, why = _literal_options(call, f"decorator {ast.unparse(decorator)!r}")
            if options is None:
                return None, why
        found = True
    return (options, "") if found else (None, "not decorated with triton.jit")


def _wrapped(value: ast.expr) -> tuple[str, dict[str, Any] | None, str] | None:
    """``triton.jit(f, **options)``, possibly inside ``triton.autotune(...)(...)`` or ``triton.heuristics(...)(...)``:
    (f, its literal options or None, why not); None for any other expression. Nothing of it is run."""
    if not isinstance(value, ast.Call):
        return None
    if isinstance(value.func, ast.Call) and _dotted(value.func.func) in WRAPPER_NAMES and len(value.args) == 1 \
            and not value.keywords:
        return _wrapped(value.args[0])
    if _dotted(value.func) not in JIT_NAMES or len(value.args) != 1 or not isinstance(value.args[0], ast.Name):
        return None
    options, why = _literal_options(value, f"{ast.unparse(value.func)}({value.args[0].id}, ...)")
    return value.args[0].id, options, why


def _plain_signature(fn: ast.FunctionDef) -> str:
    """Why the function's definition would run code (defaults, annotations), or "" when it would not."""
    arguments = fn.args
    for default in [*arguments.defaults, *arguments.kw_defaults]:
        if default is not None and not _is_literal(default):
            return f"default value {ast.unparse(default)!r} is not a plain literal"
    annotations = [a.annotation for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                                          *(a for a in (arguments.vararg, arguments.kwarg) if a is not None)]]
    for annotation in [*annotations, fn.returns]:
        if annotation is not None and not kernel_vet.plain_annotation(annotation):
            return f"annotation {ast.unparse(annotation)!r} is not a Triton type"
    return ""


def _constant_value(node: ast.stmt) -> tuple[bool, Any, str | None]:
    """``NAME = literal``, ``NAME = tl.constexpr(literal)`` or ``NAME = tl.float32`` (a path inside Triton's
    language): (True, its value, the library path or None); (False, None, None) for anything else."""
    if not isinstance(node, ast.Assign) or not all(isinstance(t, ast.Name) for t in node.targets):
        return False, None, None
    value = node.value
    if _is_literal(value):
        return True, ast.literal_eval(value), None
    try:
        if isinstance(value, ast.Call):
            import triton.language as tl

            if (kernel_vet.library_value(value.func) is tl.constexpr and len(value.args) == 1
                    and not value.keywords and _is_literal(value.args[0])):
                return True, tl.constexpr(ast.literal_eval(value.args[0])), None
            return False, None, None
        return True, kernel_vet.library_value(value), _dotted(value)
    except kernel_vet.Refused:
        return False, None, None


def _constants(node: ast.stmt) -> list[tuple[str, Any, str | None]]:
    """(name, value, library path or None) for each name a top-level statement binds to a plain constant or a
    Triton object: ``BLOCK = 32``, ``d = tl.dot``, ``from triton.language.extra import libdevice``."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        bound = ([(a.asname, a.name, None) for a in node.names if a.asname] if isinstance(node, ast.Import)
                 else [(a.asname or a.name, node.module or "", a.name) for a in node.names if not node.level])
        found, roots = [], kernel_vet.roots()
        for target, module, name in bound:
            try:
                value = kernel_vet.imported(module, name)
            except kernel_vet.Refused:
                continue
            if roots.get(target) is not value:  # import triton.language as tl: the builder's own tl
                found.append((target, value, f"{module}.{name}" if name else module))
        return found
    constant, value, path = _constant_value(node)
    return [(target.id, value, path) for target in node.targets] if constant else []


@dataclass
class Definitions:
    """What the notebook's code cells define that the builder may run: read from their syntax alone."""

    lines: list[list[str]]  # per cell: the function definitions to define (others blank), so line numbers stay right
    jit_options: dict[str, dict[str, Any]]  # kernel name (its function's) -> literal options of its triton.jit
    refused: dict[str, str]  # kernel name -> why it cannot be built
    # kernel name -> (its source from the def line, the line that starts it in its cell): for course.divergence
    sources: dict[str, tuple[str, int]] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)  # constant -> the library path it names (d = tl.dot)
    # global name -> the kernel it is bound to: itself for @triton.jit, f for ``k = triton.jit(f)``
    kernel_names: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)  # constant -> its value (a literal or a Triton object)
    nodes: dict[str, tuple[ast.FunctionDef, int]] = field(default_factory=dict)  # kernel -> (its def, its cell)


def _keep(found: Definitions, kept: list[str], lines: list[str], node: ast.FunctionDef, index: int) -> None:
    first = node.lineno  # the def line itself: decorators are applied below, not run
    kept[first - 1:node.end_lineno] = lines[first - 1:node.end_lineno]
    found.sources[node.name] = ("\n".join(lines[first - 1:node.end_lineno]), first)
    found.nodes[node.name] = (node, index)


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The top-level statements, and inside a top-level ``if``/``else`` (``elif`` too) the assignments that make a
    kernel (``k = triton.jit(f)``, ``k = triton.autotune(...)(triton.jit(f))``): every branch is read, whichever
    ran, so a notebook may pick the interpreter's form on a laptop and the autotuned one on a GPU. Nothing else of a
    branch is read: a constant bound there is not one of the notebook's."""
    for node in body:
        if not isinstance(node, ast.If):
            yield node
            continue
        for branch in (node.body, node.orelse):
            for inner in _statements(branch):
                if isinstance(inner, ast.Assign) and _wrapped(inner.value) is not None:
                    yield inner


def read_definitions(cells: list[str]) -> Definitions:
    """Top-level kernels (``@triton.jit``, or ``k = triton.jit(f)`` of a plain top-level ``def f``, also in the
    branches of a top-level ``if``) and constant assignments, checked without running anything; each kernel's body
    is vetted (``grader.kernel_build.kernel_vet``)."""
    found = Definitions([], {}, {})
    plain: dict[str, tuple[ast.FunctionDef, int, list[str]]] = {}  # undecorated top-level functions so far
    for index, source in enumerate(cells):
        lines = source.splitlines()
        kept = [""] * len(lines)
        found.lines.append(kept)
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            continue
        for node in _statements(tree.body):
            if isinstance(node, ast.FunctionDef) and not node.decorator_list:
                plain[node.name] = (node, index, lines)
            elif isinstance(node, ast.FunctionDef):
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
                found.kernel_names[node.name] = node.name
                _keep(found, kept, lines, node, index)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and (wrap := _wrapped(node.value)) is not None:
                name, options, why = wrap
                if name not in plain:
                    continue  # not a plain top-level function of the notebook: nothing to build
                fn, where, source_lines = plain[name]
                why = why or _plain_signature(fn)
                if options is not None and found.jit_options.get(name, options) != options:
                    why = f"{name} is made a kernel twice with different options"
                if why:
                    found.refused[name] = why
                    found.jit_options.pop(name, None)
                    continue
                found.refused.pop(name, None)
                found.jit_options[name] = options
                found.kernel_names[node.targets[0].id] = name
                _keep(found, found.lines[where], source_lines, fn, where)
            else:
                for target, value, path in _constants(node):
                    found.values[target] = value
                    if path is not None:
                        found.aliases[target] = path
                    else:
                        found.aliases.pop(target, None)
    scope = kernel_vet.Scope(found.kernel_names, found.values)
    functions = {name: (found.nodes[name][0], found.nodes[name][0].lineno) for name in found.jit_options}
    found.refused.update(kernel_vet.vet_all(functions, scope))
    return found


def kernel_problem(definitions: Definitions, name: str) -> str | None:
    """Why the judge will not run a launched kernel of this name, or None."""
    if name in definitions.refused:
        return f"kernel {name} cannot be built: {definitions.refused[name]}"
    if name not in definitions.jit_options:
        return not_a_kernel(name)
    return None


def not_a_kernel(name: str) -> str:
    return f"kernel {name} is not a top-level @triton.jit function of the notebook (or triton.jit(...) of one)"


def kernel_definitions(cells: list[str], folder: Path,
                       interpret: bool = False) -> tuple[dict[str, Any], dict[str, str]]:
    """Define the notebook's vetted kernels in a fresh namespace; returns (name -> kernel, name -> why refused).

    Only the vetted kernels' ``def`` statements run (their defaults are literals and their annotations Triton
    types); constants are given their values as read from the syntax. Each kernel is a JITFunction, or with
    ``interpret`` an InterpretedFunction (the CPU replay, ``grader.replay.replay_cpu``).
    """
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    definitions = read_definitions(cells)
    namespace: dict[str, Any] = {"__name__": "notebook_kernels", **kernel_vet.roots(), **definitions.values}
    folder.mkdir(parents=True, exist_ok=True)
    accepted = {name for name in definitions.jit_options if name not in definitions.refused}
    for index, kept in enumerate(definitions.lines):
        chosen = [""] * len(kept)
        for name in accepted:
            node, where = definitions.nodes[name]
            if where == index:
                chosen[node.lineno - 1:node.end_lineno] = kept[node.lineno - 1:node.end_lineno]
        if not any(chosen):
            continue
        path = folder / f"cell{index}.py"
        path.write_text("\n".join(chosen) + "\n", encoding="utf-8")
        exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    kernels = {}
    for name in sorted(accepted):
        # Chosen here, never by TRITON_INTERPRET: the builder serves the GPU judge whatever the environment says.
        kernels[name] = (InterpretedFunction if interpret else JITFunction)(namespace[name],
                                                                            **definitions.jit_options[name])
    for bound, name in definitions.kernel_names.items():
        if name in kernels:
            namespace[bound] = kernels[name]
    return kernels, definitions.refused


def specialisation(launch: dict[str, Any], kernel: Any) -> tuple[dict[str, str], dict[tuple[int, ...], Any],
                                                                 dict[tuple[int, ...], Any], dict[str, Any]]:
    """A recorded launch's (signature, constexprs, attrs, options), checked to be plain data the compiler only
    reads; raises ValueError with what is wrong."""
    from course.recorder import descriptors
    from course.recorder.plan_format import COMPILE_OPTIONS, decode_value

    signature = launch.get("signature")
    if not isinstance(signature, dict) or list(signature) != list(kernel.arg_names):
        raise ValueError(f"its recorded signature does not name the parameters {', '.join(kernel.arg_names)}")
    for kind in signature.values():
        if not (isinstance(kind, str) and (_SIGNATURE_KIND.fullmatch(kind) or descriptors.parse_signature(kind))):
            raise ValueError(f"its recorded signature has an argument of kind {str(kind)[:60]!r}, which the "
                             "judge cannot replay")
    constexprs, attrs = {}, {}
    for entry in launch.get("constexprs") or []:
        path, value = entry
        if not (isinstance(path, list) and path and all(type(i) is int and 0 <= i < len(signature) for i in path)):
            raise ValueError("its recorded constexprs are malformed")
        decoded = decode_value(value) if isinstance(value, dict) else object()
        if not kernel_vet.plain_constexpr(decoded):
            raise ValueError(f"constexpr {path} is not plain data (int, float, bool, None, a dtype, a short string)")
        constexprs[tuple(path)] = decoded
    for entry in launch.get("attrs") or []:
        path, value = entry
        if not (isinstance(path, list) and all(type(i) is int for i in path) and isinstance(value, list)
                and all(isinstance(a, list) and len(a) == 2 and isinstance(a[0], str) and type(a[1]) in (int, bool)
                        for a in value)):
            raise ValueError("its recorded argument attributes are malformed")
        attrs[tuple(path)] = value
    options = launch.get("options") or {}
    if not isinstance(options, dict) or any(k not in COMPILE_OPTIONS or not (v is None or type(v) in (int, bool))
                                            for k, v in options.items()):
        raise ValueError("its recorded compile options are not the plain options a launch may set")
    return dict(signature), constexprs, attrs, dict(options)


def recorded_launches(exported: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every recorded launch of the export: first those of each call's plan, then those of the calls' autotuned
    alternatives (``course.recorder.export``), which the judge may time and pick from (``grader.judge.config_choice``),
    so that a notebook's many alternatives never crowd its own plans out of the builder's ``MAX_KERNELS``."""
    calls = [call for entry in exported.get("kernels", {}).values() if isinstance(entry, dict)
             for call in (entry.get("calls") or {}).values() if isinstance(call, dict)]
    plans = [call.get("plan") for call in calls]
    for call in calls:
        alternatives = call.get("alternatives")
        if isinstance(alternatives, list):
            plans += [a.get("plan") for a in alternatives[:ALTERNATIVES] if isinstance(a, dict)]
    for recorded in plans:
        yield from (recorded or {}).get("launches", []) if isinstance(recorded, dict) else []


def build(request: dict[str, Any]) -> dict[str, Any]:
    """Compile every recorded launch's kernel to TTGIR; the index maps launch_key -> TTGIR file or error."""
    import nbformat
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from course.compiler import compile_triton
    from course.recorder.plan_format import ttgir_digest

    out = Path(request["out"])
    out.mkdir(parents=True, exist_ok=True)
    notebook = nbformat.read(request["notebook"], as_version=4)
    cells = [c.source for c in notebook.cells if c.cell_type == "code"]
    kernels, refused = kernel_definitions(cells, out / "src")
    constants = build_cuda.string_constants(cells)
    target = GPUTarget(**request["target"])
    exported = json.loads(Path(request["export"]).read_text(encoding="utf-8"))
    index: dict[str, Any] = {}
    for launch in recorded_launches(exported):
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
            index[key] = {"error": not_a_kernel(str(name))}
            continue
        try:
            signature, constexprs, attrs, options = specialisation(launch, kernels[name])
        except (ValueError, TypeError) as error:
            index[key] = {"error": f"kernel {name}: {error}"}
            continue
        try:
            source = ASTSource(kernels[name], signature, constexprs, attrs)
            ttgir = compile_triton(source, target, options, until="ttgir")
        except Exception as error:  # a kernel that does not compile is the student's to fix
            index[key] = {"error": f"kernel {name} did not compile: {type(error).__name__}: {error}"[:600]}
            continue
        file = out / f"{key}.ttgir"
        file.write_text(ttgir, encoding="utf-8")
        index[key] = {"kernel": name, "file": file.name, "digest": ttgir_digest(ttgir)}
    (out / "index.json").write_text(json.dumps(index, indent=1), encoding="utf-8")
    return index


def main(argv: list[str]) -> int:
    build(json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from grader.wall.exit_now import exit_now

    exit_now(main(sys.argv[1:]))
