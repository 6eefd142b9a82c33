"""The package layout says what each module is: no module name means two things across ``course`` and ``grader``
(a reader of ``export`` or ``tma`` must not have to check which package it came from)."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import course
import grader

REPO = Path(__file__).resolve().parent.parent


def _names(package) -> set[str]:
    return {m.name for m in pkgutil.iter_modules(package.__path__) if m.name != "__main__"}


def test_no_module_name_stands_in_both_packages():
    assert _names(course) and _names(grader)
    assert _names(course) & _names(grader) == set()


def _imports_of(folder: Path) -> set[str]:
    """Every module name imported (at any depth of the code) by the files under ``folder``."""
    found = set()
    for file in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
    return found


def test_the_grader_reads_nothing_of_the_day_helpers():
    # The day helpers run beside the student's code and teach; none of them is part of what the judge trusts.
    assert not {name for name in _imports_of(REPO / "grader") if name.startswith("course.days")}


def test_the_recorder_stands_on_the_toolkit_alone():
    # What runs in the sandbox and writes the judge's data imports neither the grader nor a day's helpers.
    imported = _imports_of(REPO / "course" / "recorder")
    assert not {name for name in imported if name.startswith(("grader", "course.days", "course.exercises"))}


def test_every_triton_compile_goes_through_course_compiler():
    # One compile path (course/compiler.py) for the builder, the compile stage, the judge, the day helpers and the
    # tests; the cheats in tests/adversarial/ are a student's code and may do anything.
    direct = []
    for folder in ("course", "grader", "tests", "bench"):
        for file in (REPO / folder).rglob("*.py"):
            if "adversarial" in file.parts or file in (REPO / "course" / "compiler.py", Path(__file__).resolve()):
                continue
            if "triton.compile(" in file.read_text(encoding="utf-8"):
                direct.append(str(file.relative_to(REPO)))
    assert direct == []
