"""Vet a notebook's Triton kernels statically, so that compiling them runs no Python of the student's.

Triton's code generator evaluates the names and attribute chains of a kernel body against the
function's globals, and calls plain Python functions it reaches with constant arguments
(``tl.core.builtins.exec("...")`` would run). Before the builder defines or compiles anything,
``vet`` resolves every name, attribute chain and call of a kernel body from its syntax alone and
refuses the kernel unless each call is a Triton builtin (the language's own marker), one of
Triton's own ``@jit`` library functions, a kernel the notebook defines (vetted in turn), a method
of a Triton value, or one of a few Python builtins the code generator handles itself. Attribute
chains from a global name are resolved here with ``getattr`` on Triton's own modules only: every
module they pass through must lie in ``triton.language``, no attribute may start with ``_``, and a
module is never a value (``(tl if 1 else tl).dot`` and ``m = tl`` are refused). Constexpr values
that reach the compiler are plain data (``plain_constexpr``).
"""

from __future__ import annotations

import ast
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The Python builtins a kernel may call: the code generator implements each (range/len/int as loops or
# constants, min/max/print as Triton builtins), and none of them reaches other code.
PYTHON_BUILTINS = frozenset({"range", "len", "int", "float", "min", "max", "print"})
# Triton classes a kernel may construct: loop iterators and constants.
TRITON_CLASSES = ("static_range", "range", "constexpr")
MODULE_ROOTS = ("tl", "triton", "math")  # the builder's namespace imports these, as every notebook does
LANGUAGE = "triton.language"
# Where the CUDA backend sends the portable libdevice module (CUDABackend.get_module_map).
MODULE_MAP = {"triton.language.extra.libdevice": "triton.language.extra.cuda.libdevice"}
DTYPE_NAMES = frozenset({"int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                         "fp8e4b15", "fp8e4nv", "fp8e4b8", "fp8e5", "fp8e5b16", "fp16", "bf16", "fp32", "fp64"})
MAX_CONSTEXPR_STRING = 256
_REFUSED_NODES = {ast.Lambda: "a lambda", ast.FunctionDef: "a nested function", ast.AsyncFunctionDef:
                  "a nested function", ast.ClassDef: "a class", ast.Global: "global", ast.Nonlocal: "nonlocal",
                  ast.Import: "an import", ast.ImportFrom: "an import"}


class Refused(ValueError):
    """A kernel the builder will not define or compile; the message names the kernel, line and construct."""


@dataclass(frozen=True)
class Scope:
    """What a kernel's global names refer to in the builder's namespace, known before anything is defined."""

    kernels: Mapping[str, str]  # global name -> the kernel (function name) it is bound to
    values: Mapping[str, Any]  # global name -> a plain constant or a Triton object (an alias such as d = tl.dot)


def _language_module(module: types.ModuleType) -> bool:
    return module.__name__ == LANGUAGE or module.__name__.startswith(LANGUAGE + ".")


def _owned(value: Any) -> bool:
    """Plain data, a Triton dtype, or an object of Triton's language (or its C++ bindings, e.g. enums)."""
    import triton.language as tl

    if value is None or type(value) in (bool, int, float, str) or isinstance(value, tl.dtype):
        return True
    if _library_function(value):
        return True
    if isinstance(value, types.ModuleType):
        return _language_module(value)
    module = getattr(value, "__module__", None)
    return isinstance(module, str) and module.startswith((LANGUAGE, "triton._C."))


def _library_function(value: Any) -> bool:
    """One of Triton's own ``@jit`` library functions (tl.sum): a JITFunction, or an InterpretedFunction where
    ``TRITON_INTERPRET=1`` was set when Triton was imported (the CPU judge)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITCallable

    inner = getattr(value, "fn", None)
    return isinstance(value, JITCallable | InterpretedFunction) and isinstance(inner, types.FunctionType) \
        and str(inner.__module__).startswith(LANGUAGE)


def _mapped(module: types.ModuleType) -> types.ModuleType:
    import importlib

    target = MODULE_MAP.get(module.__name__)
    return importlib.import_module(target) if target else module


def _attribute(value: Any, attr: str) -> Any:
    """``getattr``, importing a submodule of Triton's language that no one imported yet (tl.extra.libdevice)."""
    import importlib

    if isinstance(value, types.ModuleType) and not hasattr(value, attr) and _language_module(value):
        return importlib.import_module(f"{value.__name__}.{attr}")
    return getattr(value, attr)


def imported(module: str, name: str | None) -> Any:
    """What ``import triton.language... as x`` or ``from triton.language... import name`` binds; raises Refused."""
    import triton

    parts = module.split(".") + ([name] if name else [])
    if parts[:2] != ["triton", "language"]:
        raise Refused(f"{module} is not part of Triton's language")
    return resolve_chain("triton", parts[1:], triton)


def roots() -> dict[str, Any]:
    """The module names every kernel may start an attribute chain from."""
    import math

    import triton
    import triton.language as tl

    return {"tl": tl, "triton": triton, "math": math}


def resolve_chain(prefix: str, parts: list[str], start: Any) -> Any:
    """``getattr`` along ``parts`` from ``start`` (named ``prefix``: a root module or a notebook value).

    Raises Refused (the message says which part and why) for an attribute starting with ``_``, a
    module outside ``triton.language`` passed through, or a value that is not Triton's own.
    """
    import math

    import triton

    value = start
    for i, attr in enumerate(parts):
        where = ".".join([prefix, *parts[:i + 1]])
        if attr.startswith("_"):
            raise Refused(f"{where}: names starting with _ are not part of Triton's language")
        if value is triton and attr != "language":
            raise Refused(f"{where}: only triton.language may be used inside a kernel")
        if value is math:
            found = getattr(math, attr, None)
            if type(found) is not float:
                raise Refused(f"{where}: of math, only its constants (math.pi...) may be used inside a kernel")
            return found
        if isinstance(value, types.ModuleType) and value is not triton and not _language_module(value):
            raise Refused(f"{where}: module {value.__name__} is not part of Triton's language")
        try:
            value = _attribute(value, attr)
        except Exception:  # a missing name, or a module of Triton's that does not import here
            raise Refused(f"{where}: no such name in Triton's language") from None
        if isinstance(value, types.ModuleType):
            value = _mapped(value)
        if not _owned(value):
            what = f"module {value.__name__}" if isinstance(value, types.ModuleType) else "it"
            raise Refused(f"{where}: {what} is not part of Triton's language")
    return value


def triton_callable(value: Any) -> bool:
    """Whether the code generator may call ``value`` without running Python outside Triton's language."""
    import triton.language as tl

    if getattr(value, "__triton_builtin__", False) or _library_function(value):
        return True
    return any(value is getattr(tl, name) for name in TRITON_CLASSES)


def _method_names() -> frozenset[str]:
    """Methods of Triton's values (tensors, tensor descriptors): what ``x.to(...)`` may call."""
    import triton.language as tl

    names = set()
    for cls in (tl.tensor, tl.tensor_descriptor):
        for name in dir(cls):
            if not name.startswith("_") and callable(getattr(cls, name, None)):
                names.add(name)
    return frozenset(names)


def _chain(node: ast.expr) -> tuple[ast.expr, list[str]]:
    """(root expression, attribute names) of ``root.a.b``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return node, parts[::-1]


def _locals(fn: ast.FunctionDef) -> set[str]:
    args = fn.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
    return names


class _Vetter:
    def __init__(self, fn: ast.FunctionDef, name: str, scope: Scope, first_line: int):
        self.fn, self.name, self.scope, self.first_line = fn, name, scope, first_line
        self.locals = _locals(fn)
        self.roots = roots()
        self.methods = _method_names()
        self.reached: set[str] = set()

    def refuse(self, node: ast.AST, what: str) -> Refused:
        line = self.first_line + getattr(node, "lineno", self.fn.lineno) - self.fn.lineno
        return Refused(f"kernel {self.name}, line {line}: {what}")

    def global_value(self, node: ast.Name) -> tuple[str, Any]:
        """("kernel", name) | ("value", object) | ("builtin", name) for a global name."""
        name = node.id
        if name in self.scope.kernels:
            return "kernel", self.scope.kernels[name]
        if name in self.scope.values:
            return "value", self.scope.values[name]
        if name in self.roots:
            return "value", self.roots[name]
        if name in PYTHON_BUILTINS:
            return "builtin", name
        raise Refused(f"uses {name}, which is neither a kernel, a constant nor a Triton module of the notebook")

    def resolve(self, node: ast.expr) -> tuple[str, Any] | None:
        """What a name or attribute chain rooted at a global refers to, or None for a local value.

        Raises Refused (without the kernel and line: the caller adds them)."""
        root, parts = _chain(node)
        if not isinstance(root, ast.Name) or root.id in self.locals:
            for attr in parts:
                if attr.startswith("_"):
                    raise Refused(f"uses .{attr}: names starting with _ are not part of Triton's language")
            return None
        kind, value = self.global_value(root)
        if not parts:
            return kind, value
        if kind != "value":
            raise Refused(f"uses {ast.unparse(node)[:80]}: attributes of {root.id} are not Triton's language")
        return "value", resolve_chain(root.id, parts, value)

    def check_call(self, call: ast.Call) -> None:
        func = call.func
        text = ast.unparse(func)[:80]
        root, _ = _chain(func)
        if isinstance(root, ast.Name) and root.id in self.locals and root is func:
            raise self.refuse(call, f"calls {text}, a local value: call Triton functions and kernels by their names")
        if isinstance(root, ast.Name) and root.id not in self.locals:
            try:
                kind, value = self.resolve(func)
            except Refused as error:
                raise self.refuse(call, f"calls {text}, which is not a Triton builtin ({error})") from None
            if kind == "kernel":
                self.reached.add(value)
            elif kind == "value" and not triton_callable(value):
                raise self.refuse(call, f"calls {text}, which is not a Triton builtin")
            return
        if isinstance(func, ast.Attribute):  # a method of a value: acc.to(tl.float16), tl.load(p).to(...)
            try:
                self.resolve(func)
            except Refused as error:
                raise self.refuse(call, str(error)) from None
            if func.attr not in self.methods:
                raise self.refuse(call, f"calls {text}(...): .{func.attr} is not a method of Triton's tensors")
            return
        raise self.refuse(call, f"calls the result of {text}: call Triton functions and kernels by their names")

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Raise):
            return  # Triton refuses to compile a raise without evaluating any of it (a stub's NotImplementedError)
        for kind, what in _REFUSED_NODES.items():
            if isinstance(node, kind):
                raise self.refuse(node, f"{what} inside a kernel is not supported by the grader's builder")
        if isinstance(node, ast.Call):
            root, _ = _chain(node.func)
            if not (isinstance(root, ast.Name) and root.id not in self.locals) and root is not node.func:
                self.visit(root)  # what a method is called on, checked before the call itself
            for child in [*node.args, *node.keywords]:
                self.visit(child)
            self.check_call(node)
            return
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            raise self.refuse(node, f"assigns to {ast.unparse(node)[:80]}: only local names may be assigned")
        if isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load):
            root, _ = _chain(node)
            try:
                resolved = self.resolve(node)
            except Refused as error:
                raise self.refuse(node, str(error) if str(error).startswith("uses ") else f"uses {error}") from None
            if resolved is None:
                if root is not node:
                    self.visit(root)
                return
            kind, value = resolved
            if kind == "kernel":
                self.reached.add(value)
            elif kind == "value" and isinstance(value, types.ModuleType):
                raise self.refuse(node, f"uses the module {ast.unparse(node)[:80]} as a value")
            return
        for child in ast.iter_child_nodes(node):
            self.visit(child)

    def run(self) -> set[str]:
        for statement in self.fn.body:
            self.visit(statement)
        return self.reached


def vet(fn: ast.FunctionDef, name: str, scope: Scope, first_line: int | None = None) -> set[str]:
    """Check one kernel's body; returns the notebook kernels it reaches. Raises Refused with the reason.

    ``first_line``: the line of the ``def`` in its cell (for messages); the node's own line by default.
    """
    return _Vetter(fn, name, scope, fn.lineno if first_line is None else first_line).run()


def vet_all(functions: Mapping[str, tuple[ast.FunctionDef, int]], scope: Scope) -> dict[str, str]:
    """Every kernel (name -> (def node, its line)) checked with the kernels it reaches; name -> why refused."""
    own: dict[str, str] = {}
    reached: dict[str, set[str]] = {}
    for name, (fn, line) in functions.items():
        try:
            reached[name] = vet(fn, name, scope, line)
        except Refused as error:
            own[name] = str(error)
        except RecursionError:
            own[name] = f"kernel {name}: an expression nested too deeply for the grader to read"
        except Exception as error:  # a construct the vetter cannot read is refused, never guessed at
            own[name] = f"kernel {name}: the grader could not read it ({type(error).__name__})"
    refused = dict(own)
    for name in functions:
        if name in refused:
            continue
        seen, stack = {name}, list(reached.get(name, ()))
        while stack:
            other = stack.pop()
            if other in seen:
                continue
            seen.add(other)
            if other in own:
                refused[name] = f"it calls kernel {other}, which cannot be built: {own[other]}"
                break
            if other not in functions:
                refused[name] = f"it calls {other}, which is not a kernel of the notebook"
                break
            stack.extend(reached.get(other, ()))
    return refused


def plain_annotation(node: ast.expr) -> bool:
    """An annotation the builder may evaluate: a string, or a chain that resolves inside Triton's language."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    root, parts = _chain(node)
    if not isinstance(root, ast.Name) or root.id not in ("tl", "triton"):
        return False
    try:
        return not isinstance(resolve_chain(root.id, parts, roots()[root.id]), types.ModuleType)
    except Refused:
        return False


def library_value(node: ast.expr) -> Any:
    """The Triton object a top-level alias names (``d = tl.dot``, ``lang = triton.language``); raises Refused."""
    root, parts = _chain(node)
    if not isinstance(root, ast.Name) or root.id not in MODULE_ROOTS:
        raise Refused(f"{ast.unparse(node)[:80]} is not a path from tl, triton or math")
    return resolve_chain(root.id, parts, roots()[root.id])


def plain_constexpr(value: Any) -> bool:
    """A constexpr the builder passes to the compiler: int, float, bool, None, a known dtype or a short string."""
    import triton.language as tl

    if value is None or type(value) in (bool, int, float):
        return True
    if type(value) is str:
        return len(value) <= MAX_CONSTEXPR_STRING
    return isinstance(value, tl.dtype) and type(value) is tl.dtype and value.name in DTYPE_NAMES
