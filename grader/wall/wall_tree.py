"""The course as the sandbox sees it: a folder built for the grading process, holding only what a student may see.

A sandboxed run imports ``course`` and the grader modules that run inside the wall (the notebook's runner, the
builder, the CPU replay) from here, never from the checkout: the checkout's ``.git`` keeps every solution and
hidden test of every commit, and ``solutions/``, ``tests/`` and ``build/`` sit beside the code. The folder holds

- ``course/``: the package exactly as the student bundle ships it (``grader.authoring.bundle``);
- ``grader/``: the sandbox's entry modules and the grader modules they import, found from their import
  statements (so a new import cannot be forgotten), nothing else of the grader;
- ``etc/``: the few files of ``/etc`` a process reads to know its users and ``localhost``, written here, so
  the host's own (its accounts) stay outside.

It is built once per grading process in the system temp folder, owned by that process (``owner.pid``, so a
killed grader's copy is removed by ``grader.wall.scratch_folders.cleanup_stale``), readable by the sandbox's user.
"""

from __future__ import annotations

import ast
import atexit
import compileall
import os
import shutil
import tempfile
import threading
from pathlib import Path

GRADER = Path(__file__).resolve().parent.parent  # grader/, this module being in grader/wall/
CHECKOUT = GRADER.parent
# What a sandbox starts (``python -P -m ...`` in grader.run.execute, and the Jupyter kernel's spec).
ENTRY_MODULES = (
    "grader.run.execute", "grader.wall.kernel_main", "grader.kernel_build.build_kernels", "grader.replay.replay_cpu")
OWNER_FILE = "owner.pid"  # as grader.wall.scratch_folders.OWNER_FILE (not imported: the sandbox imports this module)
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
# The sandbox's accounts: root (owner of every file it sees) and the unprivileged user it runs as.
ETC_FILES = {
    "passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": "root:x:0:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost\n::1 localhost ip6-localhost\n",
}

_lock = threading.Lock()
_built: Path | None = None


def _grader_imports(path: Path) -> set[str]:
    """The ``grader.*`` modules that the file at ``path`` imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "grader":
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "grader"}
    return {name for name in found if _file(name) is not None}


def _file(module: str) -> Path | None:
    """The file of a ``grader`` module or package (its ``__init__.py``); None where there is none."""
    folder = GRADER.joinpath(*module.split(".")[1:])
    for path in (folder / "__init__.py", folder.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _packages_of(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(2, len(parts))}


def wall_modules() -> list[str]:
    """The grader modules a sandbox may import: the entry modules and everything they import, transitively."""
    seen = {"grader"}
    todo = list(ENTRY_MODULES)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        # importing grader.room.module imports the room's package first
        todo += sorted((_grader_imports(_file(module)) | _packages_of(module)) - seen)
    return sorted(seen)


def build(destination: Path) -> Path:
    """Write the tree into ``destination`` (an empty or new folder); returns it."""
    destination.mkdir(parents=True, exist_ok=True)
    shutil.copytree(CHECKOUT / "course", destination / "course", ignore=_SKIP)
    for module in wall_modules():
        source = _file(module)
        target = destination / source.relative_to(CHECKOUT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    (destination / "etc").mkdir()
    for name, text in ETC_FILES.items():
        (destination / "etc" / name).write_text(text, encoding="utf-8")
    # Compiled here once: the sandbox writes no bytecode, and each run would compile every module again.
    compileall.compile_dir(destination, quiet=2, workers=1)
    for folder, _, files in os.walk(destination):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(Path(folder) / name, 0o644)
    return destination


def tree() -> Path:
    """This process's tree, built on first use (thread-safe) and removed when the process exits."""
    global _built
    with _lock:
        if _built is None or not _built.is_dir():
            folder = Path(tempfile.mkdtemp(prefix="gpu-course-wall-")).resolve()
            build(folder / "root")
            (folder / OWNER_FILE).write_text(f"{os.getpid()}\n", encoding="utf-8")
            os.chmod(folder, 0o755)
            atexit.register(shutil.rmtree, folder, True)
            _built = folder / "root"
        return _built
