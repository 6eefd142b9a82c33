"""The package layout says what each module is: no module name means two things across ``course`` and ``grader``
(a reader of ``export`` or ``tma`` must not have to check which package it came from)."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
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


def _modules_after(code: str) -> list[str]:
    """The modules loaded in a fresh Python process after ``code`` ran (imports only what ``code`` imports)."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


# Every spec, loaded as each process loads it: one by one through ``spec.get`` (the recorder finds its notebook's
# specs by id), and all at once (the grader).
_LOAD_EVERY_SPEC = """
from course import spec
ids = [s.id for s in spec.all_specs()]
for i in ids:
    spec.get(i)
"""


def test_the_recorders_process_loads_no_day_helper_and_no_grader_module():
    # At run time, not only in the import statements: a spec that imports a day helper would bring it into the
    # sandbox's recorder as soon as the recorder looks that spec up.
    recorder = [f"course.recorder.{m.name}" for m in pkgutil.iter_modules([str(REPO / "course" / "recorder")])]
    assert "course.recorder.export" in recorder
    loaded = _modules_after("\n".join(f"import {m}" for m in recorder) + _LOAD_EVERY_SPEC)
    assert "course.recorder.export" in loaded and "course.exercises.w1d2_gpu_arrays" in loaded  # not vacuous
    strays = [m for m in loaded if m.startswith(("course.days", "grader"))]
    assert strays == [], f"the recorder's process loaded {strays}"


def test_the_graders_process_loads_no_day_helper_with_every_spec():
    loaded = _modules_after("import grader.score, grader.judge" + _LOAD_EVERY_SPEC)
    assert "grader.judge" in loaded and "course.exercises.w2d1_profiling" in loaded  # not vacuous
    strays = [m for m in loaded if m.startswith("course.days")]
    assert strays == [], f"the grader's process loaded {strays}"


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


def _module_name(file: Path, root: Path) -> str:
    parts = file.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports, from its import statements at any depth of its code (a
    function-level import closes a circle as surely as a top-level one, only later). ``root`` holds ``package``."""
    files = {_module_name(file, root): file for file in (root / package).rglob("*.py")}
    graph = {}
    for name, file in files.items():
        found = set()
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == package:
                # `from grader.room import module` imports that module; `from grader.room.module import name` it too
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                          for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names if alias.name in files}
        # a package's __init__ runs before its modules: importing it is no edge back into the room
        graph[name] = {m for m in found if m in files and m != name and not name.startswith(f"{m}.")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other, directly or around a longer loop (strongly connected
    components of more than one module, Tarjan's algorithm without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def test_no_import_circle_in_the_grader():
    graph = import_graph(REPO, "grader")
    assert {"grader.kernel_build.compile_ttgir", "grader.replay.gpu_replay", "grader.pipeline"} <= set(graph)
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle(tmp_path):
    # compile_ttgir and replay as they were: each imported the other (one of them inside a function)
    room = tmp_path / "pkg" / "room"
    room.mkdir(parents=True)
    for folder in (tmp_path / "pkg", room):
        (folder / "__init__.py").write_text('"""A room."""\n')
    (room / "a.py").write_text("from pkg.room.b import f\n")
    (room / "b.py").write_text("def f():\n    from pkg.room import c\n")
    (room / "c.py").write_text("import pkg.room.a\n")
    (room / "d.py").write_text("from pkg.room import a\n")
    assert circles(import_graph(tmp_path, "pkg")) == [["pkg.room.a", "pkg.room.b", "pkg.room.c"]]


def test_every_room_says_what_it_is_for_and_holds_no_code():
    rooms = [init for init in (REPO / "grader").glob("*/__init__.py")]
    assert len(rooms) >= 10
    for init in rooms:
        tree = ast.parse(init.read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), f"{init.relative_to(REPO)} says nothing of its room"
        assert len(tree.body) == 1, f"{init.relative_to(REPO)} holds code: a room's __init__ is its docstring"


def test_no_grader_module_is_over_450_lines():
    long = {str(f.relative_to(REPO)): n for f in (REPO / "grader").rglob("*.py")
            if (n := len(f.read_text(encoding="utf-8").splitlines())) > 450}
    assert long == {}


def test_the_architecture_page_names_every_module():
    """docs/ARCHITECTURE.md names each module of the grader and the course (a day's spec module by its family,
    `w1d1_host_baseline.py` ... `w3d5_flash_attention.py`), so a newcomer finds every file's job there."""
    page = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    modules = [path for package in ("grader", "course") for path in sorted((REPO / package).rglob("*.py"))
               if path.name not in ("__init__.py", "__main__.py")
               and not (path.parent.name == "exercises" and path.name[:2] in ("w1", "w2", "w3"))]
    unnamed = [str(path.relative_to(REPO)) for path in modules if path.name not in page]
    assert not unnamed, f"docs/ARCHITECTURE.md does not name: {unnamed}"
