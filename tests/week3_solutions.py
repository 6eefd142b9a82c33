"""Week 3's solution notebooks as modules, for the day tests: the named cells of a notebook, written to a file
(Triton reads a kernel's source) and imported, with ``DEVICE`` the device the tests run on."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import nbformat

from grader.intake.layout import SOLUTIONS

HEADER = ("import math\nimport torch\nimport triton\nimport triton.language as tl\nimport course\n"
          "DEVICE = course.device.info()\n\n")


def cells_module(folder: Path, notebook: str, cells: tuple[str, ...]) -> ModuleType:
    """The cells ``cells`` (grade ids) of ``solutions/week3/<notebook>.ipynb``, imported from ``folder``."""
    nb = nbformat.read(str(SOLUTIONS / "week3" / f"{notebook}.ipynb"), as_version=4)
    sources = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    path = folder / f"{notebook}_solution.py"
    path.write_text(HEADER + "\n\n".join(sources[name] for name in cells), encoding="utf-8")
    loaded = importlib.util.spec_from_file_location(f"{notebook}_solution", path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module
