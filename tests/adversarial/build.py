"""Build the adversarial corpus: one submission per fixture in ``fixtures/``.

``fixtures/<week>/<notebook>/*.py`` attack that notebook, named ``<notebook>-<stem>`` (Week 1 Day 7's, the
corpus's first, by their stem alone), with their expected verdicts in an ``expected.py`` beside them
(``EXPECTED = {stem: Expected(...)}``, item names of that notebook).

A fixture file has the demo-class format (see grader/authoring/demo.py): a docstring saying what the attack
does and why the new design defeats it, then sections that each start with a line ``# %% <name>``:

- ``# %% <grade_id>``: the full source of that answer cell (``matmul_kernel`` or ``answers``);
- ``# %% +after:<grade_id>``: an extra code cell inserted right after that cell, as a student adds
  cells (several sections may name the same cell; they keep their order);
- ``# %% transform``: trusted harness code defining ``def transform(nb: dict) -> None``, which edits
  the notebook JSON (nbformat v4) after the cells are filled, for attacks on notebook structure.

A fixture whose very first line is ``# gpu-only`` needs a GPU to mean anything (its docstring also
says ``GPU_ONLY = True``). The expected verdicts under the new design are in ``expected.py`` and in
README.md.

``build(destination, names)`` writes ``<destination>/<name>/<week>/<notebook>.ipynb`` for each
fixture from the released student notebook, so the corpus always matches the current release::

    .venv/bin/python tests/adversarial/build.py /tmp/adversarial-class [name ...]

The parsing half of this module needs only the standard library (``inprocess.py`` uses it on
machines without nbgrader); building imports the grader.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
REPO = HERE.parent.parent
NOTEBOOK_KEY = "week1/day7_fast_matmul"
GPU_ONLY_MARK = "# gpu-only"

# "# %% matmul_kernel" starts a section; "# %% answers < honest_slow" takes that fixture's section as is.
_SECTION = re.compile(r"^# %% (\S+)(?:[ \t]+<[ \t]+(\w+))?[ \t]*$", re.MULTILINE)
_AFTER = "+after:"


@dataclass
class Fixture:
    """One attack: its answer cells, added cells and notebook transform, as written in its file."""

    name: str
    path: Path
    doc: str
    gpu_only: bool
    notebook: str = NOTEBOOK_KEY
    answers: dict[str, str] = field(default_factory=dict)  # grade id -> full cell source
    added: list[tuple[str, str]] = field(default_factory=list)  # (after grade id, cell source)
    transform: str | None = None  # source defining transform(nb: dict) -> None

    @property
    def summary(self) -> str:
        """The docstring's first sentence."""
        first = " ".join(self.doc.split("\n\n")[0].split())
        return first


def notebook_of(path: Path) -> str:
    """The notebook a fixture file attacks, from where it lies."""
    return path.parent.relative_to(FIXTURES).as_posix()


def fixture_name(path: Path) -> str:
    key = notebook_of(path)
    return path.stem if key == NOTEBOOK_KEY else f"{key.split('/')[-1]}-{path.stem}"


def parse(path: Path) -> Fixture:
    """Read one fixture file; raises ValueError for a malformed one."""
    text = path.read_text(encoding="utf-8")
    doc = ast.get_docstring(ast.parse(text)) or ""
    if not doc:
        raise ValueError(f"{path.name}: no docstring")
    fixture = Fixture(fixture_name(path), path, doc, gpu_only=text.splitlines()[0].strip() == GPU_ONLY_MARK,
                      notebook=notebook_of(path))
    if fixture.gpu_only != ("GPU_ONLY = True" in doc):
        raise ValueError(f"{path.name}: '# gpu-only' on the first line and 'GPU_ONLY = True' in the docstring "
                         "go together")
    marks = list(_SECTION.finditer(text))
    if not marks:
        raise ValueError(f"{path.name}: no '# %% <section>' line")
    ends = [m.start() for m in marks[1:]] + [len(text)]
    for mark, end in zip(marks, ends, strict=True):
        name, body = mark.group(1), text[mark.end():end].strip("\n") + "\n"
        if mark.group(2):
            if body.strip() or name == "transform" or name.startswith(_AFTER):
                raise ValueError(f"{path.name}: '# %% {name} < {mark.group(2)}' takes an answer cell and no body")
            body = parse(path.parent / f"{mark.group(2)}.py").answers[name]
        if name == "transform":
            if fixture.transform is not None:
                raise ValueError(f"{path.name}: two transform sections")
            fixture.transform = body
        elif name.startswith(_AFTER):
            fixture.added.append((name[len(_AFTER):], body))
        else:  # an answer cell's grade id (apply() refuses one the notebook does not have)
            if name in fixture.answers:
                raise ValueError(f"{path.name}: two sections for {name}")
            fixture.answers[name] = body
    return fixture


def fixtures(names: list[str] | None = None) -> dict[str, Fixture]:
    """Every fixture (or the named ones), by name, in name order."""
    paths = FIXTURES.glob("*/*/*.py")
    found = {fixture_name(p): p for p in sorted(paths) if not p.name.startswith("_") and p.name != "expected.py"}
    if names is not None:
        unknown = sorted(set(names) - set(found))
        if unknown:
            raise KeyError(f"no fixture named {', '.join(unknown)}")
        found = {n: found[n] for n in sorted(names)}
    return {name: parse(path) for name, path in found.items()}


def _grade_id(cell: dict[str, Any]) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def apply(fixture: Fixture, nb: dict[str, Any]) -> dict[str, Any]:
    """The notebook ``nb`` (a JSON dict, left unchanged) with the fixture's cells and transform applied."""
    nb = copy.deepcopy(nb)
    cells = nb["cells"]
    by_id = {_grade_id(c): c for c in cells if _grade_id(c)}
    for grade_id, source in fixture.answers.items():
        cell = by_id.get(grade_id)
        if cell is None or not cell["metadata"]["nbgrader"].get("solution"):
            raise KeyError(f"{fixture.name}: the notebook has no answer cell {grade_id!r}")
        cell["source"] = source.rstrip("\n")
    for number, (grade_id, source) in enumerate(fixture.added):
        anchor = by_id.get(grade_id)
        if anchor is None:
            raise KeyError(f"{fixture.name}: +after:{grade_id} names no cell of the notebook")
        position = next(i for i, c in enumerate(cells) if c is anchor) + 1
        while position < len(cells) and cells[position].get("metadata", {}).get("adversarial_added"):
            position += 1  # several cells after one anchor keep the fixture's order
        cell = {"cell_type": "code", "execution_count": None, "id": f"added-{number}-{grade_id}"[:64],
                "metadata": {"adversarial_added": True}, "outputs": [], "source": source.rstrip("\n")}
        cells.insert(position, cell)
    for cell in cells:
        cell.get("metadata", {}).pop("adversarial_added", None)
    if fixture.transform is not None:
        namespace: dict[str, Any] = {"__name__": f"transform_{fixture.name}"}
        exec(compile(fixture.transform, f"{fixture.path}:transform", "exec"), namespace)  # trusted test code
        namespace["transform"](nb)
    return nb


def released_notebook(key: str = NOTEBOOK_KEY) -> dict[str, Any]:
    """A released student notebook (Week 1 Day 7 unless named), as a JSON dict (needs the grader)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import nbformat

    from grader.authoring.release import student_version
    from grader.intake.layout import course_notebooks

    notebook = next(nb for nb in course_notebooks() if nb.key == key)
    return json.loads(nbformat.writes(student_version(notebook), version=4))


def build(destination: Path, names: list[str] | None = None) -> dict[str, Path]:
    """Write ``<destination>/<fixture>/week1/day7_fast_matmul.ipynb`` for each fixture; returns the paths.

    Every notebook written is validated with ``nbformat.validate``.
    """
    import nbformat

    bases: dict[str, dict[str, Any]] = {}
    written = {}
    for name, fixture in fixtures(names).items():
        if fixture.notebook not in bases:
            bases[fixture.notebook] = released_notebook(fixture.notebook)
        assignment, notebook_name = fixture.notebook.split("/")
        node = nbformat.from_dict(apply(fixture, bases[fixture.notebook]))
        nbformat.validate(node)
        path = Path(destination) / name / assignment / f"{notebook_name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(node, str(path))
        written[name] = path
    return written


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: build.py DESTINATION [FIXTURE ...]")
    paths = build(Path(sys.argv[1]), sys.argv[2:] or None)
    for fixture_name, notebook_path in paths.items():
        print(f"{fixture_name}: {notebook_path}")
