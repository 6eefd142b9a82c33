"""Known ways a Triton kernel passes in the CPU interpreter and fails on a GPU, found in its source.

The course's CPU mode is Triton's interpreter: each kernel's Python runs with NumPy, one program
after another. Some of what a GPU does cannot show there. This module reads the source of the
``@triton.jit`` kernels a function launches (it never runs them), and names every known divergence
it recognises, with the line, why the GPU differs, and the fix. ``course.check`` prints them when it
runs on a CPU, before the student submits; ``RULES`` lists them (the README's table).

The same reading answers a second question for the grader: which library functions (``tl.dot``...)
a kernel reaches, itself or through the kernels it calls, for exercises that forbid some
(``ExerciseSpec.forbidden_calls``). A call it cannot resolve is reported rather than guessed.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Rule:
    code: str
    title: str  # what the kernel does
    gpu: str  # what the GPU does with it, and why the interpreter cannot show it
    fix: str
    source: str  # where the behaviour is documented or shown
    precision: bool = False  # only matters where the tolerance is tighter than TF32's


RULES: dict[str, Rule] = {rule.code: rule for rule in (
    Rule("tf32-dot", 'tl.dot on fp32 data without input_precision="ieee"',
         "an NVIDIA GPU with tensor cores multiplies fp32 tiles in TF32 by default, keeping 10 mantissa bits of "
         "each input; the interpreter ignores input_precision and multiplies in full fp32 (NumPy)",
         'pass input_precision="ieee" (or allow_tf32=False)',
         "Triton's tl.dot documentation (default precision tf32); InterpreterBuilder.create_dot in "
         "triton/runtime/interpreter.py (np.matmul, input_precision unused); Triton 3.6 compiling for sm_90 "
         "writes inputPrecision = tf32 into the TTGIR", precision=True),
    Rule("sum-to-dot", "tl.sum over a broadcast product x[:, :, None] * y[None, :, :]",
         "the compiler rewrites the sum of a broadcast product into a tl.dot at TF32 precision "
         "(CombineBroadcastMulReducePattern); the interpreter multiplies and sums elementwise in fp32",
         'write tl.dot(x, y, input_precision="ieee"), or accumulate rank-1 updates '
         "acc += x_col[:, None] * y_row[None, :] without a sum",
         "CombineBroadcastMulReducePattern in lib/Dialect/Triton/Transforms/Combine.cpp (triton-lang/triton), "
         "triton-lang/triton#9609; Triton 3.6 compiling for sm_90 writes tt.dot with inputPrecision = tf32, for "
         "this operand order only", precision=True),
    Rule("lost-update", "a tl.load and tl.store of the same addresses in every program, without atomics",
         "the interpreter runs the programs one after another, so each read sees the previous program's write; "
         "a GPU runs them at the same time, and concurrent read-modify-writes lose updates",
         "use tl.atomic_add (or another tl.atomic_*), or give each program its own part of the output",
         "Triton's debugging guide: the interpreter processes each program instance sequentially"),
    Rule("unchecked-address", "a tl.load or tl.store of a block of addresses without a mask (or a block pointer "
         "without boundary_check)",
         "nothing checks addresses in either mode: past the end of a tensor the interpreter reads or writes "
         "whatever host memory lies there (the check may pass by luck, or the process may crash), and a GPU "
         "reads another tensor's data, overwrites it, or stops with an illegal memory access",
         "mask every access whose block can reach past the tensor (mask=offsets < n, other=0.0)",
         "triton-lang/triton#1088 (out-of-bounds stores overwrite other data); the interpreter's load and store "
         "(triton/_C/libtriton interpreter) dereference raw addresses"),
)}

# Library paths named several ways: triton.language.core.dot, tl.core.dot and tl.dot are one function.
_LIBRARY_SUBMODULES = ("core", "standard", "semantic")
# What a @triton.jit function may call besides library functions and other kernels (Triton's code generator).
BUILTINS = frozenset({"len", "list", "range", "float", "int", "isinstance", "hasattr", "print", "min", "max"})
_LIBRARY_ROOTS = ("tl", "triton", "math")


def normalize(path: str) -> str:
    """One spelling per library function: "triton.language.core.dot" -> "tl.dot"."""
    if path == "triton.language" or path.startswith("triton.language."):
        path = "tl" + path[len("triton.language"):]
    head, _, rest = path.partition(".")
    sub, _, name = rest.partition(".")
    if head == "tl" and sub in _LIBRARY_SUBMODULES and name:
        path = f"tl.{name}"
    return path


@dataclass(frozen=True)
class KernelSource:
    """One ``@triton.jit`` function's source, and what its global names refer to.

    ``aliases`` maps a global name to the library path it stands for ("tl", "tl.dot"); ``kernels`` maps a
    global name to the key (in the same mapping of sources) of the kernel it refers to.
    """

    name: str
    source: str
    first_line: int = 1  # the line of ``source``'s first line in its cell or file
    aliases: Mapping[str, str] = field(default_factory=dict)
    kernels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Divergence:
    code: str
    kernel: str
    line: int
    detail: str = ""

    @property
    def rule(self) -> Rule:
        return RULES[self.code]

    def text(self) -> str:
        what = self.detail or self.rule.title
        return (f"[{self.code}] {self.kernel}, line {self.line}: {what}\n"
                f"    GPU: {self.rule.gpu}.\n    Fix: {self.rule.fix}.")


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _is_none(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return call.args[position] if len(call.args) > position else None


class _Kernel:
    """The facts one kernel's rules need, read from its syntax tree."""

    def __init__(self, kernel: KernelSource):
        self.kernel = kernel
        tree = ast.parse(textwrap.dedent(kernel.source))
        functions = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        if not functions:
            raise ValueError(f"{kernel.name}: no function definition in its source")
        self.fn = functions[0]
        args = self.fn.args
        self.params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        self.assigned: dict[str, list[ast.expr]] = {}
        self.calls: list[tuple[ast.Call, list[ast.expr]]] = []  # each call with the tests of the ifs around it
        self._walk(self.fn.body, [])
        self._deps: dict[str, frozenset[str]] = {}
        self._settle()
        self.scalars = self._scalar_params()

    # --- reading the tree ---------------------------------------------------------------------------------

    def _assign(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self.assigned.setdefault(target.id, []).append(value)
        elif isinstance(target, ast.Tuple | ast.List):
            values = value.elts if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(
                target.elts) else [value] * len(target.elts)
            for t, v in zip(target.elts, values, strict=True):
                self._assign(t, v)
        elif isinstance(target, ast.Starred):
            self._assign(target.value, value)

    def _walk(self, body: list[ast.stmt], tests: list[ast.expr]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    self._assign(target, stmt.value)
            elif isinstance(stmt, ast.AugAssign):
                self._assign(stmt.target, ast.BinOp(left=stmt.target, op=stmt.op, right=stmt.value))
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                self._assign(stmt.target, stmt.value)
            elif isinstance(stmt, ast.For):
                self._assign(stmt.target, stmt.iter)
            inner = [*tests, stmt.test] if isinstance(stmt, ast.If | ast.While) else tests
            for node in self._own_nodes(stmt):
                if isinstance(node, ast.Call):
                    self.calls.append((node, tests))
                elif isinstance(node, ast.NamedExpr):
                    self._assign(node.target, node.value)
            for block in ("body", "orelse", "finalbody"):
                if isinstance(getattr(stmt, block, None), list):
                    self._walk(getattr(stmt, block), inner)

    @staticmethod
    def _own_nodes(stmt: ast.stmt) -> Iterable[ast.AST]:
        """The nodes of a statement outside its nested blocks (those are walked with their own tests)."""
        stack = [c for name, c in ast.iter_fields(stmt) if name not in ("body", "orelse", "finalbody", "handlers")]
        while stack:
            item = stack.pop()
            if isinstance(item, list):
                stack.extend(item)
            elif isinstance(item, ast.AST):
                yield item
                stack.extend(ast.iter_child_nodes(item))

    # --- what names refer to ------------------------------------------------------------------------------

    def library(self, node: ast.AST) -> str | None:
        """The library path a name or attribute chain stands for ("tl.dot"), or None."""
        dotted = _dotted(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.params:
            return None
        if head in self.assigned:  # a local name bound to a library path (f = tl.dot)
            targets = {self.library(v) for v in self.assigned[head]}
            if len(targets) != 1 or None in targets:
                return None
            base = targets.pop()
        elif head in self.kernel.aliases:
            base = self.kernel.aliases[head]
        elif head in _LIBRARY_ROOTS:
            base = head
        else:
            return None
        return normalize(f"{base}.{rest}" if rest else base)

    def deps(self, node: ast.AST | None) -> frozenset[str]:
        """What a value depends on: "pid", "arange", "load", "blockptr", and "param:<name>" for each parameter."""
        if node is None:
            return frozenset()
        if isinstance(node, ast.Name):
            own = {f"param:{node.id}"} if node.id in self.params else set()
            return frozenset(own) | self._deps.get(node.id, frozenset())
        if isinstance(node, ast.Call):
            name = self.library(node.func)
            marks = {"tl.program_id": {"pid"}, "tl.arange": {"arange"}, "tl.load": {"load"},
                     "tl.make_block_ptr": {"blockptr"}, "tl.advance": {"blockptr"}}.get(name or "", set())
            if name == "tl.load":
                return frozenset(marks)
            found = set(marks)
            parts = [*node.args, *(kw.value for kw in node.keywords)]
            if name is None and isinstance(node.func, ast.Attribute):
                parts.append(node.func.value)  # a method of a value: x.to(tl.float32)
            for part in parts:
                found |= self.deps(part)
            return frozenset(found)
        found: set[str] = set()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                found |= self.deps(child)
        return frozenset(found)

    def _settle(self) -> None:
        for _ in range(32):  # a fixed point over the assignments (loops feed names back into themselves)
            changed = False
            for name, values in self.assigned.items():
                new = frozenset().union(*(self.deps(v) for v in values))
                if new != self._deps.get(name, frozenset()):
                    self._deps[name] = self._deps.get(name, frozenset()) | new
                    changed = True
            if not changed:
                return

    def _scalar_params(self) -> set[str]:
        """Parameters used as numbers (compared, multiplied, looped over): not the base of a pointer."""
        scalars: set[str] = set()
        for node in ast.walk(self.fn):
            operands: list[ast.expr] = []
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
            elif isinstance(node, ast.BinOp) and not isinstance(node.op, ast.Add | ast.Sub):
                operands = [node.left, node.right]
            elif isinstance(node, ast.Call) and (isinstance(node.func, ast.Name) and node.func.id in BUILTINS
                                                 or self.library(node.func) in ("tl.cdiv", "tl.range",
                                                                                "tl.static_range")):
                operands = list(node.args)
            scalars |= {n.id for n in operands if isinstance(n, ast.Name) and n.id in self.params}
        return scalars

    def bases(self, node: ast.AST | None, seen: frozenset[str] = frozenset()) -> set[str]:
        """The parameters a pointer expression is based on: the bare summands of its address arithmetic."""
        if node is None:
            return set()
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.bases(node.left, seen) | self.bases(node.right, seen)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
            return self.bases(node.left, seen)
        if isinstance(node, ast.Subscript):
            return self.bases(node.value, seen)
        if isinstance(node, ast.Call):
            name = self.library(node.func)
            if name == "tl.make_block_ptr":
                return self.bases(_argument(node, 0, "base"), seen)
            if name in ("tl.advance", "tl.broadcast_to", "tl.expand_dims", "tl.reshape", "tl.view"):
                return self.bases(node.args[0] if node.args else None, seen)
            return set()
        if isinstance(node, ast.Name):
            if node.id in self.params:
                return set() if node.id in self.scalars else {node.id}
            if node.id in seen:
                return set()
            return set().union(*(self.bases(v, seen | {node.id}) for v in self.assigned.get(node.id, [])))
        return set()

    def value_of(self, node: ast.expr, depth: int = 0) -> list[ast.expr]:
        """The expressions a name may stand for (the node itself when it is no local name)."""
        if isinstance(node, ast.Name) and node.id in self.assigned and depth < 4:
            return [e for v in self.assigned[node.id] for e in self.value_of(v, depth + 1)]
        return [node]


def _expanded(kernel: _Kernel, node: ast.expr, axis: int) -> bool:
    """Whether ``node`` is x[:, :, None] (axis 2) or x[None, :, :] / x[None] (axis 0), or tl.expand_dims(x, axis)."""
    for value in kernel.value_of(node):
        if isinstance(value, ast.Subscript):
            index = value.slice
            items = index.elts if isinstance(index, ast.Tuple) else [index]
            if axis == 2 and len(items) == 3 and _is_none(items[2]) and not _is_none(items[0]):
                return True
            if axis == 0 and _is_none(items[0]) and len(items) in (1, 3):
                return True
        if isinstance(value, ast.Call) and kernel.library(value.func) == "tl.expand_dims":
            given = _argument(value, 1, "axis")
            if isinstance(given, ast.Constant) and given.value in ((2, -1) if axis == 2 else (0,)):
                return True
    return False


def _broadcast_product(kernel: _Kernel, node: ast.expr | None) -> bool:
    """x[:, :, None] * y[None, :, :], in that order: Triton 3.6 leaves y[None] * x[:, :, None] alone (compiled
    for sm_90 and read back from the TTGIR)."""
    if node is None:
        return False
    return any(isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult) and _expanded(kernel, value.left, 2)
               and _expanded(kernel, value.right, 0) for value in kernel.value_of(node))


def _line(kernel: _Kernel, node: ast.AST) -> int:
    return kernel.kernel.first_line + getattr(node, "lineno", 1) - 1


def _tf32_dot(kernel: _Kernel, call: ast.Call) -> str | None:
    precision = _argument(call, 3, "input_precision")
    allow_tf32 = _argument(call, 4, "allow_tf32")
    if precision is not None and not _is_none(precision):
        if not isinstance(precision, ast.Constant):
            return None  # a constexpr chosen at launch: cannot tell from the source
        return None if precision.value in ("ieee", "tf32x3") else f'tl.dot with input_precision="{precision.value}"'
    if allow_tf32 is not None and not _is_none(allow_tf32):
        if not isinstance(allow_tf32, ast.Constant):
            return None
        return None if allow_tf32.value is False else "tl.dot with allow_tf32=True"
    return 'tl.dot without input_precision="ieee"'


def _rules(kernel: _Kernel, precision_matters: bool) -> list[Divergence]:
    found: list[Divergence] = []
    name = kernel.kernel.name
    loads = [call for call, _ in kernel.calls if kernel.library(call.func) == "tl.load"]
    loaded_bases = set().union(*(kernel.bases(_argument(c, 0, "pointer")) for c in loads)) if loads else set()
    for call, tests in kernel.calls:
        library = kernel.library(call.func)
        if precision_matters and library == "tl.dot":
            detail = _tf32_dot(kernel, call)
            if detail:
                found.append(Divergence("tf32-dot", name, _line(kernel, call), detail))
        if precision_matters and library == "tl.sum" and _broadcast_product(kernel, _argument(call, 0, "input")):
            found.append(Divergence("sum-to-dot", name, _line(kernel, call)))
        if (precision_matters and library is None and isinstance(call.func, ast.Attribute)
                and call.func.attr == "sum" and _broadcast_product(kernel, call.func.value)):
            found.append(Divergence("sum-to-dot", name, _line(kernel, call)))
        if library in ("tl.load", "tl.store"):
            pointer = _argument(call, 0, "pointer")
            mask = _argument(call, 1 if library == "tl.load" else 2, "mask")
            address = kernel.deps(pointer)
            if "blockptr" in address:
                check = _argument(call, 3 if library == "tl.load" else 4, "boundary_check")
                if check is None or isinstance(check, ast.Tuple | ast.List) and not check.elts:
                    found.append(Divergence("unchecked-address", name, _line(kernel, call),
                                            f"{library} of a block pointer without boundary_check"))
            elif "arange" in address and (mask is None or _is_none(mask)):
                found.append(Divergence("unchecked-address", name, _line(kernel, call),
                                        f"{library} of a block of addresses without a mask"))
            if library == "tl.store":
                who = set(address) | set(kernel.deps(mask)).union(*(kernel.deps(t) for t in tests))
                shared = kernel.bases(pointer) & loaded_bases
                if shared and ("pid" not in who or "load" in address):
                    where = "the same addresses in every program" if "pid" not in who else \
                        "addresses computed from loaded data, which several programs may share"
                    found.append(Divergence("lost-update", name, _line(kernel, call),
                                            f"tl.load then tl.store through {sorted(shared)[0]} at {where}, "
                                            "without atomics (if more than one program runs)"))
    return found


def _calls(kernel: _Kernel) -> list[tuple[ast.Call, str | None]]:
    return [(call, kernel.library(call.func)) for call, _ in kernel.calls]


def _parse_all(kernels: Mapping[str, KernelSource]) -> dict[str, _Kernel]:
    parsed = {}
    for key, kernel in kernels.items():
        try:
            parsed[key] = _Kernel(kernel)
        except (SyntaxError, ValueError):
            continue
    return parsed


def _reachable(parsed: Mapping[str, _Kernel], roots: Iterable[str]) -> list[str]:
    visited, stack = [], [r for r in roots if r in parsed]
    while stack:
        key = stack.pop()
        if key in visited:
            continue
        visited.append(key)
        kernel = parsed[key]
        for call, library in _calls(kernel):
            if library is None and isinstance(call.func, ast.Name):
                target = kernel.kernel.kernels.get(call.func.id)
                if target in parsed:
                    stack.append(target)
    return visited


def scan(kernels: Mapping[str, KernelSource], roots: Iterable[str] | None = None,
         precision_matters: bool = True) -> list[Divergence]:
    """Every known divergence in the kernels reachable from ``roots`` (all of them without roots), in order."""
    parsed = _parse_all(kernels)
    keys = _reachable(parsed, roots) if roots is not None else list(parsed)
    found: list[Divergence] = []
    for key in keys:
        for divergence in _rules(parsed[key], precision_matters):
            if divergence not in found:
                found.append(divergence)
    return sorted(found, key=lambda d: (d.kernel, d.line, d.code))


def library_calls(kernels: Mapping[str, KernelSource], roots: Iterable[str]) -> tuple[dict[str, list[str]],
                                                                                      list[str]]:
    """The library functions the kernels reachable from ``roots`` call, and the calls that cannot be resolved.

    Returns ({"tl.dot": ["matmul_kernel, line 12"], ...}, ["matmul_kernel, line 14: OP(...)"]). A call resolves to
    a library path, another kernel of ``kernels``, a builtin Triton allows, or a method of a value (x.to(...)).
    """
    parsed = _parse_all(kernels)
    calls: dict[str, list[str]] = {}
    unresolved: list[str] = []
    for missing in sorted(set(roots) - set(parsed)):
        unresolved.append(f"{missing}: its source could not be read")
    for key in _reachable(parsed, roots):
        kernel = parsed[key]
        for call, library in _calls(kernel):
            where = f"{kernel.kernel.name}, line {_line(kernel, call)}"
            if library is not None:
                calls.setdefault(library, []).append(where)
                continue
            func = call.func
            if isinstance(func, ast.Name):
                if func.id in kernel.kernel.kernels and kernel.kernel.kernels[func.id] in parsed:
                    continue
                if func.id in BUILTINS and func.id not in kernel.assigned and func.id not in kernel.params:
                    continue
            elif isinstance(func, ast.Attribute):
                base = _dotted(func.value)
                if base is None or base.split(".")[0] in kernel.assigned or base.split(".")[0] in kernel.params:
                    continue  # a method of a value: acc.to(tl.float16), (x * y).sum(1)
            unresolved.append(f"{where}: {ast.unparse(func)}(...)")
    return calls, unresolved


def forbidden_problem(kernels: Mapping[str, KernelSource], roots: Iterable[str],
                      forbidden: Iterable[str]) -> str | None:
    """Why the kernels reachable from ``roots`` break an exercise's ban on ``forbidden`` calls, or None."""
    banned = tuple(normalize(f) for f in forbidden)
    if not banned:
        return None
    roots = list(roots)
    calls, unresolved = library_calls(kernels, roots)
    for name, places in sorted(calls.items()):
        hit = next((b for b in banned if name == b or name.startswith(b + ".")), None)
        if hit:
            return f"{places[0]} calls {hit}, which this exercise asks you to do without"
    if unresolved:
        return (f"{unresolved[0]}: the grader cannot tell what this call reaches (this exercise forbids "
                f"{', '.join(banned)}); call library functions as tl.<name>")
    return None


# --- kernels of a live function (the notebook side) ---------------------------------------------------------

def _python_function(obj: Any) -> Callable[..., Any] | None:
    """The Python function under a Triton kernel object (JITFunction, InterpretedFunction, Autotuner...)."""
    for _ in range(8):
        inner = getattr(obj, "fn", None)
        if inner is None:
            return None
        if isinstance(inner, types.FunctionType):
            return inner
        obj = inner
    return None


def _is_kernel(obj: Any) -> bool:
    try:
        from triton.runtime.jit import KernelInterface
    except ImportError:  # pragma: no cover - triton is a dependency of the course
        return False
    return isinstance(obj, KernelInterface) and _python_function(obj) is not None


def _library_path(value: Any) -> str | None:
    """The library path of a global value from triton, or None."""
    if isinstance(value, types.ModuleType):
        name = value.__name__
    else:
        inner = _python_function(value) if _is_kernel(value) else value
        module = getattr(inner, "__module__", "") or ""
        name = f"{module}.{getattr(inner, '__name__', '')}" if module else ""
    root = name.split(".")[0]
    return normalize(name) if root in ("triton", "math") else None


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _source_of(kernel: Any, key: str, found: dict[str, KernelSource], depth: int) -> None:
    fn = _python_function(kernel)
    if fn is None or key in found or depth > 8:
        return
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return
    source = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    aliases, kernels = {}, {}
    pending = []
    for name in sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}):
        if name not in fn.__globals__:
            continue
        value = fn.__globals__[name]
        path = _library_path(value)
        if path is not None:
            aliases[name] = path
        elif _is_kernel(value):
            target = _python_function(value).__name__
            kernels[name] = target
            pending.append((value, target))
    found[key] = KernelSource(key, source, start, aliases, kernels)
    for value, target in pending:
        _source_of(value, target, found, depth + 1)


def kernels_of(fn: Callable[..., Any]) -> tuple[dict[str, KernelSource], list[str]]:
    """The sources of the Triton kernels ``fn`` may launch (and the kernels they call), and the launched ones.

    Kernels are found by the global names ``fn`` uses, following plain functions of the same module
    (a wrapper calling a launcher) a few levels deep; their sources come from ``inspect``.
    """
    found: dict[str, KernelSource] = {}
    roots: list[str] = []
    seen: set[int] = set()

    def visit(function: Any, depth: int) -> None:
        if id(function) in seen or depth > 4:
            return
        seen.add(id(function))
        code, scope = getattr(function, "__code__", None), getattr(function, "__globals__", {})
        if code is None:
            return
        values = [scope[n] for n in sorted(_code_names(code)) if n in scope]
        values += [cell.cell_contents for cell in (function.__closure__ or ()) if _has_contents(cell)]
        for value in values:
            if _is_kernel(value):
                name = _python_function(value).__name__
                _source_of(value, name, found, 0)
                if name not in roots:
                    roots.append(name)
            elif isinstance(value, types.FunctionType) and value.__module__ == function.__module__:
                visit(value, depth + 1)

    visit(fn, 0)
    return found, [r for r in roots if r in found]


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018  (an empty cell raises)
    except ValueError:
        return False
    return True


def check_function(fn: Callable[..., Any], precision_matters: bool = True) -> list[Divergence]:
    """The known divergences in the kernels ``fn`` launches."""
    kernels, roots = kernels_of(fn)
    return scan(kernels, roots, precision_matters)


def report(divergences: list[Divergence], function_name: str = "") -> str:
    """The warning printed under a check on the CPU (empty when there is nothing to say)."""
    if not divergences:
        return ""
    who = f" in the kernels {function_name} launches" if function_name else ""
    lines = [f"Warning: the CPU interpreter cannot show {len(divergences)} known difference(s) from a GPU "
             f"(the grader's){who}:"]
    lines += [textwrap.indent(d.text(), "  ") for d in divergences]
    return "\n".join(lines)
