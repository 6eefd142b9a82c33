"""Helpers more than one test file needs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def module_from_source(folder: Path, source: str, name: str) -> ModuleType:
    """``source`` written to ``folder/<name>.py`` and imported as the module ``name``, registered in ``sys.modules``
    (Triton reads a kernel's source from its file, and a dataclass looks up its module there)."""
    path = folder / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
